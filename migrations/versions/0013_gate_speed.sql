-- Revision 0013: the exit gate's reading fits PostgreSQL's regex cache (issue 11).
-- Idempotent, like every revision from 0007 on: `pyagentdb install --repair` runs
-- it again. Everything here is compiled by agentdb_private.load_claim_patterns
-- from the claim patterns document, which every install loads again.

-- Per language, the label sets the gate asks about (one alternation of the
-- language's label regexes per set: a clause is asked only what its task's
-- books need), and the class lexicon's names, regexes and literal guards.
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS set_names text[];
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS set_labels text[];
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS set_res text[];
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS lexicon_names text[];
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS lexicon_res text[];
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS lexicon_guards text[];
-- Per kind (aligned with claim_kinds), its literal guard: LIKE patterns one a line.
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS claim_guards text[];

-- The facts section's rules, per language in document order, each with the
-- strings one of which a clause must hold for the rule to be tried.
CREATE TABLE IF NOT EXISTS agentdb_private.fact_rules (
    lang text NOT NULL,
    n integer NOT NULL,
    type text NOT NULL,
    pattern text NOT NULL,
    num integer,
    min integer,
    tag integer,
    value numeric,
    any_of text[],  -- the rule's "any" strings as LIKE patterns (agentdb_private.holding)
    PRIMARY KEY (lang, n)
);
