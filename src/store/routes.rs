//! Proxy routes and quarantined digests: what `pier proxy` serves, and what deploys are
//! refused.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::text::pg_text;
use super::{Result, Store};

/// What the proxy serves for an app, as the pipeline last wrote it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, Serialize, Deserialize)]
pub struct Route {
    pub app: String,
    /// The engine whose `pier proxy --target` serves this route. A state file written
    /// before targets existed has none: its routes were all `local`'s.
    #[serde(default = "local_target")]
    pub target: String,
    pub version: i64,
    pub upstream: String,
    pub container_id: String,
    pub deployment_id: Uuid,
    pub standby: Option<String>,
}

fn local_target() -> String {
    crate::config::LOCAL.to_owned()
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Quarantined {
    pub app: String,
    pub digest: String,
    pub reason: String,
    pub deployment_id: Option<Uuid>,
    pub at: DateTime<Utc>,
}

impl Store {
    /// The routes one engine's proxy serves.
    pub(crate) async fn routes_of_target(&self, target: &str) -> Result<Vec<Route>> {
        Ok(sqlx::query_as(
            "SELECT app, target, version, upstream, container_id, deployment_id, standby
             FROM proxy_routes WHERE target = $1 ORDER BY app",
        )
        .bind(target)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(crate) async fn route(&self, app: &str, target: &str) -> Result<Option<Route>> {
        route_in(&self.pool, app, target).await
    }

    /// A fresh route version, drawn before the write that uses it so that the journal can
    /// record which version to wait for.
    pub(crate) async fn next_route_version(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT nextval('proxy_route_versions')")
            .fetch_one(&self.pool)
            .await?)
    }

    /// Reconciliation's repair: a route whose container is gone points nowhere; it is
    /// removed (the app has no serving generation to point it at).
    pub(crate) async fn delete_route(&self, route: &Route) -> Result<bool> {
        let n =
            sqlx::query("DELETE FROM proxy_routes WHERE app = $1 AND target = $2 AND version = $3")
                .bind(&route.app)
                .bind(&route.target)
                .bind(route.version)
                .execute(&self.pool)
                .await?
                .rows_affected();
        Ok(n == 1)
    }

    pub(crate) async fn quarantine(
        &self,
        app: &str,
        digest: &str,
        reason: &str,
        deployment: Uuid,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO quarantine (app, digest, reason, deployment_id) VALUES ($1, $2, $3, $4)
             ON CONFLICT (app, digest) DO UPDATE SET reason = $3, deployment_id = $4, at = now()",
        )
        .bind(app)
        .bind(digest)
        .bind(pg_text(reason))
        .bind(deployment)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(crate) async fn quarantined(&self, app: &str, digest: &str) -> Result<Option<Quarantined>> {
        Ok(
            sqlx::query_as("SELECT * FROM quarantine WHERE app = $1 AND digest = $2")
                .bind(app)
                .bind(digest)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    pub(crate) async fn quarantine_of(&self, app: &str) -> Result<Vec<Quarantined>> {
        Ok(
            sqlx::query_as("SELECT * FROM quarantine WHERE app = $1 ORDER BY at DESC LIMIT 50")
                .bind(app)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// An admin deployed exactly this digest: they vouch for it.
    pub(crate) async fn clear_quarantine(&self, app: &str, digest: &str) -> Result<bool> {
        let n = sqlx::query("DELETE FROM quarantine WHERE app = $1 AND digest = $2")
            .bind(app)
            .bind(digest)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }
}

/// The app's route on one engine, on a pool or inside a snapshot (`snapshot.rs`).
pub(super) async fn route_in<'c>(
    ex: impl sqlx::PgExecutor<'c>,
    app: &str,
    target: &str,
) -> Result<Option<Route>> {
    Ok(sqlx::query_as(
        "SELECT app, target, version, upstream, container_id, deployment_id, standby
         FROM proxy_routes WHERE app = $1 AND target = $2",
    )
    .bind(app)
    .bind(target)
    .fetch_optional(ex)
    .await?)
}
