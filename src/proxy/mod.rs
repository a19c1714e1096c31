//! `pier proxy`: the public address of every blue-green app. Its own process, so that
//! `pier serve` and its workers can crash, restart or be upgraded while traffic flows.
//!
//! Routes come from Postgres (`proxy_routes`, written by the pipeline's switch steps):
//! read at start, on every NOTIFY on `pier_routes`, and in full every `proxy.refresh`. The
//! last routes it knew are also kept in `proxy.state_file`, so that a proxy restarted while
//! the database is away comes back serving them. A loopback admin endpoint says which
//! route version is applied and what is in flight per upstream: the pipeline waits on it.

mod admin;
mod bodies;
mod feed;
mod forward;
mod h1;
mod listen;
mod probe;
mod report;
mod rules;
mod table;
mod tls;
mod upstream;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::log_budget::LogBudget;
use crate::store::Route;
pub use bodies::ProxyBody;

/// The byte path's parsers, for the fuzz targets (`fuzz/`); not an API.
#[doc(hidden)]
pub mod parsers {
    pub use super::h1::{
        AnswerHead, BadAnswer, BadChunk, ForwardingValues, Framing, MAX_HEAD, ParsedHead, Progress,
        Request, parse_answer, parse_request,
    };
}
pub use table::{Entry, Table};

/// A client's request head must arrive within this, and an idle kept-alive connection is
/// closed after it.
const HEADER_TIMEOUT: Duration = Duration::from_secs(15);

pub(crate) struct Shared {
    config: Arc<Config>,
    table: RwLock<Arc<Table>>,
    counters: table::Counters,
    limits: table::Limits,
    tls_listens: HashSet<SocketAddr>,
    /// Requests no generation answered: an app that is down must not flood the log.
    unreachable_log: LogBudget,
    /// A new table was installed: the report for a remote target's pipeline is due.
    changed: tokio::sync::Notify,
}

impl Shared {
    fn table(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Logs a request that no generation of `app` answered, a few per window in full.
    fn log_unreachable(&self, app: &str, error: &str) {
        let admit = self.unreachable_log.admit();
        if admit.left_out > 0 {
            tracing::warn!(
                left_out = admit.left_out,
                window_s = self.unreachable_log.window().as_secs(),
                "more requests found no upstream than logged"
            );
        }
        if admit.log {
            tracing::warn!(%app, %error, "no upstream answered");
        }
    }

    fn tls_on(&self, listen: SocketAddr) -> bool {
        self.tls_listens.contains(&listen)
    }

    /// Swaps in a table built from `routes`; upstreams no route names are forgotten once
    /// their last request is done.
    fn install(&self, routes: &[Route]) {
        let table = Table::build(&self.config, routes, &self.counters, &self.limits);
        let names: Vec<&str> = routes
            .iter()
            .flat_map(|r| std::iter::once(r.upstream.as_str()).chain(r.standby.as_deref()))
            .collect();
        self.counters.prune(&names);
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
        self.changed.notify_one();
    }
}

/// Runs the proxy until SIGTERM or Ctrl-C.
pub(crate) async fn run(config: Config) -> anyhow::Result<()> {
    feed::check_schema(&config).await.context("pier proxy")?;
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        crate::runtime::shutdown_signal().await;
        on_signal.cancel();
    });
    run_until(config, shutdown).await
}

pub(crate) async fn run_until(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let config = Arc::new(config);
    crate::runtime::install_crypto_provider();
    let acceptors = tls::acceptors(&config)?;
    let shared = Arc::new(Shared {
        config: config.clone(),
        table: RwLock::new(Arc::new(Table::default())),
        counters: table::Counters::default(),
        limits: table::Limits::default(),
        tls_listens: acceptors.keys().copied().collect(),
        unreachable_log: LogBudget::new(5, Duration::from_secs(10)),
        changed: tokio::sync::Notify::new(),
    });
    // Serve what was known before, at once: the database may be away.
    match feed::load_state(&config.proxy.state_file) {
        Ok(Some(routes)) => {
            tracing::info!(
                routes = routes.len(),
                "serving the last known routes until the database answers"
            );
            shared.install(&routes);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the proxy's last known routes"),
    }
    let listens: Vec<SocketAddr> =
        Table::build(&config, &[], &Default::default(), &Default::default()).listens();
    let mut tasks = tokio::task::JoinSet::new();
    for addr in listens {
        let listener =
            listen::bind_shared(addr).with_context(|| format!("proxy: listen on {addr}"))?;
        tracing::info!(%addr, tls = acceptors.contains_key(&addr), "proxy listening");
        tasks.spawn(serve(
            listener,
            acceptors.get(&addr).cloned(),
            shared.clone(),
            shutdown.clone(),
        ));
    }
    // Shared too, so that a new proxy starts beside this one with the same config.
    let admin = listen::bind_shared(config.proxy.admin)
        .with_context(|| format!("proxy admin: listen on {}", config.proxy.admin))?;
    tasks.spawn(admin::serve(admin, shared.clone(), shutdown.clone()));
    tasks.spawn(feed::follow(
        config.clone(),
        shared.clone(),
        shutdown.clone(),
    ));
    // A remote target's pipeline reaches this host only through Postgres: the proxy
    // probes its candidates' health and reports what it serves. The `local`
    // proxy's pipeline probes and asks its admin endpoint itself.
    if config.proxy.target != crate::config::LOCAL {
        let store = crate::store::Store::connect_lazy_many(&config.server.database_urls())
            .context("proxy: database url")?;
        tasks.spawn(probe::serve(
            store.clone(),
            config.proxy.target.clone(),
            shutdown.clone(),
        ));
        tasks.spawn(report::serve(store, shared.clone(), shutdown.clone()));
    }
    tracing::info!("pier proxy running");
    crate::runtime::notify_ready();
    shutdown.cancelled().await;
    let drain = config.proxy.drain_timeout;
    tracing::info!(
        ?drain,
        "pier proxy stopping: no new connections, finishing requests"
    );
    if tokio::time::timeout(drain, async { while tasks.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "requests still in flight at the drain deadline were cut off"
        );
    }
    Ok(())
}

async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let local = listener
        .local_addr()
        .expect("a bound listener has an address");
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        // A head the byte path finds too large is too large here too (431).
        .max_buf_size(h1::MAX_HEAD);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256);
    let builder = Arc::new(builder);
    let mut conns = tokio::task::JoinSet::new();
    let spawn = |conns: &mut tokio::task::JoinSet<()>, stream: tokio::net::TcpStream, peer| {
        let _ = stream.set_nodelay(true);
        conns.spawn(connection(
            stream,
            peer,
            local,
            tls.clone(),
            shared.clone(),
            builder.clone(),
            shutdown.clone(),
        ));
    };
    loop {
        let (stream, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        spawn(&mut conns, stream, peer);
        while conns.try_join_next().is_some() {}
    }
    // Served like the rest, each to its first answer (which closes it).
    for (stream, peer) in listen::close_taking_backlog(listener) {
        spawn(&mut conns, stream, peer);
    }
    while conns.join_next().await.is_some() {}
}

/// One client connection, from its first byte to its close. The upstream connections its
/// requests opened close with it: none outlives its client.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    builder: Arc<Builder<TokioExecutor>>,
    stop: CancellationToken,
) {
    let (upstreams, mut driver) = upstream::Upstreams::new();
    let client = Arc::new(forward::Client::new(shared, upstreams, local, peer));
    let for_hyper = client.clone();
    let service = hyper::service::service_fn(move |req| forward::handle(for_hyper.clone(), req));
    let up = &client.upstreams;
    match tls {
        None => match h1::serve(stream, &client, &stop).await {
            h1::End::Closed => {}
            h1::End::Handoff(io) => drive(&builder, io, service, up, &mut driver, &stop).await,
        },
        Some(acceptor) => {
            // A handshake gets the same deadline as a request head.
            match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                // HTTP/2 (agreed in the handshake) is hyper's from the start.
                Ok(Ok(tls_stream))
                    if tls_stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]) =>
                {
                    drive(&builder, tls_stream, service, up, &mut driver, &stop).await
                }
                Ok(Ok(tls_stream)) => match h1::serve(tls_stream, &client, &stop).await {
                    h1::End::Closed => {}
                    h1::End::Handoff(io) => {
                        drive(&builder, io, service, up, &mut driver, &stop).await
                    }
                },
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        }
    }
    client.upstreams.close_idle(true);
    let _ = tokio::time::timeout(upstream::UPSTREAM_IDLE, driver.finish()).await;
}

/// Serves one connection (plain or TLS) until it ends, or gracefully on shutdown, driving
/// the upstream connections its requests open in the same task.
async fn drive<IO, S>(
    builder: &Builder<TokioExecutor>,
    io: IO,
    service: S,
    upstreams: &upstream::Upstreams,
    driver: &mut upstream::Driver,
    stop: &CancellationToken,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<ProxyBody>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let stopped = driver
        .run(upstreams, async {
            tokio::select! {
                _ = conn.as_mut() => false,
                _ = stop.cancelled() => true,
            }
        })
        .await;
    if stopped {
        conn.as_mut().graceful_shutdown();
        // The process's own drain deadline ends whatever is still open after this.
        let _ = driver.run(upstreams, conn.as_mut()).await;
    }
}
