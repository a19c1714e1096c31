//! Workers: claim deployments from the queue, hold their lease with a heartbeat, run the
//! pipeline. Woken by LISTEN/NOTIFY; a timer only as a safety net, for lease expiry, and
//! (while another process deploys) to notice that its holder died.
//!
//! Liveness and fencing are two separate things here. Liveness: each process holds a
//! session-level advisory lock (its `liveness_key`) on its listening connection; when the
//! process dies, Postgres drops the lock at once and any other worker resumes its
//! deployments. Fencing: every write a worker makes is guarded by its `lease_owner` in SQL,
//! so a worker that is alive but was cut off long enough for its lease to expire and be
//! taken over can never write again.

mod wake;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::config::Config;
use crate::error::error_chain;
use crate::pipeline::{self, Context, Outcome};
use crate::store::{Deployment, DeploymentState, StoreError};

pub use wake::{Deploying, Signals, listen};

/// How long a deployment in flight may take to finish after shutdown is asked before its
/// lease is released for another worker to resume it from the journal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A fresh liveness key: random, positive, 62 bits, so that no two processes share one
/// and none collides with the 32-bit keys of per-app enqueue locks.
pub fn liveness_key() -> i64 {
    let (hi, _) = uuid::Uuid::new_v4().as_u64_pair();
    ((hi >> 2) | (1 << 40)) as i64
}

pub(crate) struct Workers {
    pub ctx: Arc<Context>,
    pub config: Arc<Config>,
    pub liveness_key: i64,
    pub wake: watch::Receiver<u64>,
    pub alive: watch::Receiver<bool>,
    pub deploying: Deploying,
    /// Told of each deployment that succeeded, so that its containers are watched.
    pub stats: crate::background::stats::Stats,
    pub shutdown: CancellationToken,
}

/// A lease holder's name: unique per worker and process, readable in the journal.
pub(crate) fn owner_name(index: usize) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    let nonce = &uuid::Uuid::new_v4().simple().to_string()[..6];
    format!("{host}:{}:w{index}:{nonce}", std::process::id())
}

impl Workers {
    pub(crate) async fn run(self) {
        let mut tasks = tokio::task::JoinSet::new();
        // A NOTIFY wakes ONE idle worker, not all of them: a burst of new deployments used to
        // send every idle worker to claim (and all but one to find nothing) for each one. A
        // worker that claims something passes the wake-up on (`baton`), so a batch of
        // deployments committed under one notification still reaches every idle worker.
        let baton = Arc::new(Notify::new());
        tasks.spawn(relay_one_by_one(
            self.wake.clone(),
            baton.clone(),
            self.shutdown.clone(),
        ));
        for i in 0..self.config.server.workers {
            let w = Worker {
                owner: owner_name(i),
                ctx: self.ctx.clone(),
                config: self.config.clone(),
                liveness_key: self.liveness_key,
                wake: baton.clone(),
                alive: self.alive.clone(),
                deploying: self.deploying.clone(),
                stats: self.stats.clone(),
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
    liveness_key: i64,
    wake: Arc<Notify>,
    alive: watch::Receiver<bool>,
    deploying: Deploying,
    stats: crate::background::stats::Stats,
    shutdown: CancellationToken,
}

/// Turns the listener's wake-ups into one `notify_one` each. A wake-up while every worker
/// is busy is kept (as `Notify`'s one stored permit) for the next worker to look.
async fn relay_one_by_one(
    mut wake: watch::Receiver<u64>,
    baton: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            changed = wake.changed() => {
                if changed.is_err() {
                    return;
                }
                baton.notify_one();
            }
            _ = shutdown.cancelled() => return,
        }
    }
}

impl Worker {
    async fn run(mut self) {
        let lease = self.config.server.lease;
        let mut backoff = Backoff::outage();
        tracing::debug!(owner = %self.owner, "worker started");
        // The last claim failed: its commit may have happened with the answer lost.
        let mut unanswered = false;
        while !self.shutdown.is_cancelled() {
            if !self.wait_alive().await {
                break;
            }
            // A wake-up arriving while this worker looks is not lost: `notify_one` with no
            // worker waiting stores a permit that the next `notified()` takes at once.
            let claimed = match unanswered {
                true => self.retake_or_claim(lease).await,
                false => {
                    self.ctx
                        .store
                        .claim(&self.owner, self.liveness_key, lease)
                        .await
                }
            };
            unanswered = claimed.is_err();
            match claimed {
                Ok(Some(dep)) => {
                    backoff.reset();
                    // More may be claimable (one NOTIFY can stand for many deployments):
                    // the next idle worker looks too.
                    self.wake.notify_one();
                    self.run_one(dep).await;
                }
                Ok(None) => {
                    backoff.reset();
                    let idle = self.idle_for().await;
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(idle) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(owner = %self.owner, error = %error_chain(&e), "claim failed; retrying");
                    backoff.wait_or(&self.shutdown).await;
                }
            }
        }
        tracing::debug!(owner = %self.owner, "worker stopped");
    }

    /// Waits until this process holds its liveness lock; `false` on shutdown.
    async fn wait_alive(&mut self) -> bool {
        tokio::select! {
            r = self.alive.wait_for(|alive| *alive) => r.is_ok(),
            _ = self.shutdown.cancelled() => false,
        }
    }

    /// Sleeps until the queue may have changed without a NOTIFY: a lease expires, a holder
    /// in another process may have died, or the sweep comes round. With nothing running
    /// anywhere this is the sweep interval: an idle Pier sends no queries.
    async fn idle_for(&self) -> Duration {
        let sweep = self.config.server.sweep_interval;
        match self.ctx.store.next_wakeup(self.liveness_key).await {
            Ok(Some(at)) => at.min(sweep) + Duration::from_millis(20),
            Ok(None) => sweep,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot read lease expiries; sleeping a second");
                sweep.min(Duration::from_secs(1))
            }
        }
    }

    async fn run_one(&self, dep: Deployment) {
        // Until it ends, the queue's NOTIFYs for this app wake no other worker here; this
        // one claims again right after.
        let _deploying = self.deploying.enter(&dep.app);
        let span =
            tracing::info_span!("deployment", id = %dep.id, app = %dep.app, attempt = dep.attempt);
        self.run_claimed(dep).instrument(span).await
    }

    async fn run_claimed(&self, dep: Deployment) {
        if dep.attempt > 1 {
            metrics::counter!("pier_lease_takeovers_total").increment(1);
        }
        // The config as reloaded now, not as it was at start: a removed app is not deployed.
        let live = self.ctx.live.load();
        let Some(app) = live.app(&dep.app) else {
            let res = self
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
            if let Err(e) = res {
                tracing::warn!(error = %error_chain(&e), "cannot fail a deployment of an unknown app; it is claimed again later");
            }
            return;
        };
        tracing::info!(owner = %self.owner, "claimed");
        // Approvals, freezes and windows, judged before any step; a deployment
        // that must wait goes back to Postgres as a waiting row, and this worker moves on.
        // A database outage (a failover) is waited out as the journal's writes wait it
        // out: released at once, the claim would keep its lease and be resumed by another
        // run only when the lease ran out.
        let backoff = Backoff::store_write().within(self.ctx.store_patience);
        let judged = crate::backoff::retry(
            backoff,
            crate::store::StoreError::is_unavailable,
            |e, _| tracing::warn!(error = %error_chain(e), "database unavailable; judging the gates again"),
            || crate::gates::check(&self.ctx.store, &self.owner, &dep, app),
        )
        .await;
        match judged {
            Ok(crate::gates::Gate::Pass) => {}
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot judge the deployment's gates; releasing it");
                let _ = self.ctx.store.release(dep.id, &self.owner).await;
                return;
            }
        }
        let mut work = pin!(pipeline::run(&self.ctx, &self.owner, &dep, app));
        let lost = self.heartbeat(&dep);
        tokio::select! {
            outcome = &mut work => self.report(outcome),
            reason = lost => {
                tracing::warn!(%reason, "lease lost; abandoning this run, the new holder resumes it");
            }
            _ = self.shutdown.cancelled() => {
                tokio::select! {
                    outcome = &mut work => self.report(outcome),
                    _ = tokio::time::sleep(SHUTDOWN_GRACE) => {
                        tracing::info!("shutting down mid-deployment; releasing it for resume");
                        if let Err(e) = self.ctx.store.release(dep.id, &self.owner).await {
                            tracing::warn!(error = %error_chain(&e), "release failed; the deployment is resumed once this process is gone");
                        }
                    }
                }
            }
        }
    }

    /// After a claim that failed: first the deployment it may have taken after all, then
    /// a new claim.
    async fn retake_or_claim(
        &self,
        lease: Duration,
    ) -> Result<Option<Deployment>, crate::store::StoreError> {
        let store = &self.ctx.store;
        match store
            .retake_unanswered_claim(&self.owner, self.liveness_key, lease)
            .await?
        {
            Some(d) => {
                tracing::info!(deployment = %d.id, "took up a claim whose answer was lost");
                Ok(Some(d))
            }
            None => store.claim(&self.owner, self.liveness_key, lease).await,
        }
    }

    fn report(&self, outcome: Outcome) {
        match outcome {
            Outcome::Abandoned(reason) => {
                tracing::warn!(%reason, "run abandoned; another worker resumes it")
            }
            Outcome::Finished(state) => {
                tracing::debug!(%state, "run finished");
                // What it started is watched for OOM kills and restart loops for a while,
                // whether or not anyone looks at it.
                if state == DeploymentState::Succeeded {
                    self.stats
                        .watch_for(crate::background::stats::sampler::WATCH_AFTER_DEPLOY);
                }
            }
        }
    }

    /// Extends the lease every third of its length; returns only when it is lost. A failed
    /// heartbeat (the database away, a failover under way) is tried again within a second
    /// or two, not a third of a lease later: the lease must not run out merely because the
    /// database came back between two beats, or another worker would resume the run.
    async fn heartbeat(&self, dep: &Deployment) -> String {
        let lease = self.config.server.lease;
        let mut retry = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
        let mut pause = lease / 3;
        loop {
            tokio::time::sleep(pause).await;
            match self.ctx.store.heartbeat(dep.id, &self.owner, lease).await {
                Ok(()) => {
                    retry.reset();
                    pause = lease / 3;
                }
                Err(StoreError::LeaseLost) => return "another worker holds the lease".into(),
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "heartbeat failed; retrying");
                    pause = retry.next_delay().unwrap_or(pause).min(lease / 3);
                }
            }
        }
    }
}
