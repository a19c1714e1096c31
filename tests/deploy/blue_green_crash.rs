//! Every point of the blue-green steps where Pier can die: aborted right before and right
//! after each side effect, then restarted. The deployment finishes, exactly one generation
//! serves through the proxy, and nothing is left behind.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// A blue-green app with `route` lines, its proxy, and v1 deployed and serving.
async fn serving_v1(route: &str) -> (TestEnv, PierProcess, String, String) {
    let env = TestEnv::builder()
        .lease("3s")
        .health_timeout(Duration::from_secs(10))
        .app(|a| a.blue_green(route))
        .start()
        .await;
    let proxy = env.start_proxy().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    (env, proxy, app, v1)
}

async fn dies_at(point: &str) {
    let (mut env, _proxy, app, _) = serving_v1("soak = \"1s\"\ndrain_timeout = \"5s\"").await;

    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", point))
        .await;
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.pier_mut()
        .wait_dead(&format!("pier aborts at {point}"), DEPLOY)
        .await;
    let crashed = env.deployment_rows(&app).await.pop().unwrap();
    assert_eq!(crashed.state, "running", "{crashed:?}");

    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["resolved_digest"], v2.as_str());
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    let all = env.engine.containers_of_app(&app).await;
    assert_eq!(
        all.len(),
        1,
        "one generation after resume at {point}: {all:#?}"
    );
    assert_eq!(env.running_digests_of(&app).await, vec![v2.clone()]);
    let names: Vec<String> = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "resolve", "pull", "verify", "network", "create", "start", "health", "switch",
            "applied", "drain", "soak", "retire"
        ],
        "{done:#}"
    );
    // The proxy serves the new generation, with no standby left.
    let routes = env.proxy_routes().await;
    let route = routes["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["app"] == app.as_str())
        .unwrap()
        .clone();
    assert!(route["standby"].is_null(), "{route:#}");
    env.cleanup().await;
}

macro_rules! crash_points {
    ($($name:ident => $point:literal),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                dies_at($point).await;
            }
        )*
    };
}

crash_points! {
    abort_after_start => "start:after",
    abort_before_switch => "switch:before",
    abort_after_switch => "switch:after",
    abort_before_applied => "applied:before",
    abort_after_applied => "applied:after",
    abort_before_drain => "drain:before",
    abort_after_drain => "drain:after",
    abort_before_soak => "soak:before",
    abort_after_soak => "soak:after",
    abort_before_retire => "retire:before",
    abort_after_retire => "retire:after",
}

/// v2 dies during its soak; Pier dies at `point` while switching back to v1.
async fn dies_while_reverting(point: &str) {
    let (mut env, _proxy, app, v1) =
        serving_v1("soak = \"9s\"\nsoak_failures = 1\ndrain_timeout = \"5s\"").await;

    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", point))
        .await;
    let load = Load::start(&env.app_url("/version"), 100_000, Duration::from_secs(90));
    env.push(&TestImage::dies_after("v2", 4), "main").await;
    env.pier_mut()
        .wait_dead(&format!("pier aborts at {point}"), DEPLOY)
        .await;
    let crashed = env.deployment_rows(&app).await.pop().unwrap();
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "rolled_back", "{done:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(env.running_digests_of(&app).await, vec![v1.clone()]);
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    let answers = load.finish().await;
    let failed = failures(&answers);
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(5)]
    );
    env.cleanup().await;
}

#[tokio::test]
async fn abort_before_revert() {
    dies_while_reverting("revert:before").await;
}

#[tokio::test]
async fn abort_after_revert() {
    dies_while_reverting("revert:after").await;
}

#[tokio::test]
async fn abort_before_rollback_after_a_revert() {
    dies_while_reverting("rollback:before").await;
}
