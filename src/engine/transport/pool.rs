//! HTTP/1.1 connections to one remote engine, kept for reuse and bounded in number. Opening
//! a connection is the expensive part (a TLS handshake; for SSH a login and a remote
//! `docker system dial-stdio`), so an idle one is kept a while, then closed by its own
//! timer: an idle Pier holds no connection and runs nothing once those timers fired.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bollard::BollardRequest;
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HOST, HeaderValue};
use hyper::{Method, Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{CONNECT_TIMEOUT, TransportError};

/// Connections open at once to one engine, busy or idle. A request that finds all of them
/// busy waits for one within [`CONNECT_TIMEOUT`]. For SSH this also keeps Pier below
/// sshd's `MaxStartups` (10 unauthenticated connections by default).
const MAX_CONNECTIONS: usize = 8;
/// Idle connections kept; more are closed as soon as they are free.
const MAX_IDLE: usize = 4;
/// How long an idle connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A pooled connection the engine closed meanwhile hands the request back unsent; it is
/// tried on the next one, at most this many times, then on a new connection.
const STALE_RETRIES: usize = 3;

/// A byte stream to the engine's API.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// A stream just opened, and how to learn why it failed if its first exchange does.
pub(crate) struct Dialed {
    pub io: Box<dyn Io>,
    /// Resolves to what the far side said when it closed the stream (ssh's stderr), if
    /// it said anything that classifies the failure; bounded in time by the dialer.
    pub explain: Option<BoxFuture<'static, Option<TransportError>>>,
    /// Resolves once what carried the stream is gone (an ssh process killed and reaped),
    /// after the stream was dropped: the connection's slot is free only then, so the
    /// bound on connections is a bound on processes too.
    pub gone: Option<BoxFuture<'static, ()>>,
}

/// Opens streams to one engine. Each stream carries one HTTP/1.1 connection.
pub(crate) trait Dialer: Send + Sync + 'static {
    fn dial(&self) -> BoxFuture<'static, Result<Dialed, TransportError>>;
    /// What the engine is, for error messages (`tcp://10.0.0.2:2376 (TLS)`).
    fn target(&self) -> &str;
    /// Classifies a failure of an established connection (a TLS alert, a reset).
    fn request_failed(&self, e: &hyper::Error) -> TransportError;
}

/// The body bollard sends, named through its request type.
trait BodyOf {
    type Body;
}
impl<B> BodyOf for Request<B> {
    type Body = B;
}
type Body = <BollardRequest as BodyOf>::Body;

pub(super) struct Pool {
    dialer: Box<dyn Dialer>,
    host: HeaderValue,
    idle: Mutex<Vec<Idle>>,
    slots: Arc<Semaphore>,
    next_id: AtomicU64,
    this: Weak<Pool>,
}

struct Idle {
    id: u64,
    conn: Conn,
}

/// One connection's sending half, and the switch that ends it. A request given up on
/// before its answer came (its caller's deadline passed: the engine hangs) ends its
/// connection: left running, it would hold its slot, waiting for an answer nobody reads,
/// until the engine woke up; eight of those and no request could go out at all.
struct Conn {
    sender: SendRequest<Body>,
    end: CancellationToken,
}

impl Pool {
    pub(crate) fn new(
        dialer: impl Dialer,
        authority: &str,
    ) -> Result<Arc<Self>, bollard::errors::Error> {
        let host = HeaderValue::from_str(authority).map_err(|_| {
            bollard::errors::Error::UnsupportedURISchemeError {
                uri: authority.to_owned(),
            }
        })?;
        Ok(Arc::new_cyclic(|this| Pool {
            dialer: Box::new(dialer),
            host,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            next_id: AtomicU64::new(0),
            this: this.clone(),
        }))
    }

    /// Sends `req` on an idle connection or a new one. The response's body streams from
    /// the connection, which returns to the pool only once that body was read to its end.
    pub(crate) async fn send(
        &self,
        req: BollardRequest,
    ) -> Result<Response<Incoming>, TransportError> {
        let mut req = origin_form(req, &self.host);
        for _ in 0..STALE_RETRIES {
            let Some(mut conn) = self.checkout() else {
                break;
            };
            let replay = replayable(&req);
            let unanswered = conn.end.clone().drop_guard();
            match conn.sender.try_send_request(req).await {
                Ok(resp) => {
                    unanswered.disarm();
                    self.recycle(conn);
                    return Ok(resp);
                }
                Err(mut e) => match (e.take_message(), replay) {
                    (Some(unsent), _) => req = unsent,
                    // The engine closed this idle connection as the request left (it
                    // restarted): nothing was answered. A request that changes nothing
                    // goes again; any other may have been acted on, so it fails, as a
                    // transient error, rather than run twice.
                    (None, Some(again)) if closed_unanswered(e.error()) => req = again,
                    (None, _) => return Err(self.dialer.request_failed(&e.into_error())),
                },
            }
        }
        let mut conn = self.connect().await?;
        let unanswered = conn.end.clone().drop_guard();
        match conn.sender.send_request(req).await {
            Ok(resp) => {
                unanswered.disarm();
                self.recycle(conn);
                Ok(resp)
            }
            Err(e) => Err(self.dialer.request_failed(&e)),
        }
    }

    fn checkout(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(c) = idle.pop() {
            if c.conn.sender.is_ready() {
                return Some(c.conn);
            }
        }
        None
    }

    /// A new connection that has answered `/_ping`: the whole path (TLS client
    /// certificate, SSH host key and login, the remote `dial-stdio`, the engine) is proven
    /// within [`CONNECT_TIMEOUT`] before any real request is trusted to it.
    async fn connect(&self) -> Result<Conn, TransportError> {
        let target = self.dialer.target();
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        let late = || {
            TransportError::transient(format!(
                "{target}: no connection within {}s",
                CONNECT_TIMEOUT.as_secs()
            ))
        };
        let permit = tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| {
                TransportError::transient(format!(
                    "{target}: all {MAX_CONNECTIONS} connections stayed busy for {}s",
                    CONNECT_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|_| TransportError::transient(format!("{target}: the client is closing")))?;
        let dialed = tokio::time::timeout_at(deadline, self.dialer.dial())
            .await
            .map_err(|_| late())??;
        let mut conn = spawn_connection(dialed.io, dialed.gone, permit, target).await?;
        let answered = tokio::time::timeout_at(deadline, ping(&mut conn.sender, &self.host)).await;
        let failure = match answered {
            Ok(Ok(())) => return Ok(conn),
            Ok(Err(e)) => self.dialer.request_failed(&e),
            Err(_) => late(),
        };
        // Closing the stream ends the far side too (ssh exits), so its reason is complete.
        conn.end.cancel();
        drop(conn);
        match dialed.explain {
            Some(explain) => Err(explain.await.unwrap_or(failure)),
            None => Err(failure),
        }
    }

    /// Keeps `sender` once its connection is free again (the response body was read),
    /// for at most [`IDLE_TIMEOUT`] unless a request takes it first.
    fn recycle(&self, mut conn: Conn) {
        let pool = self.this.clone();
        tokio::spawn(async move {
            if conn.sender.ready().await.is_err() {
                return;
            }
            let Some(id) = pool.upgrade().and_then(|p| p.put(conn)) else {
                return;
            };
            tokio::time::sleep(IDLE_TIMEOUT).await;
            if let Some(p) = pool.upgrade() {
                let mut idle = p.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.retain(|c| c.id != id);
            }
        });
    }

    fn put(&self, conn: Conn) -> Option<u64> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|c| !c.conn.sender.is_closed());
        if idle.len() >= MAX_IDLE {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        idle.push(Idle { id, conn });
        Some(id)
    }
}

/// Drives one HTTP/1.1 connection on its own task. The task holds the connection's slot
/// and the stream: when the last sender is dropped (idle timeout, pool gone) or the engine
/// closes, the stream is dropped (an ssh process is killed with it), and once it is `gone`
/// the slot is free.
async fn spawn_connection(
    io: Box<dyn Io>,
    gone: Option<BoxFuture<'static, ()>>,
    permit: OwnedSemaphorePermit,
    target: &str,
) -> Result<Conn, TransportError> {
    let (sender, conn) = http1::Builder::new()
        .handshake::<_, Body>(TokioIo::new(io))
        .await
        .map_err(|e| TransportError::transient(format!("{target}: {e}")))?;
    let end = CancellationToken::new();
    let ended = end.clone();
    tokio::spawn(async move {
        let _slot = permit;
        tokio::select! {
            r = conn => if let Err(e) = r {
                tracing::debug!(error = %e, "engine connection ended");
            },
            () = ended.cancelled() => tracing::debug!("engine connection ended: its request was given up on"),
        }
        if let Some(gone) = gone {
            gone.await;
        }
    });
    Ok(Conn { sender, end })
}

async fn ping(sender: &mut SendRequest<Body>, host: &HeaderValue) -> Result<(), hyper::Error> {
    let req = Request::get("/_ping")
        .header(HOST, host.clone())
        .body(Either::Left(Full::default()))
        .expect("a static request is valid");
    let resp = sender.send_request(req).await?;
    // The body is two bytes; reading it frees the connection for the real request.
    resp.into_body().collect().await?;
    sender.ready().await
}

/// A copy of `req` to send again, if it is a read (GET or HEAD) with a body in memory.
fn replayable(req: &BollardRequest) -> Option<BollardRequest> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return None;
    }
    let Either::Left(body) = req.body() else {
        return None;
    };
    let mut copy = Request::new(Either::Left(body.clone()));
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// The connection ended before any answer: EOF, a reset, a broken pipe.
fn closed_unanswered(e: &hyper::Error) -> bool {
    use std::io::ErrorKind as K;
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return true;
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
            );
        }
        cause = c.source();
    }
    false
}

/// bollard addresses requests as `http://authority/v1.41/...`; on a connection of one's
/// own the request line carries only the path, and `Host` says who it is for.
fn origin_form(mut req: BollardRequest, host: &HeaderValue) -> BollardRequest {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    *req.uri_mut() = path
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    req.headers_mut().insert(HOST, host.clone());
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method) -> BollardRequest {
        Request::builder()
            .method(method)
            .uri("http://10.0.0.2:2376/v1.41/containers/json?all=true")
            .body(Either::Left(Full::default()))
            .unwrap()
    }

    #[test]
    fn only_reads_are_sent_twice() {
        assert!(replayable(&request(Method::GET)).is_some());
        assert!(replayable(&request(Method::HEAD)).is_some());
        assert!(replayable(&request(Method::POST)).is_none());
        assert!(replayable(&request(Method::DELETE)).is_none());
    }

    #[test]
    fn requests_carry_only_the_path_and_the_engine_as_host() {
        let req = origin_form(
            request(Method::GET),
            &HeaderValue::from_static("engine:2376"),
        );
        assert_eq!(req.uri().to_string(), "/v1.41/containers/json?all=true");
        assert_eq!(req.headers()[HOST], "engine:2376");
    }
}
