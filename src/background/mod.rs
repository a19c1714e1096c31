//! What runs beside the workers, in one room, started by one supervisor ([`Background`])
//! that `serve` and `worker` call once: each sweep's reconciliation and retention
//! (`sweep.rs`, `reconcile/`), the notification sender and the digest timer (`notify/`),
//! promotions (`promote.rs`), the reconcile poller (`poller.rs`), the resource sampler
//! (`stats/`) and the reload on SIGHUP.
//!
//! Every task here ends when the shutdown token fires, and each waits on a timer or a
//! NOTIFY of its own: an idle Pier runs nothing here but those timers (the resource
//! sampler not even a timer: it waits until a page, the API or a scrape wants it).

pub(crate) mod notify;
pub mod poller;
pub(crate) mod promote;
pub mod reconcile;
pub mod stats;
mod sweep;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, LiveConfig};
use crate::error::error_chain;
use crate::registry::Registry;
use crate::store::Store;
pub(crate) use sweep::reconcile_now;

/// What the tasks beside the workers share; [`Background::start`] starts them all in
/// `tasks`, which `serve` drains on shutdown before it releases the liveness lock.
pub(crate) struct Background<'a> {
    pub config: &'a Arc<Config>,
    pub live: &'a LiveConfig,
    pub store: &'a Store,
    pub targets: &'a crate::target::Targets,
    /// The engine's platform, which the poller resolves tags for.
    pub platform: crate::domain::Platform,
    /// The config file, reloaded on SIGHUP when given.
    pub path: Option<PathBuf>,
    /// The demand for resource samples, which the pages, the API and the workers share.
    pub stats: &'a stats::Stats,
    pub shutdown: &'a CancellationToken,
}

impl Background<'_> {
    /// Every background task, each in `tasks`.
    pub(crate) async fn start(self, tasks: &mut JoinSet<()>) {
        if self.path.is_some() {
            tasks.spawn(reload_on_sighup(self.live.clone(), self.shutdown.clone()));
        }
        tasks.spawn(sweep::every_sweep(
            self.live.clone(),
            self.store.clone(),
            self.targets.clone(),
            self.config.server.sweep_interval,
            self.shutdown.clone(),
        ));
        stats::sampler::spawn(
            tasks,
            self.stats.clone(),
            (self.targets.clone(), self.store.clone(), self.live.clone()),
            self.shutdown.clone(),
        );
        self.start_outbox_and_timers(tasks).await;
    }

    /// Outgoing notifications (the endpoints the outbox trigger reads, then one sender),
    /// promotions, and the reconcile poller.
    async fn start_outbox_and_timers(self, tasks: &mut JoinSet<()>) {
        let (config, store, shutdown) = (self.config, self.store, self.shutdown);
        if let Err(e) = store.sync_endpoints(&notify::endpoints(config)).await {
            tracing::warn!(error = %error_chain(&e), "cannot record the notification endpoints; the previous ones stay in force until the next start");
        }
        tasks.spawn(
            notify::Sender {
                store: store.clone(),
                endpoints: config.notifications.clone(),
                public_url: config.server.sign_in.public_url.clone(),
            }
            .run(shutdown.clone()),
        );
        // Digests: one task, one timer for the next digest moment, none without digests.
        tasks.spawn(
            notify::digest::Digests {
                config: config.clone(),
                store: store.clone(),
            }
            .run(shutdown.clone()),
        );
        // Promotions: one task, one timer, woken by the source apps' queue changes.
        tasks.spawn(
            promote::Promoter {
                live: self.live.clone(),
                store: store.clone(),
                sweep: config.server.sweep_interval,
            }
            .run(shutdown.clone()),
        );
        // The reconcile poller: one timer per app with `poll` on, none otherwise.
        poller::spawn(
            tasks,
            poller::Poller {
                live: self.live.clone(),
                store: store.clone(),
                registry: Registry::new(&config.registries, config.server.registry_limits),
                tags: crate::registry::tags::TagLister::new(&config.registries),
                platform: self.platform,
            },
            shutdown,
        );
    }
}

/// `SIGHUP` (sent by `pier reload`): the file is read and checked whole; an invalid one
/// changes nothing, and its error is logged and kept for the status page.
async fn reload_on_sighup(live: LiveConfig, stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install a SIGHUP handler; `pier reload` will not work");
        return;
    };
    loop {
        tokio::select! {
            got = hup.recv() => if got.is_none() { return },
            _ = stop.cancelled() => return,
        }
        match live.reload() {
            Ok(()) => tracing::info!(reloads = live.reloads(), "configuration reloaded"),
            Err(e) => tracing::error!(error = %error_chain(&e),
                "configuration reload refused; the previous configuration stays in force"),
        }
    }
}
