//! Operator actions (rollback that pins, unpin, cancel, stop) through the JSON API
//! and the CLI, against the real engine, registry and Postgres.

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};

const DEPLOY: Duration = Duration::from_secs(60);

/// `POST /api/<path>` with `token` as bearer; `(status, json)`.
async fn api_post(env: &TestEnv, path: &str, token: &str, body: Value) -> (u16, Value) {
    let (status, text) = http_post(
        &env.pier_url(&format!("/api{path}")),
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
        ],
        body.to_string(),
    )
    .await
    .unwrap_or_else(|| panic!("no answer to POST /api{path}"));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn id_of(v: &Value) -> String {
    v["deployment"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no deployment id in {v:#}"))
        .to_owned()
}

/// The deployment once final, through the API's long-poll (`?wait=`).
async fn long_poll(env: &TestEnv, id: &str, wait: &str) -> Value {
    let url = env.pier_url(&format!("/api/deployments/{id}?wait={wait}"));
    let resp = reqwest::Client::new()
        .get(&url)
        .bearer_auth(&env.admin_token)
        .timeout(Duration::from_secs(90))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.expect("json")
}

#[tokio::test]
async fn a_rollback_pins_the_app_so_pushes_do_not_move_it_until_it_is_unpinned() {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    let token = env.admin_token.clone();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    env.latest_final_of(&app, &[first["id"].as_str().unwrap()], DEPLOY)
        .await;

    // A wrong token is 401 on every admin route, and nothing happens.
    let some_id = first["id"].as_str().unwrap();
    for path in [
        format!("/apps/{app}/deploy"),
        format!("/apps/{app}/rollback"),
        format!("/apps/{app}/unpin"),
        format!("/deployments/{some_id}/cancel"),
    ] {
        let (code, _) = api_post(&env, &path, "wrong-token", json!({ "digest": v1 })).await;
        assert_eq!(code, 401, "POST {path}");
    }
    for path in [
        format!("/apps/{app}/rollback-choices"),
        "/deliveries".to_owned(),
        "/notifications".to_owned(),
        format!("/deployments/{some_id}?wait=1s"),
    ] {
        let url = env.pier_url(&format!("/api{path}"));
        let resp = reqwest::Client::new()
            .get(&url)
            .bearer_auth("wrong-token")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 401, "GET {path}");
    }
    assert_eq!(env.deployment_rows(&app).await.len(), 2);

    // Refusals next: each says why, and none pins or queues anything.
    let (code, _) = api_post(
        &env,
        &format!("/apps/{app}/rollback"),
        "wrong-token",
        json!({ "digest": v1 }),
    )
    .await;
    assert_eq!(code, 401);
    let (code, body) = api_post(&env, "/apps/nope/rollback", &token, json!({ "digest": v1 })).await;
    assert_eq!(code, 404, "{body}");
    let (code, body) = api_post(
        &env,
        &format!("/apps/{app}/rollback"),
        &token,
        json!({ "digest": "v1" }),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    let never = format!("sha256:{}", "ab".repeat(32));
    let (code, body) = api_post(
        &env,
        &format!("/apps/{app}/rollback"),
        &token,
        json!({ "digest": never }),
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("never deployed successfully"),
        "{body}"
    );
    let (code, body) = api_post(&env, &format!("/apps/{app}/unpin"), &token, json!({})).await;
    assert_eq!(code, 409, "not pinned yet: {body}");

    // The rollback's choices are the digests that succeeded, newest first.
    let (code, choices) = env.api_get(&format!("/apps/{app}/rollback-choices")).await;
    assert_eq!(code, 200);
    let digests: Vec<&str> = choices["digests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["digest"].as_str().unwrap())
        .collect();
    assert_eq!(digests, [v2.as_str(), v1.as_str()]);
    assert!(choices["pin"].is_null());

    // Roll back to v1: it deploys, and the app is pinned there, by the API token.
    let (code, body) = api_post(
        &env,
        &format!("/apps/{app}/rollback"),
        &token,
        json!({ "digest": v1 }),
    )
    .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["pin"]["digest"], v1.as_str());
    assert_eq!(body["pin"]["by"], "api token");
    let rollback = id_of(&body);
    let done = long_poll(&env, &rollback, "50s").await;
    assert_eq!(done["final"], true, "{done:#}");
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["trigger"], "rollback");
    assert_eq!(done["requested_by"], "api token");
    assert_eq!(done["resolved_digest"], v1.as_str());
    env.wait_app_version("v1", Duration::from_secs(10)).await;

    // A push to the pinned app is recorded, says it is pinned, and does not move it.
    let v3 = env.push(&TestImage::healthy("v3"), "main").await;
    let pinned = wait_until("the push is recorded as pinned", DEPLOY, || async {
        let (_, v) = env.api_get("/deliveries?verdict=pinned").await;
        v["deliveries"].as_array()?.first().cloned()
    })
    .await;
    assert!(
        pinned["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("pinned to {v1}")),
        "{pinned:#}"
    );
    assert_eq!(pinned["deployments"], json!([]));
    let rows = env.deployment_rows(&app).await;
    assert_eq!(rows.len(), 3, "no deployment for the push: {rows:#?}");
    assert_eq!(env.running_digests_of(&app).await, vec![v1.clone()]);
    // While pinned, a deploy of another digest is refused; the pinned one may be redeployed.
    let (code, body) = api_post(
        &env,
        &format!("/apps/{app}/deploy"),
        &token,
        json!({ "digest": v3 }),
    )
    .await;
    assert_eq!(code, 409, "{body}");

    // Unpin: the pin's end is recorded, and the next push deploys.
    let (code, body) = api_post(&env, &format!("/apps/{app}/unpin"), &token, json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["unpinned"]["digest"], v1.as_str());
    let by: (Option<String>,) = sqlx::query_as("SELECT unpinned_by FROM pins WHERE app = $1")
        .bind(&app)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(by.0.as_deref(), Some("api token"));
    env.push(&TestImage::healthy("v4"), "main").await;
    env.wait_app_version("v4", DEPLOY).await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_queued_deployment_is_cancelled_and_a_running_one_stops_at_its_next_step_leaving_the_old_one_serving()
 {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    let token = env.admin_token.clone();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;

    // v2 takes 12 s to answer: its deployment sits in `health`.
    env.push(&TestImage::slow_start("v2", 12), "main").await;
    let running = wait_until("v2 is in its health step", DEPLOY, || async {
        let (_, a) = env.api_get(&format!("/apps/{app}")).await;
        let d = a["latest_deployment"].clone();
        (d["id"] != first["id"] && d["state"] == "running").then_some(())?;
        let id = d["id"].as_str()?.to_owned();
        let (_, full) = env.api_get(&format!("/deployments/{id}")).await;
        full["steps"]
            .as_array()?
            .iter()
            .any(|s| s["step"] == "health")
            .then_some(id)
    })
    .await;

    // A redeploy queues behind it; cancelling it ends it at once, before it ran.
    let (code, body) = api_post(&env, &format!("/apps/{app}/deploy"), &token, json!({})).await;
    assert_eq!(code, 202, "{body}");
    let queued = id_of(&body);
    let (code, body) = api_post(
        &env,
        &format!("/deployments/{queued}/cancel"),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(
        (code, body["result"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    let (_, q) = env.api_get(&format!("/deployments/{queued}")).await;
    assert_eq!(q["state"], "cancelled");
    assert_eq!(q["outcome"], "cancelled by api token before it started");
    assert_eq!(q["steps"], json!([]));

    // Stop the running one: it stops at its next step boundary and ends `cancelled`.
    let (code, body) = api_post(
        &env,
        &format!("/deployments/{running}/cancel"),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(
        (code, body["result"].as_str()),
        (202, Some("stop_requested")),
        "{body}"
    );
    let asked = Instant::now();
    let done = long_poll(&env, &running, "28s").await;
    assert_eq!(done["final"], true, "{done:#}");
    assert!(
        asked.elapsed() < Duration::from_secs(28),
        "the long-poll answered at the change"
    );
    assert_eq!(done["state"], "cancelled", "{done:#}");
    assert_eq!(done["cancel_requested_by"], "api token");
    // The journal says where it stopped: the step after `health`, never begun for real.
    let steps = done["steps"].as_array().unwrap();
    let stopped = steps
        .iter()
        .find(|s| s["state"] == "failed")
        .expect("a failed step");
    assert_eq!(stopped["step"], "switch", "{done:#}");
    assert!(
        stopped["error"]
            .as_str()
            .unwrap()
            .contains("stopped before this step, as api token asked")
    );
    assert!(
        steps
            .iter()
            .any(|s| s["step"] == "rollback" && s["state"] == "succeeded"),
        "{done:#}"
    );
    // The previous generation serves again, and the candidate is gone.
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(env.running_digests_of(&app).await, vec![v1.clone()]);
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    let (_, a) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(a["generation"]["digest"], v1.as_str());

    // Both have ended: cancelling again is a conflict; an unknown one is 404.
    let (code, _) = api_post(
        &env,
        &format!("/deployments/{running}/cancel"),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(code, 409);
    let (code, _) = api_post(
        &env,
        &format!("/deployments/{}/cancel", uuid::Uuid::new_v4()),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(code, 404);
    env.cleanup().await;
}

#[tokio::test]
async fn the_cli_rolls_back_and_waits_for_the_outcome() {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;

    let out = env.pier().run_cli(&["rollback", &app, &v1, "--wait"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("succeeded"), "{stdout}");
    env.wait_app_version("v1", Duration::from_secs(5)).await;
    let pinned_by: (String,) = sqlx::query_as("SELECT pinned_by FROM pins WHERE app = $1")
        .bind(&app)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    // The CLI is a client of the API: recorded by the token it carried.
    assert_eq!(pinned_by.0, "api token");

    // `deploy --wait` of a pinned app redeploys the pinned digest and waits for it.
    let out = env.pier().run_cli(&["deploy", &app, "--wait"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = env.deployment_rows(&app).await;
    let last = rows.last().unwrap();
    assert_eq!(
        (last.state.as_str(), last.resolved_digest.as_deref()),
        ("succeeded", Some(v1.as_str()))
    );

    let out = env.pier().run_cli(&["unpin", &app]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A digest that never succeeded is refused, with the reason, and nothing is queued.
    let never = format!("sha256:{}", "cd".repeat(32));
    let out = env.pier().run_cli(&["rollback", &app, &never]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("never deployed successfully"));
    assert_eq!(env.deployment_rows(&app).await.len(), rows.len());
    env.cleanup().await;
}

/// The value of the first sample of `name` whose labels include every one of `labels`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn metrics_scraped_after_a_deployment_show_its_delivery_outcome_steps_and_the_queue() {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded");

    let app_label = format!("app=\"{app}\"");
    // The worker counts a deployment just after it commits it final: scrape until the
    // count is there (it must come, within the deadline), then check everything at once.
    let m = wait_until("the finished deployment is counted", DEPLOY, || async {
        let (code, m) = http_get(&env.pier_url("/metrics")).await?;
        assert_eq!(code, 200);
        let done = &[app_label.as_str(), "state=\"succeeded\""];
        sample(&m, "pier_deployments_finished_total", done).map(|_| m)
    })
    .await;
    assert!(
        sample(
            &m,
            "pier_deliveries_total",
            &["source=\"local\"", "verdict=\"queued\""]
        ) >= Some(1.0),
        "{m}"
    );
    assert!(
        sample(&m, "pier_deliveries_total", &["verdict=\"ignored\""]) >= Some(1.0),
        "blob events: {m}"
    );
    assert_eq!(
        sample(
            &m,
            "pier_deployments_finished_total",
            &[&app_label, "state=\"succeeded\""]
        ),
        Some(1.0),
        "{m}"
    );
    for step in [
        "resolve", "pull", "create", "start", "health", "switch", "retire",
    ] {
        let step = format!("step=\"{step}\"");
        assert_eq!(
            sample(
                &m,
                "pier_step_duration_seconds_count",
                &[&step, "result=\"succeeded\""]
            ),
            Some(1.0),
            "{step}: {m}"
        );
        assert!(
            sample(
                &m,
                "pier_step_duration_seconds_bucket",
                &[&step, "le=\"+Inf\""]
            )
            .is_some(),
            "a histogram, not a summary: {m}"
        );
    }
    assert_eq!(
        sample(&m, "pier_queue_depth", &["state=\"queued\""]),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "pier_queue_depth", &["state=\"running\""]),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "pier_lease_takeovers_total", &[]),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "pier_notification_failures_total", &[]),
        Some(0.0),
        "{m}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_stop_interrupted_by_a_crash_during_its_rollback_still_ends_cancelled_with_the_old_one_serving()
 {
    let mut env = TestEnv::start().await;
    let app = env.app().to_owned();
    let token = env.admin_token.clone();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    // This Pier dies the moment the stopped deployment's rollback begins.
    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", "rollback:before"))
        .await;

    env.push(&TestImage::slow_start("v2", 8), "main").await;
    let running = wait_until("v2 is in its health step", DEPLOY, || async {
        let (_, a) = env.api_get(&format!("/apps/{app}")).await;
        let d = a["latest_deployment"].clone();
        (d["id"] != first["id"] && d["state"] == "running").then_some(())?;
        let id = d["id"].as_str()?.to_owned();
        let (_, full) = env.api_get(&format!("/deployments/{id}")).await;
        full["steps"]
            .as_array()?
            .iter()
            .any(|s| s["step"] == "health")
            .then_some(id)
    })
    .await;
    let (code, _) = api_post(
        &env,
        &format!("/deployments/{running}/cancel"),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(code, 202);
    env.pier_mut()
        .wait_dead("pier aborts at the rollback", DEPLOY)
        .await;
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;

    // Resumed from the journal: the recorded stop is honoured, not read as a failure.
    let done = long_poll(&env, &running, "28s").await;
    assert_eq!(done["state"], "cancelled", "{done:#}");
    let steps = done["steps"].as_array().unwrap();
    assert!(
        steps
            .iter()
            .any(|s| s["step"] == "switch" && s["state"] == "failed"),
        "{done:#}"
    );
    assert!(
        steps
            .iter()
            .any(|s| s["step"] == "rollback" && s["state"] == "succeeded"),
        "{done:#}"
    );
    env.wait_app_version("v1", Duration::from_secs(20)).await;
    assert_eq!(env.running_digests_of(&app).await, vec![v1]);
    env.cleanup().await;
}

/// A CI job waits for the outcome with one `?wait=60s`, even when the deployment takes
/// longer than the server's `request_timeout` (2 s here; v1 needs about 6 s to answer).
#[tokio::test]
async fn the_long_poll_waits_past_the_request_timeout_until_the_deployment_is_final() {
    let env = TestEnv::builder()
        .server_toml("request_timeout = \"2s\"")
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::slow_start("v1", 6), "main").await;
    let id = wait_until("the push queued a deployment", DEPLOY, || async {
        let (_, a) = env.api_get(&format!("/apps/{app}")).await;
        a["latest_deployment"]["id"].as_str().map(str::to_owned)
    })
    .await;
    let done = long_poll(&env, &id, "60s").await;
    assert_eq!(done["final"], true, "{done:#}");
    assert_eq!(done["state"], "succeeded", "{done:#}");
    env.cleanup().await;
}

/// A stop that lands before `stop_old` (asked while `create` ran, honoured when the resumed
/// deployment reaches `stop_old`) journals the stop in that step's place. The rollback
/// then has no old generation to start again, the old one never stopped and still serves,
/// and the candidate is removed: before, it read the stop's record as the step's own
/// intent and the rollback failed.
#[tokio::test]
async fn a_stop_asked_while_the_candidate_is_created_ends_cancelled_at_stop_old() {
    let mut env = TestEnv::builder().lease("3s").start().await;
    let app = env.app().to_owned();
    let token = env.admin_token.clone();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    env.pier_mut()
        .restart_with(|c| c.env("PIER_PAUSE_AT", "create:after"))
        .await;

    env.push(&TestImage::healthy("v2"), "main").await;
    env.pier()
        .wait_for_log("PIER_PAUSE_AT reached", DEPLOY)
        .await;
    let running = env
        .deployment_rows(&app)
        .await
        .pop()
        .expect("v2's deployment");
    assert_ne!(Some(running.id.as_str()), first["id"].as_str());
    // The paused process holds a worker thread for good, so the stop is asked of Pier's
    // web side served by this test on the same database, as another `pier serve` would.
    let web = web_only(&env).await;
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/api/deployments/{}/cancel",
            web.base, running.id
        ))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .expect("the web side answers");
    assert_eq!(resp.status().as_u16(), 202);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["result"], "stop_requested", "{body}");
    env.pier_mut().kill();
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_PAUSE_AT"))
        .await;

    let done = long_poll(&env, &running.id, "28s").await;
    assert_eq!(done["state"], "cancelled", "{done:#}");
    let steps = done["steps"].as_array().unwrap();
    let stopped = steps
        .iter()
        .find(|s| s["state"] == "failed")
        .expect("a failed step");
    assert_eq!(stopped["step"], "stop_old", "{done:#}");
    assert!(
        steps
            .iter()
            .any(|s| s["step"] == "rollback" && s["state"] == "succeeded"),
        "{done:#}"
    );
    env.wait_app_version("v1", Duration::from_secs(20)).await;
    assert_eq!(env.running_digests_of(&app).await, vec![v1]);
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}
