//! Start-up: connect, migrate, then the HTTP server and the workers side by side under one
//! shutdown signal.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::backoff::Backoff;
use crate::config::Config;
use crate::engine::{Engine, EngineView};
use crate::error::error_chain;
use crate::pipeline::Context;
use crate::registry::Registry;
use crate::store::Store;
use crate::web::{self, AppState};
use crate::worker::{self, Signals, Workers};

/// How log lines are written: human-readable text, or one JSON object per line for a log
/// collector. Colour codes only when the output is a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

pub fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("pier=info,warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

/// Exactly one TLS crypto provider: reqwest's `rustls` feature (the registry client, probes) brings aws-lc-rs.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

pub(crate) struct Parts {
    pub config: Arc<Config>,
    pub store: Store,
    /// Every target's engine client (see `target/`).
    pub targets: crate::target::Targets,
    /// The `local` target's engine, connected now: reconciliation and the pages' view.
    pub engine: Engine,
}

/// Connects to the database (migrating it) and the engine. The database may be briefly
/// unavailable at boot (Postgres starting beside Pier): wait for it with a deadline.
pub(crate) async fn connect(config: Config, migrate: bool) -> anyhow::Result<Parts> {
    install_crypto_provider();
    let store = Store::connect_lazy_many(&config.server.database_urls()).context("database url")?;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
        .within(Duration::from_secs(30));
    loop {
        let res = if migrate {
            store.migrate().await
        } else {
            store.ping().await
        };
        match res {
            Ok(()) => break,
            Err(e) if e.is_unavailable() && !backoff.expired() => {
                tracing::warn!(error = %error_chain(&e), "database not reachable yet; retrying");
                backoff.wait().await;
            }
            Err(e) => {
                return Err(e).context(if migrate {
                    "migrate database"
                } else {
                    "connect to database"
                });
            }
        }
    }
    let targets = crate::target::Targets::build(&config.targets, config.server.app_subnets)
        .context("make the targets' engine clients")?;
    let engine = targets.local().context("no `local` target")?.engine.clone();
    // The local engine is asked now, as before targets existed: a Pier whose own engine
    // is away says so at once. Other engines are asked when first used.
    engine
        .ping()
        .await
        .context("connect to the Docker engine")?;
    Ok(Parts {
        config: Arc::new(config),
        store,
        targets,
        engine,
    })
}

/// `pier serve` (HTTP and workers) or `pier worker` (workers only), until SIGTERM or
/// Ctrl-C.
pub(crate) async fn run(config: Config, path: Option<PathBuf>, http: bool) -> anyhow::Result<()> {
    let listener = match http {
        true => Some(
            tokio::net::TcpListener::bind(config.server.listen)
                .await
                .with_context(|| format!("listen on {}", config.server.listen))?,
        ),
        false => None,
    };
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!(
            "shutting down: no new claims; finishing or releasing deployments in flight"
        );
        on_signal.cancel();
    });
    run_until_with(config, path, listener, shutdown).await
}

/// The whole of Pier in this process: the HTTP app on `http` (when given) and the workers,
/// until `shutdown` fires. Tests start it in-process on a port-0 listener.
pub async fn run_until(
    config: Config,
    http: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_until_with(config, None, http, shutdown).await
}

/// [`run_until`], reloading the config from `path` on SIGHUP (when given).
pub(crate) async fn run_until_with(
    config: Config,
    path: Option<PathBuf>,
    http: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = metrics_handle();
    let Parts {
        config,
        store,
        targets,
        engine,
    } = connect(config, true).await?;
    let (platform, env_key) = platform_and_key(&engine, &store).await?;
    let poll_platform = platform.clone();
    let live = crate::config::LiveConfig::new(config.clone(), path.clone());
    if path.is_some() {
        tokio::spawn(reload_on_sighup(live.clone(), shutdown.clone()));
    }
    let ctx = Arc::new(pipeline_context(
        &config,
        (store.clone(), targets),
        platform,
        env_key,
        live.clone(),
    ));
    let (signals, wake_rx, alive_rx) = worker_signals();
    let deploying = signals.deploying.clone();
    let liveness_key = worker::liveness_key();

    // Before any claim: remove what crashed runs left behind and that nothing will resume.
    run_reconcile(&config, &store, &ctx.targets).await;

    // The listener holds this process's liveness lock: it stops only after the workers
    // have finished or released their deployments, or they would look abandoned.
    let listener_stop = CancellationToken::new();
    let listening = tokio::spawn(worker::listen(
        store.clone(),
        liveness_key,
        signals,
        listener_stop.clone(),
    ));

    let mut tasks = tokio::task::JoinSet::new();
    let side = SideTasks {
        config: &config,
        live: &live,
        store: &store,
        shutdown: &shutdown,
    };
    side.spawn_sweeper(&mut tasks, &ctx.targets);
    side.spawn_outbox_and_timers(&mut tasks, poll_platform)
        .await;
    // The pages' read-only view of every target's engine, before the workers take `ctx`.
    let page_targets = web::engines::TargetViews::of(&ctx.targets);
    tasks.spawn(
        Workers {
            ctx,
            config: config.clone(),
            liveness_key,
            wake: wake_rx,
            alive: alive_rx,
            deploying,
            shutdown: shutdown.clone(),
        }
        .run(),
    );
    if let Some(listener) = http {
        tracing::info!(addr = %listener.local_addr()?, "listening");
        side.spawn_http(&mut tasks, listener, (engine, page_targets, metrics));
    }
    tracing::info!(workers = config.server.workers, "pier running");
    shutdown.cancelled().await;
    while tasks.join_next().await.is_some() {}
    listener_stop.cancel();
    let _ = listening.await;
    Ok(())
}

/// The engine's platform (what images are pulled for) and the installation's env key.
async fn platform_and_key(
    engine: &Engine,
    store: &Store,
) -> anyhow::Result<(crate::domain::Platform, Vec<u8>)> {
    let platform = engine
        .platform()
        .await
        .context("ask the engine its platform")?;
    let env_key = store
        .installation_key()
        .await
        .context("read the installation key")?;
    Ok((platform, env_key))
}

/// The listener's ends of the workers' wake-up and liveness channels, and the workers'.
fn worker_signals() -> (Signals, watch::Receiver<u64>, watch::Receiver<bool>) {
    let (wake, wake_rx) = watch::channel(0u64);
    let (alive, alive_rx) = watch::channel(false);
    let signals = Signals {
        wake,
        alive,
        deploying: worker::Deploying::default(),
    };
    (signals, wake_rx, alive_rx)
}

/// The workers' context: the registry client, deadlines and proxy admin from `config`.
fn pipeline_context(
    config: &Config,
    (store, targets): (Store, crate::target::Targets),
    platform: crate::domain::Platform,
    env_key: Vec<u8>,
    live: crate::config::LiveConfig,
) -> Context {
    Context {
        store,
        targets,
        registry: Registry::new(&config.registries, config.server.registry_limits),
        platform,
        http: crate::pipeline::probe_client(),
        store_patience: Duration::from_secs(120),
        retry_budget: config.server.retry_budget,
        pull_timeout: config.server.pull_timeout,
        env_key,
        proxy_admin: config.proxy.admin,
        live,
    }
}

/// What the tasks beside the workers share; each `spawn_*` starts its tasks in `tasks`,
/// which `run_until_with` drains on shutdown before it releases the liveness lock.
struct SideTasks<'a> {
    config: &'a Arc<Config>,
    live: &'a crate::config::LiveConfig,
    store: &'a Store,
    shutdown: &'a CancellationToken,
}

impl SideTasks<'_> {
    /// Every sweep: reconciliation and retention, with the config as reloaded, so that
    /// reconciliation repairs what the config says now.
    fn spawn_sweeper(&self, tasks: &mut JoinSet<()>, targets: &crate::target::Targets) {
        let (c, s, e, stop) = (
            self.live.clone(),
            self.store.clone(),
            targets.clone(),
            self.shutdown.clone(),
        );
        let sweep = self.config.server.sweep_interval;
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(sweep) => {
                        let config = c.load();
                        run_reconcile(&config, &s, &e).await;
                        run_retention(&config, &s).await;
                    }
                    _ = stop.cancelled() => return,
                }
            }
        });
    }

    /// Outgoing notifications (the endpoints the outbox trigger reads, then one sender),
    /// promotions, and the reconcile poller.
    async fn spawn_outbox_and_timers(
        &self,
        tasks: &mut JoinSet<()>,
        poll_platform: crate::domain::Platform,
    ) {
        let (config, store, shutdown) = (self.config, self.store, self.shutdown);
        if let Err(e) = store
            .sync_endpoints(&crate::notify::endpoints(config))
            .await
        {
            tracing::warn!(error = %error_chain(&e), "cannot record the notification endpoints; the previous ones stay in force until the next start");
        }
        tasks.spawn(
            crate::notify::Sender {
                store: store.clone(),
                endpoints: config.notifications.clone(),
                public_url: config.server.sign_in.public_url.clone(),
            }
            .run(shutdown.clone()),
        );
        // Promotions: one task, one timer, woken by the source apps' queue changes.
        tasks.spawn(
            crate::promote::Promoter {
                live: self.live.clone(),
                store: store.clone(),
                sweep: config.server.sweep_interval,
            }
            .run(shutdown.clone()),
        );
        // The reconcile poller: one timer per app with `poll` on, none otherwise.
        crate::poller::spawn(
            tasks,
            crate::poller::Poller {
                live: self.live.clone(),
                store: store.clone(),
                registry: Registry::new(&config.registries, config.server.registry_limits),
                tags: crate::registry::tags::TagLister::new(&config.registries),
                platform: poll_platform,
            },
            shutdown,
        );
    }

    /// The HTTP app on `listener`, with the server's header timeout and connection cap.
    fn spawn_http(
        &self,
        tasks: &mut JoinSet<()>,
        listener: tokio::net::TcpListener,
        (engine, targets, metrics): (Engine, web::engines::TargetViews, Option<PrometheusHandle>),
    ) {
        let (config, store, shutdown) = (self.config, self.store, self.shutdown);
        let state = AppState {
            config: config.clone(),
            store: store.clone(),
            engine: EngineView::new(engine),
            targets,
            metrics,
            guard: Arc::new(web::guard::Guard::new(config.server.webhook_buffer_bytes)),
            live: Some(self.live.clone()),
            pages: web::ui::PageState::new(store.clone(), shutdown.clone()),
        };
        let limits = web::server::Limits {
            header_timeout: self.config.server.header_timeout,
            max_connections: self.config.server.max_connections,
        };
        let app = web::router(state);
        tasks.spawn(web::server::serve(
            listener,
            app,
            limits,
            self.shutdown.clone(),
        ));
    }
}

/// The process's metrics recorder, installed once however many times Pier starts in it.
fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Durations are histograms with buckets (not summaries), so that they can be
            // summed across processes: a step takes milliseconds to minutes.
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &[
                        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                    ],
                )
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}

async fn run_reconcile(config: &Config, store: &Store, targets: &crate::target::Targets) {
    match crate::reconcile::reconcile_all(config, store, targets).await {
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

pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// `SIGHUP` (sent by `pier reload`): the file is read and checked whole; an invalid one
/// changes nothing, and its error is logged and kept for the status page.
async fn reload_on_sighup(live: crate::config::LiveConfig, stop: CancellationToken) {
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
