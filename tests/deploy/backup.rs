//! Pier's own state is its database: a `pg_dump` of it, restored with `pg_restore` into a
//! new database, serves the same history to a new Pier, and the next push deploys there.
//! Real `pg_dump`/`pg_restore` (the server's version), real registry, real engine.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// `program args…` to completion; panics with its output unless it succeeded.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e} (is postgresql-client installed?)"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The backup and restore the docs give: a custom-format dump, restored without owners.
fn dump_and_restore(from: &str, to: &str, file: &Path) {
    let file = file.to_str().unwrap();
    run(
        "pg_dump",
        &[
            "--format=custom",
            "--no-owner",
            "--file",
            file,
            "--dbname",
            from,
        ],
    );
    run(
        "pg_restore",
        &[
            "--no-owner",
            "--exit-on-error",
            "--single-transaction",
            "--dbname",
            to,
            file,
        ],
    );
}

/// What an operator reads of the history through the API: the app's deployments and what
/// serves, one deployment with its journal, and the deliveries log. (The app's answer also
/// carries the engine's live view, "Up 3 seconds", which is not history.)
async fn history(env: &TestEnv, deployment: &str) -> Vec<serde_json::Value> {
    let get = |path: String| async move {
        let (status, body) = env.api_get(&path).await;
        assert_eq!(status, 200, "GET /api{path}: {body}");
        body
    };
    let app = get(format!("/apps/{}", env.app())).await;
    let stored = [
        "deployments",
        "generation",
        "latest_deployment",
        "pin",
        "reconcile_actions",
    ]
    .map(|key| app[key].clone());
    let mut all = stored.to_vec();
    all.push(get(format!("/deployments/{deployment}")).await);
    all.push(get("/deliveries".to_owned()).await);
    all
}

#[tokio::test]
async fn a_dump_restored_into_a_new_database_serves_the_same_history_and_the_next_push_deploys() {
    let mut env = TestEnv::start().await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    let id = first["id"].as_str().unwrap().to_owned();
    let before = history(&env, &id).await;
    let page = http_get(&env.pier_url(&format!("/deployments/{id}")))
        .await
        .expect("the deployment's page");
    assert_eq!(page.0, 200);

    // The old Pier stops; a new one starts on the restored copy (same config otherwise).
    let code = env.pier_mut().terminate(Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{}", tail(&env.pier().log(), 30));
    let dir = tempfile::tempdir().unwrap();
    let restored = TestDb::create().await;
    dump_and_restore(&env.db.url, &restored.url, &dir.path().join("pier.dump"));
    let config = env
        .config_toml()
        .replace(&env.pier_database_url, &restored.url);
    assert_ne!(
        config,
        env.config_toml(),
        "the config names the restored database"
    );
    let mut old = std::mem::replace(&mut env.db, restored);
    old.cleanup().await;
    env.pier_database_url = env.db.url.clone();
    env.start_pier().await;

    assert_eq!(history(&env, &id).await, before, "the same history");
    let again = http_get(&env.pier_url(&format!("/deployments/{id}")))
        .await
        .expect("the deployment's page");
    assert_eq!(again.0, 200);
    for step in ["resolve", "pull", "start", "health"] {
        assert!(again.1.contains(step), "the page shows the journal: {step}");
    }

    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let next = env.latest_final_of(&app, &[&id], DEPLOY).await;
    assert_eq!(next["state"], "succeeded", "{next:#}");
    assert_eq!(next["resolved_digest"], v2.as_str(), "{next:#}");
    assert_eq!(env.running_digests_of(&app).await, [v2]);
    env.cleanup().await;
}
