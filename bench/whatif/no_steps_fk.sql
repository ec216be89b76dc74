-- What if steps had no foreign key to tasks? (Every step is written under its
-- task's row lock, by agentdb alone.) Counts the referential check per step.
ALTER TABLE agentdb_private.steps DROP CONSTRAINT steps_task_id_fkey;
