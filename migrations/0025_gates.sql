-- Issue 26: approvals, deploy windows and freezes. A deployment that must wait is a row in
-- a waiting state, never a sleeping task: a restart, a crash or another Pier process
-- changes nothing, and the next moment anything can change (an approval's expiry, a
-- window's opening, a freeze's end) is `waiting_until`, one timer for the workers.

ALTER TABLE deployments DROP CONSTRAINT deployments_state_check;
ALTER TABLE deployments ADD CONSTRAINT deployments_state_check
    CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'superseded', 'cancelled',
                     'rolled_back', 'awaiting_approval', 'awaiting_window'));
ALTER TABLE deployments DROP CONSTRAINT deployments_trigger_check;
ALTER TABLE deployments ADD CONSTRAINT deployments_trigger_check
    CHECK (trigger IN ('webhook', 'manual', 'rollback', 'reconcile', 'promotion'));

-- Set once the deployment passed its gates (approval, window, freeze): a run resumed
-- after a crash is never held again halfway through its steps.
ALTER TABLE deployments ADD COLUMN gated_at timestamptz;
-- Why it waits, as the pages show it ("2 approvals of ops, release", "frozen by ...").
ALTER TABLE deployments ADD COLUMN waiting_for text;
-- awaiting_approval: when the request expires; awaiting_window: when it may run.
ALTER TABLE deployments ADD COLUMN waiting_until timestamptz;
-- When its approval request expires, set when it first waits for approval: a later wait
-- for a window never moves it, nor is its opening ever read as the expiry.
ALTER TABLE deployments ADD COLUMN approval_expires_at timestamptz;
-- A promotion: the deployment of the source app whose digest this one deploys.
ALTER TABLE deployments ADD COLUMN promoted_from uuid REFERENCES deployments (id);

CREATE INDEX deployments_waiting ON deployments (waiting_until)
    WHERE state IN ('awaiting_approval', 'awaiting_window');

-- Every approval, rejection and override, with who and when. One approval per admin per
-- deployment, enforced here: the same admin twice is still one approval.
CREATE TABLE deployment_decisions (
    id             bigserial   PRIMARY KEY,
    deployment_id  uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    kind           text        NOT NULL CHECK (kind IN ('approve', 'reject', 'override')),
    admin          text        NOT NULL,
    reason         text,
    at             timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX deployment_decisions_one_approval
    ON deployment_decisions (deployment_id, admin) WHERE kind = 'approve';
CREATE INDEX deployment_decisions_of ON deployment_decisions (deployment_id, at);

-- Freezes, with their history: at most one in force per app (lifted_at IS NULL).
CREATE TABLE freezes (
    id         bigserial   PRIMARY KEY,
    app        text        NOT NULL,
    until      timestamptz NOT NULL,
    reason     text        NOT NULL,
    frozen_by  text        NOT NULL,
    frozen_at  timestamptz NOT NULL DEFAULT now(),
    lifted_by  text,
    lifted_at  timestamptz
);
CREATE UNIQUE INDEX freezes_one_in_force ON freezes (app) WHERE lifted_at IS NULL;

-- A session of a named admin (`[[admins]]`): its user name is that admin, proven.
ALTER TABLE sessions DROP CONSTRAINT sessions_method_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_method_check
    CHECK (method IN ('token', 'password', 'admin'));

-- A deployment that starts waiting for approval is announced like a final state.
ALTER TABLE notifications DROP CONSTRAINT notifications_event_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_event_check
    CHECK (event IN ('deployment.succeeded', 'deployment.failed', 'deployment.rolled_back',
                     'deployment.awaiting_approval'));

CREATE OR REPLACE FUNCTION pier_outbox_deployment() RETURNS trigger AS $$
BEGIN
    IF NEW.state IN ('succeeded', 'failed', 'rolled_back', 'awaiting_approval')
       AND OLD.state IS DISTINCT FROM NEW.state THEN
        INSERT INTO notifications (id, endpoint, event, app, deployment_id, payload)
        SELECT gen_random_uuid(), e.name, 'deployment.' || NEW.state, NEW.app, NEW.id,
               jsonb_build_object(
                   'id', NEW.id, 'app', NEW.app, 'state', NEW.state,
                   'trigger', NEW.trigger, 'image', NEW.image,
                   'tag', NEW.requested_tag, 'digest', NEW.resolved_digest,
                   'outcome', NEW.outcome, 'error', NEW.error,
                   'requested_by', NEW.requested_by,
                   'waiting_for', NEW.waiting_for, 'waiting_until', NEW.waiting_until,
                   'started_at', NEW.started_at, 'finished_at', NEW.finished_at)
        FROM notification_endpoints e
        WHERE (e.apps IS NULL OR NEW.app = ANY (e.apps))
          AND ('deployment.' || NEW.state) = ANY (e.events)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
