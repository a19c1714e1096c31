-- Blue-green deploys through Pier's own proxy.

-- `rolled_back`: switched to the new generation, then back to the previous one because the
-- new one failed its soak.
ALTER TABLE deployments DROP CONSTRAINT deployments_state_check;
ALTER TABLE deployments ADD CONSTRAINT deployments_state_check
    CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'superseded', 'cancelled',
                     'rolled_back'));

-- What the proxy serves, per app: written by the pipeline's `switch` step (and by a
-- rollback or a repair), read by every `pier proxy`. `version` only grows, so a proxy can
-- say which write it has applied and the pipeline can wait for exactly that.
CREATE SEQUENCE proxy_route_versions;
CREATE TABLE proxy_routes (
    app            text        PRIMARY KEY,
    version        bigint      NOT NULL DEFAULT nextval('proxy_route_versions'),
    -- The serving generation: `host:port` on 127.0.0.1, its container and deployment.
    upstream       text        NOT NULL,
    container_id   text        NOT NULL,
    deployment_id  uuid        NOT NULL,
    -- The previous generation, kept running during the soak: requests that cannot reach
    -- the serving upstream at all are retried there, so a candidate that dies drops none.
    standby        text,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION pier_notify_routes() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('pier_routes', coalesce(NEW.app, OLD.app));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER proxy_routes_notify
    AFTER INSERT OR UPDATE OR DELETE ON proxy_routes
    FOR EACH ROW EXECUTE FUNCTION pier_notify_routes();

-- Reconciliation also repairs the proxy's routes.
ALTER TABLE reconcile_actions DROP CONSTRAINT reconcile_actions_action_check;
ALTER TABLE reconcile_actions ADD CONSTRAINT reconcile_actions_action_check
    CHECK (action IN ('removed_orphan', 'requeued_missing', 'removed_route'));

-- Digests that failed their health check or were rolled back, per app: pushes and the
-- poller skip them; an admin's deploy of exactly that digest clears the entry.
CREATE TABLE quarantine (
    app            text        NOT NULL,
    digest         text        NOT NULL,
    reason         text        NOT NULL,
    deployment_id  uuid        REFERENCES deployments (id),
    at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app, digest)
);
