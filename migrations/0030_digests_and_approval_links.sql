-- Digests: a notification that summarizes a period instead of announcing one deployment.
-- It has no deployment; it has a period (`daily:2026-12-07T09:00:00Z`, named by the moment
-- that ends it), and an endpoint gets at most one per period: every Pier process inserts it
-- when its timer fires, and the unique index lets exactly one insert win.
ALTER TABLE notifications ALTER COLUMN deployment_id DROP NOT NULL;
ALTER TABLE notifications ADD COLUMN period text;
-- 0029's shape of an event name, and `digest`.
ALTER TABLE notifications DROP CONSTRAINT notifications_event_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_event_check
    CHECK (event ~ '^(deployment|container)\.[a-z_]+$' OR event = 'digest');
ALTER TABLE notifications ADD CONSTRAINT notifications_digest_or_deployment
    CHECK (CASE WHEN event = 'digest' THEN period IS NOT NULL AND deployment_id IS NULL
                ELSE period IS NULL AND deployment_id IS NOT NULL END);
CREATE UNIQUE INDEX notifications_one_digest_per_period
    ON notifications (endpoint, period) WHERE period IS NOT NULL;

-- Approval links: each signed link (a nonce and an action) opens the approval once. The
-- signature proves Pier made it; this row proves it was not used before. Rows are only
-- ever inserted; the primary key refuses a second use, whichever process serves it.
CREATE TABLE approval_link_uses (
    nonce          uuid        NOT NULL,
    action         text        NOT NULL CHECK (action IN ('approve', 'reject')),
    deployment_id  uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    used_by        text        NOT NULL,
    used_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (nonce, action)
);
