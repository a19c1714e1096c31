//! One request through the proxy: find the route, forward to the serving generation with
//! `X-Forwarded-*`, count it in flight until its answer's body ends, and when the serving
//! generation cannot be reached at all, retry on the standby (the previous generation,
//! kept during a soak). WebSocket and other upgrades are passed through as raw bytes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::Shared;
use super::table::InFlight;
use super::upstream::{SendError, Upstreams};

pub type ProxyBody = BoxBody<Bytes, BoxError>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Bodies up to this size are read before forwarding, so that a request can be sent
/// again to the standby if the serving generation is gone; larger ones stream through.
pub(super) const RETRYABLE_BODY: u64 = 64 * 1024;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one hop, never forwarded (RFC 9110, 7.6.1). Names, not strings:
/// a lookup by a standard name needs no hashing of text.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// What every request of one client connection shares, built once per connection: the
/// peer's address as a header value is not formatted again for each request.
pub struct Client {
    pub shared: Arc<Shared>,
    pub upstreams: Upstreams,
    pub local: SocketAddr,
    pub(super) peer_ip: HeaderValue,
    /// The connection came in over TLS (`X-Forwarded-Proto: https`).
    pub(super) tls: bool,
}

impl Client {
    pub fn new(
        shared: Arc<Shared>,
        upstreams: Upstreams,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Self {
        let peer_ip = HeaderValue::from_str(&peer.ip().to_string())
            .expect("an IP address is a valid header value");
        let tls = shared.tls_on(local);
        Client {
            shared,
            upstreams,
            local,
            peer_ip,
            tls,
        }
    }
}

pub async fn handle(
    client: Arc<Client>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    Ok(match route(&client, req).await {
        Ok(resp) => resp,
        Err(page) => page,
    })
}

async fn route(
    client: &Client,
    mut req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Response<ProxyBody>> {
    let (shared, upstreams, local) = (client.shared.as_ref(), &client.upstreams, client.local);
    let host = request_host(&req);
    let entry = {
        let table = shared.table();
        table.find(local, host.as_deref()).cloned()
    };
    let Some(entry) = entry else {
        return Err(page(StatusCode::NOT_FOUND, "No app is routed here."));
    };
    if entry.upstream.is_none() {
        return Err(page(
            StatusCode::SERVICE_UNAVAILABLE,
            "This app has no running version yet.",
        ));
    }
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > entry.max_body) {
        return Err(page(
            StatusCode::PAYLOAD_TOO_LARGE,
            "The request body is too large.",
        ));
    }
    let upgrade = is_upgrade(req.headers());
    // Read before the hop-by-hop headers (Transfer-Encoding among them) are dropped.
    let chunked = is_chunked(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    forwarded_headers(
        &mut parts.headers,
        &client.peer_ip,
        host.as_deref(),
        client.tls,
        upgrade,
    );
    // An HTTP/2 client names the host in the request's authority; HTTP/1.1 needs `Host`.
    if !parts.headers.contains_key(header::HOST)
        && let Some(v) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(header::HOST, v);
    }

    // No body, or a small one read first: the request can then go to the standby too.
    let bodiless = !upgrade && !chunked && announced.unwrap_or(0) == 0;
    let small = !upgrade && !chunked && announced.unwrap_or(0) <= RETRYABLE_BODY;
    let (buffered, mut streamed) = if bodiless {
        (Some(Bytes::new()), None)
    } else if small {
        match Limited::new(body, RETRYABLE_BODY as usize).collect().await {
            Ok(b) => (Some(b.to_bytes()), None),
            Err(_) => {
                return Err(page(
                    StatusCode::BAD_REQUEST,
                    "The request body could not be read.",
                ));
            }
        }
    } else {
        let limited = Limited::new(body, entry.max_body as usize)
            .map_err(|e| -> BoxError { e })
            .boxed();
        (None, Some(limited))
    };
    let idempotent = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let mut last_error = String::new();
    // Origin-form (`/path?query`), as HTTP/1.1 to the app wants it; an HTTP/2 request's
    // scheme and authority are dropped (the authority went into `Host` above). The parts
    // share the request's bytes: nothing is parsed or copied again.
    let uri = if parts.uri.scheme().is_none() && parts.uri.authority().is_none() {
        std::mem::take(&mut parts.uri)
    } else {
        let mut u = std::mem::take(&mut parts.uri).into_parts();
        u.scheme = None;
        u.authority = None;
        if u.path_and_query.is_none() {
            u.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/"));
        }
        hyper::Uri::from_parts(u).unwrap_or_else(|_| hyper::Uri::from_static("/"))
    };
    for attempt in entry.attempts() {
        let (target, is_last) = (attempt.target, attempt.is_last);
        let body = match (&buffered, streamed.take()) {
            (Some(b), _) => Full::new(b.clone())
                .map_err(|e| -> BoxError { match e {} })
                .boxed(),
            (None, Some(s)) => s,
            // A streamed body was consumed by the first try: nothing left to retry with.
            (None, None) => break,
        };
        let mut out = Request::builder()
            .method(parts.method.clone())
            .uri(uri.clone())
            .version(hyper::Version::HTTP_11)
            .body(body)
            .expect("a request from valid parts");
        *out.headers_mut() = if is_last {
            std::mem::take(&mut parts.headers)
        } else {
            parts.headers.clone()
        };
        let guard = attempt.start(&shared.counters);
        let sending = async {
            if upgrade {
                upstreams.send_upgrade(target, out).await
            } else {
                upstreams.send(target, out).await
            }
        };
        let sent = tokio::time::timeout(entry.timeout, sending).await;
        match sent {
            Ok(Ok(mut resp)) => {
                if upgrade && resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                    let upstream_upgrade = hyper::upgrade::on(&mut resp);
                    if let Some(client_upgrade) = client_upgrade {
                        tokio::spawn(splice(client_upgrade, upstream_upgrade, guard));
                    }
                    let (p, _) = resp.into_parts();
                    return Ok(Response::from_parts(p, empty()));
                }
                return Ok(answer(resp, guard));
            }
            Ok(Err(e)) => {
                // Retry only what cannot have reached the app: a refused connection, or an
                // idempotent request whose answer never started.
                let unreached = matches!(e, SendError::Connect) || idempotent;
                last_error = e.to_string();
                drop(guard);
                if !unreached || is_last {
                    break;
                }
                tracing::debug!(app = %entry.app, %target, "upstream unreachable; trying the standby");
            }
            Err(_) => {
                return Err(page(
                    StatusCode::GATEWAY_TIMEOUT,
                    "The app did not answer in time.",
                ));
            }
        }
    }
    shared.log_unreachable(&entry.app, &last_error);
    Err(page(
        StatusCode::BAD_GATEWAY,
        "The app could not be reached. Try again in a moment.",
    ))
}

/// The answer as it goes back to the client: hop-by-hop headers dropped, counted in
/// flight until its body has been sent.
fn answer(resp: Response<Incoming>, guard: InFlight) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = Counted {
        inner: body,
        _guard: guard,
    };
    Response::from_parts(parts, BoxBody::new(body))
}

/// Copies bytes both ways between an upgraded client connection and its upstream.
async fn splice(
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    _guard: InFlight,
) {
    let (Ok(client), Ok(upstream)) = tokio::join!(client, upstream) else {
        return;
    };
    let mut client = TokioIo::new(client);
    let mut upstream = TokioIo::new(upstream);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

fn request_host(req: &Request<Incoming>) -> Option<String> {
    let raw = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))?;
    Some(without_port(raw).trim_end_matches('.').to_ascii_lowercase())
}

/// `host:port`, `[v6]:port` or a bare host, without its port.
fn without_port(raw: &str) -> &str {
    if let Some(rest) = raw.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match raw.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => raw,
    }
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

fn is_chunked(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING) && !headers.contains_key(header::CONTENT_LENGTH)
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most requests and answers carry none: one pass over the names, no removal.
    if !headers.keys().any(|k| HOP_BY_HOP.contains(k)) {
        return;
    }
    // Headers the client named in `Connection` are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for h in &HOP_BY_HOP {
        headers.remove(h);
    }
}

fn forwarded_headers(
    headers: &mut HeaderMap,
    peer_ip: &HeaderValue,
    host: Option<&str>,
    tls: bool,
    upgrade: bool,
) {
    let upgrade_value = headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(headers);
    if upgrade && let Some(u) = upgrade_value {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u);
    }
    let xff = match headers.get(X_FORWARDED_FOR).map(HeaderValue::as_bytes) {
        Some(prior) => {
            let mut v = Vec::with_capacity(prior.len() + 2 + peer_ip.len());
            v.extend_from_slice(prior);
            v.extend_from_slice(b", ");
            v.extend_from_slice(peer_ip.as_bytes());
            HeaderValue::from_maybe_shared(Bytes::from(v)).ok()
        }
        None => Some(peer_ip.clone()),
    };
    if let Some(v) = xff {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(
        X_FORWARDED_PROTO,
        HeaderValue::from_static(if tls { "https" } else { "http" }),
    );
    if let Some(h) = host.and_then(|h| HeaderValue::from_str(h).ok()) {
        headers.insert(X_FORWARDED_HOST, h);
    }
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new())
        .map_err(|e| -> BoxError { match e {} })
        .boxed()
}

/// A short page of the proxy's own, for when no app answers: never a hang.
pub fn page(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let html = page_html(status, text);
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .body(
            Full::new(Bytes::from(html))
                .map_err(|e| -> BoxError { match e {} })
                .boxed(),
        )
        .expect("a static response")
}

pub(super) fn page_html(status: StatusCode, text: &str) -> String {
    format!("<!doctype html><title>{status}</title><h1>{status}</h1><p>{text}</p>\n")
}

/// The app's answer body, counted in flight until it ends or is dropped.
struct Counted {
    inner: Incoming,
    _guard: InFlight,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(|e| -> BoxError { Box::new(e) })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
