-- Contained apps (issue 10): durable ownership of named volumes, and imports.

-- One incarnation per app name, made the first time the app owns something: a volume
-- records it so that an app removed and later re-added under the same name is told apart
-- from the one that made the volume.
CREATE TABLE app_incarnations (
    app          text        PRIMARY KEY,
    incarnation  uuid        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Who owns each engine volume Pier made. Written (and committed) before the volume is
-- created, so a crash in between leaves a protected record, never an unowned volume; a row
-- is removed only by `pier volumes rm`, never because an app left the config.
CREATE TABLE volumes (
    name           text        PRIMARY KEY,
    app            text        NOT NULL,
    incarnation    uuid        NOT NULL,
    service        text        NOT NULL,
    deployment_id  uuid,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX volumes_app ON volumes (app);

-- `pier import`: the archive a deployment loads instead of pulling, and the platform the
-- operator expects it to hold.
ALTER TABLE deployments ADD COLUMN archive text;
ALTER TABLE deployments ADD COLUMN archive_platform text;
