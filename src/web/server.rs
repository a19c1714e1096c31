//! The HTTP server's own limits, below the routes: how long a client may take to send its
//! headers (and, between requests, how long a kept-alive connection may sit idle), how many
//! connections may be open at once, and a graceful stop on the shared shutdown token.
//!
//! A connection that trickles its headers, or opens and sends nothing, costs one task and a
//! timer until `header_timeout`; it never holds up another client's request.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::server::conn::http1::Builder;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Whole request head, and idle time on a kept-alive connection.
    pub header_timeout: Duration,
    /// Connections open at once; more wait in the kernel's backlog.
    pub max_connections: usize,
}

/// A request that announces a body larger than any route takes is answered 413 at once,
/// before a byte of it is read. A request cut off (408), refused for its size (413) or
/// malformed (400) may have left body bytes unread: the connection is closed after the
/// answer instead of being drained for reuse, which a trickling client could make last
/// forever.
pub(crate) async fn refuse_oversize_and_close_after_errors(
    State(max_body): State<usize>,
    req: Request,
    next: Next,
) -> Response {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut resp = match announced {
        Some(n) if n > max_body as u64 => crate::web::WebError::TooLarge(format!(
            "request body too large (at most {max_body} bytes)"
        ))
        .into_response(),
        _ => next.run(req).await,
    };
    if matches!(
        resp.status(),
        StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST
    ) {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// How long open connections get to finish their requests after shutdown is asked.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown`, then lets open requests finish (up to
/// [`DRAIN`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // HTTP/1.1 only: webhooks, pages and the API need nothing more, and protocol detection
    // (HTTP/2's preface) would read the first bytes with no deadline at all.
    let mut builder = Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(64 * 1024);
    let builder = Arc::new(builder);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        // The client's address reaches handlers as `ConnectInfo`, for per-address limits.
        let app = app.clone();
        let service = hyper::service::service_fn(
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(req)
            },
        );
        let builder = builder.clone();
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _permit = permit;
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(DRAIN, conn.as_mut()).await;
                }
            }
        });
        // Reap finished connections so the set does not grow with the server's uptime.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN + Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}
