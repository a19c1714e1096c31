//! A registry that misbehaves on purpose: a fault injector, not a fake. It answers manifest
//! requests with one configured fault; everything else it relays to a real registry (the
//! upstream) when it has one, so that what is finally resolved, pulled and run is a real
//! pushed image with a real digest.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::*;

/// What the manifest endpoint does.
#[derive(Debug, Clone)]
pub enum Fault {
    /// A manifest whose body arrives one byte every `every` (the head at once).
    Trickle { every: Duration },
    /// `bytes` of manifest streamed in 64 KiB chunks, no `Content-Length`: only reading
    /// it tells how large it is. The chunks are one shared buffer, never the whole body.
    HugeStreamed { bytes: u64 },
    /// The same, but `Content-Length` announces the size up front.
    HugeAnnounced { bytes: u64 },
    /// Every manifest URL redirects to another one and back, for ever.
    RedirectLoop,
    /// The manifest redirects to this `Location` (e.g. `ftp://…`, `file:///etc/passwd`).
    RedirectTo(String),
    /// The first manifest requests are answered 429 with these `Retry-After`s, in order;
    /// later ones are relayed to the upstream.
    TooManyRequests(Vec<RetryAfter>),
}

#[derive(Debug, Clone, Copy)]
pub enum RetryAfter {
    Seconds(u64),
    /// An HTTP date this far in the future when the answer is sent.
    DateIn(Duration),
}

/// One manifest request as the double saw it.
#[derive(Debug, Clone)]
pub struct Hit {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// What the double answered (before any body was streamed).
    pub status: u16,
    pub authorization: Option<String>,
}

/// One request to the double's token service.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub query: String,
    pub authorization: Option<String>,
}

struct Shared {
    fault: Fault,
    /// Only manifest paths containing this are faulted (all when `None`).
    only: Option<String>,
    /// Behind a token service: manifests need `Authorization: Bearer <this>`, from `/token`.
    token: Option<String>,
    token_requests: Mutex<Vec<TokenRequest>>,
    upstream: Mutex<Option<String>>,
    hits: Mutex<Vec<Hit>>,
    rate_limited: AtomicUsize,
    body_bytes_sent: Arc<AtomicU64>,
    relay: reqwest::Client,
}

/// The double on `127.0.0.1:<port>`; stops when dropped.
pub struct HostileRegistry {
    port: u16,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

const CHUNK: usize = 64 << 10;
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Starts like a manifest so that nothing but its pace or size is wrong with it.
const TRICKLED: &[u8] = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}"#;

impl HostileRegistry {
    pub async fn start(fault: Fault) -> HostileRegistry {
        Self::start_with(fault, None, None).await
    }

    /// Like [`HostileRegistry::start`], but only manifest requests whose path contains
    /// `only` are faulted (e.g. `/manifests/sha256-`: cosign's signature tags); the others
    /// are relayed to the upstream.
    pub async fn start_for(fault: Fault, only: &str) -> HostileRegistry {
        Self::start_with(fault, None, Some(only.to_owned())).await
    }

    /// Like [`HostileRegistry::start`], but every manifest request first needs a Bearer
    /// token: without it the answer is 401 with a challenge naming this double's `/token`
    /// realm, which hands out the token to anyone (and records what it was sent).
    pub async fn start_behind_token(fault: Fault) -> HostileRegistry {
        Self::start_with(fault, Some(format!("tok-{}", random_hex(16))), None).await
    }

    async fn start_with(
        fault: Fault,
        token: Option<String>,
        only: Option<String>,
    ) -> HostileRegistry {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the hostile registry");
        let port = listener.local_addr().expect("local_addr").port();
        let shared = Arc::new(Shared {
            fault,
            only,
            token,
            token_requests: Mutex::new(Vec::new()),
            upstream: Mutex::new(None),
            hits: Mutex::new(Vec::new()),
            rate_limited: AtomicUsize::new(0),
            body_bytes_sent: Arc::new(AtomicU64::new(0)),
            relay: reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("relay client"),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        HostileRegistry { port, shared, task }
    }

    /// Relays what is not faulted to this registry (`http://127.0.0.1:PORT`).
    pub fn set_upstream(&self, url: &str) {
        *self.shared.upstream.lock().unwrap() = Some(url.trim_end_matches('/').to_owned());
    }

    /// `127.0.0.1:PORT`, the host part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every manifest request so far, in order.
    pub fn manifest_hits(&self) -> Vec<Hit> {
        self.shared.hits.lock().unwrap().clone()
    }

    /// Every request to the token service so far.
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.shared.token_requests.lock().unwrap().clone()
    }

    /// Body bytes of faulted manifests handed to the connection so far.
    pub fn body_bytes_sent(&self) -> u64 {
        self.shared.body_bytes_sent.load(Ordering::Relaxed)
    }

    /// The `[[registries]]` table for this double: plain HTTP and the given extra lines
    /// (timeouts, caps).
    pub fn registry_toml(&self, extra: &str) -> String {
        format!(
            "\n[[registries]]\nhost = \"{}\"\ninsecure = true\n{}\n",
            self.host(),
            extra.trim()
        )
    }
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is_manifest(path: &str) -> bool {
    path.starts_with("/v2/") && path.contains("/manifests/")
}

async fn handle(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if let Some(token) = &s.token {
        if path == "/token" {
            s.token_requests.lock().unwrap().push(TokenRequest {
                query: req.uri().query().unwrap_or_default().to_owned(),
                authorization,
            });
            let mut r = answer(
                StatusCode::OK,
                Body::from(format!(r#"{{"token":"{token}","expires_in":300}}"#)),
            );
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return r;
        }
        if is_manifest(&path) && authorization.as_deref() != Some(&format!("Bearer {token}")) {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let repo = path
                .trim_start_matches("/v2/")
                .split("/manifests/")
                .next()
                .unwrap_or_default();
            let challenge = format!(
                r#"Bearer realm="http://{host}/token",service="hostile",scope="repository:{repo}:pull""#
            );
            let mut r = answer(StatusCode::UNAUTHORIZED, Body::empty());
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(&challenge).unwrap(),
            );
            s.hits.lock().unwrap().push(Hit {
                at: Instant::now(),
                method: method.to_string(),
                path,
                status: 401,
                authorization,
            });
            return r;
        }
    }
    let faulted = is_manifest(&path)
        && s.only.as_ref().is_none_or(|o| path.contains(o.as_str()))
        && match &s.fault {
            Fault::TooManyRequests(list) => {
                s.rate_limited.fetch_add(1, Ordering::SeqCst) < list.len()
            }
            _ => true,
        };
    let upstream = s.upstream.lock().unwrap().clone();
    let resp = if faulted {
        fault(&s, &path, &method)
    } else if let Some(up) = upstream {
        relay(&s.relay, &up, req).await
    } else if path == "/v2/" || path == "/v2" {
        answer(StatusCode::OK, Body::from("{}"))
    } else {
        answer(StatusCode::NOT_FOUND, Body::empty())
    };
    if is_manifest(&path) {
        s.hits.lock().unwrap().push(Hit {
            at: Instant::now(),
            method: method.to_string(),
            path,
            status: resp.status().as_u16(),
            authorization,
        });
    }
    resp
}

fn answer(status: StatusCode, body: Body) -> Response {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r
}

fn fault(s: &Shared, path: &str, method: &Method) -> Response {
    let sent = s.body_bytes_sent.clone();
    match &s.fault {
        Fault::Trickle { every } => {
            let every = *every;
            let stream = futures_util::stream::unfold(0usize, move |i| {
                let sent = sent.clone();
                async move {
                    if i >= TRICKLED.len() {
                        return None;
                    }
                    if i > 0 {
                        tokio::time::sleep(every).await;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from_static(&TRICKLED[i..=i])),
                        i + 1,
                    ))
                }
            });
            manifest_response(Body::from_stream(stream), None)
        }
        Fault::HugeStreamed { bytes } | Fault::HugeAnnounced { bytes } => {
            let total = *bytes;
            let chunk = Bytes::from(vec![b' '; CHUNK]);
            let stream = futures_util::stream::unfold(0u64, move |done| {
                let (chunk, sent) = (chunk.clone(), sent.clone());
                async move {
                    if done >= total {
                        return None;
                    }
                    let n = (total - done).min(CHUNK as u64);
                    sent.fetch_add(n, Ordering::Relaxed);
                    Some((Ok::<_, std::io::Error>(chunk.slice(..n as usize)), done + n))
                }
            });
            let announced = matches!(s.fault, Fault::HugeAnnounced { .. }).then_some(total);
            if method == Method::HEAD {
                return manifest_response(Body::empty(), announced);
            }
            manifest_response(Body::from_stream(stream), announced)
        }
        Fault::RedirectLoop => {
            let next = match path.strip_suffix("-again") {
                Some(p) => p.to_owned(),
                None => format!("{path}-again"),
            };
            redirect(&next)
        }
        Fault::RedirectTo(location) => redirect(location),
        Fault::TooManyRequests(list) => {
            let n = s.rate_limited.load(Ordering::SeqCst) - 1;
            let value = match list[n.min(list.len() - 1)] {
                RetryAfter::Seconds(secs) => secs.to_string(),
                RetryAfter::DateIn(d) => httpdate::fmt_http_date(std::time::SystemTime::now() + d),
            };
            let mut r = answer(
                StatusCode::TOO_MANY_REQUESTS,
                Body::from(r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}"#),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_str(&value).unwrap());
            r
        }
    }
}

fn manifest_response(body: Body, length: Option<u64>) -> Response {
    let mut r = answer(StatusCode::OK, body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(MANIFEST_TYPE),
    );
    if let Some(n) = length {
        r.headers_mut().insert(header::CONTENT_LENGTH, n.into());
    }
    r
}

fn redirect(location: &str) -> Response {
    let mut r = answer(StatusCode::FOUND, Body::empty());
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(location).expect("a header-safe Location"),
    );
    r
}

/// The request as it came, to the upstream; its answer as it came, headers that matter
/// to a registry client included. Bodies here are test images: small.
async fn relay(client: &reqwest::Client, upstream: &str, req: Request) -> Response {
    let url = format!(
        "{upstream}{}",
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    let mut out = client.request(req.method().clone(), &url);
    for name in [header::ACCEPT, header::AUTHORIZATION] {
        for v in req.headers().get_all(&name) {
            out = out.header(&name, v.clone());
        }
    }
    let Ok(resp) = out.send().await else {
        return answer(StatusCode::BAD_GATEWAY, Body::empty());
    };
    let status = resp.status();
    let mut headers = HeaderMap::new();
    for name in [
        header::CONTENT_TYPE,
        header::CONTENT_LENGTH,
        header::WWW_AUTHENTICATE,
        header::LOCATION,
        header::HeaderName::from_static("docker-content-digest"),
        header::HeaderName::from_static("docker-distribution-api-version"),
    ] {
        for v in resp.headers().get_all(&name) {
            headers.append(&name, v.clone());
        }
    }
    let body = resp.bytes().await.unwrap_or_default();
    let mut r = answer(status, Body::from(body));
    r.headers_mut().extend(headers);
    r
}
