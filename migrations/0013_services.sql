-- Several services per app (issue 10): each service of a generation has its own journal
-- entries for the steps it runs on its own (create, connect, start, health, ...). The
-- app's primary service keeps the empty key, so every existing entry stays what it was.
ALTER TABLE deployment_steps ADD COLUMN service text NOT NULL DEFAULT '';
ALTER TABLE deployment_steps DROP CONSTRAINT deployment_steps_deployment_id_step_key;
ALTER TABLE deployment_steps ADD CONSTRAINT deployment_steps_one_per_service
    UNIQUE (deployment_id, step, service);
