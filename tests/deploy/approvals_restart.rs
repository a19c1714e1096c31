//! Waiting is a state in Postgres, never a sleeping task. Pier is SIGKILLed while
//! one deployment waits for approval and another for its window; after the restart both
//! still wait, then each runs exactly once (approved with `pier approve`, and when its
//! window opens).

use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

async fn latest_of(env: &TestEnv, app: &str, state: &str) -> Value {
    wait_until(
        &format!("{app}'s latest deployment {state}"),
        DEPLOY,
        || async move {
            let (_, v) = env.api_get(&format!("/apps/{app}")).await;
            let d = v.get("latest_deployment")?.clone();
            (d.get("state")?.as_str()? == state).then_some(d)
        },
    )
    .await
}

async fn steps_of(env: &TestEnv, id: &str) -> Vec<(String, i32)> {
    sqlx::query_as("SELECT step, replays FROM deployment_steps WHERE deployment_id = $1::uuid")
        .bind(id)
        .fetch_all(&env.db.pool)
        .await
        .expect("read steps")
}

#[tokio::test]
async fn after_a_sigkill_waiting_deployments_still_wait_and_each_runs_exactly_once() {
    let token = random_hex(32);
    let open = chrono::Utc::now() + chrono::Duration::seconds(30);
    let window = format!(
        "daily {}-{} UTC",
        open.format("%H:%M:%S"),
        (open + chrono::Duration::hours(1)).format("%H:%M:%S")
    );
    let mut windowed = AppSpec::new("win");
    windowed.extra_toml = format!("windows = [\"{window}\"]");
    let windowed_url = format!("http://{}/version", windowed.publish());
    let windowed_name = windowed.name.clone();
    let windowed_repo = windowed.repo.clone();
    let mut env = TestEnv::builder()
        .sources_toml(&format!(
            "[[admins]]\nname = \"ops\"\ntoken = \"{token}\"\n"
        ))
        .app(|a| {
            a.extra_toml = "approval = { required = 1, from = [\"ops\"] }".into();
        })
        .add_app(windowed)
        .start()
        .await;
    let approved = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.registry()
        .push(&windowed_repo, "main", &TestImage::healthy("w1"))
        .await;
    let a = latest_of(&env, &approved, "awaiting_approval").await;
    let w = latest_of(&env, &windowed_name, "awaiting_window").await;

    env.pier_mut().kill();
    env.start_pier().await;
    for (app, d, state) in [
        (&approved, &a, "awaiting_approval"),
        (&windowed_name, &w, "awaiting_window"),
    ] {
        let again = latest_of(&env, app, state).await;
        assert_eq!(again["id"], d["id"], "the same deployment waits: {again:#}");
        assert_eq!(again["attempt"], 0, "{again:#}");
        assert!(steps_of(&env, d["id"].as_str().unwrap()).await.is_empty());
    }

    // `pier approve ID --as ops`, a client of the restarted server with ops's own token.
    let a_id = a["id"].as_str().unwrap().to_owned();
    let home = tempfile::tempdir().expect("tempdir");
    let url = env.pier_url("");
    let approve = |t: String| {
        let (home, url, a_id) = (home.path().to_owned(), url.clone(), a_id.clone());
        async move {
            let env = [("PIER_URL", url.as_str()), ("PIER_TOKEN", t.as_str())];
            run_pier_client(&home, &env, &["approve", &a_id, "--as", "ops"]).await
        }
    };
    let out = approve(random_hex(32)).await;
    assert!(!out.status.success(), "a wrong token approves nothing");
    let out = approve(token.clone()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.wait_app_version("v1", DEPLOY).await;
    wait_until(&format!("{windowed_url} serves w1"), DEPLOY, || async {
        matches!(http_get(&windowed_url).await, Some((200, b)) if b == "w1").then_some(())
    })
    .await;
    for app in [&approved, &windowed_name] {
        // A recreate container answers before its deployment's health, switch and retire
        // are journaled: wait for the deployment to end before reading its rows.
        latest_of(&env, app, "succeeded").await;
        let rows = env.deployment_rows(app).await;
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].state, "succeeded", "{rows:?}");
        assert_eq!(rows[0].attempt, 1, "ran once: {rows:?}");
        let steps = steps_of(&env, &rows[0].id).await;
        assert!(steps.iter().all(|(_, replays)| *replays == 0), "{steps:?}");
        assert_eq!(env.running_digests_of(app).await.len(), 1);
    }
    let started = env.deployment_rows(&windowed_name).await[0]
        .started_at
        .unwrap();
    // The window is written to the second: it opened at `open` without its fraction.
    assert!(
        started.timestamp() >= open.timestamp(),
        "started {started} before its window {open}"
    );
    env.cleanup().await;
}
