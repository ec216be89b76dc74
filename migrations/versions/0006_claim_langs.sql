-- Revision 0006: the claim patterns document, compiled per language into the
-- arrays agentdb.detect_claims walks. Written by agentdb_private.load_claim_patterns
-- from agentdb_private.claim_rules (the document stays the source).
CREATE TABLE agentdb_private.claim_langs (
    lang text PRIMARY KEY,
    -- The document's clause separator, the same for every language.
    clause_split text NOT NULL,
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

-- Stored uncompressed: detect_claims reads every row on each call, and a
-- compressed value would be decompressed again at each access.
ALTER TABLE agentdb_private.claim_langs
ALTER COLUMN exclude_re SET STORAGE EXTERNAL,
ALTER COLUMN guard_res SET STORAGE EXTERNAL,
ALTER COLUMN claim_res SET STORAGE EXTERNAL;

-- A fingerprint of the loaded document: a runtime that detects claims itself
-- with the same patterns says so with it (agentdb.claim_patterns_fingerprint).
ALTER TABLE agentdb_private.claim_rules ADD COLUMN fingerprint text;
