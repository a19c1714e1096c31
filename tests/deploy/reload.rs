//! Config reload without restart: what a reload changes reaches every part of a
//! running Pier, not only its workers. Apps removed by a reload are no longer shown,
//! matched by pushes or polled; apps added by one are shown, deployed by the next push
//! and polled at once. Real engine, registry and Postgres; reload through `pier reload`.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// Makes the running `pier serve` reload `toml` (the `n`th reload since start).
async fn reload(env: &TestEnv, toml: &str, n: usize) {
    env.reload(toml, n, DEPLOY).await;
}

/// A delivery naming `repo` has been stored (whatever its verdict).
async fn wait_delivery_of(env: &TestEnv, repo: &str) {
    wait_until(&format!("a delivery for {repo}"), DEPLOY, || async {
        let (_, d) = env.api_get("/deliveries?limit=200").await;
        d.to_string().contains(repo).then_some(())
    })
    .await;
}

#[tokio::test]
async fn apps_removed_and_added_by_a_reload_are_followed_by_pages_pushes_and_the_poller() {
    let mut polled = AppSpec::new("polled");
    polled.extra_toml = "poll = \"1s\"".to_owned();
    let env = TestEnv::builder().add_app(polled.clone()).start().await;
    let app = env.app().to_owned();
    let start = env.config_text();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let (code, _) = env.api_get(&format!("/apps/{}", polled.name)).await;
    assert_eq!(code, 200);

    // Both apps leave the config.
    let neither = without_app(&without_app(&start, &app), &polled.name);
    reload(&env, &neither, 1).await;
    for name in [&app, &polled.name] {
        let (code, _) = env.api_get(&format!("/apps/{name}")).await;
        assert_eq!(code, 404, "{name} is gone from the API");
    }
    let (_, index) = http_get(&env.pier_url("/")).await.unwrap();
    assert!(!index.contains(&polled.name), "{index}");
    // A push for either queues nothing now: not through the webhook, not by a poll.
    let before = env.deployment_rows(&app).await.len();
    env.push(&TestImage::healthy("v2"), "main").await;
    env.registry()
        .push(&polled.repo, "main", &TestImage::healthy("p1"))
        .await;
    wait_delivery_of(&env, &polled.repo).await;
    // Absence can only be shown by waiting: three poll intervals, in which the removed
    // app's timer would have queued.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        env.deployment_rows(&app).await.len(),
        before,
        "pushed while removed"
    );
    assert!(
        env.deployment_rows(&polled.name).await.is_empty(),
        "polled while removed"
    );

    // Both come back: the poller finds the polled app's tag at once, and the next push of
    // the other is matched by the webhook.
    reload(&env, &start, 2).await;
    let url = format!("http://127.0.0.1:{}/version", polled.publish_port);
    wait_until("the polled app serves p1", DEPLOY, || async {
        matches!(http_get(&url).await, Some((200, v)) if v == "p1").then_some(())
    })
    .await;
    let rows = env.deployment_rows(&polled.name).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0].trigger, "reconcile",
        "queued by the poller: {rows:?}"
    );
    let (_, index) = http_get(&env.pier_url("/")).await.unwrap();
    assert!(index.contains(&polled.name), "shown again");
    env.push(&TestImage::healthy("v3"), "main").await;
    env.wait_app_version("v3", DEPLOY).await;
    let last = env.deployment_rows(&app).await.pop().unwrap();
    assert_eq!(last.trigger, "webhook", "{last:?}");
    env.cleanup().await;
}
