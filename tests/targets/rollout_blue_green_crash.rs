//! `pier serve` SIGKILLed at the step boundaries of a blue-green rollout across
//! three engines (local, `e2` over TLS, `e3` over SSH), each behind its own host's `pier
//! proxy`. Every blue-green step is crashed before and after its side effect, on one
//! engine each in turn. After each restart the deployment finishes: exactly one container
//! per engine runs the newest digest and answers through that host's proxy, and the
//! journal shows every engine's steps once, the interrupted one replayed, none redone.

use crate::support::rollout::*;
use crate::support::*;

/// The steps a blue-green engine takes after its candidate exists, in order.
const BLUE_GREEN_STEPS: [&str; 8] = [
    "start", "health", "switch", "applied", "drain", "stop_old", "soak", "retire",
];
/// Every step each engine journals once in a blue-green rollout (after a first version).
const ENGINE_STEPS: [&str; 13] = [
    "reach", "pull", "verify", "network", "create", "start", "health", "switch", "applied",
    "drain", "stop_old", "soak", "retire",
];
const ENGINES: [&str; 3] = ["local", "e2", "e3"];

fn points(when: &str, offset: usize) -> Vec<String> {
    BLUE_GREEN_STEPS
        .iter()
        .enumerate()
        .map(|(i, step)| format!("{step}#{}:{when}", ENGINES[(i + offset) % ENGINES.len()]))
        .collect()
}

async fn sigkill_at_each(points: Vec<String>) {
    let mut fleet = Fleet::start(FleetSpec {
        route: Some("soak = \"1s\"\ndrain_timeout = \"5s\"\nkeep_previous_running = false"),
        app_toml: "health = { path = \"/health\", timeout = \"20s\" }\n".into(),
        ..FleetSpec::default()
    })
    .await;
    let v0 = fleet.env.push(&TestImage::healthy("v0"), "main").await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    wait_answering(&fleet, "v0").await;
    fleet.assert_serving(&v0, "v0").await;

    for (n, point) in points.iter().enumerate() {
        let version = format!("v{}", n + 1);
        let pier = fleet.env.pier_mut();
        pier.restart_with(|c| c.env("PIER_PAUSE_AT", point)).await;
        let digest = fleet.env.push(&TestImage::healthy(&version), "main").await;
        let reached = format!("PIER_PAUSE_AT reached: {point}");
        fleet.env.pier().wait_for_log(&reached, FLEET_DEPLOY).await;
        fleet.env.pier_mut().kill();
        let app = fleet.env.app().to_owned();
        let crashed = fleet.env.deployment_rows(&app).await.pop().expect("a row");
        assert_eq!(crashed.state, "running", "{point}: {crashed:?}");

        let pier = fleet.env.pier_mut();
        pier.restart_with(|c| c.without_env("PIER_PAUSE_AT")).await;
        let d = fleet.env.deployment_final(&crashed.id, FLEET_DEPLOY).await;
        assert_eq!(d["state"], "succeeded", "{point}: {d:#}");
        assert_eq!(d["resolved_digest"], digest.as_str(), "{point}");
        wait_answering(&fleet, &version).await;
        let running = fleet.assert_serving(&digest, &version).await;
        assert_journaled_once(&d, point, &running, &ENGINE_STEPS);
    }
    fleet.cleanup().await;
}

async fn wait_answering(fleet: &Fleet, version: &str) {
    for target in ENGINES {
        let what = format!("{target}'s proxy answers {version}");
        wait_until(&what, FLEET_DEPLOY, || async {
            (fleet.version_on(target).await.as_deref() == Some(version)).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn sigkill_before_every_blue_green_step_of_a_three_engine_rollout_resumes_each_engine_once() {
    sigkill_at_each(points("before", 0)).await;
}

#[tokio::test]
async fn sigkill_after_every_blue_green_step_of_a_three_engine_rollout_resumes_each_engine_once() {
    sigkill_at_each(points("after", 1)).await;
}
