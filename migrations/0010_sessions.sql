-- Sign-in sessions of the status page, and live updates of its pages.

-- A signed-in browser's session. The cookie carries a random id; only its SHA-256 is
-- stored, so a copy of this table (a backup, a read-only leak) signs nobody in.
CREATE TABLE sessions (
    id_hash     bytea       PRIMARY KEY,
    -- Who signed in, as they named themselves at sign-in (recorded with their actions).
    user_name   text        NOT NULL,
    method      text        NOT NULL CHECK (method IN ('token', 'password')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
-- Expired sessions are deleted at each sign-in, through this index.
CREATE INDEX sessions_expiry ON sessions (expires_at);

-- Live pages: every change a page shows of a deployment (its state, digest, error, each
-- journal step) is announced on `pier_live` with the deployment's id, by whichever process
-- made it. Delivered at commit, never for a rolled-back change. Heartbeats (lease updates)
-- are not announced: they change nothing a page shows.
CREATE FUNCTION pier_notify_live() RETURNS trigger AS $$
BEGIN
    IF TG_TABLE_NAME = 'deployment_steps' THEN
        PERFORM pg_notify('pier_live', NEW.deployment_id::text);
    ELSE
        PERFORM pg_notify('pier_live', NEW.id::text);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER deployment_steps_live
    AFTER INSERT OR UPDATE ON deployment_steps
    FOR EACH ROW EXECUTE FUNCTION pier_notify_live();

CREATE TRIGGER deployments_live
    AFTER INSERT OR UPDATE OF state, resolved_digest, outcome, error, candidate_logs ON deployments
    FOR EACH ROW EXECUTE FUNCTION pier_notify_live();
