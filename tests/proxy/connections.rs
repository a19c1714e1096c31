//! Connection accounting in `pier proxy`: every connection it opens to an app belongs to
//! a client connection and closes with it, so clients that come and go (HTTP/1.0, HTTP/2)
//! leave no file descriptors behind, even under a file limit of 64; and SIGTERM ends the
//! process within `proxy.drain_timeout`, idle keep-alive clients or not.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(10);

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Sets the running process's file limit, as `ulimit -n` would have before it started.
fn limit_files(pid: u32, n: u32) {
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={n}:{n}")])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit failed");
}

/// One HTTP/1.0 request on its own connection, closed once answered; its status.
async fn http10(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: app.test\r\n\r\n");
    let text = exchange_to_close(s, &req, DEADLINE).await?;
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an answer: {text:?}"))
}

/// A few requests on one HTTP/2 (prior knowledge) connection, which is then dropped.
async fn http2(addr: SocketAddr, n: usize) -> Result<Vec<u16>, String> {
    let io = TokioIo::new(TcpStream::connect(addr).await.map_err(|e| e.to_string())?);
    let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let mut statuses = Vec::new();
    for i in 0..n {
        let mut sender = sender.clone();
        let req = hyper::Request::get(format!("http://app.test/h2/{i}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = tokio::time::timeout(DEADLINE, sender.send_request(req))
            .await
            .map_err(|_| "no answer in time".to_string())?
            .map_err(|e| e.to_string())?;
        statuses.push(resp.status().as_u16());
        let _ = resp.into_body().collect().await;
    }
    drop(sender);
    conn.abort();
    Ok(statuses)
}

async fn wait_for_fds(pid: u32, at_most: usize, what: &str) {
    let found = poll_until(Duration::from_secs(20), || async move {
        (open_fds(pid) <= at_most).then_some(())
    })
    .await;
    assert!(
        found.is_some(),
        "{what}: {} open files, not back to {at_most}",
        open_fds(pid)
    );
}

#[tokio::test]
async fn clients_that_come_and_go_leave_no_connections_to_the_app() {
    let app = RecordingApp::start().await;
    let proxy = PierProxy::start(app.addr, "").await;
    let pid = proxy.process.pid().expect("pier proxy runs");
    assert_eq!(http10(proxy.listen, "/warm").await, Ok(200));
    let idle = open_fds(pid);
    limit_files(pid, 64);

    let mut failed = Vec::new();
    for round in 0..50 {
        let mut batch = tokio::task::JoinSet::new();
        for i in 0..20 {
            let addr = proxy.listen;
            batch.spawn(async move { http10(addr, &format!("/old/{round}/{i}")).await });
        }
        while let Some(r) = batch.join_next().await {
            match r.unwrap() {
                Ok(200) => {}
                other => failed.push(other),
            }
        }
    }
    assert!(failed.is_empty(), "1,000 HTTP/1.0 requests: {failed:?}");
    wait_for_fds(pid, idle, "after 1,000 HTTP/1.0 requests").await;

    for _ in 0..20 {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..5 {
            let addr = proxy.listen;
            batch.spawn(async move { http2(addr, 4).await });
        }
        while let Some(r) = batch.join_next().await {
            match r.unwrap() {
                Ok(s) if s.iter().all(|s| *s == 200) => {}
                other => failed.push(other.map(|_| 0)),
            }
        }
    }
    assert!(failed.is_empty(), "100 HTTP/2 connections: {failed:?}");
    wait_for_fds(pid, idle, "after 100 HTTP/2 connections").await;
    assert_eq!(http10(proxy.listen, "/after").await, Ok(200));
    let log = proxy.process.log();
    assert!(!log.contains("Too many open files"), "{log}");
}

#[tokio::test]
async fn sigterm_ends_the_proxy_within_its_drain_timeout_despite_idle_clients() {
    let app = RecordingApp::start().await;
    let mut proxy = PierProxy::start(app.addr, "drain_timeout = \"3s\"").await;
    // Idle keep-alive clients on both paths: the byte path's and hyper's (HTTP/2).
    let mut idle = Vec::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(proxy.listen).await.unwrap();
        s.write_all(b"GET /keep HTTP/1.1\r\nHost: app.test\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(DEADLINE, s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        idle.push(s);
    }
    let io = TokioIo::new(TcpStream::connect(proxy.listen).await.unwrap());
    let (_h2, conn) =
        hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(TokioExecutor::new(), io)
            .await
            .unwrap();
    let h2 = tokio::spawn(conn);
    let started = Instant::now();
    let code = proxy.process.terminate(Duration::from_secs(10)).await;
    let took = started.elapsed();
    assert_eq!(code, Some(0), "exited by itself: {}", proxy.process.log());
    // Exiting by itself (not killed at 10 s) is the proof; the bound only says it did not
    // wait for the idle clients, with room for a loaded machine past the 3 s drain.
    assert!(took < Duration::from_secs(9), "SIGTERM took {took:?}");
    h2.abort();
}

#[tokio::test]
async fn an_app_gets_no_more_connections_than_its_limit_and_the_rest_get_503() {
    // An app that accepts and reads but never answers: each request holds its connection.
    let app = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app_addr = app.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = app.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(s);
        }
    });
    let proxy = PierProxy::start(app_addr, "max_upstream_connections = 2").await;
    let mut hanging = Vec::new();
    for i in 0..2 {
        let mut s = TcpStream::connect(proxy.listen).await.unwrap();
        let req = format!("GET /hold/{i} HTTP/1.1\r\nHost: app.test\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        hanging.push(s);
    }
    let held = accepted.clone();
    wait_until("both requests reach the app", DEADLINE, || {
        let n = held.load(std::sync::atomic::Ordering::SeqCst);
        async move { (n >= 2).then_some(()) }
    })
    .await;
    // On the byte path and on hyper's.
    for raw in [
        "GET /third HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
        "GET /third HTTP/1.0\r\nHost: app.test\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(proxy.listen).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(DEADLINE, s.read_to_end(&mut out))
            .await
            .expect("answered by the proxy itself in time")
            .unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 503") || text.starts_with("HTTP/1.0 503"),
            "{text}"
        );
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    drop(hanging);
    holder.abort();
}
