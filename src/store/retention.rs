//! Retention: old deliveries and old journal steps are deleted a bounded number at a time,
//! from the sweep that already runs (no timer of its own: an idle Pier with nothing old
//! sends nothing more than one short statement per sweep and policy).
//!
//! What stays: every deployment row (app, digest, outcome, created, started and finished
//! times: the summary), the serving generation's whole journal, and every deployment's
//! `create` step, which is how Pier recognizes the containers it made (a container whose
//! record was gone would no longer be Pier's to stop or remove).

use std::time::Duration;

use super::{Result, Store};

/// What one pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub deliveries: u64,
    pub steps: u64,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Store {
    /// Deletes up to `limit` deliveries received more than `age` ago. Deployments they
    /// queued stay, without the link (`delivery_id` becomes NULL).
    pub async fn prune_deliveries(&self, age: Duration, limit: i64) -> Result<u64> {
        let mut tx = self.begin().await?;
        let old: Vec<uuid::Uuid> = sqlx::query_scalar(
            "SELECT id FROM deliveries
             WHERE received_at < now() - $1 * interval '1 second'
             ORDER BY received_at LIMIT $2",
        )
        .bind(secs(age))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        if old.is_empty() {
            return Ok(0);
        }
        sqlx::query("UPDATE deployments SET delivery_id = NULL WHERE delivery_id = ANY($1)")
            .bind(&old)
            .execute(&mut *tx)
            .await?;
        let n = sqlx::query("DELETE FROM deliveries WHERE id = ANY($1)")
            .bind(&old)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n)
    }

    /// Deletes the journal steps (all but `create`) of up to `limit` deployments that
    /// finished more than `age` ago and do not serve now, and marks them pruned.
    pub async fn prune_steps(&self, age: Duration, limit: i64) -> Result<u64> {
        Ok(sqlx::query(
            "WITH old AS (
               SELECT d.id FROM deployments d
               WHERE d.finished_at < now() - $1 * interval '1 second'
                 AND d.steps_pruned_at IS NULL AND d.finished_at IS NOT NULL
                 AND d.state NOT IN ('queued', 'running')
                 AND NOT EXISTS (SELECT 1 FROM app_generations g WHERE g.deployment_id = d.id)
               ORDER BY d.finished_at LIMIT $2
               FOR UPDATE SKIP LOCKED),
             marked AS (
               UPDATE deployments d SET steps_pruned_at = now()
               FROM old WHERE d.id = old.id RETURNING d.id)
             DELETE FROM deployment_steps s USING marked
             WHERE s.deployment_id = marked.id AND s.step <> 'create'",
        )
        .bind(secs(age))
        .bind(limit)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

impl Store {
    /// One pass of the configured policy: nothing at all (no statement) when none is set.
    pub async fn apply_retention(&self, policy: &crate::config::RetentionConfig) -> Result<Pruned> {
        let mut pruned = Pruned::default();
        if let Some(age) = policy.deliveries {
            pruned.deliveries = self.prune_deliveries(age, policy.per_sweep).await?;
        }
        if let Some(age) = policy.steps {
            pruned.steps = self.prune_steps(age, policy.per_sweep).await?;
        }
        Ok(pruned)
    }
}
