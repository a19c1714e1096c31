//! Webhooks in: a delivery with a wrong token or signature is refused and stores nothing,
//! a bad request gets its own status code, a signed generic delivery deploys the digest it
//! resolves, and a webhook that arrives before the registry moved the tag still deploys the
//! push. Real Docker engine, real Distribution registry sending its own notifications, real
//! Postgres.

use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

async fn latest_final(env: &TestEnv, not: &[&str]) -> Value {
    env.latest_final_of(env.app(), not, DEPLOY).await
}

#[tokio::test]
async fn a_delivery_with_a_wrong_token_or_signature_is_refused_and_stores_nothing() {
    let env = TestEnv::builder().without_notifications().start().await;
    let fixture = std::fs::read("tests/fixtures/distribution_push_v1.json").unwrap();
    let media = "application/vnd.docker.distribution.events.v1+json";
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("local", vec![("Content-Type", media.into())]),
        (
            "local",
            vec![
                ("Content-Type", media.into()),
                ("Authorization", "Bearer wrong".into()),
            ],
        ),
        (
            "local",
            vec![
                ("Content-Type", media.into()),
                (
                    "Authorization",
                    format!("Bearer {}x", env.distribution_token),
                ),
            ],
        ),
        ("gen", vec![("Content-Type", "application/json".into())]),
        (
            "gen",
            vec![
                ("Content-Type", "application/json".into()),
                (
                    "X-Pier-Signature",
                    sign_hmac_sha256("not-the-secret", &fixture),
                ),
            ],
        ),
        (
            "gen",
            vec![
                ("Content-Type", "application/json".into()),
                ("X-Pier-Signature", "sha256=00".into()),
            ],
        ),
    ];
    for (source, headers) in &cases {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (code, body) = env.post_hook(source, &h, &fixture).await;
        assert_eq!(code, 401, "{source} {headers:?}: {body}");
        assert!(!body.contains(&env.distribution_token) && !body.contains(&env.generic_secret));
    }
    for table in ["deliveries", "deployments", "deployment_steps"] {
        let n: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&env.db.pool)
                .await
                .unwrap();
        assert_eq!(n, 0, "{table} must stay empty");
    }
    // The refusals are counted.
    let (_, metrics) = http_get(&env.pier_url("/metrics")).await.unwrap();
    assert!(metrics.contains("result=\"unauthenticated\""), "{metrics}");
    env.cleanup().await;
}

#[tokio::test]
async fn bad_requests_get_their_own_status_codes() {
    let env = TestEnv::builder().without_notifications().start().await;
    let token = format!("Bearer {}", env.distribution_token);
    let media = "application/vnd.docker.distribution.events.v1+json";
    let auth = [("Content-Type", media), ("Authorization", token.as_str())];
    // Authentic but malformed: 400, nothing stored.
    assert_eq!(env.post_hook("local", &auth, b"{not json").await.0, 400);
    // Wrong content type: 415.
    let plain = [
        ("Content-Type", "text/plain"),
        ("Authorization", token.as_str()),
    ];
    assert_eq!(
        env.post_hook("local", &plain, b"{\"events\":[]}").await.0,
        415
    );
    // Too large: 413.
    let big = vec![b' '; 2 << 20];
    assert_eq!(env.post_hook("local", &auth, &big).await.0, 413);
    // Unknown source: 404.
    assert_eq!(env.post_hook("nope", &auth, b"{}").await.0, 404);
    // Authentic, well-formed, nothing to deploy: 200, recorded as ignored.
    let blob = br#"{"events":[{"id":"b1","action":"push","target":{"mediaType":"application/octet-stream","digest":"sha256:00","repository":"demo/x"}}]}"#;
    let (code, body) = env.post_hook("local", &auth, blob).await;
    assert_eq!(code, 200, "{body}");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE verdict = 'ignored'")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM deployments")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
    env.cleanup().await;
}

#[tokio::test]
async fn a_signed_generic_delivery_deploys_the_resolved_digest() {
    let env = TestEnv::builder().without_notifications().start().await;
    let digest = env.push(&TestImage::healthy("g1"), "main").await;
    let body = format!(r#"{{"repository":"{}","tag":"main"}}"#, env.image());
    let (code, answer) = env.post_generic(body.as_bytes()).await;
    assert_eq!(code, 202, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let status_url = answer["deployments"][0]["status_url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(status_url.starts_with("/api/deployments/"));
    env.wait_app_version("g1", DEPLOY).await;
    let d = wait_until("generic deployment final", DEPLOY, || async {
        let (_, d) = env.api_get(status_url.trim_start_matches("/api")).await;
        (d["state"] == "succeeded").then_some(d)
    })
    .await;
    assert_eq!(d["resolved_digest"], digest.as_str());
    env.cleanup().await;
}

/// Distribution notifies before it moves the tag: a resolve right after the webhook can
/// still see the serving digest. Pier waits for the tag to catch up instead of calling the
/// push a no-op.
#[tokio::test]
async fn a_webhook_that_arrives_before_the_tag_moves_still_deploys_the_push() {
    let env = TestEnv::builder().without_notifications().start().await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let body = format!(
        r#"{{"repository":"{}","tag":"main","digest":"{v1}"}}"#,
        env.image()
    );
    assert_eq!(env.post_generic(body.as_bytes()).await.0, 202);
    env.wait_app_version("v1", DEPLOY).await;
    let first = latest_final(&env, &[]).await;

    // v2 exists in the registry, but `main` still names v1 when the webhook arrives.
    let v2 = env.push(&TestImage::healthy("v2"), "staging").await;
    let body = format!(
        r#"{{"repository":"{}","tag":"main","digest":"{v2}"}}"#,
        env.image()
    );
    assert_eq!(env.post_generic(body.as_bytes()).await.0, 202);
    tokio::time::sleep(Duration::from_millis(300)).await; // the registry's lag, simulated
    // The tag moves with one PUT: building the image again could take longer than Pier
    // waits for the tag on a loaded machine.
    env.registry().retag(env.repo(), &v2, "main").await;

    let second = latest_final(&env, &[first["id"].as_str().unwrap()]).await;
    assert_eq!(second["state"], "succeeded", "{second:#}");
    assert_eq!(second["resolved_digest"], v2.as_str(), "{second:#}");
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    env.cleanup().await;
}
