//! HTTP health inside a rollout across three real engines: the host's (`local`),
//! one in a network namespace over TLS (`e2`), one over SSH (`e3`). Each remote app
//! publishes on its own host's loopback, which Pier cannot reach, so each remote engine's
//! `health` step is probed by the `pier proxy --target` running on that host (inside its
//! namespace); `local`'s is probed by Pier itself. A version whose health fails on one host
//! only rolls the whole rollout back.

use std::time::Duration;

use crate::support::rollout::*;
use crate::support::*;
use serde_json::Value;

const REMOTES: [&str; 2] = ["e2", "e3"];
/// What `v1` may take to answer again on an engine once the deployment is final.
const ANSWER: Duration = Duration::from_secs(30);

/// A fleet with a proxy on each remote host and an app with HTTP health (`/health`, which
/// the test images serve) of `timeout`; e3's engine gives its containers `nofile=1111`.
async fn fleet_with_http_health(timeout: &str) -> Fleet {
    Fleet::start(FleetSpec {
        proxies: true,
        app_toml: format!("health = {{ path = \"/health\", timeout = \"{timeout}\" }}\n"),
        third_dockerd_args: vec!["--default-ulimit", "nofile=1111:1111"],
        ..FleetSpec::default()
    })
    .await
}

/// The probe requests of a deployment, as the proxies left them: (target, state,
/// taken_by), by target then age.
async fn probe_rows(fleet: &Fleet, deployment: &str) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as(
        "SELECT target, state, taken_by FROM remote_probes
         WHERE deployment_id = $1::uuid ORDER BY target, requested_at",
    )
    .bind(deployment)
    .fetch_all(&fleet.env.db.pool)
    .await
    .expect("read remote_probes")
}

/// Waits until every engine answers `version` on its own host's loopback.
async fn wait_answering(fleet: &Fleet, version: &str) {
    for target in ["local", "e2", "e3"] {
        wait_until(&format!("{target} answers {version}"), ANSWER, || async {
            (fleet.version_on(target).await.as_deref() == Some(version)).then_some(())
        })
        .await;
    }
}

/// `target`'s health step probed over HTTP, on that host by its own proxy: the journaled
/// intent names the target, the result or error names that proxy's pid.
fn assert_probed_by_its_proxy(fleet: &Fleet, d: &Value, target: &str) {
    let health = step_of(d, "health", target);
    assert_eq!(health["intent"]["mode"], "http", "{health:#}");
    assert_eq!(health["intent"]["via"], target, "{health:#}");
    let said = match health["state"].as_str() {
        Some("succeeded") => health["result"]["detail"].as_str(),
        _ => health["error"].as_str(),
    }
    .unwrap_or_default();
    let pid = fleet.proxy_pid(target);
    assert!(
        said.contains(&format!("(probed by pier proxy pid {pid} "))
            && said.contains(&format!("for target {target})")),
        "{target} was probed by the proxy on its host (pid {pid}): {health:#}"
    );
}

#[tokio::test]
async fn http_health_on_every_engine_of_a_rollout_is_probed_on_its_own_host() {
    let fleet = fleet_with_http_health("30s").await;
    let v1 = fleet.env.push(&TestImage::healthy("v1"), "main").await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], v1.as_str());
    wait_answering(&fleet, "v1").await;
    fleet.assert_serving(&v1, "v1").await;

    // Pier probes local itself: no proxy named, the answer is its own.
    let local = step_of(&d, "health", "local");
    assert_eq!(local["state"], "succeeded", "{d:#}");
    assert_eq!(local["intent"]["mode"], "http", "{local:#}");
    assert!(local["intent"].get("via").is_none(), "{local:#}");
    let detail = local["result"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("answered 200"), "{local:#}");
    assert!(!detail.contains("probed by"), "{local:#}");
    for target in REMOTES {
        assert_eq!(step_of(&d, "health", target)["state"], "succeeded", "{d:#}");
        assert_probed_by_its_proxy(&fleet, &d, target);
    }

    // One request per remote engine, none for local, each taken by that host's proxy.
    let rows = probe_rows(&fleet, d["id"].as_str().unwrap()).await;
    let targets: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(targets, REMOTES, "{rows:?}");
    for (target, state, by) in &rows {
        assert_eq!(state, "healthy", "{rows:?}");
        let by = by.as_deref().unwrap_or_default();
        let pid = fleet.proxy_pid(target);
        assert!(
            by.starts_with(&format!("pier proxy pid {pid} "))
                && by.ends_with(&format!(" for target {target}")),
            "{rows:?}"
        );
    }
    fleet.cleanup().await;
}

#[tokio::test]
async fn a_version_failing_http_health_on_the_third_engine_rolls_the_rollout_back() {
    let fleet = fleet_with_http_health("10s").await;
    let v1 = fleet.env.push(&TestImage::healthy("v1"), "main").await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    wait_answering(&fleet, "v1").await;
    let before = fleet.assert_serving(&v1, "v1").await;

    // `/health` answers 404 where the file limit is 1111: on e3 only.
    let v2 = fleet
        .env
        .push(&TestImage::http_unhealthy_at_nofile("v2", 1111), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "failed", "{d:#}");
    assert_eq!(d["resolved_digest"], v2.as_str());
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains("engine e3"), "names the engine: {d:#}");
    assert!(
        error.contains("not healthy within 10s") && error.contains("/health answered 404"),
        "names the reason: {d:#}"
    );
    assert!(
        error.contains(&format!("pid {} ", fleet.proxy_pid("e3"))),
        "names the proxy that probed: {d:#}"
    );

    // local and e2 passed their health and switched, then were switched back.
    assert_eq!(
        step_of(&d, "health", "local")["state"],
        "succeeded",
        "{d:#}"
    );
    assert_eq!(step_of(&d, "health", "e2")["state"], "succeeded", "{d:#}");
    assert_probed_by_its_proxy(&fleet, &d, "e2");
    for target in ["local", "e2"] {
        assert_eq!(step_of(&d, "switch", target)["state"], "succeeded", "{d:#}");
        assert_eq!(step_of(&d, "revert", target)["state"], "succeeded", "{d:#}");
    }
    assert_eq!(step_of(&d, "health", "e3")["state"], "failed", "{d:#}");
    assert_probed_by_its_proxy(&fleet, &d, "e3");
    assert!(
        find_step(&d, "switch", "e3").is_none(),
        "e3 never switched: {d:#}"
    );

    // The proxies recorded what they saw: healthy on e2, not on e3.
    let rows = probe_rows(&fleet, d["id"].as_str().unwrap()).await;
    let states = |t: &str| -> Vec<&str> {
        rows.iter()
            .filter(|r| r.0 == t)
            .map(|r| r.1.as_str())
            .collect()
    };
    assert_eq!(states("e2"), ["healthy"], "{rows:?}");
    assert_eq!(states("e3"), ["failed"], "{rows:?}");
    assert!(states("local").is_empty(), "{rows:?}");

    // Every engine serves v1 again, from the containers that served it before.
    wait_answering(&fleet, "v1").await;
    let after = fleet.assert_serving(&v1, "v1").await;
    assert_eq!(
        before, after,
        "the previous generation's containers run again"
    );
    for target in ["local", "e2", "e3"] {
        assert_eq!(
            fleet.serving_generation(target).await.as_deref(),
            Some(v1.as_str()),
            "{target}'s serving generation is v1 again"
        );
    }
    fleet.cleanup().await;
}
