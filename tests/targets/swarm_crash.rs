//! `pier serve` SIGKILLed at every step boundary of a swarm deployment (before
//! and after each side effect of resolve, verify, update and converge, and of a failed
//! version's rollback). After each restart the deployment finishes: every replica runs
//! the newest digest (or, for the failed version, the previous one again), and the
//! service's own history shows exactly one update per deployment.

use crate::support::swarm::*;
use crate::support::*;
use serde_json::Value;

const STEPS: [&str; 4] = ["resolve", "verify", "update", "converge"];
const REPLICAS: usize = 2;

/// The `pier.deployment` label of the service's previous spec, as the docker CLI reads
/// it (bollard's model has no `PreviousSpec`): after one update by deployment D from the
/// spec of deployment P, it is P; an update sent twice would make it D.
fn previous_spec_deployment(s: &SwarmEnv) -> String {
    let (ok, out) = s.swarm.manager.docker(&[
        "service",
        "inspect",
        s.env.app(),
        "--format",
        "{{index .PreviousSpec.Labels \"pier.deployment\"}}",
    ]);
    assert!(ok, "docker service inspect: {out}");
    out.trim().to_owned()
}

/// Pauses Pier at `point`, pushes `image`, SIGKILLs Pier there, restarts it: the
/// deployment, once final.
async fn deploy_killed_at(s: &mut SwarmEnv, point: &str, image: &TestImage) -> (String, Value) {
    s.env
        .pier_mut()
        .restart_with(|c| c.env("PIER_PAUSE_AT", point))
        .await;
    let digest = s.env.push(image, "main").await;
    s.env
        .pier()
        .wait_for_log(&format!("PIER_PAUSE_AT reached: {point}"), SWARM_DEPLOY)
        .await;
    s.env.pier_mut().kill();
    s.env
        .pier_mut()
        .restart_with(|c| c.without_env("PIER_PAUSE_AT"))
        .await;
    (digest, s.final_deployment().await)
}

fn steps_named<'a>(d: &'a Value, name: &'a str) -> impl Iterator<Item = &'a Value> {
    d["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |s| s["step"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_every_step_boundary_updates_the_service_exactly_once() {
    let mut s = SwarmEnv::start("replicas = 2, update = { monitor = \"1s\" }").await;
    let v0 = s.env.push(&TestImage::healthy("v0"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    s.assert_tasks_run(&v0, REPLICAS).await;
    let mut previous = d["id"].as_str().unwrap().to_owned();

    let points = STEPS
        .iter()
        .flat_map(|step| [format!("{step}:before"), format!("{step}:after")]);
    for (n, point) in points.enumerate() {
        let version = format!("v{}", n + 1);
        let (digest, d) = deploy_killed_at(&mut s, &point, &TestImage::healthy(&version)).await;
        assert_eq!(d["state"], "succeeded", "{point}: {d:#}");
        assert_eq!(d["resolved_digest"], digest.as_str(), "{point}");
        for step in STEPS {
            let runs: Vec<&Value> = steps_named(&d, step).collect();
            assert_eq!(runs.len(), 1, "{point}: {step} journaled once: {d:#}");
            assert_eq!(runs[0]["state"], "succeeded", "{point}: {d:#}");
        }
        let id = d["id"].as_str().unwrap().to_owned();
        let service = s.service().await;
        assert_eq!(
            service.label("pier.deployment"),
            Some(id.as_str()),
            "{point}"
        );
        assert_eq!(
            previous_spec_deployment(&s),
            previous,
            "{point}: the spec was updated once, from the previous deployment's"
        );
        s.assert_tasks_run(&digest, REPLICAS).await;
        previous = id;
    }
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_around_the_rollback_of_a_failed_version_still_restores_the_previous_one() {
    let mut s = SwarmEnv::start("replicas = 2, update = { monitor = \"2s\" }").await;
    let v1 = s.env.push(&TestImage::healthy("v1"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let v1_id = d["id"].as_str().unwrap().to_owned();

    for (n, point) in ["rollback:before", "rollback:after"].iter().enumerate() {
        let bad = TestImage::no_health_file(&format!("bad{n}"));
        let (digest, d) = deploy_killed_at(&mut s, point, &bad).await;
        assert_eq!(d["state"], "rolled_back", "{point}: {d:#}");
        assert_eq!(d["resolved_digest"], digest.as_str(), "{point}");
        let rollbacks: Vec<&Value> = steps_named(&d, "rollback").collect();
        assert_eq!(rollbacks.len(), 1, "{point}: {d:#}");
        assert_eq!(rollbacks[0]["state"], "succeeded", "{point}: {d:#}");
        let service = s.service().await;
        assert_eq!(
            service.label("pier.deployment"),
            Some(v1_id.as_str()),
            "{point}"
        );
        s.assert_tasks_run(&v1, REPLICAS).await;
    }
    s.cleanup().await;
}
