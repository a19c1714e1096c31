//! Tag rules: an app follows an exact tag, a glob, or a semver range. A range
//! deploys the highest version and a lower version pushed later never rolls it back; a
//! glob follows only matching tags; the delivery says which rule matched. Real registry
//! (its own notifications), real engine, real Postgres.

use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(90);

/// The newest delivery with a push event (not a pull: the registry reports those too) of
/// `tag`, once there is one.
async fn delivery_for_tag(env: &TestEnv, tag: &str) -> (String, String, Value) {
    wait_until(
        &format!("a delivery for tag {tag}"),
        DEPLOY,
        || async move {
            sqlx::query_as::<_, (String, String, Value)>(
                "SELECT verdict, reason, events FROM deliveries
                 WHERE events @> jsonb_build_array(jsonb_build_object('tag', $1::text, 'ignore', null))
                 ORDER BY received_at DESC LIMIT 1",
            )
            .bind(tag)
            .fetch_optional(&env.db.pool)
            .await
            .expect("read deliveries")
        },
    )
    .await
}

async fn requested_tags(env: &TestEnv) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT coalesce(requested_tag, ''), state FROM deployments WHERE app = $1
         ORDER BY created_at",
    )
    .bind(env.app())
    .fetch_all(&env.db.pool)
    .await
    .expect("read deployments")
}

#[tokio::test]
async fn a_semver_app_runs_the_highest_version_and_a_lower_push_never_rolls_it_back() {
    let env = TestEnv::builder()
        .app(|a| {
            a.tag = String::new();
            a.extra_toml = "versions = \">=1.2, <2\"".into();
        })
        .start()
        .await;

    let v13 = env.push(&TestImage::healthy("v1.3.0"), "v1.3.0").await;
    env.wait_app_version("v1.3.0", DEPLOY).await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    // The deployment resolves the pushed tag, never the range.
    assert_eq!(d["requested_tag"], "v1.3.0", "{d:#}");
    assert_eq!(d["resolved_digest"], v13.as_str());
    let (verdict, _, events) = delivery_for_tag(&env, "v1.3.0").await;
    assert_eq!(verdict, "queued");
    assert!(
        events.to_string().contains("semver >=1.2, <2"),
        "the delivery names the rule that matched: {events:#}"
    );

    // A lower version, pushed after: recorded, with why it deployed nothing.
    env.push(&TestImage::healthy("v1.2.5"), "1.2.5").await;
    let (verdict, reason, _) = delivery_for_tag(&env, "1.2.5").await;
    assert_eq!(verdict, "ignored", "{reason}");
    assert!(
        reason.contains("1.2.5 not deployed") && reason.contains("v1.3.0 is newer"),
        "{reason}"
    );
    // Outside the range: not this app's at all.
    env.push(&TestImage::healthy("v2.0.0"), "2.0.0").await;
    let (verdict, reason, _) = delivery_for_tag(&env, "2.0.0").await;
    assert_eq!(verdict, "ignored", "{reason}");
    assert!(reason.contains("no app follows tag `2.0.0`"), "{reason}");
    assert_eq!(
        requested_tags(&env).await,
        vec![("v1.3.0".to_owned(), "succeeded".to_owned())],
        "neither the lower nor the out-of-range version queued anything"
    );
    assert_eq!(env.running_digests_of(env.app()).await, vec![v13.clone()]);
    env.wait_app_version("v1.3.0", Duration::from_secs(5)).await;

    // A higher version in range deploys.
    let v14 = env.push(&TestImage::healthy("v1.4.0"), "1.4.0").await;
    env.wait_app_version("v1.4.0", DEPLOY).await;
    let d2 = env
        .latest_final_of(env.app(), &[d["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["requested_tag"], "1.4.0");
    assert_eq!(d2["resolved_digest"], v14.as_str());
    env.cleanup().await;
}

#[tokio::test]
async fn a_glob_app_follows_only_matching_tags_and_deploys_the_pushed_tag() {
    let env = TestEnv::builder()
        .app(|a| a.tag = "v1.*".into())
        .start()
        .await;

    env.push(&TestImage::healthy("main"), "main").await;
    let (verdict, reason, _) = delivery_for_tag(&env, "main").await;
    assert_eq!(verdict, "ignored");
    assert!(reason.contains("no app follows tag `main`"), "{reason}");

    let v1 = env.push(&TestImage::healthy("v1.0"), "v1.0").await;
    env.wait_app_version("v1.0", DEPLOY).await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d["requested_tag"], "v1.0", "{d:#}");
    assert_eq!(d["resolved_digest"], v1.as_str());
    let (_, _, events) = delivery_for_tag(&env, "v1.0").await;
    assert!(events.to_string().contains("glob v1.*"), "{events:#}");

    env.push(&TestImage::healthy("v2.0"), "v2.0").await;
    let (verdict, _, _) = delivery_for_tag(&env, "v2.0").await;
    assert_eq!(verdict, "ignored");
    // The app page and API say which rule the app follows.
    let (_, app) = env.api_get(&format!("/apps/{}", env.app())).await;
    assert_eq!(app["rule"], "glob v1.*", "{app:#}");
    assert_eq!(requested_tags(&env).await.len(), 1);
    env.wait_app_version("v1.0", Duration::from_secs(5)).await;

    // A manual redeploy of a glob app resolves the tag that serves, never the pattern.
    let url = env.pier_url(&format!("/api/apps/{}/deploy", env.app()));
    let bearer = format!("Bearer {}", env.admin_token);
    let (code, answer) = http_post(&url, &[("Authorization", bearer.as_str())], "")
        .await
        .unwrap();
    assert_eq!(code, 202, "{answer}");
    let again = env
        .latest_final_of(env.app(), &[d["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(again["requested_tag"], "v1.0", "{again:#}");
    assert_eq!(again["state"], "succeeded", "{again:#}");
    assert_eq!(again["resolved_digest"], v1.as_str());
    env.cleanup().await;
}
