-- Issue 39: an app's incarnation ends. An app removed from the config, whose containers
-- are all gone, ends its incarnation; a different app added later under the same name
-- gets a new one, and with it new, empty volumes: it never inherits the old app's data
-- by name. The old volumes keep their records (data goes only when someone names it) and
-- `pier volumes adopt` hands one to the live incarnation on purpose.

-- `app_incarnations` keeps the live incarnation of each name, as before (a previous
-- release still running during a rolling upgrade reads and writes it unchanged); an
-- incarnation that ends moves here, in one statement.
CREATE TABLE ended_incarnations (
    incarnation  uuid        PRIMARY KEY,
    app          text        NOT NULL,
    created_at   timestamptz NOT NULL,
    ended_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ended_incarnations_app ON ended_incarnations (app, ended_at);

-- `incarnation` is the owner now; `made_in` is the provenance the volume's engine labels
-- carry (labels cannot change), which an adoption leaves as it was. NULL (every row of an
-- earlier release, and one a previous release still writes during a rolling upgrade)
-- means the owning incarnation made it.
ALTER TABLE volumes ADD COLUMN made_in uuid;
ALTER TABLE volumes ADD COLUMN adopted_at timestamptz;

ALTER TABLE reconcile_actions DROP CONSTRAINT reconcile_actions_action_check;
ALTER TABLE reconcile_actions ADD CONSTRAINT reconcile_actions_action_check
    CHECK (action IN ('removed_orphan', 'requeued_missing', 'removed_route', 'removed_network',
                      'ended_incarnation'));
