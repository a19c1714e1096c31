//! What `pier proxy` does to the bytes it carries, checked against the real binary: the
//! `X-Forwarded-*` headers an app sees, hop-by-hop headers dropped, WebSocket upgrades and
//! streaming bodies passed through as they happen, HTTP/2 clients served. The upstream is
//! a small server inside the test, so that it can report exactly what reached it; the
//! proxy reads its route from its state file, the way it starts when the database is away
//! (`support::PierProxy`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

const DEADLINE: Duration = Duration::from_secs(10);

type Proxy = PierProxy;

async fn proxy_to(upstream: SocketAddr) -> Proxy {
    proxy_with(upstream, "").await
}

/// Like [`proxy_to`], with more lines for `[proxy]`.
async fn proxy_with(upstream: SocketAddr, proxy_toml: &str) -> Proxy {
    let proxy = PierProxy::start(upstream, proxy_toml).await;
    wait_until("pier proxy routes app.test", DEADLINE, || async move {
        let (status, _) = raw_get(proxy.listen, "/", "app.test").await?;
        (status == 200).then_some(())
    })
    .await;
    proxy
}

/// A running `pier proxy` routing `app.test` to `upstream`, which may not answer.
async fn proxy_routing_to(upstream: SocketAddr) -> Proxy {
    PierProxy::start(upstream, "").await
}

/// One HTTP/1.1 GET over a fresh connection; the status and the whole answer.
async fn raw_get(addr: SocketAddr, path: &str, host: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(DEADLINE, s.read_to_end(&mut out))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text))
}

/// An upstream that answers every request with the headers it received, as JSON.
async fn header_echo() -> SocketAddr {
    serve_upstream(|req: Request<Incoming>| async move {
        let headers: serde_json::Map<String, serde_json::Value> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").into()))
            .collect();
        let version = format!("{:?}", req.version());
        // Read whole, as an app does before it answers.
        let received = req
            .into_body()
            .collect()
            .await
            .map_or(0, |b| b.to_bytes().len());
        let body = serde_json::json!({
            "version": version,
            "headers": headers,
            "body_bytes": received,
        });
        Response::new(full(body.to_string()))
    })
    .await
}

/// An upstream that answers every request with its body's length and SHA-256.
async fn digest_echo() -> SocketAddr {
    serve_upstream(|req: Request<Incoming>| async move {
        let bytes = req.into_body().collect().await.map(|b| b.to_bytes());
        let digest = bytes
            .map(|b| format!("{} {}", b.len(), sha256_digest(&b)))
            .unwrap_or_else(|e| format!("error {e}"));
        Response::new(full(digest))
    })
    .await
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(s: impl Into<Bytes>) -> UpBody {
    Full::new(s.into()).boxed()
}

async fn serve_upstream<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<UpBody>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// What the header echo saw of one request sent as `raw` over a fresh connection.
async fn seen_by_app(proxy: &Proxy, raw: &[u8]) -> serde_json::Value {
    let mut s = TcpStream::connect(proxy.listen).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(DEADLINE, s.read_to_string(&mut out))
        .await
        .expect("the proxy answers in time")
        .unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a complete answer");
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    serde_json::from_str(body).expect("the echo's JSON")
}

#[tokio::test]
async fn a_client_s_forwarding_headers_are_replaced_on_both_paths() {
    let proxy = proxy_to(header_echo().await).await;
    for version in ["1.1", "1.0"] {
        let raw = format!(
            "GET / HTTP/{version}\r\nHost: app.test\r\nX-Forwarded-For: 6.6.6.6\r\n\
             Forwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\n\
             X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );
        let seen = seen_by_app(&proxy, raw.as_bytes()).await;
        let h = seen["headers"].as_object().unwrap();
        assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{seen}");
        assert_eq!(h["x-forwarded-proto"], "http", "{seen}");
        assert_eq!(h["x-forwarded-host"], "app.test", "{seen}");
        assert_eq!(h["accept"], "*/*", "{seen}");
        for spoofed in ["forwarded", "x-real-ip", "x_forwarded_for"] {
            assert!(
                !h.contains_key(spoofed),
                "HTTP/{version}: {spoofed} reached the app: {seen}"
            );
        }
    }
}

#[tokio::test]
async fn a_trusted_proxy_s_forwarded_for_is_appended_to_on_both_paths() {
    let proxy = proxy_with(header_echo().await, "trusted_proxies = [\"127.0.0.0/8\"]").await;
    for version in ["1.1", "1.0"] {
        let raw = format!(
            "GET / HTTP/{version}\r\nHost: app.test\r\nX-Forwarded-For: 203.0.113.9\r\n\
             X-Forwarded-Proto: https\r\nConnection: close\r\n\r\n"
        );
        let seen = seen_by_app(&proxy, raw.as_bytes()).await;
        let h = &seen["headers"];
        assert_eq!(h["x-forwarded-for"], "203.0.113.9, 127.0.0.1", "{seen}");
        assert_eq!(h["x-forwarded-proto"], "https", "{seen}");
    }
}

#[tokio::test]
async fn the_app_sees_who_asked_how_and_for_which_host_and_no_hop_headers() {
    let proxy = proxy_to(header_echo().await).await;
    let mut s = TcpStream::connect(proxy.listen).await.unwrap();
    s.write_all(
        b"GET /who HTTP/1.1\r\nHost: APP.test:8080\r\nX-Forwarded-For: 203.0.113.9\r\n\
          Connection: close, x-private-hop\r\nX-Private-Hop: secret\r\nKeep-Alive: timeout=5\r\n\
          Proxy-Authorization: Basic c2VjcmV0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = String::new();
    tokio::time::timeout(DEADLINE, s.read_to_string(&mut out))
        .await
        .expect("the proxy answers in time")
        .unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a complete answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen: serde_json::Value = serde_json::from_str(body).expect("the echo's JSON");
    let h = &seen["headers"];
    assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(h["x-forwarded-proto"], "http", "{seen}");
    assert_eq!(h["x-forwarded-host"], "app.test", "{seen}");
    for hop in ["x-private-hop", "keep-alive", "proxy-authorization"] {
        assert!(h.get(hop).is_none(), "{hop} reached the app: {seen}");
    }
}

#[tokio::test]
async fn a_websocket_upgrade_carries_bytes_both_ways() {
    // A raw upstream: reads the upgrade request, switches protocols, then answers every
    // byte it gets in upper case, so the test sees both directions.
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = up.local_addr().unwrap();
    let (saw_head, head_seen) = oneshot::channel::<String>();
    tokio::spawn(async move {
        let mut saw_head = Some(saw_head);
        while let Ok((mut s, _)) = up.accept().await {
            let head = read_head(&mut s).await;
            if !head.to_ascii_lowercase().contains("upgrade: websocket") {
                // The proxy's readiness probe: a plain answer.
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
                continue;
            }
            if let Some(tx) = saw_head.take() {
                let _ = tx.send(head);
            }
            s.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            )
            .await
            .unwrap();
            let mut buf = [0u8; 64];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                let upper = buf[..n].to_ascii_uppercase();
                if s.write_all(&upper).await.is_err() {
                    break;
                }
            }
        }
    });
    let proxy = proxy_to(up_addr).await;
    let mut c = TcpStream::connect(proxy.listen).await.unwrap();
    c.write_all(
        b"GET /socket HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await
    .unwrap();
    let answer = read_head(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let head = tokio::time::timeout(DEADLINE, head_seen)
        .await
        .expect("the upgrade reached the upstream")
        .unwrap();
    assert!(
        head.contains("sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ=="),
        "{head}"
    );
    for word in ["hello", "proxy"] {
        c.write_all(word.as_bytes()).await.unwrap();
        let mut back = vec![0u8; word.len()];
        tokio::time::timeout(DEADLINE, c.read_exact(&mut back))
            .await
            .expect("the echo comes back through the proxy")
            .unwrap();
        assert_eq!(back, word.to_ascii_uppercase().as_bytes());
    }
}

/// The request head up to the blank line, lower-cased header names kept as sent.
async fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
        match tokio::time::timeout(DEADLINE, s.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    // Header names to lower case, values as sent: hyper may change a name's case.
    text.lines()
        .map(|l| match l.split_once(':') {
            Some((k, v)) => format!("{}:{v}", k.to_ascii_lowercase()),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

#[tokio::test]
async fn an_answer_streams_to_the_client_before_the_app_has_finished_it() {
    // The upstream sends its first chunk, then holds the rest until the test has seen
    // that chunk arrive through the proxy: a proxy that buffered answers would hang here.
    let (release_tx, release_rx) = mpsc::channel::<()>(1);
    let release_rx = std::sync::Arc::new(tokio::sync::Mutex::new(release_rx));
    let up = serve_upstream(move |req: Request<Incoming>| {
        let release_rx = release_rx.clone();
        async move {
            if req.uri().path() != "/stream" {
                return Response::new(full("ok"));
            }
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            tokio::spawn(async move {
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(b"first;"))))
                    .await;
                let _ = release_rx.lock().await.recv().await;
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"last")))).await;
            });
            let body = StreamBody::new(tokio_stream_of(rx));
            Response::new(BodyExt::boxed(body))
        }
    })
    .await;
    let proxy = proxy_to(up).await;
    let mut c = TcpStream::connect(proxy.listen).await.unwrap();
    c.write_all(b"GET /stream HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("first;") {
        let n = tokio::time::timeout(DEADLINE, c.read(&mut buf))
            .await
            .expect("the first chunk arrives while the app still holds the rest")
            .unwrap();
        assert!(n > 0, "the connection closed early: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&seen).contains("last"));
    release_tx.send(()).await.unwrap();
    tokio::time::timeout(DEADLINE, c.read_to_end(&mut seen))
        .await
        .expect("the answer ends once the app ends it")
        .unwrap();
    assert!(String::from_utf8_lossy(&seen).contains("last"), "{seen:?}");
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn a_large_upload_streams_through_whole() {
    // Larger than what the proxy reads ahead for a retry: it must stream, in order, whole.
    let up = digest_echo().await;
    let proxy = proxy_to(up).await;
    let payload: Vec<u8> = (0..(1024 * 1024u32)).map(|i| (i % 251) as u8).collect();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(
        TcpStream::connect(proxy.listen).await.unwrap(),
    ))
    .await
    .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    let chunks: Vec<Bytes> = payload
        .chunks(64 * 1024)
        .map(Bytes::copy_from_slice)
        .collect();
    tokio::spawn(async move {
        for c in chunks {
            let _ = tx.send(Ok(Frame::data(c))).await;
        }
    });
    let req = Request::post("/upload")
        .header("host", "app.test")
        .body(StreamBody::new(tokio_stream_of(rx)))
        .unwrap();
    let resp = tokio::time::timeout(DEADLINE, sender.send_request(req))
        .await
        .expect("the proxy answers in time")
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&body),
        format!("{} {}", payload.len(), sha256_digest(&payload))
    );
}

#[tokio::test]
async fn http2_clients_are_served_and_the_app_gets_http1() {
    let proxy = proxy_to(header_echo().await).await;
    let io = TokioIo::new(TcpStream::connect(proxy.listen).await.unwrap());
    let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .expect("an HTTP/2 (prior knowledge) handshake with the proxy");
    tokio::spawn(conn);
    // Several streams at once on the one connection.
    let mut answers = Vec::new();
    for i in 0..8 {
        let mut sender = sender.clone();
        answers.push(tokio::spawn(async move {
            let req = Request::get(format!("http://app.test/h2/{i}"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let resp = tokio::time::timeout(DEADLINE, sender.send_request(req))
                .await
                .expect("an answer in time")
                .expect("an HTTP/2 answer");
            assert_eq!(resp.version(), hyper::Version::HTTP_2);
            assert_eq!(resp.status(), 200);
            resp.into_body().collect().await.unwrap().to_bytes()
        }));
    }
    for a in answers {
        let body = a.await.unwrap();
        let seen: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(seen["version"], "HTTP/1.1", "{seen}");
        assert_eq!(seen["headers"]["x-forwarded-host"], "app.test", "{seen}");
    }
}

/// A raw upstream with canned answers by path, in every framing HTTP/1.1 has, written as
/// bytes so that the test knows exactly what the proxy was given. Counts its connections,
/// and says on `closed` when it closed one after `/bye` without announcing it.
async fn canned_upstream() -> (
    SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    mpsc::Receiver<()>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = up.local_addr().unwrap();
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    let (closed_tx, closed) = mpsc::channel(8);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = up.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                loop {
                    let head = read_head(&mut s).await;
                    let Some(line) = head.lines().next().filter(|l| !l.is_empty()) else {
                        return;
                    };
                    let mut words = line.split(' ');
                    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    let mut body = vec![0u8; length];
                    s.read_exact(&mut body).await.unwrap();
                    let answer: Vec<u8> = match (method, path) {
                        ("HEAD", _) => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n".to_vec(),
                        ("POST", _) => [
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n")
                                .as_bytes(),
                            &body,
                        ]
                        .concat(),
                        (_, "/chunked") => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                            5\r\nhello\r\n0\r\nX-Sum: 5\r\n\r\n"
                            .to_vec(),
                        (_, "/hints") => b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n\
                            HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                            .to_vec(),
                        (_, "/close") => b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(),
                        (_, "/bye") => b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye".to_vec(),
                        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
                    };
                    if s.write_all(&answer).await.is_err() {
                        return;
                    }
                    if path == "/close" || path == "/bye" {
                        let _ = s.shutdown().await;
                        drop(s);
                        if path == "/bye" {
                            let _ = closed_tx.send(()).await;
                        }
                        return;
                    }
                }
            });
        }
    });
    (addr, conns, closed)
}

async fn read_all(c: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(DEADLINE, c.read_to_end(&mut out))
        .await
        .expect("the proxy ends the connection in time")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn pipelined_requests_in_every_framing_go_through_one_app_connection_unchanged() {
    use std::sync::atomic::Ordering;
    let (up, conns, _) = canned_upstream().await;
    let proxy = proxy_to(up).await;
    let before = conns.load(Ordering::SeqCst);
    let mut c = TcpStream::connect(proxy.listen).await.unwrap();
    c.write_all(
        b"GET /len HTTP/1.1\r\nHost: app.test\r\n\r\n\
          POST /echo HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n\r\nabcde\
          HEAD /len HTTP/1.1\r\nHost: app.test\r\n\r\n\
          GET /chunked HTTP/1.1\r\nHost: app.test\r\n\r\n\
          GET /hints HTTP/1.1\r\nHost: app.test\r\n\r\n\
          GET /close HTTP/1.1\r\nHost: app.test\r\n\r\n",
    )
    .await
    .unwrap();
    let got = read_all(&mut c).await;
    assert_eq!(
        got,
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
         HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcde\
         HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n\
         HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 5\r\n\r\n\
         HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n\
         HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\
         HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst) - before,
        1,
        "one kept-alive connection to the app carries all six"
    );
}

#[tokio::test]
async fn a_kept_alive_app_connection_the_app_closed_is_replaced_before_the_next_request() {
    let (up, _, mut closed) = canned_upstream().await;
    let proxy = proxy_to(up).await;
    let mut c = TcpStream::connect(proxy.listen).await.unwrap();
    c.write_all(b"GET /bye HTTP/1.1\r\nHost: app.test\r\n\r\n")
        .await
        .unwrap();
    let mut first = vec![0u8; "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye".len()];
    tokio::time::timeout(DEADLINE, c.read_exact(&mut first))
        .await
        .expect("the first answer in time")
        .unwrap();
    tokio::time::timeout(DEADLINE, closed.recv())
        .await
        .expect("the app closed its side");
    // Not idempotent: a proxy that sent it on the dead connection could not retry it.
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: app.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
        .await
        .unwrap();
    assert_eq!(
        read_all(&mut c).await,
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
    );
}

#[tokio::test]
async fn a_large_upload_with_a_length_streams_through_and_the_connection_goes_on() {
    let up = digest_echo().await;
    let proxy = proxy_to(up).await;
    let payload: Vec<u8> = (0..(1024 * 1024u32)).map(|i| (i % 251) as u8).collect();
    let c = TcpStream::connect(proxy.listen).await.unwrap();
    let (mut rd, mut wr) = c.into_split();
    let sent = payload.clone();
    let writer = tokio::spawn(async move {
        let head = format!(
            "POST /upload HTTP/1.1\r\nHost: app.test\r\nContent-Length: {}\r\n\r\n",
            sent.len()
        );
        wr.write_all(head.as_bytes()).await.unwrap();
        for piece in sent.chunks(60_000) {
            wr.write_all(piece).await.unwrap();
        }
        wr.write_all(b"GET /after HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        wr
    });
    let mut out = Vec::new();
    tokio::time::timeout(DEADLINE, rd.read_to_end(&mut out))
        .await
        .expect("both answers in time")
        .unwrap();
    let _wr = writer.await.unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 2, "{text}");
    assert!(
        text.contains(&format!("{} {}", payload.len(), sha256_digest(&payload))),
        "{text}"
    );
    assert!(
        text.contains(&format!("0 {}", sha256_digest(b""))),
        "{text}"
    );
}

#[tokio::test]
async fn requests_only_hyper_serves_are_handed_over_mid_connection_and_answered() {
    let proxy = proxy_to(header_echo().await).await;
    let mut c = TcpStream::connect(proxy.listen).await.unwrap();
    // A plain GET, then a chunked upload (hyper's), then a GET after it.
    c.write_all(
        b"GET /one HTTP/1.1\r\nHost: app.test\r\n\r\n\
          POST /two HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n\
          3\r\nabc\r\n0\r\n\r\n\
          GET /three HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let got = read_all(&mut c).await;
    assert_eq!(got.matches("HTTP/1.1 200 OK").count(), 3, "{got}");
    assert_eq!(
        got.matches("\"x-forwarded-host\":\"app.test\"").count(),
        3,
        "{got}"
    );
    assert!(got.contains("\"body_bytes\":3"), "{got}");

    // HTTP/1.0 is hyper's from the first request.
    let mut c = TcpStream::connect(proxy.listen).await.unwrap();
    c.write_all(b"GET /old HTTP/1.0\r\nHost: app.test\r\n\r\n")
        .await
        .unwrap();
    let got = read_all(&mut c).await;
    assert!(
        got.starts_with("HTTP/1.0 200") || got.starts_with("HTTP/1.1 200"),
        "{got}"
    );
    assert!(got.contains("\"x-forwarded-for\":\"127.0.0.1\""), "{got}");
}

#[tokio::test]
async fn an_app_that_is_down_gets_a_502_per_request_and_a_few_log_lines_not_one_each() {
    // The upstream address is a port nobody listens on.
    let down: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let proxy = proxy_routing_to(down).await;
    for _ in 0..100 {
        let (status, page) = raw_get(proxy.listen, "/", "app.test")
            .await
            .expect("an answer from the proxy itself");
        assert_eq!(status, 502, "{page}");
    }
    let log = proxy.process.log();
    let lines = log.matches("no upstream answered").count();
    assert!(
        (1..=5).contains(&lines),
        "{lines} lines for 100 failed requests:\n{log}"
    );
}
