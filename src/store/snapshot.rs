//! An app's status rows as of one instant, for the status page and the API. The workers
//! write a step's journal entry and the generation (or route) it switched in one
//! transaction; read apart, a switch that commits between two reads shows the journal's
//! `switch succeeded` beside the old generation (or none): a status that lies. One
//! REPEATABLE READ, READ ONLY transaction sees every row from the same commit.

use sqlx::{Postgres, Transaction};

use super::deployments::{app_deployments_in, generations_of_in};
use super::routes::route_in;
use super::steps::steps_in;
use super::{Deployment, DeploymentState, Generation, Result, Route, StepRecord, Store};

/// What the status of one app is made of, read in one snapshot.
pub(crate) struct AppRows {
    pub generations: Vec<Generation>,
    /// Newest first, at most the history asked for.
    pub deployments: Vec<Deployment>,
    /// The journal of the deployment in progress (empty when none runs).
    pub steps: Vec<StepRecord>,
    /// The route on the app's first target.
    pub route: Option<Route>,
}

impl AppRows {
    pub(crate) fn running(&self) -> Option<&Deployment> {
        self.deployments
            .iter()
            .find(|d| d.state == DeploymentState::Running)
    }
}

impl Store {
    /// A read-only transaction whose every query sees the same commit.
    pub(super) async fn begin_snapshot(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    pub(crate) async fn app_rows(&self, app: &str, first: &str, history: i64) -> Result<AppRows> {
        let mut tx = self.begin_snapshot().await?;
        let generations = generations_of_in(&mut *tx, app).await?;
        let deployments = app_deployments_in(&mut *tx, app, history).await?;
        let running = deployments
            .iter()
            .find(|d| d.state == DeploymentState::Running)
            .map(|d| d.id);
        let steps = match running {
            Some(id) => steps_in(&mut *tx, id).await?,
            None => Vec::new(),
        };
        let route = route_in(&mut *tx, app, first).await?;
        tx.commit().await?;
        Ok(AppRows {
            generations,
            deployments,
            steps,
            route,
        })
    }
}
