use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::kinds::{DeploymentState, ReconcileKind};
use super::text::pg_text;
use super::{Result, Store};

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct ReconcileAction {
    pub id: i64,
    pub app: String,
    /// The engine the action was taken on.
    pub target: String,
    pub action: ReconcileKind,
    pub container_id: Option<String>,
    pub deployment_id: Option<Uuid>,
    /// The engine's id of the network a `removed_network` action removed.
    pub network_id: Option<String>,
    pub detail: String,
    pub at: DateTime<Utc>,
}

impl Store {
    /// The states of the given deployments; ids the database does not know are absent.
    pub(crate) async fn deployment_states(
        &self,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, DeploymentState>> {
        let rows: Vec<(Uuid, DeploymentState)> =
            sqlx::query_as("SELECT id, state FROM deployments WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().collect())
    }

    /// Which of `ids` Pier can account for: containers its journal created (the `create`
    /// step's result) or that serve as an app's generation. Only these are ever stopped or
    /// removed; a container that merely carries Pier's labels is not Pier's to touch.
    pub async fn known_containers(&self, ids: &[String]) -> Result<HashSet<String>> {
        if ids.is_empty() {
            return Ok(HashSet::new());
        }
        let known: Vec<String> = sqlx::query_scalar(
            "SELECT result->>'id' FROM deployment_steps
             WHERE step = 'create' AND result->>'id' = ANY($1)
             UNION
             SELECT container_id FROM app_generations WHERE container_id = ANY($1)",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(known.into_iter().collect())
    }

    /// Whether the app has a deployment queued or running.
    pub(crate) async fn app_busy(&self, app: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM deployments WHERE app = $1 AND state IN ('queued', 'running'))",
        )
        .bind(app)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Which of `apps` this installation has deployed and has nothing queued or running
    /// for, in one statement. The deployment rows outlive the journal's steps (retention
    /// prunes steps, never the rows), so an app deployed long ago still counts; an app only
    /// another Pier on the same engine deploys does not, and its network is not this one's
    /// to remove.
    ///
    /// On another engine than `local` the app must also have run there (a journal entry
    /// or a serving generation of that target): an engine other Piers deploy to as well
    /// holds networks this one never made. (`local`'s rows from before targets existed
    /// are all `local`'s, so there the deployment rows alone decide, as they always did.)
    pub(crate) async fn apps_deployed_and_idle(
        &self,
        apps: &[String],
        target: &str,
    ) -> Result<HashSet<String>> {
        if apps.is_empty() {
            return Ok(HashSet::new());
        }
        let found: Vec<String> = sqlx::query_scalar(
            "SELECT d.app FROM deployments d WHERE d.app = ANY($1) GROUP BY d.app
             HAVING NOT bool_or(d.state IN ('queued', 'running'))
                AND ($2 = 'local'
                     OR EXISTS (SELECT 1 FROM app_generations g
                                WHERE g.app = d.app AND g.target = $2)
                     OR EXISTS (SELECT 1 FROM deployment_steps s
                                JOIN deployments o ON o.id = s.deployment_id
                                WHERE o.app = d.app AND s.target = $2))",
        )
        .bind(apps)
        .bind(target)
        .fetch_all(&self.pool)
        .await?;
        Ok(found.into_iter().collect())
    }

    pub(crate) async fn record_network_removed(
        &self,
        target: &str,
        app: &str,
        network_id: &str,
        detail: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO reconcile_actions (app, action, network_id, detail, target)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(app)
        .bind(ReconcileKind::RemovedNetwork)
        .bind(network_id)
        .bind(pg_text(detail))
        .bind(target)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(crate) async fn record_reconcile(
        &self,
        target: &str,
        app: &str,
        action: ReconcileKind,
        container_id: Option<&str>,
        deployment_id: Option<Uuid>,
        detail: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO reconcile_actions (app, action, container_id, deployment_id, detail, target)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(app)
        .bind(action)
        .bind(container_id)
        .bind(deployment_id)
        .bind(pg_text(detail))
        .bind(target)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(crate) async fn reconcile_actions(
        &self,
        app: &str,
        limit: i64,
    ) -> Result<Vec<ReconcileAction>> {
        Ok(sqlx::query_as(
            "SELECT * FROM reconcile_actions WHERE app = $1 ORDER BY at DESC LIMIT $2",
        )
        .bind(app)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }
}
