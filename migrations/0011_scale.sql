-- Issue 12: history at scale. The overview lists the newest deployments of all apps; the
-- newest succeeded deployment of an app (serving tag, no-rollback rule) is looked up by
-- app; retention finds finished deployments whose journal it has not pruned yet. Each was
-- a scan of the whole table.
CREATE INDEX deployments_recent ON deployments (created_at DESC);
CREATE INDEX deployments_app_succeeded ON deployments (app, finished_at DESC)
    WHERE state = 'succeeded';

-- When retention deleted this deployment's journal steps (all but `create`); the row
-- itself, with its outcome and times, stays as the summary.
ALTER TABLE deployments ADD COLUMN steps_pruned_at timestamptz;
CREATE INDEX deployments_journal_to_prune ON deployments (finished_at)
    WHERE finished_at IS NOT NULL AND steps_pruned_at IS NULL;
