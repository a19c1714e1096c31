//! An app's log where it runs besides the host's engine: on a remote engine over TLS
//! (a real dockerd in a network namespace, with client certificates) and as a service on a
//! two-node swarm (through the manager, every task's), both followed by `pier logs -f` as
//! the app writes. One lean test per kind: the log itself is tested in
//! `tests/deploy/logs.rs`.

use std::time::Duration;

use crate::support::swarm::*;
use crate::support::*;

const DEPLOYED_WITHIN: Duration = Duration::from_secs(180);
const FOLLOWED_WITHIN: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_log_on_a_remote_engine_over_tls_is_followed_with_its_secrets_masked() {
    let builder = TestEnv::builder()
        .no_health()
        .app(|a| a.extra_toml = "targets = [\"tls1\"]".into())
        .without_pier();
    let mut env = talking_app(builder).start().await;
    let mut remote = ExtraEngine::builder()
        .forward(env.registry_port)
        .start()
        .await;
    env.add_sources_toml(&remote.tls_target_toml("tls1"));
    env.start_pier().await;
    env.push(&TestImage::with_healthcheck("v1"), "main").await;
    let d = env.latest_final_of(env.app(), &[], DEPLOYED_WITHIN).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");

    let args = [env.app(), "--target", "tls1", "-f", "-n", "100"];
    let mut follow = PierLogs::start(&env.pier_url(""), &env.admin_token, &args);
    let no_secret = |line: &str| assert!(!line.contains(LOG_SECRET), "{line}");
    let first = follow.tick_above(0, FOLLOWED_WITHIN, no_secret).await;
    follow
        .tick_above(first + 1, FOLLOWED_WITHIN, no_secret)
        .await;
    assert!(follow.is_running(), "it follows until stopped");
    let stderr = follow.stop().await;
    assert!(stderr.contains("oops on stderr"), "{stderr}");
    env.cleanup().await;
    remote.cleanup();
}

/// `GET /api/apps/{app}/logs` read once: status and body.
async fn log_text(env: &TestEnv, app: &str) -> (u16, String) {
    let resp = http_client()
        .get(env.pier_url(&format!("/api/apps/{app}/logs")))
        .bearer_auth(&env.admin_token)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("the log API answers");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swarm_services_log_holds_every_tasks_lines_and_is_followed() {
    let s = SwarmEnv::start_with(
        "replicas = 2, update = { monitor = \"2s\" }",
        &talking_toml(),
        &[],
    )
    .await;
    s.env.push(&TestImage::healthy("v1"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let app = s.env.app().to_owned();

    // Both tasks' lines, through the manager: each wrote one line on stderr.
    let (status, lines) = wait_until("both tasks' stderr lines", SWARM_DEPLOY, || async {
        let (status, lines) = log_text(&s.env, &app).await;
        let both = lines.matches(r#""stream":"stderr","#).count() == 2;
        (status != 200 || both).then_some((status, lines))
    })
    .await;
    assert_eq!(status, 200, "{lines}");
    assert!(!lines.contains(r#""error""#), "{lines}");

    let args = [app.as_str(), "--target", "swarm", "-f", "-n", "5"];
    let mut follow = PierLogs::start(&s.env.pier_url(""), &s.env.admin_token, &args);
    let first = follow.tick_above(0, FOLLOWED_WITHIN, |_| {}).await;
    follow.tick_above(first + 1, FOLLOWED_WITHIN, |_| {}).await;
    assert!(follow.is_running(), "it follows until stopped");
    follow.stop().await;
    let (status, refused) = s
        .env
        .api_get(&format!(
            "/apps/{app}/logs?deployment={}",
            d["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 400, "a swarm's log is the service's: {refused}");
    s.cleanup().await;
}
