//! Postgres goes away in the middle of a deployment: webhooks get 503 (so the registry
//! retries and no push is lost), Pier reconnects, and the deployment finishes.
//! Its own test binary: it stops the shared Postgres, which no other test may see.

mod support;

use std::process::Command;
use std::time::Duration;

use support::*;

const DEPLOY: Duration = Duration::from_secs(90);

/// `pg_ctlcluster 15 main <action>`, or the command in PIER_TEST_PG_CTL.
fn postgres(action: &str) {
    let ctl = std::env::var("PIER_TEST_PG_CTL").unwrap_or_else(|_| "pg_ctlcluster 15 main".into());
    let mut parts = ctl.split_whitespace();
    let status = Command::new(parts.next().unwrap())
        .args(parts)
        .arg(action)
        .status()
        .expect("run the Postgres control command");
    assert!(status.success(), "{ctl} {action} failed");
}

/// Starts Postgres again however the test ends, so that no later test finds it down.
struct Restart;

impl Drop for Restart {
    fn drop(&mut self) {
        postgres("start");
    }
}

#[tokio::test]
async fn postgres_restarted_mid_deployment_is_survived_and_no_push_is_lost() {
    let env = TestEnv::start().await;
    let app = env.app().to_owned();
    let v1 = env.push(&TestImage::slow_start("v1", 3), "main").await;
    let running = wait_until("v1 is in its health step", DEPLOY, || async {
        let rows = env.deployment_rows(&app).await;
        let r = rows.into_iter().find(|r| r.state == "running")?;
        let health: Option<String> = sqlx::query_scalar(
            "SELECT state FROM deployment_steps WHERE deployment_id = $1::uuid AND step = 'health'",
        )
        .bind(&r.id)
        .fetch_optional(&env.db.pool)
        .await
        .ok()?;
        health.map(|_| r)
    })
    .await;

    postgres("stop");
    let restart = Restart;
    let outage = async {
        // While the database is down: webhooks are refused with 503, readiness says why.
        let body = format!(r#"{{"repository":"{}","tag":"main"}}"#, env.image());
        let (code, answer) = env.post_generic(body.as_bytes()).await;
        assert_eq!(code, 503, "{answer}");
        assert!(
            !answer.contains("pier:"),
            "no connection details leak: {answer}"
        );
        // Readiness answers within its probe's own 2 s bound; the client waits longer,
        // since on a loaded machine the answer itself can take more than that to arrive.
        let (code, ready) = http_get_within(&env.pier_url("/readyz"), Duration::from_secs(15))
            .await
            .expect("/readyz answers while the database is down");
        assert_eq!(code, 503, "{ready}");
        assert!(ready.contains("database: unavailable"), "{ready}");
        // A real push now: the registry's notification gets 503 and is retried.
        env.push(&TestImage::healthy("v2"), "main").await
    };
    let v2 = tokio::time::timeout(Duration::from_secs(60), outage).await;
    drop(restart);
    let v2 = v2.expect("the outage checks finished");

    // The interrupted deployment finishes, and the push made during the outage deploys.
    let first = env.deployment_final(&running.id, DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    assert_eq!(first["resolved_digest"], v1.as_str());
    env.wait_app_version("v2", DEPLOY).await;
    let last = env.latest_final_of(&app, &[&running.id], DEPLOY).await;
    assert_eq!(last["state"], "succeeded", "{last:#}");
    assert_eq!(last["resolved_digest"], v2.as_str());
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}
