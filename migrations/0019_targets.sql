-- Issue 23: several engines ("targets"). Everything that is about one engine gains the
-- target it is about; before this migration there was one engine, so every existing row is
-- about `local`.

-- The journal: a container step is journaled per (deployment, step, service, target), so a
-- rollout across engines resumes each engine from its own entries and never redoes an
-- engine that finished. Steps of the whole deployment (resolve) keep the empty target.
ALTER TABLE deployment_steps ADD COLUMN target text NOT NULL DEFAULT '';
UPDATE deployment_steps SET target = 'local' WHERE step <> 'resolve';
ALTER TABLE deployment_steps DROP CONSTRAINT deployment_steps_one_per_service;
ALTER TABLE deployment_steps ADD CONSTRAINT deployment_steps_one_per_lane
    UNIQUE (deployment_id, step, service, target);

-- What serves, per app and engine: each engine has its own serving generation.
ALTER TABLE app_generations ADD COLUMN target text NOT NULL DEFAULT 'local';
ALTER TABLE app_generations ALTER COLUMN target DROP DEFAULT;
ALTER TABLE app_generations DROP CONSTRAINT app_generations_pkey;
ALTER TABLE app_generations ADD PRIMARY KEY (app, target);

-- The proxy's routes, per app and engine: `pier proxy --target NAME` serves its engine's.
ALTER TABLE proxy_routes ADD COLUMN target text NOT NULL DEFAULT 'local';
ALTER TABLE proxy_routes ALTER COLUMN target DROP DEFAULT;
ALTER TABLE proxy_routes DROP CONSTRAINT proxy_routes_pkey;
ALTER TABLE proxy_routes ADD PRIMARY KEY (app, target);

-- A volume is one engine's: the same name on two engines is two volumes, two owners.
ALTER TABLE volumes ADD COLUMN target text NOT NULL DEFAULT 'local';
ALTER TABLE volumes ALTER COLUMN target DROP DEFAULT;
ALTER TABLE volumes DROP CONSTRAINT volumes_pkey;
ALTER TABLE volumes ADD PRIMARY KEY (target, name);

-- What reconciliation did, and on which engine.
ALTER TABLE reconcile_actions ADD COLUMN target text NOT NULL DEFAULT 'local';
