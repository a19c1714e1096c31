//! One app on three real engines: the host's (`local`), one in a network
//! namespace over `tcp://` with TLS client certificates (`e2`), one over `ssh://` (`e3`).
//! A push deploys one pinned digest to all three, batch by batch; a version that fails on
//! the third leaves every engine on the previous digest; an engine that is down fails the
//! rollout before any engine changes. The crash tests are in `engine_rollout_crash.rs`.

use std::time::Duration;

use crate::support::rollout::*;
use crate::support::*;
use serde_json::Value;

#[tokio::test]
async fn a_push_deploys_one_digest_to_three_engines_batch_by_batch() {
    let fleet = Fleet::start(FleetSpec::default()).await;
    let v1 = fleet
        .env
        .push(&TestImage::with_healthcheck("v1"), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], v1.as_str());
    let first = fleet.assert_serving(&v1, "v1").await;

    // One batch at a time: an engine pulls only after the one before it switched.
    let order = ["local", "e2", "e3"];
    for pair in order.windows(2) {
        let switched = step_of(&d, "switch", pair[0]);
        let pulled = step_of(&d, "pull", pair[1]);
        assert!(
            time(&pulled["started_at"]) >= time(&switched["finished_at"]),
            "{} pulled before {} switched: {d:#}",
            pair[1],
            pair[0]
        );
    }
    // `resolve` is the deployment's, once; every engine has its own `reach` … `retire`.
    let resolves = steps(&d).filter(|s| s["step"] == "resolve").count();
    assert_eq!(resolves, 1, "{d:#}");
    for target in order {
        for step in ["reach", "pull", "create", "health", "switch", "retire"] {
            assert_eq!(step_of(&d, step, target)["state"], "succeeded", "{d:#}");
        }
    }

    // The next version replaces each engine's container; the old ones are gone.
    let v2 = fleet
        .env
        .push(&TestImage::with_healthcheck("v2"), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let second = fleet.assert_serving(&v2, "v2").await;
    for (a, b) in first.iter().zip(&second) {
        assert_ne!(a, b, "a new container on every engine");
    }
    fleet.cleanup().await;
}

#[tokio::test]
async fn a_version_failing_health_on_the_third_engine_leaves_every_engine_on_the_previous_one() {
    let fleet = Fleet::start(FleetSpec {
        third_dockerd_args: vec!["--default-ulimit", "nofile=1111:1111"],
        ..FleetSpec::default()
    })
    .await;
    let (v1, before) = fleet
        .deploy_everywhere(&TestImage::with_healthcheck("v1"), "v1")
        .await;

    // Healthy wherever the file limit is not 1111: on local and e2, not on e3.
    let v2 = fleet
        .env
        .push(&TestImage::unhealthy_at_nofile("v2", 1111), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "failed", "{d:#}");
    assert_eq!(d["resolved_digest"], v2.as_str());
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains("engine e3"), "names the engine: {d:#}");
    assert!(error.contains("health"), "names the step: {d:#}");

    // local and e2 switched to v2, then back; e3 never switched.
    for target in ["local", "e2"] {
        assert_eq!(step_of(&d, "switch", target)["state"], "succeeded", "{d:#}");
        assert_eq!(step_of(&d, "revert", target)["state"], "succeeded", "{d:#}");
    }
    assert!(
        find_step(&d, "switch", "e3").is_none(),
        "e3 never switched: {d:#}"
    );
    assert_eq!(step_of(&d, "health", "e3")["state"], "failed", "{d:#}");
    // Every engine serves v1 again, from the very containers that served it before.
    let after = fleet.assert_serving(&v1, "v1").await;
    assert_eq!(
        before, after,
        "the previous generation's containers run again"
    );
    fleet.assert_generation_everywhere(&v1).await;
    fleet.cleanup().await;
}

/// The rollout's retry budget; the deadline of a probe (`version`) is 5 s.
const BUDGET: &str = "8s";

/// A hung engine (dockerd stopped by SIGSTOP: its port accepts, nothing answers, and the
/// connection pooled from the last deployment is reused without connecting) and then a
/// dead one each fail the rollout at `reach`, within the retry budget plus one probe's
/// deadline, with every engine still on what it served and the pages answering.
#[tokio::test]
async fn an_engine_that_hangs_or_is_down_fails_the_rollout_within_its_budget_before_any_engine_changes()
 {
    let mut fleet = Fleet::start(FleetSpec {
        retry_budget: BUDGET,
        ..FleetSpec::default()
    })
    .await;
    let v1 = fleet
        .env
        .push(&TestImage::with_healthcheck("v1"), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let before = fleet.assert_serving_on(&["local", "e3"], &v1, "v1").await;

    fleet.remote("e2").hang_dockerd();
    let d = refused_at_reach(&fleet, "v2").await;
    let error = d["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("gave no answer to version within 5s"),
        "names the call and its deadline: {d:#}"
    );
    assert_pages_answer(&fleet).await;
    let after = fleet.assert_serving_on(&["local", "e3"], &v1, "v1").await;
    assert_eq!(before, after);

    fleet.remote_mut("e2").stop_dockerd();
    refused_at_reach(&fleet, "v3").await;
    let after = fleet.assert_serving_on(&["local", "e3"], &v1, "v1").await;
    assert_eq!(before, after);
    assert_pages_answer(&fleet).await;
    fleet.cleanup().await;
}

/// Pushes `version` and returns its deployment, once it failed at e2's `reach` with no
/// engine changed, within the budget. Before every call had a deadline of its kind, a hung
/// engine's `version` waited out the client's 120 s whatever the budget said; the bound
/// here is the budget, one probe's deadline and a wide margin for a loaded machine, and
/// is still far below those 120 s.
async fn refused_at_reach(fleet: &Fleet, version: &str) -> Value {
    fleet
        .env
        .push(&TestImage::with_healthcheck(version), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "failed", "{d:#}");
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains("engine e2"), "names the engine: {d:#}");
    let reach = step_of(&d, "reach", "e2");
    assert_eq!(reach["state"], "failed", "{d:#}");
    let waited = time(&reach["finished_at"]) - time(&reach["started_at"]);
    let bound = humantime::parse_duration(BUDGET).unwrap() + Duration::from_secs(5 + 25);
    assert!(
        waited.to_std().unwrap() < bound,
        "reach took {waited} with a budget of {BUDGET}: {d:#}"
    );
    // Nothing past `reach` ran anywhere: no pull, no container.
    let changed: Vec<&Value> = steps(&d)
        .filter(|s| !matches!(s["step"].as_str(), Some("resolve" | "reach")))
        .collect();
    assert!(changed.is_empty(), "no engine changed: {changed:#?}");
    d
}

/// The app's page, its API and the overview answer while an engine does not.
async fn assert_pages_answer(fleet: &Fleet) {
    let (status, _) = fleet
        .env
        .api_get(&format!("/apps/{}", fleet.env.app()))
        .await;
    assert_eq!(status, 200);
    for path in ["/".to_owned(), format!("/apps/{}", fleet.env.app())] {
        let page = http_client()
            .get(fleet.env.pier_url(&path))
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path} answers: {e}"));
        assert!(
            page.status().is_success() || page.status().as_u16() == 303,
            "{path}: {}",
            page.status()
        );
    }
}

/// A stop asked during the pause between batches ends the rollout at once, not after the
/// pause: the next batch's first step stops, and every engine that switched goes back to
/// what it served before (here, the app was new: nothing).
#[tokio::test]
async fn a_stop_during_the_pause_between_batches_ends_the_rollout_without_waiting_for_it() {
    let fleet = Fleet::start(FleetSpec {
        batch: "2",
        pause: "300s",
        ..FleetSpec::default()
    })
    .await;
    fleet
        .env
        .push(&TestImage::with_healthcheck("v1"), "main")
        .await;
    let app = fleet.env.app().to_owned();
    let row = wait_until("the deployment", FLEET_DEPLOY, || async {
        fleet.env.deployment_rows(&app).await.pop()
    })
    .await;
    let path = format!("/deployments/{}", row.id);
    wait_until("the first batch switched", FLEET_DEPLOY, || async {
        let (_, d) = fleet.env.api_get(&path).await;
        let switched = ["local", "e2"]
            .iter()
            .all(|t| find_step(&d, "switch", t).is_some_and(|s| s["state"] == "succeeded"));
        switched.then_some(())
    })
    .await;
    let (code, _) = http_post(
        &fleet.env.pier_url(&format!("/api{path}/cancel")),
        &[
            (
                "Authorization",
                &format!("Bearer {}", fleet.env.admin_token),
            ),
            ("Content-Type", "application/json"),
        ],
        "{}",
    )
    .await
    .expect("an answer to the stop");
    assert_eq!(code, 202);
    // Well inside the 300 s pause, however loaded the machine.
    let d = fleet
        .env
        .deployment_final(&row.id, Duration::from_secs(120))
        .await;
    assert_eq!(d["state"], "cancelled", "{d:#}");
    let pull = step_of(&d, "pull", "e3");
    assert_eq!(pull["state"], "failed", "{pull:#}");
    assert!(
        pull["error"]
            .as_str()
            .unwrap_or_default()
            .contains("stopped before this step"),
        "{pull:#}"
    );
    for target in ["local", "e2", "e3"] {
        if target != "e3" {
            assert_eq!(step_of(&d, "revert", target)["state"], "succeeded", "{d:#}");
        }
        let left = fleet.engine(target).await.containers_of_app(&app).await;
        assert!(left.is_empty(), "{target}: {left:#?}");
        assert_eq!(fleet.serving_generation(target).await, None, "{target}");
    }
    fleet.cleanup().await;
}
