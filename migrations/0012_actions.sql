-- Operator actions (rollback that pins, unpin, cancel and stop), who did each, and the
-- outgoing notifications' durable outbox.

-- Who asked for a deployment by hand (`api token`, a signed-in user, `cli`); NULL for
-- webhook and poller deployments, whose delivery says where they came from.
ALTER TABLE deployments ADD COLUMN requested_by text;
-- A stop asked of a running deployment: the worker honours it at the next step boundary
-- before `switch`, through the failure path (the previous generation keeps serving).
ALTER TABLE deployments ADD COLUMN cancel_requested_by text;
ALTER TABLE deployments ADD COLUMN cancel_requested_at timestamptz;

-- Pins, with their history: a rollback pins the app to the digest it rolled back to, and
-- pushes and the poller do not move a pinned app until someone unpins it. At most one
-- pin per app is in force (unpinned_at IS NULL), enforced by the index itself.
CREATE TABLE pins (
    id             bigserial   PRIMARY KEY,
    app            text        NOT NULL,
    digest         text        NOT NULL,
    pinned_by      text        NOT NULL,
    pinned_at      timestamptz NOT NULL DEFAULT now(),
    deployment_id  uuid        REFERENCES deployments (id),
    unpinned_by    text,
    unpinned_at    timestamptz
);
CREATE UNIQUE INDEX pins_one_in_force ON pins (app) WHERE unpinned_at IS NULL;
CREATE INDEX pins_history ON pins (app, pinned_at DESC);

-- A delivery whose only matches were pinned apps says so.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_verdict_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_verdict_check
    CHECK (verdict IN ('queued', 'ignored', 'pinned'));

-- The rollback choices: an app's succeeded deployments by digest.
CREATE INDEX deployments_succeeded_digests ON deployments (app, resolved_digest, finished_at DESC)
    WHERE state = 'succeeded';

-- Outgoing notifications. One row per (event, endpoint), written in the same transaction
-- as the deployment's final state, so a crash can neither lose one nor send it for a
-- state that was never committed. A sender claims due rows with SKIP LOCKED, and every
-- attempt, failed or not, is a row of its own in `notification_attempts`.
CREATE TABLE notifications (
    id             uuid        PRIMARY KEY,
    endpoint       text        NOT NULL,
    event          text        NOT NULL CHECK (event IN ('deployment.succeeded', 'deployment.failed', 'deployment.rolled_back')),
    app            text        NOT NULL,
    deployment_id  uuid        NOT NULL REFERENCES deployments (id),
    payload        jsonb       NOT NULL,
    state          text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts       integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    UNIQUE (deployment_id, endpoint, event)
);
CREATE INDEX notifications_due ON notifications (next_attempt_at) WHERE state = 'pending';
CREATE INDEX notifications_recent ON notifications (created_at DESC, id DESC);

CREATE TABLE notification_attempts (
    id               bigserial   PRIMARY KEY,
    notification_id  uuid        NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    attempt          integer     NOT NULL,
    at               timestamptz NOT NULL DEFAULT now(),
    status           integer,
    error            text,
    took_ms          integer     NOT NULL
);
CREATE INDEX notification_attempts_of ON notification_attempts (notification_id, attempt);

CREATE FUNCTION pier_notify_outbox() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('pier_outbox', NEW.endpoint);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER notifications_notify
    AFTER INSERT ON notifications
    FOR EACH ROW EXECUTE FUNCTION pier_notify_outbox();

-- The configured endpoints, written from the config at start-up, so that the database
-- itself can fill the outbox in the transaction that ends a deployment (below): whatever
-- process ends it, and however it dies right after, the notification is not lost.
CREATE TABLE notification_endpoints (
    name    text   PRIMARY KEY,
    apps    text[],
    events  text[] NOT NULL
);

CREATE FUNCTION pier_outbox_deployment() RETURNS trigger AS $$
BEGIN
    IF NEW.state IN ('succeeded', 'failed', 'rolled_back')
       AND OLD.state IS DISTINCT FROM NEW.state THEN
        INSERT INTO notifications (id, endpoint, event, app, deployment_id, payload)
        SELECT gen_random_uuid(), e.name, 'deployment.' || NEW.state, NEW.app, NEW.id,
               jsonb_build_object(
                   'id', NEW.id, 'app', NEW.app, 'state', NEW.state,
                   'trigger', NEW.trigger, 'image', NEW.image,
                   'tag', NEW.requested_tag, 'digest', NEW.resolved_digest,
                   'outcome', NEW.outcome, 'error', NEW.error,
                   'requested_by', NEW.requested_by,
                   'started_at', NEW.started_at, 'finished_at', NEW.finished_at)
        FROM notification_endpoints e
        WHERE (e.apps IS NULL OR NEW.app = ANY (e.apps))
          AND ('deployment.' || NEW.state) = ANY (e.events)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER deployments_outbox
    AFTER UPDATE OF state ON deployments
    FOR EACH ROW EXECUTE FUNCTION pier_outbox_deployment();
