-- Issue 39: an app's incarnation ends. An app removed from the config, whose containers
-- are all gone, ends its incarnation; a different app added later under the same name
-- gets a new one, and with it new, empty volumes: it never inherits the old app's data
-- by name. The old volumes keep their records (data goes only when someone names it) and
-- `pier volumes adopt` hands one to the live incarnation on purpose.

-- Several incarnations per name over time, at most one of them live.
ALTER TABLE app_incarnations ADD COLUMN ended_at timestamptz;
ALTER TABLE app_incarnations DROP CONSTRAINT app_incarnations_pkey;
ALTER TABLE app_incarnations ADD PRIMARY KEY (incarnation);
CREATE UNIQUE INDEX app_incarnations_live ON app_incarnations (app) WHERE ended_at IS NULL;

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
