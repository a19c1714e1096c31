//! Workers: claim deployments from the queue, hold their lease with a heartbeat, run the
//! pipeline. Woken by LISTEN/NOTIFY; a timer only as a safety net and for lease expiry.

mod wake;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::pipeline::{self, Context, Outcome};
use crate::store::{Deployment, DeploymentState, StoreError};

pub use wake::listen;

/// How long a deployment in flight may take to finish after shutdown is asked before its
/// lease is released for another worker to resume it from the journal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

pub struct Workers {
    pub ctx: Arc<Context>,
    pub config: Arc<Config>,
    pub wake: watch::Receiver<u64>,
    pub shutdown: CancellationToken,
}

/// A lease holder's name: unique per worker and process, readable in the journal.
pub fn owner_name(index: usize) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    let nonce = &uuid::Uuid::new_v4().simple().to_string()[..6];
    format!("{host}:{}:w{index}:{nonce}", std::process::id())
}

impl Workers {
    pub async fn run(self) {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..self.config.server.workers {
            let w = Worker {
                owner: owner_name(i),
                ctx: self.ctx.clone(),
                config: self.config.clone(),
                wake: self.wake.clone(),
                shutdown: self.shutdown.clone(),
            };
            tasks.spawn(w.run());
        }
        while tasks.join_next().await.is_some() {}
    }
}

struct Worker {
    owner: String,
    ctx: Arc<Context>,
    config: Arc<Config>,
    wake: watch::Receiver<u64>,
    shutdown: CancellationToken,
}

impl Worker {
    async fn run(mut self) {
        let lease = self.config.server.lease;
        let mut backoff = Duration::from_millis(200);
        tracing::debug!(owner = %self.owner, "worker started");
        while !self.shutdown.is_cancelled() {
            // Mark wake-ups seen *before* looking, so one arriving meanwhile is not lost.
            self.wake.borrow_and_update();
            match self.ctx.store.claim(&self.owner, lease).await {
                Ok(Some(dep)) => {
                    backoff = Duration::from_millis(200);
                    self.run_one(dep).await;
                }
                Ok(None) => {
                    let idle = self.idle_for().await;
                    tokio::select! {
                        _ = self.wake.changed() => {}
                        _ = tokio::time::sleep(idle) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(owner = %self.owner, error = %e, "claim failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        tracing::debug!(owner = %self.owner, "worker stopped");
    }

    /// Sleeps until the next lease in the database expires (a crashed worker's deployment
    /// to take over), or the sweep interval, whichever is sooner.
    async fn idle_for(&self) -> Duration {
        let sweep = self.config.server.sweep_interval;
        match self.ctx.store.next_lease_expiry().await {
            Ok(Some(left)) => left.min(sweep) + Duration::from_millis(20),
            _ => sweep,
        }
    }

    async fn run_one(&self, dep: Deployment) {
        let Some(app) = self.config.app(&dep.app) else {
            let _ = self
                .ctx
                .store
                .finish(
                    dep.id,
                    &self.owner,
                    DeploymentState::Failed,
                    "failed; nothing was changed",
                    Some(&format!("app `{}` is not in the configuration", dep.app)),
                    None,
                )
                .await;
            return;
        };
        tracing::info!(owner = %self.owner, deployment = %dep.id, app = %dep.app, attempt = dep.attempt, "claimed");
        let mut work = pin!(pipeline::run(&self.ctx, &self.owner, &dep, app));
        let lost = self.heartbeat(&dep);
        tokio::select! {
            outcome = &mut work => self.report(&dep, outcome),
            reason = lost => {
                tracing::warn!(deployment = %dep.id, %reason, "lease lost; abandoning this run, the new holder resumes it");
            }
            _ = self.shutdown.cancelled() => {
                tokio::select! {
                    outcome = &mut work => self.report(&dep, outcome),
                    _ = tokio::time::sleep(SHUTDOWN_GRACE) => {
                        tracing::info!(deployment = %dep.id, "shutting down mid-deployment; releasing it for resume");
                        let _ = self.ctx.store.release(dep.id, &self.owner).await;
                    }
                }
            }
        }
    }

    fn report(&self, dep: &Deployment, outcome: Outcome) {
        if let Outcome::Abandoned(reason) = outcome {
            tracing::warn!(deployment = %dep.id, %reason, "run abandoned; it resumes when its lease expires");
        }
    }

    /// Extends the lease every third of its length; returns only when it is lost.
    async fn heartbeat(&self, dep: &Deployment) -> String {
        let lease = self.config.server.lease;
        loop {
            tokio::time::sleep(lease / 3).await;
            match self.ctx.store.heartbeat(dep.id, &self.owner, lease).await {
                Ok(()) => {}
                Err(StoreError::LeaseLost) => return "another worker holds the lease".into(),
                Err(e) => {
                    tracing::warn!(deployment = %dep.id, error = %e, "heartbeat failed; retrying")
                }
            }
        }
    }
}
