//! Waiting costs nothing. With one deployment waiting for approval, one for a
//! window an hour away, and a promoted app whose source serves, an idle Pier sends Postgres
//! no statement between sweeps: every statement goes through a counting relay.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// Waits until no statement has gone through for `quiet`; returns the count then.
async fn settled(proxy: &PgProxy, quiet: Duration) -> u64 {
    wait_until("pier settles", Duration::from_secs(30), || async {
        let before = proxy.statements();
        tokio::time::sleep(quiet).await;
        (proxy.statements() == before).then_some(before)
    })
    .await
}

async fn latest_state(env: &TestEnv, app: &str, state: &str) {
    wait_until(&format!("{app} {state}"), DEPLOY, || async move {
        let (_, v) = env.api_get(&format!("/apps/{app}")).await;
        (v["latest_deployment"]["state"].as_str()? == state).then_some(())
    })
    .await
}

#[tokio::test]
async fn deployments_waiting_for_approval_and_a_window_and_a_promotion_send_nothing_while_idle() {
    let open = chrono::Utc::now() + chrono::Duration::hours(1);
    let window = format!(
        "daily {}-{} UTC",
        open.format("%H:%M:%S"),
        (open + chrono::Duration::minutes(30)).format("%H:%M:%S")
    );
    let mut windowed = AppSpec::new("win");
    windowed.extra_toml = format!("windows = [\"{window}\"]");
    let (win_name, win_repo) = (windowed.name.clone(), windowed.repo.clone());
    let mut promoted = AppSpec::new("prod");
    promoted.extra_toml = format!("promote_from = \"{win_name}\"\nafter = \"1h\"");
    promoted.repo = win_repo.clone();
    let token = random_hex(32);
    let env = TestEnv::builder()
        .workers(2)
        .server_toml("sweep_interval = \"1h\"")
        .sources_toml(&format!(
            "[[admins]]\nname = \"ops\"\ntoken = \"{token}\"\n"
        ))
        .app(|a| a.extra_toml = "approval = { required = 1, from = [\"ops\"] }".into())
        .add_app(windowed)
        .add_app(promoted)
        .without_pier()
        .start()
        .await;
    let proxy = PgProxy::start(&env.db.url).await;
    let config = env
        .config_toml()
        .replace(&env.db.url, &proxy.url_for(&env.db.url));
    let pier = PierCommand::new(&config).start().await;
    pier.wait_for_log("pier running", Duration::from_secs(10))
        .await;
    let mut env = env;
    env.pier = Some(pier);

    env.push(&TestImage::healthy("v1"), "main").await;
    env.registry()
        .push(&win_repo, "main", &TestImage::healthy("w1"))
        .await;
    latest_state(&env, env.app(), "awaiting_approval").await;
    latest_state(&env, &win_name, "awaiting_window").await;

    settled(&proxy, Duration::from_millis(500)).await;
    let before = proxy.statements();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        proxy.statements() - before,
        0,
        "statements sent in 5 s while deployments wait"
    );
    env.cleanup().await;
}
