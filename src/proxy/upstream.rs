//! Upstream connections, owned by the client connection that uses them.
//!
//! A client connection's task also drives the HTTP/1.1 connections it opened to the app,
//! so a proxied request costs no hand-over between tasks (a shared pool, like hyper's
//! legacy client, costs one each way and a lock), and a kept-alive client keeps a warm
//! connection to the serving generation. Idle connections to any other address are
//! dropped at the next request: after a switch, nothing keeps a retired generation's
//! connections open.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::forward::ProxyBody;

/// A connection to the app must be established within this.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle upstream connections one client connection keeps (an HTTP/2 client may have many
/// requests in flight at once; the connections beyond this are closed after use).
const MAX_IDLE: usize = 8;

pub type Driving = Pin<Box<dyn Future<Output = ()> + Send>>;

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Nothing reached the app: the connection could not be made.
    #[error("cannot connect")]
    Connect,
    /// The connection failed while the request was sent or its answer awaited.
    #[error("the connection failed")]
    Failed,
}

pub struct Upstreams {
    idle: Mutex<Vec<(String, SendRequest<ProxyBody>)>>,
    drive: mpsc::UnboundedSender<Driving>,
}

/// Polled by the client connection's task beside the connection itself.
pub struct Driver {
    new: mpsc::UnboundedReceiver<Driving>,
    running: FuturesUnordered<Driving>,
}

impl Upstreams {
    pub fn new() -> (Upstreams, Driver) {
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
    pub async fn send(
        &self,
        target: &str,
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
        let (mut sender, conn) = open(target).await?;
        if let Err(mpsc::error::SendError(conn)) = self.drive.send(Box::pin(async move {
            let _ = conn.await;
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
    pub async fn send_upgrade(
        &self,
        target: &str,
        req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let (mut sender, conn) = open(target).await?;
        tokio::spawn(conn.with_upgrades());
        sender
            .send_request(req)
            .await
            .map_err(|_| SendError::Failed)
    }

    fn checkout(&self, target: &str) -> Option<SendRequest<ProxyBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|(t, s)| t == target && !s.is_closed());
        let i = idle.iter().position(|(_, s)| s.is_ready())?;
        Some(idle.swap_remove(i).1)
    }

    fn checkin(&self, target: &str, sender: SendRequest<ProxyBody>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((target.to_owned(), sender));
        }
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
    pub async fn run<F: Future>(&mut self, conn: F) -> F::Output {
        let mut conn = std::pin::pin!(conn);
        loop {
            tokio::select! {
                out = conn.as_mut() => break out,
                Some(c) = self.new.recv() => self.running.push(c),
                Some(()) = self.running.next(), if !self.running.is_empty() => {}
            }
        }
    }

    /// What is left to drive once the client connection has ended.
    pub async fn finish(mut self) {
        self.new.close();
        while let Ok(c) = self.new.try_recv() {
            self.running.push(c);
        }
        while self.running.next().await.is_some() {}
    }
}
