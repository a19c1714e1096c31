//! Health and blue-green on a remote engine, for real. The app runs
//! on a real dockerd in its own network namespace, reached over TLS; it publishes on that
//! host's loopback, which Pier cannot reach. `pier proxy --target edge`, run inside the
//! namespace as on that host, takes the health probes the pipeline writes to Postgres and
//! reports the routes it applied and what is in flight, and the pipeline waits on both
//! with LISTEN.

use std::time::{Duration, Instant};

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(120);
const TARGET: &str = "edge";

/// Pier and its database and registry on this host, the first app on `edge`, an extra
/// engine whose namespace reaches the registry and Postgres at their usual addresses.
async fn on_a_remote_engine(change: impl FnOnce(&mut AppSpec)) -> (TestEnv, ExtraEngine) {
    on_a_remote_engine_with(&[], change).await
}

/// The same, with environment for the Pier process (e.g. `PIER_CRASH_AT`).
async fn on_a_remote_engine_with(
    pier_env: &[(&str, &str)],
    change: impl FnOnce(&mut AppSpec),
) -> (TestEnv, ExtraEngine) {
    let mut builder = TestEnv::builder();
    for (k, v) in pier_env {
        builder = builder.pier_env(k, v);
    }
    let mut env = builder
        .without_pier()
        .app(|a| {
            a.extra_toml = format!("targets = [\"{TARGET}\"]");
            change(a);
        })
        .start()
        .await;
    let db = reqwest::Url::parse(&env.pier_database_url).expect("a database URL");
    let remote = ExtraEngine::builder()
        .forward(env.registry_port)
        .forward(db.port().unwrap_or(5432))
        .start()
        .await;
    env.add_sources_toml(&remote.tls_target_toml(TARGET));
    env.start_pier().await;
    (env, remote)
}

/// `pier proxy --target edge` inside the engine's namespace, as it runs on that host.
async fn proxy_on_that_host(env: &TestEnv, remote: &ExtraEngine) -> PierProcess {
    remote.start_proxy(env, TARGET).await
}

/// The deployment with its steps, and the one step named `step`.
async fn step_of(env: &TestEnv, id: &str, step: &str) -> (serde_json::Value, serde_json::Value) {
    let full = env.deployment_final(id, DEPLOY).await;
    let s = full["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["step"] == step))
        .cloned()
        .unwrap_or_else(|| panic!("no {step} step: {full:#}"));
    (full, s)
}

/// The probe requests of a deployment, as the proxy left them: (state, taken_by, attempts).
async fn probe_rows(env: &TestEnv, deployment: &str) -> Vec<(String, Option<String>, Option<i32>)> {
    sqlx::query_as(
        "SELECT state, taken_by, attempts FROM remote_probes
         WHERE deployment_id = $1::uuid ORDER BY requested_at",
    )
    .bind(deployment)
    .fetch_all(&env.db.pool)
    .await
    .expect("read remote_probes")
}

#[tokio::test]
async fn http_health_on_a_remote_engine_is_probed_by_that_hosts_proxy_and_a_failing_version_keeps_the_old_one()
 {
    let (env, remote) =
        on_a_remote_engine(|a| a.health_timeout = Some(Duration::from_secs(8))).await;
    let proxy = proxy_on_that_host(&env, &remote).await;
    let pid = proxy.pid().expect("the proxy runs");
    let port = env.apps[0].publish_port;

    env.push(&TestImage::healthy("v1"), "main").await;
    let first = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    let first_id = first["id"].as_str().unwrap().to_owned();
    let (_, health) = step_of(&env, &first_id, "health").await;
    assert_eq!(health["target"], TARGET, "{health:#}");
    assert_eq!(health["intent"]["via"], TARGET, "{health:#}");
    let detail = health["result"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("(probed by pier proxy pid {pid} "))
            && detail.contains(&format!("for target {TARGET})")),
        "the probes came from the proxy on that host (pid {pid}): {health:#}"
    );
    let probes = health["result"]["probes"].as_u64().unwrap();
    assert!(probes >= 1, "{health:#}");
    let rows = probe_rows(&env, &first_id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, "healthy");
    let by = rows[0].1.as_deref().expect("taken by a proxy");
    assert!(detail.contains(by), "{rows:?} {detail}");
    assert_eq!(rows[0].2, Some(probes as i32));
    // It answers on that host's loopback, not on this one's: nothing was opened for Pier.
    let inside = remote.http_get_inside(port, "/version").await;
    assert_eq!(inside, Some((200, "v1".to_owned())));
    assert!(
        http_get(&format!("http://127.0.0.1:{port}/version"))
            .await
            .is_none()
    );

    // A version whose health endpoint is missing fails at health, with that proxy's reason.
    env.push(&TestImage::no_health_file("v2"), "main").await;
    let second = env.latest_final_of(env.app(), &[&first_id], DEPLOY).await;
    assert_eq!(second["state"], "failed", "{second:#}");
    let second_id = second["id"].as_str().unwrap().to_owned();
    let (full, health) = step_of(&env, &second_id, "health").await;
    assert_eq!(health["state"], "failed", "{full:#}");
    let error = health["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("not healthy within 8s")
            && error.contains(&format!("127.0.0.1:{port}/health answered 404"))
            && error.contains(&format!("pid {pid} ")),
        "{full:#}"
    );
    let rows = probe_rows(&env, &second_id).await;
    assert!(rows.iter().any(|r| r.0 == "failed"), "{rows:?}");
    // The old version was restored on that engine and answers there.
    let back = wait_until(
        "v1 answers on that host again",
        Duration::from_secs(30),
        || async {
            remote
                .http_get_inside(port, "/version")
                .await
                .filter(|(s, b)| *s == 200 && b == "v1")
        },
    )
    .await;
    assert_eq!(back.1, "v1");
    env.cleanup().await;
}

#[tokio::test]
async fn without_a_proxy_for_the_target_the_deployment_fails_at_health_within_its_deadline() {
    let (env, _remote) = on_a_remote_engine(|_| {}).await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let done = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    let (full, health) = step_of(&env, done["id"].as_str().unwrap(), "health").await;
    let error = health["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "no pier proxy for target {TARGET} took the probe within 10s"
        )),
        "{full:#}"
    );
    let at = |k: &str| chrono::DateTime::parse_from_rfc3339(health[k].as_str().unwrap()).unwrap();
    let waited = at("finished_at") - at("started_at");
    assert!(
        waited >= chrono::Duration::seconds(9) && waited <= chrono::Duration::seconds(25),
        "the health step waited {waited}: {health:#}"
    );
    let rows = probe_rows(&env, done["id"].as_str().unwrap()).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, "lapsed", "{rows:?}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_crash_after_the_probe_request_reads_back_the_outcome_that_hosts_proxy_recorded() {
    let (mut env, remote) =
        on_a_remote_engine_with(&[("PIER_CRASH_AT", "health:requested")], |_| {}).await;
    let _proxy = proxy_on_that_host(&env, &remote).await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let pier = env.pier_mut();
    wait_until("pier aborts after asking for the probe", DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    assert!(
        pier.log().contains("PIER_CRASH_AT"),
        "{}",
        tail(&pier.log(), 30)
    );
    let crashed = env.deployment_rows(env.app()).await.pop().unwrap();
    assert_eq!(crashed.state, "running", "{crashed:?}");
    // The proxy on that host probes while Pier is down, and records the outcome.
    wait_until(
        "the proxy records the outcome",
        Duration::from_secs(30),
        || async {
            let rows = probe_rows(&env, &crashed.id).await;
            (rows.len() == 1 && rows[0].0 == "healthy").then_some(())
        },
    )
    .await;

    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let (_, health) = step_of(&env, &crashed.id, "health").await;
    assert_eq!(health["state"], "succeeded", "{health:#}");
    assert_eq!(health["replays"], 1, "{health:#}");
    // Read back, not asked again: one request, the one the proxy answered.
    let rows = probe_rows(&env, &crashed.id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, "healthy");
    let inside = remote
        .http_get_inside(env.apps[0].publish_port, "/version")
        .await;
    assert_eq!(inside, Some((200, "v1".to_owned())));
    env.cleanup().await;
}

#[tokio::test]
async fn blue_green_on_a_remote_engine_through_that_hosts_proxy_drops_no_request_under_load() {
    let (env, remote) = on_a_remote_engine(|a| {
        a.health_timeout = Some(Duration::from_secs(10));
        a.blue_green("soak = \"2s\"\ndrain_timeout = \"5s\"");
    })
    .await;
    let _proxy = proxy_on_that_host(&env, &remote).await;
    let port = env.apps[0].publish_port;
    env.push(&TestImage::healthy("v1"), "main").await;
    let first = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    let first_id = first["id"].as_str().unwrap().to_owned();
    wait_until(
        "v1 serves through the proxy on that host",
        Duration::from_secs(20),
        || async {
            remote
                .curl_inside(port, "/version")
                .await
                .filter(|(s, b)| *s == 200 && b == "v1")
        },
    )
    .await;

    let load = remote.load_inside(port);
    wait_until("the load runs", Duration::from_secs(20), || async {
        (load.answers().len() > 20).then_some(())
    })
    .await;
    let started = Instant::now();
    env.push(&TestImage::healthy("v2"), "main").await;
    let second = env.latest_final_of(env.app(), &[&first_id], DEPLOY).await;
    let took = started.elapsed();
    assert_eq!(second["state"], "succeeded", "{second:#}");
    let second_id = second["id"].as_str().unwrap().to_owned();
    wait_until("the load sees v2", Duration::from_secs(20), || async {
        load.answers().iter().any(|a| a == "v2 200").then_some(())
    })
    .await;
    let answers = load.finish();
    let failed: Vec<&String> = answers.iter().filter(|a| !a.ends_with(" 200")).collect();
    eprintln!(
        "{} requests through the proxy on that host during the switch ({took:?}), {} failed",
        answers.len(),
        failed.len()
    );
    assert!(answers.len() > 100, "the load ran: {}", answers.len());
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(10)]
    );
    // Versions only move forward: v1, then v2.
    let first_v2 = answers.iter().position(|a| a == "v2 200").unwrap();
    assert!(
        answers[first_v2..].iter().all(|a| a == "v2 200"),
        "v1 answered after v2"
    );
    assert!(answers[..first_v2].iter().all(|a| a == "v1 200"));

    // Applied and drained were learnt from that proxy's reports, not a local endpoint.
    let (full, applied) = step_of(&env, &second_id, "applied").await;
    assert_eq!(applied["state"], "succeeded", "{full:#}");
    let (_, drain) = step_of(&env, &second_id, "drain").await;
    assert_eq!(drain["state"], "succeeded", "{full:#}");
    assert_eq!(drain["result"]["timed_out"], false, "{drain:#}");
    let reports: Vec<(String, serde_json::Value)> =
        sqlx::query_as("SELECT proxy, routes FROM proxy_reports WHERE target = $1")
            .bind(TARGET)
            .fetch_all(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let version = applied["intent"]["version"].as_i64().unwrap();
    assert!(
        reports[0].1[env.app()].as_i64().unwrap() >= version,
        "{reports:?}"
    );
    env.cleanup().await;
}
