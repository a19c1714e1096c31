//! `pier serve` SIGKILLed at the step boundaries of a three-engine rollout
//! (local, `e2` over TLS, `e3` over SSH). Each crash point names its engine
//! (`pull#e2:before`); every step is crashed at before and after its side effect, on one
//! engine each in turn, and the shared `resolve` too. After each restart the deployment
//! finishes: exactly one container per engine runs the newest digest, and the journal
//! shows every engine's steps once, the interrupted one replayed, none redone.

use crate::support::rollout::*;
use crate::support::*;

/// Every engine step of a rollout, in order (the app has no volumes or shared networks).
const ENGINE_STEPS: [&str; 10] = [
    "reach", "pull", "verify", "network", "create", "stop_old", "start", "health", "switch",
    "retire",
];
const ENGINES: [&str; 3] = ["local", "e2", "e3"];

/// The crash points of one half: `resolve`, then each engine step on the engines in turn.
fn points(when: &str, offset: usize) -> Vec<String> {
    let mut all = vec![format!("resolve:{when}")];
    for (i, step) in ENGINE_STEPS.iter().enumerate() {
        let target = ENGINES[(i + offset) % ENGINES.len()];
        all.push(format!("{step}#{target}:{when}"));
    }
    all
}

async fn sigkill_at_each(points: Vec<String>) {
    let mut fleet = Fleet::start(FleetSpec::default()).await;
    let v0 = fleet
        .env
        .push(&TestImage::with_healthcheck("v0"), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    fleet.assert_serving(&v0, "v0").await;

    for (n, point) in points.iter().enumerate() {
        let version = format!("v{}", n + 1);
        fleet
            .env
            .pier_mut()
            .restart_with(|c| c.env("PIER_PAUSE_AT", point))
            .await;
        let digest = fleet
            .env
            .push(&TestImage::with_healthcheck(&version), "main")
            .await;
        fleet
            .env
            .pier()
            .wait_for_log(&format!("PIER_PAUSE_AT reached: {point}"), FLEET_DEPLOY)
            .await;
        fleet.env.pier_mut().kill();
        let app = fleet.env.app().to_owned();
        let crashed = fleet.env.deployment_rows(&app).await.pop().expect("a row");
        assert_eq!(crashed.state, "running", "{point}: {crashed:?}");

        fleet
            .env
            .pier_mut()
            .restart_with(|c| c.without_env("PIER_PAUSE_AT"))
            .await;
        let d = fleet.env.deployment_final(&crashed.id, FLEET_DEPLOY).await;
        assert_eq!(d["state"], "succeeded", "{point}: {d:#}");
        assert_eq!(d["resolved_digest"], digest.as_str(), "{point}");
        let running = fleet.assert_serving(&digest, &version).await;
        assert_journaled_once(&d, point, &running, &ENGINE_STEPS);
    }
    fleet.cleanup().await;
}

#[tokio::test]
async fn sigkill_before_every_step_of_a_three_engine_rollout_resumes_each_engine_once() {
    sigkill_at_each(points("before", 0)).await;
}

#[tokio::test]
async fn sigkill_after_every_step_of_a_three_engine_rollout_resumes_each_engine_once() {
    sigkill_at_each(points("after", 1)).await;
}

/// A rollout whose process dies at the same point on every attempt (e3's `health`, after
/// local and e2 switched) gives up after `MAX_ATTEMPTS`, and the attempt that gives up
/// undoes every engine from its journal: local and e2 switch back to the very containers
/// that served before, e3's candidate goes and its stopped container starts again.
#[tokio::test]
async fn a_rollout_that_dies_on_every_attempt_gives_up_with_every_engine_back_on_the_previous_version()
 {
    let mut fleet = Fleet::start(FleetSpec::default()).await;
    let (v1, before) = fleet
        .deploy_everywhere(&TestImage::with_healthcheck("v1"), "v1")
        .await;

    fleet
        .env
        .pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", "health#e3:before"))
        .await;
    fleet
        .env
        .push(&TestImage::with_healthcheck("v2"), "main")
        .await;
    let app = fleet.env.app().to_owned();
    let mut restarts = 0;
    let done = loop {
        let pier = fleet.env.pier_mut();
        let died = poll_until(FLEET_DEPLOY, || {
            let gone = !pier.is_running();
            async move { gone.then_some(()) }
        })
        .await;
        let rows = fleet.env.deployment_rows(&app).await;
        let row = rows.last().expect("the v2 deployment").clone();
        if row.state != "running" && row.state != "queued" {
            break row;
        }
        assert!(died.is_some(), "pier neither crashed nor finished: {row:?}");
        assert!(restarts < 10, "running after {restarts} restarts: {row:?}");
        restarts += 1;
        fleet.env.pier_mut().restart().await;
    };
    assert_eq!(done.state, "failed", "{done:?}");
    assert_eq!(done.attempt, pier::pipeline::MAX_ATTEMPTS + 1);
    let d = fleet.env.deployment_final(&done.id, FLEET_DEPLOY).await;
    let outcome = d["outcome"].as_str().unwrap_or_default();
    assert!(outcome.contains("gave up"), "{d:#}");
    for target in ["local", "e2"] {
        let revert = step_of(&d, "revert", target);
        assert_eq!(revert["state"], "succeeded", "{target}: {revert:#}");
        assert_eq!(revert["intent"]["to"]["digest"], v1.as_str(), "{revert:#}");
    }
    assert_eq!(step_of(&d, "rollback", "e3")["state"], "succeeded", "{d:#}");
    assert_eq!(fleet.assert_serving(&v1, "v1").await, before);
    fleet.assert_generation_everywhere(&v1).await;
    fleet.cleanup().await;
}
