-- Revision 0006: the claim patterns document, compiled per language into the
-- arrays agentdb.detect_claims walks. Written by agentdb_private.load_claim_patterns
-- from the document (agentdb_private.claim_rules stays the source), which also
-- compiles the rows into a constant function; the table is read at load time only.
CREATE TABLE agentdb_private.claim_langs (
    lang text PRIMARY KEY,
    -- The document's clause separator and limits, the same for every language.
    clause_split text NOT NULL,
    max_clause integer,
    max_per_kind integer,
    -- '' or 'i' (ASCII case folding).
    flags text NOT NULL,
    -- A clause without this script holds none of the language's claims.
    script text,
    -- Every exclusion in one alternation: a clause that matches holds no claim.
    exclude_re text,
    -- Per kind, the alternation of its claim patterns: a first test, used where
    -- the document's "precheck" says it is cheaper than trying each pattern.
    guarded boolean NOT NULL,
    guard_kinds text[] NOT NULL,
    guard_res text[] NOT NULL,
    -- The claim patterns in the document's order.
    claim_kinds text[] NOT NULL,
    claim_res text[] NOT NULL
);

-- A fingerprint of the loaded document: a runtime that detects claims itself
-- with the same patterns says so with it (agentdb.claim_patterns_fingerprint).
ALTER TABLE agentdb_private.claim_rules ADD COLUMN fingerprint text;

-- Claims a runtime detected with the loaded patterns are recorded as such.
ALTER TABLE agentdb_private.claims DROP CONSTRAINT claims_source_check;
ALTER TABLE agentdb_private.claims ADD CONSTRAINT claims_source_check
CHECK (source IN ('detected', 'declared', 'runtime'));
