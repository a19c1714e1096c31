//! Each sweep (`[server] sweep_interval`): reconciliation, then retention, with the config
//! as reloaded, so that reconciliation repairs what the config says now. Also run once at
//! start-up, before any claim.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, LiveConfig};
use crate::error::error_chain;
use crate::store::Store;
use crate::target::Targets;

pub(super) async fn every_sweep(
    live: LiveConfig,
    store: Store,
    targets: Targets,
    sweep: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(sweep) => {
                let config = live.load();
                reconcile_now(&config, &store, &targets).await;
                run_retention(&config, &store).await;
            }
            _ = stop.cancelled() => return,
        }
    }
}

/// Reconciliation once; what it did is logged, a failure too (the next sweep tries again).
pub(crate) async fn reconcile_now(config: &Config, store: &Store, targets: &Targets) {
    match super::reconcile::reconcile_all(config, store, targets).await {
        Ok(r) => {
            for w in &r.warnings {
                tracing::warn!("reconcile: {w}");
            }
            if !r.removed.is_empty() || !r.requeued.is_empty() || !r.networks_removed.is_empty() {
                tracing::info!(
                    removed = r.removed.len(),
                    requeued = r.requeued.len(),
                    networks_removed = r.networks_removed.len(),
                    "reconciled"
                );
            }
        }
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "reconciliation failed; it runs again at the next sweep")
        }
    }
}

/// Retention rides on the sweep: at most `per_sweep` rows per policy each time, so a long
/// backlog drains over a few sweeps instead of one long transaction.
async fn run_retention(config: &Config, store: &Store) {
    match store.apply_retention(&config.retention).await {
        Ok(p) if p.deliveries > 0 || p.steps > 0 => {
            tracing::info!(
                deliveries = p.deliveries,
                steps = p.steps,
                "retention pruned history"
            )
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "retention failed; it runs again at the next sweep")
        }
    }
}
