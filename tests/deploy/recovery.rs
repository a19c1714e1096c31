//! Recovery paths fail loudly: a journal entry that does not decode is never read as
//! "nothing to do", and every log line of a deployment carries its ids.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_rollback_that_cannot_read_its_journal_fails_the_deployment_loudly() {
    let mut env = TestEnv::builder()
        .lease("3s")
        .health_timeout(Duration::from_secs(3))
        .pier_env("PIER_LOG_FORMAT", "json")
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded");

    // v2 never becomes healthy; Pier stops before its health step, v1 already stopped.
    env.pier_mut()
        .restart_with(|c| c.env("PIER_PAUSE_AT", "health:before"))
        .await;
    env.push(&TestImage::no_health_file("v2"), "main").await;
    env.pier()
        .wait_for_log("PIER_PAUSE_AT reached", DEPLOY)
        .await;
    env.pier_mut().kill();
    let crashed = env.deployment_rows(&app).await.pop().unwrap();
    assert_eq!(crashed.state, "running");

    // What the rollback needs (which containers stop_old stopped) no longer decodes.
    let broken = sqlx::query(
        "UPDATE deployment_steps SET intent = '{\"running\": \"not a list\"}'
         WHERE deployment_id = $1::uuid AND step = 'stop_old'",
    )
    .bind(&crashed.id)
    .execute(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(broken.rows_affected(), 1);

    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_PAUSE_AT"))
        .await;
    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    let outcome = done["outcome"].as_str().unwrap_or_default();
    assert!(
        outcome.contains("ROLLBACK FAILED") && outcome.contains("stop_old"),
        "the outcome says the rollback failed and where: {outcome}"
    );
    let error = done["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("health:"), "the cause is kept: {error}");

    // The alert is in the log, as JSON, inside the deployment's span.
    let log = env.pier().log();
    let alert: serde_json::Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("ALERT"))
        })
        .unwrap_or_else(|| panic!("no ALERT line in the JSON log:\n{}", tail(&log, 30)));
    assert_eq!(alert["level"], "ERROR");
    assert_eq!(alert["span"]["id"], crashed.id.as_str(), "{alert:#}");
    assert_eq!(alert["span"]["app"], app.as_str(), "{alert:#}");
    env.cleanup().await;
}

#[tokio::test]
async fn every_log_line_of_a_step_carries_the_deployment_and_the_step() {
    let env = TestEnv::builder()
        .pier_env("PIER_LOG_FORMAT", "json")
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let done = env.latest_final_of(&app, &[], DEPLOY).await;
    let id = done["id"].as_str().unwrap().to_owned();

    let log = env.pier().log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(!lines.is_empty(), "JSON log lines:\n{}", tail(&log, 20));
    let of_deployment: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| {
            v["spans"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["id"] == id.as_str()))
        })
        .collect();
    assert!(
        of_deployment
            .iter()
            .any(|v| v["fields"]["message"] == "deployment finished"),
        "the final line is in the deployment's span: {of_deployment:#?}"
    );
    let request = lines
        .iter()
        .find(|v| v["span"]["name"] == "request")
        .unwrap_or_else(|| panic!("no line in a request span:\n{}", tail(&log, 30)));
    assert!(
        request["span"]["route"].as_str().is_some(),
        "requests are named by their route: {request:#}"
    );
    env.cleanup().await;
}
