//! Whatever happens to Pier mid-deployment, the app ends up running the newest pushed digest
//! in exactly one container, the deployment reaches a final state, and nothing is left behind.
//! Pier is killed at every named point, before and after each step's side effect: aborted from
//! inside (`PIER_CRASH_AT`), or paused there (`PIER_PAUSE_AT`) and SIGKILLed from outside.

use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

enum Death {
    /// `PIER_CRASH_AT`: the process aborts itself at the point.
    Abort,
    /// `PIER_PAUSE_AT`: the process stops at the point and the test SIGKILLs it.
    Sigkill,
}

/// v1 serves; Pier dies at `point` while deploying v2; a fresh Pier finishes the job.
async fn dies_at(point: &str, death: Death) {
    let mut env = TestEnv::builder().lease("3s").start().await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded");

    let var = match death {
        Death::Abort => "PIER_CRASH_AT",
        Death::Sigkill => "PIER_PAUSE_AT",
    };
    env.pier_mut().restart_with(|c| c.env(var, point)).await;
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    match death {
        Death::Abort => {
            let pier = env.pier_mut();
            wait_until(&format!("pier aborts at {point}"), DEPLOY, || {
                let gone = !pier.is_running();
                async move { gone.then_some(()) }
            })
            .await;
            assert!(
                pier.log().contains("PIER_CRASH_AT"),
                "{}",
                tail(&pier.log(), 30)
            );
        }
        Death::Sigkill => {
            env.pier()
                .wait_for_log("PIER_PAUSE_AT reached", DEPLOY)
                .await;
            env.pier_mut().kill();
        }
    }
    let crashed = env.deployment_rows(&app).await.pop().unwrap();
    assert_eq!(
        crashed.state, "running",
        "the crash left the deployment running: {crashed:?}"
    );

    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT").without_env("PIER_PAUSE_AT"))
        .await;
    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["resolved_digest"], v2.as_str());
    assert!(
        done["attempt"].as_i64().unwrap() >= 2,
        "it was resumed: {done:#}"
    );

    // Exactly one container of the app, running v2, answering; no orphan, no candidate left.
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    let all = env.engine.containers_of_app(&app).await;
    assert_eq!(all.len(), 1, "containers after resume at {point}: {all:#?}");
    assert_eq!(env.running_digests_of(&app).await, vec![v2.clone()]);
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(view["generation"]["digest"], v2.as_str());
    assert_eq!(
        view["generation"]["container_id"].as_str(),
        all[0].id.as_deref()
    );

    // The journal shows every step done once, and which one was resumed.
    let steps = done["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "resolve", "pull", "verify", "network", "create", "stop_old", "start", "health",
            "switch", "retire"
        ],
        "{done:#}"
    );
    assert!(steps.iter().all(|s| s["state"] == "succeeded"), "{done:#}");
    let (step, when) = point.split_once(':').unwrap();
    let at: &Value = steps.iter().find(|s| s["step"] == step).unwrap();
    if when == "before" {
        assert_eq!(
            at["replays"], 1,
            "{step} was interrupted and replayed: {at:#}"
        );
    } else {
        assert_eq!(at["replays"], 0, "{step} had finished: {at:#}");
    }
    env.cleanup().await;
}

macro_rules! crash_tests {
    ($($name:ident: $point:literal, $death:expr;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                dies_at($point, $death).await;
            }
        )*
    };
}

crash_tests! {
    abort_before_resolve: "resolve:before", Death::Abort;
    abort_after_resolve: "resolve:after", Death::Abort;
    abort_before_pull: "pull:before", Death::Abort;
    abort_after_pull: "pull:after", Death::Abort;
    abort_before_verify: "verify:before", Death::Abort;
    abort_after_verify: "verify:after", Death::Abort;
    abort_before_create: "create:before", Death::Abort;
    abort_after_create: "create:after", Death::Abort;
    abort_before_stop_old: "stop_old:before", Death::Abort;
    abort_after_stop_old: "stop_old:after", Death::Abort;
    abort_before_start: "start:before", Death::Abort;
    abort_after_start: "start:after", Death::Abort;
    abort_before_health: "health:before", Death::Abort;
    abort_after_health: "health:after", Death::Abort;
    abort_before_switch: "switch:before", Death::Abort;
    abort_after_switch: "switch:after", Death::Abort;
    abort_before_retire: "retire:before", Death::Abort;
    abort_after_retire: "retire:after", Death::Abort;
    sigkill_after_create: "create:after", Death::Sigkill;
    sigkill_after_stop_old: "stop_old:after", Death::Sigkill;
    sigkill_before_health: "health:before", Death::Sigkill;
    sigkill_before_switch: "switch:before", Death::Sigkill;
    sigkill_before_retire: "retire:before", Death::Sigkill;
}

/// A container created but not yet journaled (the crash hit between the engine's create and
/// the journal write) is adopted on resume, not created twice.
#[tokio::test]
async fn crash_after_create_is_resumed_without_a_second_container() {
    let mut env = TestEnv::builder().lease("3s").start().await;
    let app = env.app().to_owned();
    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", "create:before"))
        .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.pier_mut().wait_dead("pier aborts", DEPLOY).await;
    let crashed = env.deployment_rows(&app).await.pop().unwrap();
    // Do by hand what the crashed worker was about to do: the engine has the container, the
    // journal does not.
    let reference = format!("{}@{v1}", env.image());
    env.engine.pull(&reference).await;
    let made = env
        .engine
        .create_labelled_for(&app, &crashed.id, &v1, &reference, env.publish())
        .await;
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let create = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "create")
        .unwrap()
        .clone();
    assert_eq!(create["result"]["adopted"], true, "{create:#}");
    assert_eq!(create["result"]["id"].as_str(), Some(made.as_str()));
    let all = env.engine.containers_of_app(&app).await;
    assert_eq!(all.len(), 1, "{all:#?}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    env.cleanup().await;
}

/// If the config changed between the crash and the restart, the resumed step does not
/// silently use the new parameters: the deployment fails as a conflict, the old generation
/// keeps serving, and the next push deploys with the new config.
#[tokio::test]
async fn a_config_change_between_crash_and_resume_is_a_conflict_not_a_swap() {
    let mut env = TestEnv::builder().lease("3s").start().await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;

    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", "create:after"))
        .await;
    env.push(&TestImage::healthy("v2"), "main").await;
    env.pier_mut().wait_dead("pier aborts", DEPLOY).await;
    let crashed = env.deployment_rows(&app).await.pop().unwrap();
    let path = env.pier().config_path();
    let changed = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"hello\"", "\"changed\"");
    assert!(changed.contains("changed"));
    std::fs::write(&path, changed).unwrap();
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;

    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    assert!(
        done["error"].as_str().unwrap().contains("conflict"),
        "{done:#}"
    );
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);

    let v3 = env.push(&TestImage::healthy("v3"), "main").await;
    let next = env
        .latest_final_of(&app, &[first["id"].as_str().unwrap(), &crashed.id], DEPLOY)
        .await;
    assert_eq!(next["state"], "succeeded", "{next:#}");
    assert_eq!(next["resolved_digest"], v3.as_str());
    env.wait_app_version("v3", Duration::from_secs(10)).await;
    env.cleanup().await;
}

/// A deployment that kills Pier every time it runs is given up after a bounded number of
/// attempts: it fails, and the previous generation is started again and serves.
#[tokio::test]
async fn a_deployment_that_crashes_pier_every_time_is_given_up_and_rolled_back() {
    let mut env = TestEnv::builder().lease("3s").start().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    env.latest_final_of(&app, &[], DEPLOY).await;

    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", "health:before"))
        .await;
    env.push(&TestImage::healthy("v2"), "main").await;
    let crashed = wait_until("the v2 deployment", DEPLOY, || async {
        env.deployment_rows(&app)
            .await
            .into_iter()
            .find(|r| r.state == "running")
    })
    .await;
    let mut restarts = 0;
    let done = loop {
        let pier = env.pier_mut();
        let died = poll_until(Duration::from_secs(20), || {
            let gone = !pier.is_running();
            async move { gone.then_some(()) }
        })
        .await;
        let rows = env.deployment_rows(&app).await;
        let row = rows.iter().find(|r| r.id == crashed.id).unwrap().clone();
        if row.state != "running" {
            break row;
        }
        assert!(died.is_some(), "pier neither crashed nor finished: {row:?}");
        assert!(
            restarts < 10,
            "still running after {restarts} restarts: {row:?}"
        );
        restarts += 1;
        env.pier_mut().restart().await;
    };
    assert_eq!(done.state, "failed", "{done:?}");
    assert_eq!(done.attempt, pier::pipeline::MAX_ATTEMPTS + 1);
    let (_, d) = env.api_get(&format!("/deployments/{}", done.id)).await;
    assert!(d["error"].as_str().unwrap().contains("gave up"), "{d:#}");
    // The old generation, stopped by the crashed attempts, serves again.
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(env.running_digests_of(&app).await, vec![v1]);
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}

/// SIGTERM mid-deployment: Pier stops claiming, lets the deployment in flight finish, and
/// exits cleanly.
#[tokio::test]
async fn sigterm_mid_deployment_lets_it_finish_then_exits() {
    let mut env = TestEnv::start().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::slow_start("v1", 2), "main").await;
    wait_until("v1 is running", DEPLOY, || async {
        env.deployment_rows(&app)
            .await
            .into_iter()
            .find(|r| r.state == "running")
    })
    .await;
    let code = env.pier_mut().terminate(Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "pier exits cleanly on SIGTERM");
    let row = env.deployment_rows(&app).await.pop().unwrap();
    assert_eq!(row.state, "succeeded", "{row:?}");
    assert_eq!(env.running_digests_of(&app).await, vec![v1]);
    env.cleanup().await;
}
