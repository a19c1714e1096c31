//! Upstream connections, owned by the client connection that uses them.
//!
//! A client connection's task also drives the HTTP/1.1 connections it opened to the app,
//! so a proxied request costs no hand-over between tasks (a shared pool, like hyper's
//! legacy client, costs one each way and a lock), and a kept-alive client keeps a warm
//! connection to the serving generation. Idle connections to any other address are
//! dropped at the next request: after a switch, nothing keeps a retired generation's
//! connections open.
//!
//! Every upstream connection belongs to one client connection: it is closed when idle
//! for [`UPSTREAM_IDLE`], and when its client connection ends (`close_idle`), so a client
//! that goes away leaves nothing open to the app. Each also holds a permit of its app's
//! `proxy.max_upstream_connections` for as long as it is open.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

use super::bodies::ProxyBody;

/// A connection to the app must be established within this.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle upstream connections one client connection keeps (an HTTP/2 client may have many
/// requests in flight at once; the connections beyond this are closed after use).
const MAX_IDLE: usize = 8;
/// An upstream connection unused this long is closed.
pub(super) const UPSTREAM_IDLE: Duration = Duration::from_secs(15);

pub(crate) type Driving = Pin<Box<dyn Future<Output = ()> + Send>>;

#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Nothing reached the app: the connection could not be made.
    #[error("cannot connect")]
    Connect,
    /// The connection failed while the request was sent or its answer awaited.
    #[error("the connection failed")]
    Failed,
    /// The app has `proxy.max_upstream_connections` open and none came free in time.
    #[error("too many connections to the app")]
    Busy,
}

/// A permit of the app's connection limit, held for as long as one connection is open.
pub(super) async fn permit(limit: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, SendError> {
    tokio::time::timeout(CONNECT_TIMEOUT, limit.clone().acquire_owned())
        .await
        .map_err(|_| SendError::Busy)?
        .map_err(|_| SendError::Busy)
}

struct Idle {
    target: String,
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

pub(crate) struct Upstreams {
    idle: Mutex<Vec<Idle>>,
    drive: mpsc::UnboundedSender<Driving>,
}

/// Polled by the client connection's task beside the connection itself.
pub(crate) struct Driver {
    new: mpsc::UnboundedReceiver<Driving>,
    running: FuturesUnordered<Driving>,
}

impl Upstreams {
    pub(crate) fn new() -> (Upstreams, Driver) {
        let (drive, new) = mpsc::unbounded_channel();
        (
            Upstreams {
                idle: Mutex::new(Vec::new()),
                drive,
            },
            Driver {
                new,
                running: FuturesUnordered::new(),
            },
        )
    }

    /// Sends `req` to `target` on an idle connection, or on a new one. A pooled
    /// connection the app closed meanwhile gives the request back unsent; it then goes
    /// out on a fresh connection.
    pub(crate) async fn send(
        &self,
        target: &str,
        limit: &Arc<Semaphore>,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        while let Some(mut sender) = self.checkout(target) {
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    self.checkin(target, sender);
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(SendError::Failed),
                },
            }
        }
        let permit = permit(limit).await?;
        let (mut sender, conn) = open(target).await?;
        if let Err(mpsc::error::SendError(conn)) = self.drive.send(Box::pin(async move {
            let _ = conn.await;
            drop(permit);
        })) {
            tokio::spawn(conn);
        }
        let resp = sender
            .send_request(req)
            .await
            .map_err(|_| SendError::Failed)?;
        self.checkin(target, sender);
        Ok(resp)
    }

    /// An upgrade (WebSocket) gets a connection of its own, driven by its own task: once
    /// switched, its bytes belong to the splice, not to this client's pool.
    pub(crate) async fn send_upgrade(
        &self,
        target: &str,
        limit: &Arc<Semaphore>,
        req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let permit = permit(limit).await?;
        let (mut sender, conn) = open(target).await?;
        // The permit goes with the upgraded connection: the splice ends it.
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
            drop(permit);
        });
        sender
            .send_request(req)
            .await
            .map_err(|_| SendError::Failed)
    }

    fn checkout(&self, target: &str) -> Option<SendRequest<ProxyBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|i| i.target == target && !i.sender.is_closed());
        let i = idle.iter().position(|i| i.sender.is_ready())?;
        Some(idle.swap_remove(i).sender)
    }

    fn checkin(&self, target: &str, sender: SendRequest<ProxyBody>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                target: target.to_owned(),
                sender,
                since: Instant::now(),
            });
        }
    }

    /// Drops the idle connections unused for [`UPSTREAM_IDLE`] (all of them with
    /// `everything`): a connection whose last sender is gone closes once idle.
    pub(crate) fn close_idle(&self, everything: bool) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|i| !everything && i.since.elapsed() < UPSTREAM_IDLE);
    }
}

type Opened = (
    SendRequest<ProxyBody>,
    http1::Connection<TokioIo<TcpStream>, ProxyBody>,
);

async fn open(target: &str) -> Result<Opened, SendError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .map_err(|_| SendError::Connect)?
        .map_err(|_| SendError::Connect)?;
    let _ = stream.set_nodelay(true);
    http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|_| SendError::Connect)
}

impl Driver {
    /// Runs `conn` (the client connection) to its end while driving the upstream
    /// connections it opens; then lets those finish what they carry. They end as soon as
    /// their last sender is gone, which the end of `conn` brings about.
    pub(crate) async fn run<F: Future>(&mut self, upstreams: &Upstreams, conn: F) -> F::Output {
        let mut conn = std::pin::pin!(conn);
        let mut sweep = tokio::time::interval(UPSTREAM_IDLE / 3);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                out = conn.as_mut() => break out,
                Some(c) = self.new.recv() => self.running.push(c),
                Some(()) = self.running.next(), if !self.running.is_empty() => {}
                _ = sweep.tick(), if !self.running.is_empty() => upstreams.close_idle(false),
            }
        }
    }

    /// What is left to drive once the client connection has ended (after `close_idle`,
    /// this is only answers still being passed on).
    pub(crate) async fn finish(mut self) {
        self.new.close();
        while let Ok(c) = self.new.try_recv() {
            self.running.push(c);
        }
        while self.running.next().await.is_some() {}
    }
}
