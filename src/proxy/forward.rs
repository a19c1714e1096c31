//! One request through the proxy: find the route, forward to the serving generation with
//! `X-Forwarded-*`, count it in flight until its answer's body ends, and when the serving
//! generation cannot be reached at all, retry on the standby (the previous generation,
//! kept during a soak). WebSocket and other upgrades are passed through as raw bytes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::Shared;
use super::bodies::{
    Ahead, BodyFailure, BoxError, Counted, Failure, Prepared, ProxyBody, read_ahead, streamed,
};
use super::rules::{self, ToApp};
use super::table::{Entry, InFlight};
use super::upstream::{SendError, Upstreams};

/// Bodies up to this size are read before forwarding, so that a request can be sent
/// again to the standby if the serving generation is gone; larger ones stream through.
pub(super) const RETRYABLE_BODY: u64 = 64 * 1024;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// What every request of one client connection shares, built once per connection: the
/// peer's address as a header value is not formatted again for each request.
pub(crate) struct Client {
    pub shared: Arc<Shared>,
    pub upstreams: Upstreams,
    pub local: SocketAddr,
    pub(super) peer_ip: HeaderValue,
    /// The connection came in over TLS (`X-Forwarded-Proto: https`).
    pub(super) tls: bool,
    /// The peer is one of `proxy.trusted_proxies`.
    pub(super) trusted: bool,
}

impl Client {
    pub(crate) fn new(
        shared: Arc<Shared>,
        upstreams: Upstreams,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Self {
        let peer_ip = HeaderValue::from_str(&peer.ip().to_string())
            .expect("an IP address is a valid header value");
        let tls = shared.tls_on(local);
        let trusted = shared.config.proxy.trusts(peer.ip());
        Client {
            shared,
            upstreams,
            local,
            peer_ip,
            tls,
            trusted,
        }
    }
}

pub(crate) async fn handle(
    client: Arc<Client>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    Ok(match route(&client, req).await {
        Ok(resp) => resp,
        Err(page) => page,
    })
}

/// The request as it goes to the app, and what the proxy needs to know of it.
struct Outgoing {
    parts: hyper::http::request::Parts,
    body: Prepared,
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// How the client's body failed, if it did while it streamed to the app.
    body_failed: Failure,
}

async fn route(
    client: &Client,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Response<ProxyBody>> {
    let (shared, local) = (client.shared.as_ref(), client.local);
    let http1 = req.version() < hyper::Version::HTTP_2;
    rules::check_request(
        req.method().as_str().as_bytes(),
        req.version() == hyper::Version::HTTP_11,
        pairs(req.headers()),
    )
    .map_err(|r| refusal(r, http1))?;
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
    let out = prepare(client, req, host.as_deref(), &entry).await?;
    send(client, &entry, out).await
}

/// Checks the body's size, rewrites the head for the app and reads a small body ahead.
async fn prepare(
    client: &Client,
    mut req: Request<Incoming>,
    host: Option<&str>,
    entry: &Entry,
) -> Result<Outgoing, Response<ProxyBody>> {
    let http1 = req.version() < hyper::Version::HTTP_2;
    // Checked by `check_request`: digits only, one header.
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| rules::parse_length(v.as_bytes()));
    if announced.is_some_and(|n| n > entry.max_body) {
        return Err(refusal(rules::TOO_LARGE, http1));
    }
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    headers_for_app(&mut parts.headers, client, host, upgrade);
    // An HTTP/2 client names the host in the request's authority; HTTP/1.1 needs `Host`.
    if !parts.headers.contains_key(header::HOST)
        && let Some(v) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(header::HOST, v);
    }
    parts.uri = origin_form(std::mem::take(&mut parts.uri));
    let body_failed = Failure::default();
    let body = if upgrade || announced == Some(0) || body.is_end_stream() {
        Prepared::Whole(Bytes::new())
    } else {
        let ahead = tokio::time::timeout(entry.timeout, read_ahead(body, RETRYABLE_BODY as usize));
        match ahead.await {
            Ok(Ok(Ahead::Whole(b))) if b.len() as u64 > entry.max_body => {
                return Err(refusal(rules::TOO_LARGE, http1));
            }
            Ok(Ok(Ahead::Whole(b))) => Prepared::Whole(b),
            Ok(Ok(Ahead::Partial(prefix, rest))) => {
                Prepared::Streamed(Some(streamed(prefix, rest, entry.max_body, &body_failed)))
            }
            Ok(Err(_)) => return Err(refusal(rules::BAD_BODY, http1)),
            Err(_) => {
                return Err(page(
                    StatusCode::REQUEST_TIMEOUT,
                    "The request body did not arrive in time.",
                ));
            }
        }
    };
    Ok(Outgoing {
        parts,
        body,
        upgrade: client_upgrade,
        body_failed,
    })
}

/// Origin-form (`/path?query`), as HTTP/1.1 to the app wants it; an HTTP/2 request's
/// scheme and authority are dropped (the authority went into `Host`). The parts share
/// the request's bytes: nothing is parsed or copied again.
fn origin_form(uri: hyper::Uri) -> hyper::Uri {
    if uri.scheme().is_none() && uri.authority().is_none() {
        return uri;
    }
    let mut u = uri.into_parts();
    u.scheme = None;
    u.authority = None;
    if u.path_and_query.is_none() {
        u.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/"));
    }
    hyper::Uri::from_parts(u).unwrap_or_else(|_| hyper::Uri::from_static("/"))
}

/// The serving generation, then (for what cannot have reached it) the standby.
async fn send(
    client: &Client,
    entry: &Entry,
    mut out: Outgoing,
) -> Result<Response<ProxyBody>, Response<ProxyBody>> {
    let shared = client.shared.as_ref();
    let upgrade = out.upgrade.is_some();
    let idempotent = matches!(
        out.parts.method,
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let mut last_error = String::new();
    let mut busy = false;
    for attempt in entry.attempts() {
        let (target, is_last) = (attempt.target, attempt.is_last);
        let Some(body) = out.body.take() else {
            // A streamed body was consumed by the first try: nothing left to retry with.
            break;
        };
        let req = out.attempt(body, is_last);
        let guard = attempt.start(&shared.counters);
        let up = &client.upstreams;
        let sending = async {
            if upgrade {
                up.send_upgrade(target, &entry.conns, req).await
            } else {
                up.send(target, &entry.conns, req).await
            }
        };
        match tokio::time::timeout(entry.timeout, sending).await {
            Ok(Ok(resp)) => {
                if upgrade && resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                    return Ok(switched(resp, out.upgrade.take(), guard));
                }
                return answer(resp, guard).ok_or_else(|| {
                    page(StatusCode::BAD_GATEWAY, "The app's answer was malformed.")
                });
            }
            Ok(Err(_)) if out.body_failed.get() == BodyFailure::Malformed => {
                return Err(refusal(rules::BAD_BODY, true));
            }
            Ok(Err(_)) if out.body_failed.get() == BodyFailure::TooLarge => {
                return Err(refusal(rules::TOO_LARGE, true));
            }
            Ok(Err(e)) => {
                // Retry only what cannot have reached the app: a refused connection, or an
                // idempotent request whose answer never started.
                let unreached = matches!(e, SendError::Connect | SendError::Busy) || idempotent;
                busy = matches!(e, SendError::Busy);
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
    Err(unreached_page(busy))
}

impl Outgoing {
    /// One attempt's request: the last attempt takes the headers, earlier ones a copy.
    fn attempt(&mut self, body: ProxyBody, is_last: bool) -> Request<ProxyBody> {
        let mut req = Request::builder()
            .method(self.parts.method.clone())
            .uri(self.parts.uri.clone())
            .version(hyper::Version::HTTP_11)
            .body(body)
            .expect("a request from valid parts");
        *req.headers_mut() = if is_last {
            std::mem::take(&mut self.parts.headers)
        } else {
            self.parts.headers.clone()
        };
        req
    }
}

/// The app agreed to switch protocols: both upgraded connections are spliced, counted in
/// flight until the splice ends, and the client gets the 101's head.
fn switched(
    mut resp: Response<Incoming>,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    guard: InFlight,
) -> Response<ProxyBody> {
    let upstream_upgrade = hyper::upgrade::on(&mut resp);
    if let Some(client_upgrade) = client_upgrade {
        tokio::spawn(splice(client_upgrade, upstream_upgrade, guard));
    }
    let (p, _) = resp.into_parts();
    Response::from_parts(p, empty())
}

/// No attempt reached the app: 503 when it was at its connection limit, else 502.
fn unreached_page(busy: bool) -> Response<ProxyBody> {
    if busy {
        page(
            StatusCode::SERVICE_UNAVAILABLE,
            "The app is busy. Try again in a moment.",
        )
    } else {
        page(
            StatusCode::BAD_GATEWAY,
            "The app could not be reached. Try again in a moment.",
        )
    }
}

/// The answer as it goes back to the client: hop-by-hop headers dropped, counted in
/// flight until its body has been sent; `None` when its length is not one RFC 9110
/// digits-only `Content-Length`.
fn answer(resp: Response<Incoming>, guard: InFlight) -> Option<Response<ProxyBody>> {
    let (mut parts, body) = resp.into_parts();
    let lengths = parts.headers.get_all(header::CONTENT_LENGTH);
    let mut lengths = lengths.iter();
    let first = lengths.next();
    if lengths.next().is_some()
        || first.is_some_and(|v| rules::parse_length(v.as_bytes()).is_none())
    {
        return None;
    }
    let drop: Vec<HeaderName> = {
        let conn = rules::Connection::of(pairs(&parts.headers)).unwrap_or_default();
        parts
            .headers
            .keys()
            .filter(|k| !rules::answer_header(k.as_str().as_bytes(), &conn))
            .cloned()
            .collect()
    };
    for k in drop {
        parts.headers.remove(k);
    }
    let body = Counted {
        inner: body,
        _guard: guard,
    };
    Some(Response::from_parts(parts, BoxBody::new(body)))
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

fn pairs(headers: &HeaderMap) -> impl Iterator<Item = (&[u8], &[u8])> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str().as_bytes(), v.as_bytes()))
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
        && rules::Connection::of(pairs(headers)).is_some_and(|c| c.names("upgrade"))
}

/// The head for the app, by [`rules`]: hop-by-hop, forwarding and underscore headers
/// out, the body's framing left to hyper (it frames what it sends), Pier's
/// `X-Forwarded-*` in.
fn headers_for_app(headers: &mut HeaderMap, client: &Client, host: Option<&str>, upgrade: bool) {
    let upgrade_value = headers.get(header::UPGRADE).cloned();
    let mut prior_for: Vec<u8> = Vec::new();
    let mut proto: &'static str = if client.tls { "https" } else { "http" };
    let mut drop: Vec<HeaderName> = vec![header::CONTENT_LENGTH];
    {
        let conn = rules::Connection::of(pairs(headers)).unwrap_or_default();
        for (name, value) in headers.iter() {
            let verdict = rules::request_header(name.as_str().as_bytes(), &conn);
            match verdict {
                ToApp::Keep => continue,
                ToApp::PriorFor if client.trusted => {
                    prior_for.extend_from_slice(value.as_bytes());
                    prior_for.extend_from_slice(b", ");
                }
                ToApp::PriorProto if client.trusted && value == "https" => proto = "https",
                ToApp::PriorProto if client.trusted && value == "http" => proto = "http",
                ToApp::Drop | ToApp::PriorFor | ToApp::PriorProto => {}
            }
            drop.push(name.clone());
        }
    }
    for name in drop {
        headers.remove(name);
    }
    if upgrade && let Some(u) = upgrade_value {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u);
    }
    let xff = if prior_for.is_empty() {
        Some(client.peer_ip.clone())
    } else {
        prior_for.extend_from_slice(client.peer_ip.as_bytes());
        HeaderValue::from_maybe_shared(Bytes::from(prior_for)).ok()
    };
    if let Some(v) = xff {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    if let Some(h) = host.and_then(|h| HeaderValue::from_str(h).ok()) {
        headers.insert(X_FORWARDED_HOST, h);
    }
}

/// The proxy's own answer to a request no path forwards; an HTTP/1 connection closes
/// after it (an HTTP/2 stream ends by itself).
fn refusal(r: rules::Refusal, http1: bool) -> Response<ProxyBody> {
    let mut resp = page(r.status, r.text);
    if http1 {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new())
        .map_err(|e| -> BoxError { match e {} })
        .boxed()
}

/// A short page of the proxy's own, for when no app answers: never a hang.
pub(crate) fn page(status: StatusCode, text: &str) -> Response<ProxyBody> {
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
