//! Promotion. Production (`promote_from` staging, `after` a few seconds) is not
//! deployed by pushes; it gets exactly the digest staging served healthily for `after`,
//! linked to the staging deployment, and never one that failed its soak there.

use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

const DEPLOY: Duration = Duration::from_secs(90);

async fn serves(url: &str, version: &str) {
    wait_until(&format!("{url} serves {version}"), DEPLOY, || async move {
        matches!(http_get(url).await, Some((200, b)) if b == version).then_some(())
    })
    .await
}

async fn latest_final(env: &TestEnv, app: &str, not: &[&str]) -> Value {
    env.latest_final_of(app, not, DEPLOY).await
}

#[tokio::test]
async fn production_gets_exactly_what_staging_proved_and_never_a_digest_that_failed_its_soak() {
    let staging = unique_app("stg");
    let repo = format!("demo/{staging}");
    let mut prod = AppSpec::new("prod");
    prod.repo = repo.clone();
    prod.extra_toml = format!("promote_from = \"{staging}\"\nafter = \"2s\"");
    let prod_name = prod.name.clone();
    let prod_url = format!("http://{}/version", prod.publish());
    let (s, r) = (staging.clone(), repo.clone());
    let env = TestEnv::builder()
        .lease("5s")
        .health_timeout(Duration::from_secs(5))
        .app(move |a| {
            a.name = s;
            a.repo = r;
            a.blue_green("soak = \"6s\"\nsoak_failures = 1\ndrain_timeout = \"2s\"");
        })
        .add_app(prod)
        .start()
        .await;
    let _proxy = env.start_proxy().await;

    // The push deploys staging only; `after` later production gets that digest.
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let s1 = latest_final(&env, &staging, &[]).await;
    assert_eq!(s1["state"], "succeeded", "{s1:#}");
    serves(&prod_url, "v1").await;
    let p1 = latest_final(&env, &prod_name, &[]).await;
    assert_eq!(p1["state"], "succeeded", "{p1:#}");
    assert_eq!(p1["trigger"], "promotion", "{p1:#}");
    assert_eq!(p1["resolved_digest"], v1.as_str(), "{p1:#}");
    assert_eq!(p1["promoted_from"], s1["id"], "{p1:#}");
    let at =
        |v: &Value, k: &str| chrono::DateTime::parse_from_rfc3339(v[k].as_str().unwrap()).unwrap();
    assert!(
        at(&p1, "created_at") >= at(&s1, "finished_at") + chrono::Duration::seconds(2),
        "promoted before staging served it for `after`: {s1:#} {p1:#}"
    );

    // v2 dies during its soak on staging: rolled back there, quarantined, never promoted.
    env.push(&TestImage::dies_after("v2", 2), "main").await;
    let s1_id = s1["id"].as_str().unwrap();
    let s2 = latest_final(&env, &staging, &[s1_id]).await;
    assert_eq!(s2["state"], "rolled_back", "{s2:#}");

    // v3 succeeds on staging and is promoted: production went v1, then v3, nothing else.
    let v3 = env.push(&TestImage::healthy("v3"), "main").await;
    serves(&prod_url, "v3").await;
    let rows = env.deployment_rows(&prod_name).await;
    let digests: Vec<&str> = rows
        .iter()
        .map(|r| r.resolved_digest.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(digests, [v1.as_str(), v3.as_str()], "{rows:?}");
    assert!(rows.iter().all(|r| r.trigger == "promotion"), "{rows:?}");
    env.cleanup().await;
}

/// Staging redeployed with the digest production already runs proves it again, and the
/// promotion that follows changes nothing: it asks no admin to approve a no-op and ends
/// at once, saying why.
#[tokio::test]
async fn promoting_what_production_already_runs_asks_no_approval_and_ends_as_a_no_op() {
    let (admins_toml, [ops, release, _]) = crate::approvals::admins();
    let staging = unique_app("stg");
    let repo = format!("demo/{staging}");
    let mut prod = AppSpec::new("prod");
    prod.repo = repo.clone();
    prod.extra_toml = format!(
        "promote_from = \"{staging}\"\nafter = \"1s\"\n\
         approval = {{ required = 2, from = [\"ops\", \"release\"], expires = \"1h\" }}"
    );
    let prod_name = prod.name.clone();
    let (s, r) = (staging.clone(), repo);
    let env = TestEnv::builder()
        .sources_toml(&admins_toml)
        .app(move |a| {
            a.name = s;
            a.repo = r;
        })
        .add_app(prod)
        .start()
        .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let waiting = latest_final(&env, &prod_name, &[]).await;
    assert_eq!(waiting["state"], "awaiting_approval", "{waiting:#}");
    let first = waiting["id"].as_str().unwrap().to_owned();
    for token in [&ops, &release] {
        let path = format!("/deployments/{first}/approve");
        let (code, body) = crate::approvals::api_post(&env, &path, token, json!({})).await;
        assert_eq!(code, 200, "{body}");
    }
    let p1 = wait_until("the approved promotion succeeds", DEPLOY, || async {
        let (_, d) = env.api_get(&format!("/deployments/{first}")).await;
        (d["state"] == "succeeded").then_some(d)
    })
    .await;
    assert_eq!(p1["resolved_digest"], v1.as_str(), "{p1:#}");

    // Staging again, by hand, with the very digest production runs.
    let (code, body) = crate::approvals::api_post(
        &env,
        &format!("/apps/{staging}/deploy"),
        &env.admin_token,
        json!({ "digest": v1 }),
    )
    .await;
    assert_eq!(code, 202, "{body}");
    let p2 = latest_final(&env, &prod_name, &[&first]).await;
    assert_eq!(p2["trigger"], "promotion", "{p2:#}");
    assert_eq!(p2["state"], "succeeded", "no approval asked: {p2:#}");
    let outcome = p2["outcome"].as_str().unwrap_or_default();
    assert!(outcome.contains("no-op"), "says why: {p2:#}");
    assert!(p2["waiting_for"].is_null(), "{p2:#}");
    let (_, full) = env
        .api_get(&format!("/deployments/{}", p2["id"].as_str().unwrap()))
        .await;
    assert_eq!(full["decisions"], json!([]), "{full:#}");
    env.cleanup().await;
}
