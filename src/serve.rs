//! Start-up: connect, migrate, then the HTTP server and the workers side by side under one
//! shutdown signal.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::background::Background;
use crate::backoff::Backoff;
use crate::config::Config;
use crate::engine::{Engine, EngineView};
use crate::error::error_chain;
use crate::pipeline::Context;
use crate::registry::Registry;
use crate::store::Store;
use crate::web::{self, AppState};
use crate::worker::{self, Signals, Workers};

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
    crate::runtime::install_crypto_provider();
    let store = Store::connect_lazy_many(&config.server.database_urls()).context("database url")?;
    let what = if migrate {
        "migrate database"
    } else {
        "connect to database"
    };
    until_reachable(what, || async {
        if migrate {
            store.migrate().await
        } else {
            store.ping().await
        }
    })
    .await?;
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

/// `op` until it succeeds, retried while the database is unavailable for at most 30 s. Every
/// statement of start-up goes through here: on a loaded machine the first connections can
/// outlast the pool's 3 s acquire deadline, and a Pier that exits then is one that a
/// restart loop, not the database, keeps down.
pub(crate) async fn until_reachable<T, F, Fut>(what: &'static str, mut op: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, crate::store::StoreError>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
        .within(Duration::from_secs(30));
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_unavailable() && !backoff.expired() => {
                tracing::warn!(error = %error_chain(&e), "{what}: database not reachable yet; retrying");
                backoff.wait().await;
            }
            Err(e) => return Err(e).context(what),
        }
    }
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
        crate::runtime::shutdown_signal().await;
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
    let metrics = crate::runtime::metrics_handle();
    let Parts {
        config,
        store,
        targets,
        engine,
    } = connect(config, true).await?;
    let (platform, env_key) = platform_and_key(&engine, &store).await?;
    let poll_platform = platform.clone();
    let live = crate::config::LiveConfig::new(config.clone(), path.clone());
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
    crate::background::reconcile_now(&config, &store, &ctx.targets).await;

    let (listener_stop, listening) = start_listener(&store, liveness_key, signals);

    let mut tasks = tokio::task::JoinSet::new();
    let stats = crate::background::stats::Stats::new(config.server.stats_interval);
    Background {
        config: &config,
        live: &live,
        store: &store,
        targets: &ctx.targets,
        platform: poll_platform,
        path,
        stats: &stats,
        shutdown: &shutdown,
    }
    .start(&mut tasks)
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
            stats: stats.clone(),
            shutdown: shutdown.clone(),
        }
        .run(),
    );
    if let Some(listener) = http {
        tracing::info!(addr = %listener.local_addr()?, "listening");
        let http = Http {
            config: &config,
            live: &live,
            store: &store,
            shutdown: &shutdown,
        };
        http.spawn(&mut tasks, listener, (engine, page_targets, metrics), stats);
    }
    tracing::info!(workers = config.server.workers, "pier running");
    crate::runtime::notify_ready();
    shutdown.cancelled().await;
    while tasks.join_next().await.is_some() {}
    listener_stop.cancel();
    let _ = listening.await;
    Ok(())
}

/// The queue's listener. It holds this process's liveness lock, so it is stopped (by the
/// returned token) only after the workers have finished or released their deployments,
/// or they would look abandoned.
fn start_listener(
    store: &Store,
    liveness_key: i64,
    signals: Signals,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let listening = tokio::spawn(worker::listen(
        store.clone(),
        liveness_key,
        signals,
        stop.clone(),
    ));
    (stop, listening)
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
    let env_key = until_reachable("read the installation key", || store.installation_key()).await?;
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

/// The workers' context: the registry client, deadlines, secrets and proxy admin from
/// `config` (with a warning when secret files would land on disk).
fn pipeline_context(
    config: &Config,
    (store, targets): (Store, crate::target::Targets),
    platform: crate::domain::Platform,
    env_key: Vec<u8>,
    live: crate::config::LiveConfig,
) -> Context {
    if let Some(w) = config.secrets_dir_warning() {
        tracing::warn!("{w}");
    }
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
        age_identity: config.server.age_identity.clone(),
        secrets_dir: config.server.secrets_dir.clone(),
        proxy_admin: config.proxy.admin,
        live,
    }
}

/// What the HTTP app shares with the rest of the process.
struct Http<'a> {
    config: &'a Arc<Config>,
    live: &'a crate::config::LiveConfig,
    store: &'a Store,
    shutdown: &'a CancellationToken,
}

impl Http<'_> {
    /// The HTTP app on `listener`, with the server's header timeout and connection cap.
    fn spawn(
        &self,
        tasks: &mut JoinSet<()>,
        listener: tokio::net::TcpListener,
        (engine, targets, metrics): (Engine, web::engines::TargetViews, Option<PrometheusHandle>),
        stats: crate::background::stats::Stats,
    ) {
        let (config, store, shutdown) = (self.config, self.store, self.shutdown);
        let state = AppState {
            config: config.clone(),
            store: store.clone(),
            engine: EngineView::new(engine),
            targets,
            metrics,
            stats,
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
