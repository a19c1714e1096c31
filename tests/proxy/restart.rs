//! A planned restart of `pier proxy` drops no request: a new proxy starts beside the old
//! one on the same address (`SO_REUSEPORT`), the old one gets SIGTERM, stops accepting,
//! answers what it has (the last answer on each kept-alive connection says
//! `Connection: close`) and exits, while a load client keeps sending requests.

use std::time::{Duration, Instant};

use crate::support::*;

#[tokio::test]
async fn three_restarts_under_load_fail_no_request() {
    let app = RecordingApp::start().await;
    let config = "drain_timeout = \"5s\"";
    let mut serving = PierProxy::start(app.addr, config).await;
    let listen = serving.listen;
    let url = format!("http://{listen}/load");
    let load = Load::start(&url, 1_000_000, Duration::from_secs(120));
    let served = |n: usize| {
        let app = app.clone();
        async move { (app.seen().len() >= n).then_some(()) }
    };
    wait_until("the load is under way", Duration::from_secs(20), || {
        served(200)
    })
    .await;
    for restart in 0..3 {
        let next = PierProxy::start_on(app.addr, listen, config).await;
        let started = Instant::now();
        let code = serving.process.terminate(Duration::from_secs(15)).await;
        let took = started.elapsed();
        assert_eq!(
            code,
            Some(0),
            "restart {restart}: {}",
            serving.process.log()
        );
        // Within the 5 s drain, with room for a loaded machine; killed at 15 s otherwise.
        assert!(
            took < Duration::from_secs(12),
            "restart {restart}: SIGTERM took {took:?}"
        );
        // The new proxy carries the load alone for a while before the next restart.
        let before = app.seen().len();
        wait_until(
            "the new proxy serves the load",
            Duration::from_secs(20),
            || served(before + 200),
        )
        .await;
        serving = next;
    }
    let answers = load.finish().await;
    let failed = failures(&answers);
    eprintln!(
        "{} requests across 3 restarts, {} failed",
        answers.len(),
        failed.len()
    );
    assert!(answers.len() > 800, "{} requests", answers.len());
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(10)]
    );
}

#[tokio::test]
async fn a_connection_idle_at_sigterm_gets_its_next_request_answered_with_connection_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    let app = RecordingApp::start().await;
    let mut proxy = PierProxy::start(app.addr, "drain_timeout = \"5s\"").await;
    let mut idle = Vec::new();
    for i in 0..5 {
        let mut s = TcpStream::connect(proxy.listen).await.unwrap();
        let req = format!("GET /first/{i} HTTP/1.1\r\nHost: app.test\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let want = format!("ok GET /first/{i}");
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).ends_with(&want) {
            let mut buf = [0u8; 512];
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .expect("the first answer in time")
                .unwrap();
            assert!(n > 0, "closed before the first answer");
            got.extend_from_slice(&buf[..n]);
        }
        idle.push(s);
    }
    let pid = proxy.process.pid().expect("pier proxy runs");
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    // Once the listener is closed, the proxy is certainly stopping.
    let listen = proxy.listen;
    wait_until(
        "the proxy stops accepting",
        Duration::from_secs(5),
        || async move { TcpStream::connect(listen).await.is_err().then_some(()) },
    )
    .await;
    for (i, s) in idle.iter_mut().enumerate() {
        let req = format!("GET /second/{i} HTTP/1.1\r\nHost: app.test\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
            .await
            .expect("answered and closed in time")
            .unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200"), "{i}: {text:?}");
        assert!(text.contains("Connection: close\r\n"), "{i}: {text:?}");
        assert!(
            text.ends_with(&format!("ok GET /second/{i}")),
            "{i}: {text:?}"
        );
    }
    assert_eq!(
        proxy.process.wait_exit(Duration::from_secs(10)).await,
        Some(0)
    );
}
