-- Issue 21: reconciliation also removes the private networks (`pier-<app>`) of apps that
-- left the config, once nothing is attached, and records which network it removed: the
-- engine's address pools hold about 30 networks, and a removal without a record would
-- leave an operator guessing where an app's network went.
ALTER TABLE reconcile_actions ADD COLUMN network_id text;
ALTER TABLE reconcile_actions DROP CONSTRAINT reconcile_actions_action_check;
ALTER TABLE reconcile_actions ADD CONSTRAINT reconcile_actions_action_check
    CHECK (action IN ('removed_orphan', 'requeued_missing', 'removed_route', 'removed_network'));
