use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::kinds::{Step, StepState};
use super::text::{pg_json, pg_text};
use super::{Result, Store, StoreError};

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct StepRecord {
    pub id: i64,
    pub deployment_id: Uuid,
    pub step: Step,
    /// The service this entry is for; empty for the app's primary service (and for steps
    /// that are the whole generation's, like `resolve` or `switch`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// The engine this entry ran on; empty for the steps of the whole deployment
    /// (`resolve`), which no engine runs.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target: String,
    pub state: StepState,
    pub intent: serde_json::Value,
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
    pub attempt: i32,
    pub replays: i32,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Where in a deployment a journal entry belongs, besides its step: the service (empty
/// for the primary one and for the generation's own steps) and the target engine (empty
/// for the steps of the whole deployment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane<'a> {
    pub service: &'a str,
    pub target: &'a str,
}

impl Lane<'static> {
    /// The whole deployment's entries (`resolve`, `signature`): no service, no engine.
    pub const WHOLE: Self = Lane {
        service: "",
        target: "",
    };
}

/// What a step's success changes besides its own record, in the same transaction: the
/// app's serving generation (the `switch` step, a revert) and the proxy's route to it. The
/// page, the journal and the proxy can therefore never disagree about what serves.
#[derive(Debug, Clone, Default)]
pub struct GenerationSwitch {
    pub app: String,
    /// The engine whose serving generation (and proxy route) this is.
    pub target: String,
    /// The new serving generation: `(deployment, digest, container)`.
    pub generation: Option<(Uuid, String, String)>,
    /// The engine serves nothing of the app any more (a rollout reverted on an engine the
    /// app was new to): its generation row and its proxy route go.
    pub forget: bool,
    pub route: Option<RouteWrite>,
}

/// A proxy route as a step writes it; `version` was drawn beforehand (and journaled in the
/// step's result) so that the pipeline can wait for the proxy to apply exactly it.
#[derive(Debug, Clone)]
pub struct RouteWrite {
    pub version: i64,
    pub upstream: String,
    pub container_id: String,
    pub deployment_id: Uuid,
    pub standby: Option<String>,
}

/// Every journal write checks that the writer still holds the deployment's lease, so a
/// worker that lost it (paused, partitioned) cannot overwrite its successor's record.
async fn holds_lease(
    tx: &mut Transaction<'_, Postgres>,
    deployment: Uuid,
    owner: &str,
) -> Result<()> {
    let held: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM deployments WHERE id = $1 AND lease_owner = $2 AND state = 'running'
         FOR UPDATE",
    )
    .bind(deployment)
    .bind(owner)
    .fetch_optional(&mut **tx)
    .await?;
    held.map(|_| ()).ok_or(StoreError::LeaseLost)
}

impl Store {
    pub async fn steps(&self, deployment: Uuid) -> Result<Vec<StepRecord>> {
        steps_in(&self.pool, deployment).await
    }

    /// One journal entry.
    pub(crate) async fn step(
        &self,
        deployment: Uuid,
        step: Step,
        lane: Lane<'_>,
    ) -> Result<Option<StepRecord>> {
        Ok(sqlx::query_as(
            "SELECT * FROM deployment_steps
             WHERE deployment_id = $1 AND step = $2 AND service = $3 AND target = $4",
        )
        .bind(deployment)
        .bind(step)
        .bind(lane.service)
        .bind(lane.target)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Records a step's intent, committed before its side effect.
    pub async fn step_begin(
        &self,
        deployment: Uuid,
        owner: &str,
        step: Step,
        lane: Lane<'_>,
        intent: &serde_json::Value,
        attempt: i32,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        holds_lease(&mut tx, deployment, owner).await?;
        sqlx::query(
            "INSERT INTO deployment_steps
                 (deployment_id, step, service, target, state, intent, attempt)
             VALUES ($1, $2, $5, $6, 'started', $3, $4)",
        )
        .bind(deployment)
        .bind(step)
        .bind(pg_json(intent).as_ref())
        .bind(attempt)
        .bind(lane.service)
        .bind(lane.target)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Marks a started step as being replayed after a crash or a lost lease.
    pub(crate) async fn step_replay(
        &self,
        deployment: Uuid,
        owner: &str,
        step: Step,
        lane: Lane<'_>,
        attempt: i32,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        holds_lease(&mut tx, deployment, owner).await?;
        sqlx::query(
            "UPDATE deployment_steps SET replays = replays + 1, attempt = $3
             WHERE deployment_id = $1 AND step = $2 AND service = $4 AND target = $5",
        )
        .bind(deployment)
        .bind(step)
        .bind(attempt)
        .bind(lane.service)
        .bind(lane.target)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records a step's result; with `switch`, the app's serving generation changes in the
    /// same transaction.
    pub async fn step_succeed(
        &self,
        deployment: Uuid,
        owner: &str,
        step: Step,
        lane: Lane<'_>,
        result: &serde_json::Value,
        switch: Option<&GenerationSwitch>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        holds_lease(&mut tx, deployment, owner).await?;
        if let Some(change) = switch {
            apply_switch(&mut tx, change).await?;
        }
        finish_step(
            &mut tx,
            deployment,
            (step, lane),
            StepState::Succeeded,
            Some(result),
            None,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn step_fail(
        &self,
        deployment: Uuid,
        owner: &str,
        step: Step,
        lane: Lane<'_>,
        error: &str,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        holds_lease(&mut tx, deployment, owner).await?;
        finish_step(
            &mut tx,
            deployment,
            (step, lane),
            StepState::Failed,
            None,
            Some(error),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

async fn apply_switch(tx: &mut Transaction<'_, Postgres>, change: &GenerationSwitch) -> Result<()> {
    if change.forget {
        // A route to a generation that is gone would send requests nowhere.
        for delete in [
            "DELETE FROM app_generations WHERE app = $1 AND target = $2",
            "DELETE FROM proxy_routes WHERE app = $1 AND target = $2",
        ] {
            sqlx::query(delete)
                .bind(&change.app)
                .bind(&change.target)
                .execute(&mut **tx)
                .await?;
        }
    }
    if let Some((deployment, digest, container)) = &change.generation {
        sqlx::query(
            "INSERT INTO app_generations (app, deployment_id, digest, container_id, target)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (app, target) DO UPDATE SET deployment_id = $2, digest = $3,
                 container_id = $4, switched_at = now()",
        )
        .bind(&change.app)
        .bind(deployment)
        .bind(digest)
        .bind(container)
        .bind(&change.target)
        .execute(&mut **tx)
        .await?;
    }
    if let Some(r) = &change.route {
        sqlx::query(
            "INSERT INTO proxy_routes
                 (app, version, upstream, container_id, deployment_id, standby, target)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (app, target) DO UPDATE SET version = $2, upstream = $3, container_id = $4,
                 deployment_id = $5, standby = $6, updated_at = now()",
        )
        .bind(&change.app)
        .bind(r.version)
        .bind(&r.upstream)
        .bind(&r.container_id)
        .bind(r.deployment_id)
        .bind(&r.standby)
        .bind(&change.target)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

async fn finish_step(
    tx: &mut Transaction<'_, Postgres>,
    deployment: Uuid,
    (step, lane): (Step, Lane<'_>),
    state: StepState,
    result: Option<&serde_json::Value>,
    error: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE deployment_steps SET state = $3, result = $4, error = $5, finished_at = now()
         WHERE deployment_id = $1 AND step = $2 AND service = $6 AND target = $7",
    )
    .bind(deployment)
    .bind(step)
    .bind(state)
    .bind(result.map(pg_json).as_ref().map(|c| c.as_ref()))
    .bind(error.map(pg_text))
    .bind(lane.service)
    .bind(lane.target)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl Store {
    /// The resolve result (`Resolved`) journaled for further service `service` of image
    /// `image` by the latest succeeded deployment of `app` whose primary service ran
    /// `digest`, and that deployment: what a digest-pinned deploy of `digest` runs again.
    pub(crate) async fn service_resolved_with(
        &self,
        app: &str,
        digest: &str,
        service: &str,
        image: &str,
    ) -> Result<Option<(Uuid, serde_json::Value)>> {
        Ok(sqlx::query_as(
            "SELECT d.id, s.result FROM deployment_steps s
             JOIN deployments d ON d.id = s.deployment_id
             WHERE d.app = $1 AND d.resolved_digest = $2 AND d.state = 'succeeded'
               AND s.step = 'resolve' AND s.service = $3 AND s.state = 'succeeded'
               AND s.intent->>'image' = $4 AND s.result IS NOT NULL
             ORDER BY d.finished_at DESC NULLS LAST LIMIT 1",
        )
        .bind(app)
        .bind(digest)
        .bind(service)
        .bind(image)
        .fetch_optional(&self.pool)
        .await?)
    }
}

/// A deployment's journal in order, on a pool or inside a snapshot (`snapshot.rs`).
pub(super) async fn steps_in<'c>(
    ex: impl sqlx::PgExecutor<'c>,
    deployment: Uuid,
) -> Result<Vec<StepRecord>> {
    Ok(
        sqlx::query_as("SELECT * FROM deployment_steps WHERE deployment_id = $1 ORDER BY id")
            .bind(deployment)
            .fetch_all(ex)
            .await?,
    )
}
