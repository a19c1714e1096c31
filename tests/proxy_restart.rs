//! A planned restart of `pier proxy` drops no request: a new proxy starts beside the old
//! one on the same address (`SO_REUSEPORT`), the old one gets SIGTERM, stops accepting,
//! answers what it has (the last answer on each kept-alive connection says
//! `Connection: close`) and exits, while a load client keeps sending requests.

mod support;

use std::time::{Duration, Instant};

use support::*;

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
        assert!(
            took < Duration::from_secs(6),
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
