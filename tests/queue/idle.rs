//! An idle Pier sends Postgres nothing between sweeps: no polling loop, whatever happened
//! before. Every statement its pool and its listener send is counted by a relay.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// Waits until no statement has gone through for `quiet`; returns the count then.
async fn settled(proxy: &PgProxy, quiet: Duration) -> u64 {
    wait_until("pier settles", Duration::from_secs(30), || async {
        let before = proxy.statements();
        tokio::time::sleep(quiet).await;
        (proxy.statements() == before).then_some(before)
    })
    .await
}

/// Statements sent during `window`, the measurement itself being a span of time.
async fn statements_during(proxy: &PgProxy, window: Duration) -> u64 {
    let before = proxy.statements();
    tokio::time::sleep(window).await;
    proxy.statements() - before
}

/// Waits until the outbox row of the deployment's notification is `sent` (read directly,
/// not through the relay, so the check itself is not counted).
async fn notification_recorded_as_sent(env: &TestEnv) {
    wait_until(
        "the notification is recorded as sent",
        Duration::from_secs(30),
        || async {
            let sent: i64 =
                sqlx::query_scalar("SELECT count(*) FROM notifications WHERE state = 'sent'")
                    .fetch_one(&env.db.pool)
                    .await
                    .ok()?;
            (sent > 0).then_some(())
        },
    )
    .await
}

/// A Pier with two workers whose every statement goes through a counting relay, and a
/// notification endpoint (its sender must be as idle as the workers).
async fn proxied_pier(sweep: &str) -> (TestEnv, PgProxy, PierProcess, HookRecorder) {
    let receiver = HookRecorder::start().await;
    let env = TestEnv::builder()
        .workers(2)
        .server_toml(&format!("sweep_interval = \"{sweep}\""))
        .sources_toml(&format!(
            "[[notifications]]\nname = \"idle\"\nurl = \"{}\"\nformat = \"slack\"\n",
            receiver.url("/idle")
        ))
        .without_pier()
        .start()
        .await;
    let proxy = PgProxy::start(&env.db.url).await;
    let config = env
        .config_toml()
        .replace(&env.db.url, &proxy.url_for(&env.db.url));
    let pier = PierCommand::new(&config).start().await;
    pier.wait_for_log("pier running", Duration::from_secs(10))
        .await;
    (env, proxy, pier, receiver)
}

#[tokio::test]
async fn an_idle_pier_with_two_workers_sends_no_statement_between_sweeps() {
    let (env, proxy, pier, mut receiver) = proxied_pier("1h").await;
    // Two seconds without a statement: the workers' first claims and LISTENs, the
    // sender's and poller's first looks come after "pier running", and on a loaded
    // machine one can come more than half a second after the last (CI saw 11 of them
    // counted as idle traffic after a 500 ms quiet span).
    let at_start = settled(&proxy, Duration::from_secs(2)).await;
    assert!(
        at_start > 0,
        "the relay counts statements (migrate, LISTEN, claims)"
    );
    let idle = statements_during(&proxy, Duration::from_secs(5)).await;
    assert_eq!(idle, 0, "statements sent in 5 s by an idle pier");

    // After a deployment the workers go back to sleep: nothing runs, so nothing to poll.
    let busy_from = proxy.statements();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let final_state = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(final_state["state"], "succeeded");
    // The outcome was notified, then the sender went back to sleep too.
    let sent = receiver.next(Duration::from_secs(10)).await;
    assert!(sent.is_some_and(|h| h.path == "/idle"));
    // The sender records the answer after the receiver has it: on a loaded machine that
    // write can come more than a quiet span later, and would be counted as idle traffic.
    notification_recorded_as_sent(&env).await;
    let after = settled(&proxy, Duration::from_secs(1)).await;
    assert!(after > busy_from, "the deployment went through the relay");
    let idle = statements_during(&proxy, Duration::from_secs(5)).await;
    assert_eq!(
        idle, 0,
        "statements sent in 5 s after the deployment finished"
    );
    drop(pier);
    env.cleanup().await;
}

#[tokio::test]
async fn a_short_sweep_costs_a_bounded_handful_of_statements_per_sweep() {
    let (env, proxy, pier, _receiver) = proxied_pier("1s").await;
    // Five sweeps: each is a reconcile pass (a few reads) and one claim and one wake-up
    // query per worker. A polling loop would send hundreds.
    let sent = statements_during(&proxy, Duration::from_secs(5)).await;
    eprintln!("statements in 5 s with a 1 s sweep: {sent}");
    assert!(sent > 0, "the sweep runs");
    assert!(sent <= 6 * 10, "{sent} statements in 5 s");
    drop(pier);
    env.cleanup().await;
}

#[tokio::test]
async fn a_burst_of_pushes_for_an_app_being_deployed_sends_no_idle_worker_to_claim() {
    let (env, proxy, pier, _receiver) = proxied_pier("1h").await;
    // The app is being deployed: v1 answers its health check only after 8 s.
    env.push(&TestImage::slow_start("v1", 8), "main").await;
    wait_until("v1's health check runs", DEPLOY, || async {
        let probing: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM deployment_steps WHERE step = 'health' AND state = 'started'",
        )
        .fetch_one(&env.db.pool)
        .await
        .ok()?;
        (probing == 1).then_some(())
    })
    .await;
    // Twenty pushes for the app meanwhile: each is one statement, and each one's NOTIFY
    // used to send the idle worker to claim (nothing: the app is busy) and to read when
    // to wake next, three statements per push in all.
    const PUSHES: u64 = 20;
    let before = proxy.statements();
    let mut last = String::new();
    for n in 0..PUSHES {
        let body = format!(
            r#"{{"repository":"{}/{}","tag":"main","digest":"sha256:{:064x}","id":"burst-{n}"}}"#,
            env.registry_host(),
            env.repo(),
            n + 1
        );
        let (status, answer) = env.post_generic(body.as_bytes()).await;
        assert_eq!(status, 202, "{answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        last = answer["deployments"][0]["id"].as_str().unwrap().to_owned();
    }
    let sent = proxy.statements() - before;
    eprintln!("statements during {PUSHES} pushes for a busy app: {sent}");
    // The deliveries, plus room for a heartbeat of the deployment in hand.
    assert!(sent <= PUSHES + 3, "{sent} statements for {PUSHES} pushes");
    // Nothing is stranded: once v1 is done, the newest push is taken up at once.
    let final_state = env.deployment_final(&last, DEPLOY).await;
    assert_ne!(final_state["state"], "superseded", "{final_state}");
    drop(pier);
    env.cleanup().await;
}
