-- Revision 0008: the exit gate reads the books first (issue 11). Idempotent,
-- like every revision from 0007 on: `pyagentdb install --repair` runs it again.
-- A task says whether its turn asked for an action and in which time zone its
-- user lives; a tool may say which kinds of claim it backs; a reply records
-- the state of the books it was judged on; the claim patterns document's
-- clause recognisers are compiled per language next to its claim patterns.

-- The runtime says the user asked for an action (tools were offered): an empty
-- task then delivers only a question, an offer, a draft or "nothing was done".
ALTER TABLE agentdb_private.tasks ADD COLUMN IF NOT EXISTS expects_action boolean NOT NULL DEFAULT false;
-- The user's time zone (an IANA name): times and dates in a reply are read in it.
ALTER TABLE agentdb_private.tasks ADD COLUMN IF NOT EXISTS time_zone text;

-- Claim classes a tool backs beyond those of its action (a cancel that is an
-- update backs "cancel"); NULL: the classes its labels name.
ALTER TABLE agentdb_private.tools ADD COLUMN IF NOT EXISTS backs text[];

-- The class of a claim (book, send, pay, cancel, ...), when its words name one.
ALTER TABLE agentdb_private.claims ADD COLUMN IF NOT EXISTS claim_class text;

-- troubled, empty or clean: the books the verdict was decided on.
ALTER TABLE agentdb_private.replies ADD COLUMN IF NOT EXISTS book_state text;
ALTER TABLE agentdb_private.replies DROP CONSTRAINT IF EXISTS replies_book_state_check;
ALTER TABLE agentdb_private.replies ADD CONSTRAINT replies_book_state_check
CHECK (book_state IN ('troubled', 'empty', 'clean'));

-- Per language, the clause recognisers: label names and their regexes, and
-- (the same for every language) what the separator after a question holds.
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS label_names text[];
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS label_res text[];
ALTER TABLE agentdb_private.claim_langs ADD COLUMN IF NOT EXISTS question_sep text;
