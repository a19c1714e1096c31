-- Pier's whole state. The web pages and the workers read and write these same rows.

-- Every authentic webhook delivery, with its verdict, so an operator can see what arrived
-- and why it did or did not deploy. Unauthenticated requests are never stored.
CREATE TABLE deliveries (
    id            uuid PRIMARY KEY,
    source        text        NOT NULL,
    -- The sender's own event id(s); a retry carries the same key and is not stored twice.
    event_key     text,
    received_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    seen_count    integer     NOT NULL DEFAULT 1,
    verdict       text        NOT NULL CHECK (verdict IN ('queued', 'ignored')),
    reason        text        NOT NULL,
    events        jsonb       NOT NULL
);
CREATE UNIQUE INDEX deliveries_dedupe ON deliveries (source, event_key) WHERE event_key IS NOT NULL;
CREATE INDEX deliveries_recent ON deliveries (received_at DESC);

-- The deployments table is the queue and the history at once.
CREATE TABLE deployments (
    id               uuid PRIMARY KEY,
    app              text        NOT NULL,
    trigger          text        NOT NULL CHECK (trigger IN ('webhook', 'manual', 'rollback', 'reconcile')),
    delivery_id      uuid        REFERENCES deliveries (id),
    image            text        NOT NULL,
    requested_tag    text,
    -- A digest named by the sender (a hint) or pinned by an operator (`deploy --digest`).
    claimed_digest   text,
    pinned           boolean     NOT NULL DEFAULT false,
    resolved_digest  text,
    platform         text,
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'superseded', 'cancelled')),
    attempt          integer     NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at timestamptz,
    superseded_by    uuid        REFERENCES deployments (id) DEFERRABLE INITIALLY DEFERRED,
    outcome          text,
    error            text,
    candidate_logs   text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
-- Enforced by the database itself, whatever number of Pier processes share it:
-- per app at most one deployment waits and at most one runs.
CREATE UNIQUE INDEX deployments_one_queued_per_app  ON deployments (app) WHERE state = 'queued';
CREATE UNIQUE INDEX deployments_one_running_per_app ON deployments (app) WHERE state = 'running';
CREATE INDEX deployments_app_recent ON deployments (app, created_at DESC);
CREATE INDEX deployments_claimable ON deployments (created_at) WHERE state IN ('queued', 'running');

-- The journal: one row per step of a deployment. The intent is written (and committed)
-- before the side effect, the result after it.
CREATE TABLE deployment_steps (
    id             bigserial   PRIMARY KEY,
    deployment_id  uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    step           text        NOT NULL,
    state          text        NOT NULL CHECK (state IN ('started', 'succeeded', 'failed')),
    intent         jsonb       NOT NULL,
    result         jsonb,
    error          text,
    attempt        integer     NOT NULL,
    replays        integer     NOT NULL DEFAULT 0,
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    UNIQUE (deployment_id, step)
);

-- What serves now, per app: written only by the `switch` step, in the same transaction
-- as that step's result.
CREATE TABLE app_generations (
    app            text        PRIMARY KEY,
    deployment_id  uuid        NOT NULL REFERENCES deployments (id),
    digest         text        NOT NULL,
    container_id   text        NOT NULL,
    switched_at    timestamptz NOT NULL DEFAULT now()
);

-- Wakes workers (and live pages) on every queue change, from any process that writes it,
-- including `pier deploy`. Delivered at commit, never for a rolled-back change.
CREATE FUNCTION pier_notify_queue() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('pier_queue', NEW.app);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER deployments_notify
    AFTER INSERT OR UPDATE OF state ON deployments
    FOR EACH ROW EXECUTE FUNCTION pier_notify_queue();
