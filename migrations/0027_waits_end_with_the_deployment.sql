-- What a deployment waited for (an approval, a window, a freeze) ends with the deployment:
-- a row that ended superseded, expired, cancelled or failed while it waited kept saying
-- "waits for 2 approvals" on the pages and in the API. One rule, in the one place every
-- writer of a final state passes through, so no code path can forget it.

CREATE OR REPLACE FUNCTION pier_end_waits() RETURNS trigger AS $$
BEGIN
    NEW.waiting_for := NULL;
    NEW.waiting_until := NULL;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER deployments_end_waits
    BEFORE UPDATE ON deployments
    FOR EACH ROW
    WHEN (NEW.state IN ('succeeded', 'failed', 'superseded', 'cancelled', 'rolled_back')
          AND (NEW.waiting_for IS NOT NULL OR NEW.waiting_until IS NOT NULL))
    EXECUTE FUNCTION pier_end_waits();

-- Rows that ended before this rule.
UPDATE deployments SET waiting_for = NULL, waiting_until = NULL
WHERE state IN ('succeeded', 'failed', 'superseded', 'cancelled', 'rolled_back')
  AND (waiting_for IS NOT NULL OR waiting_until IS NOT NULL);
