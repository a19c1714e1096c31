-- What reconciliation did to the engine, so that no container disappears without a record.
CREATE TABLE reconcile_actions (
    id             bigserial   PRIMARY KEY,
    app            text        NOT NULL,
    action         text        NOT NULL CHECK (action IN ('removed_orphan', 'requeued_missing')),
    container_id   text,
    deployment_id  uuid,
    detail         text        NOT NULL,
    at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reconcile_actions_app ON reconcile_actions (app, at DESC);
