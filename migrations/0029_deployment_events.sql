-- What a deployment's containers did after they started, as the resource sampler saw it:
-- killed for memory, or restarted again and again. A row of the deployment's timeline,
-- at most one per container and kind (a sampler that sees the same kill twice, or two
-- Pier processes that both see it, record it once). Rows are only ever added.
CREATE TABLE deployment_events (
    id                  bigserial   PRIMARY KEY,
    deployment_id       uuid        NOT NULL REFERENCES deployments (id),
    kind                text        NOT NULL CHECK (kind IN ('oom_killed', 'restart_loop')),
    target              text        NOT NULL,
    service             text        NOT NULL,
    container_id        text        NOT NULL,
    container_name      text        NOT NULL,
    -- When the engine saw it (the OOM event's time, or the sample's).
    at                  timestamptz NOT NULL,
    -- The engine's restart count and the container's memory limit, when sampled.
    restarts            bigint,
    memory_limit_bytes  bigint,
    recorded_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (deployment_id, container_id, kind)
);
CREATE INDEX deployment_events_of ON deployment_events (deployment_id, at);

-- Notifications of these events ride the same outbox. The event names a notification may
-- carry are checked where they are configured (`[[notifications]] events`); here only
-- their shape, so that another event added beside these needs no change of this check.
ALTER TABLE notifications DROP CONSTRAINT notifications_event_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_event_check
    CHECK (event ~ '^(deployment|container)\.[a-z_]+$');
