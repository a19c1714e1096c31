//! The queue's promises: dedupe, supersede, one deployment at a time per app, parallel apps,
//! several processes on one database, retries of transient failures, orphans reconciled.

use std::time::Duration;

use crate::support::*;
use chrono::{DateTime, Utc};

const DEPLOY: Duration = Duration::from_secs(60);
const MEDIA: &str = "application/vnd.docker.distribution.events.v1+json";

/// A Distribution notification, as the registry sends it, for a tagged manifest push.
fn push_event(id: &str, env: &TestEnv, tag: &str, digest: &str) -> Vec<u8> {
    serde_json::json!({ "events": [{
        "id": id,
        "timestamp": "2026-11-29T12:00:00Z",
        "action": "push",
        "target": {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "repository": env.repo(),
            "url": format!("http://{}/v2/{}/manifests/{digest}", env.registry_host(), env.repo()),
            "tag": tag,
        },
        "request": { "host": env.registry_host(), "method": "PUT" },
    }]})
    .to_string()
    .into_bytes()
}

async fn post_event(env: &TestEnv, body: &[u8]) -> (u16, String) {
    let auth = format!("Bearer {}", env.distribution_token);
    env.post_hook(
        "local",
        &[("Content-Type", MEDIA), ("Authorization", &auth)],
        body,
    )
    .await
}

fn overlaps(a: &DeploymentRow, b: &DeploymentRow) -> bool {
    let (Some(s1), Some(e1), Some(s2), Some(e2)) =
        (a.started_at, a.finished_at, b.started_at, b.finished_at)
    else {
        return false;
    };
    s1 < e2 && s2 < e1
}

#[tokio::test]
async fn twenty_duplicate_deliveries_of_one_event_give_one_deployment() {
    let env = TestEnv::builder().without_notifications().start().await;
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let body = push_event("event-1", &env, "main", &digest);
    let answers = futures_util::future::join_all((0..20).map(|_| post_event(&env, &body))).await;
    let accepted = answers.iter().filter(|(c, _)| *c == 202).count();
    let duplicates = answers.iter().filter(|(c, _)| *c == 200).count();
    assert_eq!((accepted, duplicates), (1, 19), "{answers:#?}");

    env.wait_app_version("v1", DEPLOY).await;
    let rows = env.deployment_rows(env.app()).await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let (count, seen): (i64, i64) =
        sqlx::query_as("SELECT count(*), sum(seen_count) FROM deliveries")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(
        (count, seen),
        (1, 20),
        "one delivery row, seen twenty times"
    );

    // Another event naming the digest that is already running: no second deployment
    // while one is pending, and a no-op that says so once it serves.
    let done = env.latest_final_of(env.app(), &[], DEPLOY).await;
    let (code, answer) = post_event(&env, &push_event("event-2", &env, "main", &digest)).await;
    assert_eq!(code, 202, "{answer}");
    let noop = env
        .latest_final_of(env.app(), &[done["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(noop["state"], "succeeded");
    assert!(
        noop["outcome"].as_str().unwrap().contains("no-op"),
        "{noop:#}"
    );
    let (_, steps) = env
        .api_get(&format!("/deployments/{}", noop["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        steps["steps"].as_array().unwrap().len(),
        1,
        "only resolve ran: {steps:#}"
    );
    assert_eq!(env.engine.containers_of_app(env.app()).await.len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn the_same_digest_already_queued_or_running_is_not_queued_again() {
    let env = TestEnv::builder().without_notifications().start().await;
    let digest = env.push(&TestImage::slow_start("slow", 2), "main").await;
    let (code, _) = post_event(&env, &push_event("a", &env, "main", &digest)).await;
    assert_eq!(code, 202);
    // Different event ids, same digest, while the first is queued or running.
    for id in ["b", "c", "d"] {
        let (code, answer) = post_event(&env, &push_event(id, &env, "main", &digest)).await;
        assert_eq!(code, 200, "{answer}");
        assert!(answer.contains("already_pending"), "{answer}");
    }
    env.wait_app_version("slow", DEPLOY).await;
    assert_eq!(env.deployment_rows(env.app()).await.len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn pushes_of_v1_to_v5_in_quick_succession_end_with_v5_and_never_overlap() {
    // v1 must outlast four pushes, which beside a CPU burner took more than the default
    // 20 s of health: the release below, not a timeout, decides when it becomes healthy.
    let env = TestEnv::builder()
        .health_timeout(Duration::from_secs(300))
        .start()
        .await;
    // v2..v5 are in the registry beforehand (a tag Pier does not follow), so their pushes
    // to `main` below are quick, and v1 becomes healthy only once the test releases it,
    // after the last push: every push arrives while v1 runs, however loaded the machine
    // (at load 25 one push took as long as a deploy of six seconds, so a fixed wait had
    // each version deployed in turn).
    for v in 2..=5 {
        env.push(
            &TestImage::healthy(&format!("v{v}")),
            &format!("staged-v{v}"),
        )
        .await;
    }
    let mut digests = vec![env.push(&TestImage::slow_start("v1", 280), "main").await];
    let v1 = wait_until("v1's container runs", DEPLOY, || async {
        let running = env.engine.running_containers_of_app(env.app()).await;
        running.into_iter().next().and_then(|c| c.id)
    })
    .await;
    for v in 2..=5 {
        digests.push(
            env.push(&TestImage::healthy(&format!("v{v}")), "main")
                .await,
        );
    }
    let (released, out) = docker_cli(&["exec", &v1, "/bin/busybox", "touch", "/tmp/release"]);
    assert!(released, "release v1's server: {out}");
    env.wait_app_version("v5", DEPLOY).await;
    // Let every notification land and every deployment finish.
    let rows = wait_until("all deployments final", DEPLOY, || async {
        let rows = env.deployment_rows(env.app()).await;
        let last_is_v5 =
            rows.last().and_then(|r| r.resolved_digest.as_deref()) == Some(&digests[4]);
        (last_is_v5
            && rows
                .iter()
                .all(|r| !matches!(r.state.as_str(), "queued" | "running")))
        .then_some(rows)
    })
    .await;
    let last = rows.last().unwrap();
    assert_eq!(last.state, "succeeded", "{rows:#?}");
    assert_eq!(
        env.running_digests_of(env.app()).await,
        vec![digests[4].clone()]
    );
    assert_eq!(env.engine.containers_of_app(env.app()).await.len(), 1);

    let superseded: Vec<&DeploymentRow> = rows.iter().filter(|r| r.state == "superseded").collect();
    assert!(
        !superseded.is_empty(),
        "queued deployments in between are superseded: {rows:#?}"
    );
    for s in &superseded {
        let by = s.superseded_by.as_deref().expect("superseded_by is set");
        let pos = |id: &str| rows.iter().position(|r| r.id == id).unwrap();
        assert!(pos(by) > pos(&s.id), "superseded by a newer deployment");
        assert!(s.started_at.is_none(), "a superseded deployment never ran");
    }
    // No two deployments of the app ever ran at once.
    let ran: Vec<&DeploymentRow> = rows.iter().filter(|r| r.started_at.is_some()).collect();
    for (i, a) in ran.iter().enumerate() {
        for b in &ran[i + 1..] {
            assert!(!overlaps(a, b), "{a:?} and {b:?} ran at the same time");
        }
    }
    env.cleanup().await;
}

#[tokio::test]
async fn two_apps_deploy_in_parallel() {
    let env = TestEnv::builder()
        .without_notifications()
        .add_app(AppSpec::new("api"))
        .start()
        .await;
    let (a, b) = (env.apps[0].clone(), env.apps[1].clone());
    env.registry()
        .push(&a.repo, "main", &TestImage::slow_start("a1", 2))
        .await;
    env.registry()
        .push(&b.repo, "main", &TestImage::slow_start("b1", 2))
        .await;
    for app in [&a, &b] {
        let body = format!(
            r#"{{"repository":"{}/{}","tag":"main"}}"#,
            env.registry_host(),
            app.repo
        );
        let (code, answer) = env.post_generic(body.as_bytes()).await;
        assert_eq!(code, 202, "{answer}");
    }
    let da = env.latest_final_of(&a.name, &[], DEPLOY).await;
    let db = env.latest_final_of(&b.name, &[], DEPLOY).await;
    assert_eq!(
        (da["state"].as_str(), db["state"].as_str()),
        (Some("succeeded"), Some("succeeded"))
    );
    let span = |d: &serde_json::Value| -> (DateTime<Utc>, DateTime<Utc>) {
        (
            d["started_at"].as_str().unwrap().parse().unwrap(),
            d["finished_at"].as_str().unwrap().parse().unwrap(),
        )
    };
    let ((s1, e1), (s2, e2)) = (span(&da), span(&db));
    assert!(
        s1 < e2 && s2 < e1,
        "the two apps' deployments overlapped in time: {s1}..{e1} vs {s2}..{e2}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn two_pier_processes_share_one_database_and_nothing_runs_twice() {
    let env = TestEnv::builder()
        .add_app(AppSpec::new("api"))
        .add_app(AppSpec::new("jobs"))
        .start()
        .await;
    let second = env.start_another_pier().await;
    let apps = env.apps.clone();
    let mut last = Vec::new();
    for round in 1..=3 {
        for app in &apps {
            let d = env
                .registry()
                .push(
                    &app.repo,
                    "main",
                    &TestImage::healthy(&format!("{}-{round}", app.name)),
                )
                .await;
            if round == 3 {
                last.push(d);
            }
        }
    }
    for (app, digest) in apps.iter().zip(&last) {
        wait_until(
            &format!("{} runs its last push", app.name),
            DEPLOY,
            || async {
                let rows = env.deployment_rows(&app.name).await;
                let settled = rows
                    .iter()
                    .all(|r| !matches!(r.state.as_str(), "queued" | "running"));
                (settled && env.running_digests_of(&app.name).await == vec![digest.clone()])
                    .then_some(())
            },
        )
        .await;
        let rows = env.deployment_rows(&app.name).await;
        for r in &rows {
            assert!(
                matches!(r.state.as_str(), "succeeded" | "superseded"),
                "{r:?}"
            );
            assert!(r.attempt <= 1, "no deployment was claimed twice: {r:?}");
        }
        let ran: Vec<&DeploymentRow> = rows.iter().filter(|r| r.started_at.is_some()).collect();
        for (i, a) in ran.iter().enumerate() {
            for b in &ran[i + 1..] {
                assert!(
                    !overlaps(a, b),
                    "{a:?} and {b:?} of {} ran at once",
                    app.name
                );
            }
        }
        assert_eq!(env.engine.containers_of_app(&app.name).await.len(), 1);
    }
    let replays: i64 = sqlx::query_scalar("SELECT coalesce(sum(replays), 0) FROM deployment_steps")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(replays, 0, "no step ran twice");
    let claims = |log: &str| log.matches(" claimed").count();
    println!(
        "claims: first process {}, second {}",
        claims(&env.pier().log()),
        claims(&second.log())
    );
    drop(second);
    env.cleanup().await;
}

#[tokio::test]
async fn a_registry_down_during_resolve_is_retried_until_it_is_back() {
    let mut env = TestEnv::start().await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(env.app(), &[], DEPLOY).await;

    env.registry_mut().stop();
    let out = env.pier().run_cli(&["deploy", env.app()]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.pier()
        .wait_for_log("transient failure; retrying", DEPLOY)
        .await;
    let pending = env.deployment_rows(env.app()).await.pop().unwrap();
    assert_eq!(
        pending.state, "running",
        "still trying, not failed: {pending:?}"
    );

    env.registry_mut().restart().await;
    let done = env.deployment_final(&pending.id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["resolved_digest"], v1.as_str());
    assert_ne!(done["id"], first["id"]);
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    env.cleanup().await;
}

#[tokio::test]
async fn orphans_are_removed_at_start_up_and_the_removal_is_recorded() {
    let mut env = TestEnv::builder().lease("3s").start().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;

    // A real orphan: v2's candidate, created and journaled by Pier, whose deployment then
    // ended (given up) without removing it.
    env.pier_mut()
        .restart_with(|c| c.env("PIER_PAUSE_AT", "stop_old:before"))
        .await;
    env.push(&TestImage::healthy("v2"), "main").await;
    env.pier()
        .wait_for_log("PIER_PAUSE_AT reached", DEPLOY)
        .await;
    env.pier_mut().kill();
    let given_up = env.deployment_rows(&app).await.pop().unwrap();
    let orphan: String = sqlx::query_scalar(
        "SELECT result->>'id' FROM deployment_steps WHERE deployment_id = $1::uuid AND step = 'create'",
    )
    .bind(&given_up.id)
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE deployments SET state = 'failed', finished_at = now(), lease_owner = NULL,
             lease_key = NULL, lease_expires_at = NULL
         WHERE id = $1::uuid",
    )
    .bind(&given_up.id)
    .execute(&env.db.pool)
    .await
    .unwrap();
    // And a container that only carries the app's labels, naming a finished deployment:
    // Pier's journal never created it, so it is not Pier's to remove.
    let v1_ref = format!("{}@{v1}", env.image());
    let publish = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let stranger = env
        .engine
        .create_labelled_for(&app, first["id"].as_str().unwrap(), &v1, &v1_ref, publish)
        .await;
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_PAUSE_AT"))
        .await;

    let ids = wait_until("the orphan is removed", DEPLOY, || async {
        let ids: Vec<String> = env
            .engine
            .containers_of_app(&app)
            .await
            .into_iter()
            .filter_map(|c| c.id)
            .collect();
        (!ids.contains(&orphan)).then_some(ids)
    })
    .await;
    assert!(
        ids.contains(&stranger),
        "a container Pier cannot account for is left alone"
    );
    assert_eq!(
        env.running_digests_of(&app).await,
        vec![v1.clone()],
        "the serving generation is untouched"
    );
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let actions = view["reconcile_actions"].as_array().unwrap();
    assert!(
        actions
            .iter()
            .any(|a| a["action"] == "removed_orphan" && a["container_id"] == orphan.as_str()),
        "{actions:#?}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_labelled_container_started_by_hand_survives_a_deploy() {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;

    // Someone runs a container with the app's labels beside Pier's (a debug copy, say).
    let by_hand = env
        .engine
        .run_labelled(
            &app,
            &format!("{}@{v1}", env.image()),
            std::net::SocketAddr::from(([127, 0, 0, 1], free_port())),
        )
        .await;
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let latest = env
        .latest_final_of(&app, &[first["id"].as_str().unwrap()], DEPLOY)
        .await;
    let done = env
        .deployment_final(latest["id"].as_str().unwrap(), DEPLOY)
        .await;
    assert_eq!(done["state"], "succeeded", "{done:#}");

    let running: Vec<String> = env
        .engine
        .running_containers_of_app(&app)
        .await
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    assert!(
        running.contains(&by_hand),
        "the container started by hand still runs: {running:?}"
    );
    let stop_old = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "stop_old")
        .unwrap();
    assert_eq!(
        stop_old["intent"]["unaccounted"][0],
        by_hand.as_str(),
        "the journal says it was left alone: {stop_old:#}"
    );
    assert!(
        stop_old["intent"]["running"]
            .as_array()
            .unwrap()
            .iter()
            .all(|id| id != by_hand.as_str())
    );
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let listed = view["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == by_hand.as_str())
        .unwrap_or_else(|| panic!("the app page lists it: {view:#}"));
    assert_eq!(listed["accounted_for"], false, "{listed:#}");
    assert!(env.running_digests_of(&app).await.contains(&v2));
    env.cleanup().await;
}

/// v1 serves, deployed from a push; reconciliation sweeps every second.
async fn serving_v1_with_fast_sweeps() -> (TestEnv, String, String, serde_json::Value) {
    let env = TestEnv::builder()
        .server_toml("sweep_interval = \"1s\"")
        .start()
        .await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    (env, app, v1, first)
}

#[tokio::test]
async fn a_serving_container_removed_behind_piers_back_is_redeployed() {
    let (mut env, app, v1, first) = serving_v1_with_fast_sweeps().await;
    env.engine.remove_app_containers(&app).await;
    let again = env
        .latest_final_of(&app, &[first["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(again["trigger"], "reconcile");
    assert_eq!(again["state"], "succeeded", "{again:#}");
    assert_eq!(again["resolved_digest"], v1.as_str());
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    env.pier_mut().restart().await;
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn a_serving_container_that_cannot_be_restored_is_tried_once_not_every_sweep() {
    let (env, app, v1, first) = serving_v1_with_fast_sweeps().await;
    // The image is gone from the registry and from the engine, and so is the container.
    assert_eq!(env.registry().delete_manifest(env.repo(), &v1).await, 202);
    env.engine.remove_app_containers(&app).await;
    env.engine
        .remove_image(&format!("{}@{v1}", env.image()))
        .await;

    let failed = env
        .latest_final_of(&app, &[first["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(
        (failed["trigger"].as_str(), failed["state"].as_str()),
        (Some("reconcile"), Some("failed"))
    );
    // Two more sweeps pass and say why they do nothing; no second attempt is queued.
    let pier = env.pier();
    wait_until("two sweeps report the lost container", DEPLOY, || async {
        (pier.log().matches("restoring it failed").count() >= 2).then_some(())
    })
    .await;
    let reconciles = env
        .deployment_rows(&app)
        .await
        .into_iter()
        .filter(|r| r.trigger == "reconcile")
        .count();
    assert_eq!(reconciles, 1);
    env.cleanup().await;
}
