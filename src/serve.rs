//! Start-up: connect, migrate, then the HTTP server and the workers side by side under one
//! shutdown signal.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::Engine;
use crate::pipeline::Context;
use crate::registry::Registry;
use crate::store::Store;
use crate::web::{self, AppState};
use crate::worker::{self, Workers};

pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("pier=info,warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

/// Exactly one TLS crypto provider: oci-client's reqwest brings aws-lc-rs.
fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

pub struct Parts {
    pub config: Arc<Config>,
    pub store: Store,
    pub engine: Engine,
}

/// Connects to the database (migrating it) and the engine. The database may be briefly
/// unavailable at boot (Postgres starting beside Pier): wait for it with a deadline.
pub async fn connect(config: Config, migrate: bool) -> anyhow::Result<Parts> {
    install_crypto_provider();
    let store = Store::connect_lazy(config.server.database_url.expose()).context("database url")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut delay = Duration::from_millis(100);
    loop {
        let res = if migrate {
            store.migrate().await
        } else {
            store.ping().await
        };
        match res {
            Ok(()) => break,
            Err(e) if e.is_unavailable() && tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "database not reachable yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
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
    let engine = Engine::connect(config.server.docker_host.as_deref())
        .await
        .context("connect to the Docker engine")?;
    Ok(Parts {
        config: Arc::new(config),
        store,
        engine,
    })
}

/// `pier serve` (HTTP and workers) or `pier worker` (workers only).
pub async fn run(config: Config, http: bool) -> anyhow::Result<()> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .ok();
    let Parts {
        config,
        store,
        engine,
    } = connect(config, true).await?;
    let platform = engine
        .platform()
        .await
        .context("ask the engine its platform")?;
    let ctx = Arc::new(Context {
        store: store.clone(),
        engine: engine.clone(),
        registry: Registry::new(&config.registries),
        platform,
        http: crate::pipeline::probe_client(),
        store_patience: Duration::from_secs(120),
        retry_budget: Duration::from_secs(120),
    });
    let shutdown = CancellationToken::new();
    let (wake_tx, wake_rx) = watch::channel(0u64);

    // Before any claim: remove what crashed runs left behind and that nothing will resume.
    run_reconcile(&config, &store, &engine).await;
    let (c, s, e, stop) = (
        config.clone(),
        store.clone(),
        engine.clone(),
        shutdown.clone(),
    );
    let sweep = config.server.sweep_interval;

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(worker::listen(store.clone(), wake_tx, shutdown.clone()));
    tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(sweep) => run_reconcile(&c, &s, &e).await,
                _ = stop.cancelled() => return,
            }
        }
    });
    tasks.spawn(
        Workers {
            ctx,
            config: config.clone(),
            wake: wake_rx,
            shutdown: shutdown.clone(),
        }
        .run(),
    );
    if http {
        let listener = tokio::net::TcpListener::bind(config.server.listen)
            .await
            .with_context(|| format!("listen on {}", config.server.listen))?;
        tracing::info!(addr = %listener.local_addr()?, "listening");
        let app = web::router(AppState {
            config: config.clone(),
            store,
            engine,
            metrics,
        });
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "http server failed");
            }
        });
    }
    tracing::info!(workers = config.server.workers, "pier running");
    shutdown_signal().await;
    tracing::info!("shutting down: no new claims; finishing or releasing deployments in flight");
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}

async fn run_reconcile(config: &Config, store: &Store, engine: &Engine) {
    match crate::reconcile::reconcile(config, store, engine).await {
        Ok(r) => {
            for w in &r.warnings {
                tracing::warn!("reconcile: {w}");
            }
            if !r.removed.is_empty() || !r.requeued.is_empty() {
                tracing::info!(
                    removed = r.removed.len(),
                    requeued = r.requeued.len(),
                    "reconciled"
                );
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "reconciliation failed; it runs again at the next sweep")
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
