//! A push to a real registry deploys exactly that digest.
//! Real Docker engine, real Distribution registry sending its own notifications, real Postgres.

use std::time::Duration;

use crate::support::*;
use serde_json::Value;
use sha2::Digest as _;

const DEPLOY: Duration = Duration::from_secs(60);

async fn latest_final(env: &TestEnv, not: &[&str]) -> Value {
    env.latest_final_of(env.app(), not, DEPLOY).await
}

async fn running_digests(env: &TestEnv) -> Vec<String> {
    env.running_digests_of(env.app()).await
}

/// The container a deployment created, from its journal.
async fn created_container(env: &TestEnv, deployment: &str) -> String {
    let (_, dep) = env.api_get(&format!("/deployments/{deployment}")).await;
    dep["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "create")
        .and_then(|s| s["result"]["id"].as_str())
        .expect("a created container in the journal")
        .to_owned()
}

#[tokio::test]
async fn push_of_v1_then_v2_runs_exactly_the_pushed_digest_in_one_container() {
    let env = TestEnv::builder()
        .app(|a| {
            a.extra_toml =
                "memory = \"64m\"\ncpus = 0.5\nrestart = \"always\"\npids_limit = 512".into()
        })
        .start()
        .await;

    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = latest_final(&env, &[]).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    assert_eq!(d1["resolved_digest"], v1.as_str());
    assert_eq!(d1["trigger"], "webhook");
    assert_eq!(running_digests(&env).await, vec![v1.clone()]);

    // The container carries the contract's labels, pinned to the digest.
    let containers = env.engine.containers_of_app(env.app()).await;
    assert_eq!(containers.len(), 1);
    let labels = containers[0].labels.clone().unwrap_or_default();
    assert_eq!(labels.get("pier.managed").map(String::as_str), Some("true"));
    assert_eq!(labels.get("pier.app").map(String::as_str), Some(env.app()));
    assert_eq!(
        labels.get("pier.deployment"),
        d1["id"].as_str().map(str::to_owned).as_ref()
    );
    assert_eq!(
        containers[0].image.as_deref(),
        Some(format!("{}@{v1}", env.image()).as_str())
    );
    // Limits and restart policy from the config reach the engine.
    let inspect = docker()
        .await
        .inspect_container(containers[0].id.as_deref().unwrap(), None)
        .await
        .unwrap();
    let host = inspect.host_config.unwrap();
    assert_eq!(host.memory, Some(64 << 20));
    assert_eq!(host.nano_cpus, Some(500_000_000));
    assert_eq!(
        host.restart_policy
            .and_then(|r| r.name)
            .map(|n| n.to_string()),
        Some("always".to_owned())
    );
    // Hardened by default: no privilege escalation, a pids limit (here set to 512).
    assert_eq!(host.pids_limit, Some(512));
    assert_eq!(
        host.security_opt.unwrap_or_default(),
        vec!["no-new-privileges:true".to_owned()]
    );
    // The journal keeps a keyed hash of the env values, never a plain one that would let a
    // reader of the page confirm a guessed value.
    let steps = env
        .deployment_final(d1["id"].as_str().unwrap(), DEPLOY)
        .await["steps"]
        .clone();
    let create = steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "create")
        .unwrap()
        .clone();
    let plain = hex::encode(sha2::Sha256::digest(b"GREETING=hello"));
    assert!(create["intent"].get("env_sha256").is_none(), "{create:#}");
    let keyed = create["intent"]["env_hmac"].as_str().unwrap_or_default();
    assert_eq!(keyed.len(), 64, "{create:#}");
    assert_ne!(keyed, plain);
    let env_vars = inspect.config.and_then(|c| c.env).unwrap_or_default();
    assert!(
        env_vars.contains(&"GREETING=hello".to_owned()),
        "{env_vars:?}"
    );

    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    assert_ne!(v1, v2);
    env.wait_app_version("v2", DEPLOY).await;
    let d2 = latest_final(&env, &[d1["id"].as_str().unwrap()]).await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    assert_eq!(d2["resolved_digest"], v2.as_str());

    // Exactly one container of the app remains: the old generation was retired.
    let all = env.engine.containers_of_app(env.app()).await;
    assert_eq!(all.len(), 1, "containers left: {all:#?}");
    assert_eq!(running_digests(&env).await, vec![v2.clone()]);

    // The journal has every step, each with its intent before and result after.
    let (_, dep) = env
        .api_get(&format!("/deployments/{}", d2["id"].as_str().unwrap()))
        .await;
    let steps: Vec<&str> = dep["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "resolve", "pull", "verify", "network", "create", "stop_old", "start", "health",
            "switch", "retire"
        ]
    );
    assert!(
        dep["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "succeeded")
    );

    // The deployment's page says which container the stop step stopped: v1's.
    let v1_container = created_container(&env, d1["id"].as_str().unwrap()).await;
    let (_, page) =
        http_get(&env.pier_url(&format!("/deployments/{}", d2["id"].as_str().unwrap())))
            .await
            .unwrap();
    assert!(
        page.contains(&format!(
            "Stop the previous generation ({})",
            &v1_container[..12]
        )),
        "the stop step names v1's container {v1_container}"
    );

    // The status page and the API tell the same story as the engine.
    let (_, app) = env.api_get(&format!("/apps/{}", env.app())).await;
    assert_eq!(app["generation"]["digest"], v2.as_str());
    let (code, page) = http_get(&env.pier_url("/")).await.unwrap();
    assert_eq!(code, 200);
    assert!(page.contains(env.app()), "status page lists the app");
    assert!(
        page.contains(&v2["sha256:".len().."sha256:".len() + 12]),
        "status page shows the serving digest"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_push_that_never_becomes_healthy_leaves_the_previous_version_serving() {
    let env = TestEnv::builder()
        .health_timeout(Duration::from_secs(3))
        .start()
        .await;
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let good = latest_final(&env, &[]).await;
    assert_eq!(good["state"], "succeeded");

    let bad = env.push(&TestImage::no_health_file("v3"), "main").await;
    let failed = latest_final(&env, &[good["id"].as_str().unwrap()]).await;
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert_eq!(failed["resolved_digest"], bad.as_str());
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("health") && error.contains("404"),
        "the reason names the probe: {error}"
    );

    // v2 still answers, from the same container, and no candidate is left behind.
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    let all = env.engine.containers_of_app(env.app()).await;
    assert_eq!(all.len(), 1, "containers left: {all:#?}");
    assert_eq!(running_digests(&env).await, vec![v2.clone()]);
    let (_, app) = env.api_get(&format!("/apps/{}", env.app())).await;
    assert_eq!(app["generation"]["digest"], v2.as_str());
    assert_eq!(app["generation"]["deployment_id"], good["id"]);
    env.cleanup().await;
}

#[tokio::test]
async fn a_container_that_exits_at_once_fails_fast_with_its_logs() {
    let env = TestEnv::builder()
        .health_timeout(Duration::from_secs(30))
        .app(|a| {
            a.env
                .insert("API_TOKEN".into(), "env:PIER_TEST_APP_TOKEN".into());
        })
        .pier_env("PIER_TEST_APP_TOKEN", "s3cret-app-token")
        .start()
        .await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let good = latest_final(&env, &[]).await;

    env.push(&TestImage::exits_at_once("v2"), "main").await;
    let failed = latest_final(&env, &[good["id"].as_str().unwrap()]).await;
    assert_eq!(failed["state"], "failed", "{failed:#}");
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains("exited"), "{error}");
    // The candidate's last log lines are kept, with secret env values masked.
    let logs = failed["candidate_logs"].as_str().unwrap_or_default();
    assert!(logs.contains("GREETING=hello"), "{logs}");
    assert!(logs.contains("API_TOKEN=***"), "{logs}");
    assert!(!logs.contains("s3cret-app-token"), "{logs}");
    // Also when the app printed it base64-encoded; and a NUL byte loses nothing.
    assert!(logs.contains("b64:"), "{logs}");
    assert!(!logs.contains("czNjcmV0LWFwcC10b2tlbg"), "{logs}");
    assert!(logs.contains("nul:\u{fffd}:end"), "{logs}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(running_digests(&env).await, vec![v1]);
    assert_eq!(env.engine.containers_of_app(env.app()).await.len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn redeploy_runs_a_new_deployment_of_the_same_digest() {
    let env = TestEnv::start().await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = latest_final(&env, &[]).await;
    let first_container = env.engine.running_containers_of_app(env.app()).await[0]
        .id
        .clone();

    // Never open: without a session it sends to sign-in; a wrong bearer token is 401.
    let path = format!("/apps/{}/redeploy", env.app());
    let url = env.pier_url(&path);
    let a = post_anonymous(&url, "", &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login")));
    let a = post_anonymous(&url, "", &[("Authorization", "Bearer wrong")]).await;
    assert_eq!(a.status, 401);

    let admin = SignedIn::new(&env.pier_url(""), "admin", &env.admin_token).await;
    let token = admin.form_token(&format!("/apps/{}", env.app())).await;
    let a = admin.post(&path, &[("form_token", &token)], &[]).await;
    assert_eq!(a.status, 303, "redeploy answered {a:?}");
    let second = latest_final(&env, &[first["id"].as_str().unwrap()]).await;
    assert_eq!(second["state"], "succeeded", "{second:#}");
    assert_eq!(second["trigger"], "manual");
    assert_eq!(second["resolved_digest"], v1.as_str());
    assert_ne!(second["id"], first["id"]);

    // It really ran again: a new container of the same digest replaced the first.
    let running = env.engine.running_containers_of_app(env.app()).await;
    assert_eq!(running.len(), 1);
    assert_ne!(running[0].id.as_deref(), first_container.as_deref());
    assert_eq!(running_digests(&env).await, vec![v1]);
    env.wait_app_version("v1", Duration::from_secs(5)).await;
    env.cleanup().await;
}

#[tokio::test]
async fn an_index_deploys_the_manifest_for_the_engines_platform() {
    let env = TestEnv::start().await;
    let (index, amd64) = env.registry().push_index(env.repo(), "main", "multi").await;
    env.wait_app_version("multi", DEPLOY).await;
    let d = latest_final(&env, &[]).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    // Pinned to the platform manifest, not the index: that is what the engine records.
    assert_eq!(d["resolved_digest"], amd64.as_str());
    assert_eq!(d["platform"], "linux/amd64");
    let (_, dep) = env
        .api_get(&format!("/deployments/{}", d["id"].as_str().unwrap()))
        .await;
    let resolve = &dep["steps"][0];
    assert_eq!(resolve["step"], "resolve");
    assert_eq!(resolve["result"]["index_digest"], index.as_str());
    assert_eq!(running_digests(&env).await, vec![amd64]);
    env.cleanup().await;
}

#[tokio::test]
async fn the_cli_deploys_a_pinned_digest_even_after_the_tag_moved() {
    let env = TestEnv::start().await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = latest_final(&env, &[]).await;
    env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let second = latest_final(&env, &[first["id"].as_str().unwrap()]).await;

    // Roll back to v1 by digest, while `main` names v2.
    let out = env
        .pier()
        .run_cli(&["deploy", env.app(), "--digest", &v1])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let third = latest_final(
        &env,
        &[
            first["id"].as_str().unwrap(),
            second["id"].as_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(third["state"], "succeeded", "{third:#}");
    assert_eq!(third["resolved_digest"], v1.as_str());
    assert_eq!(third["pinned"], true);
    env.wait_app_version("v1", Duration::from_secs(10)).await;

    // `pier status --json` reads the same rows.
    let out = env.pier().run_cli(&["status", "--json"]).await;
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status[0]["generation"]["digest"], v1.as_str());

    // A digest the registry does not have fails at once, and says so; v1 keeps serving.
    let missing = format!("sha256:{}", "0".repeat(64));
    let out = env
        .pier()
        .run_cli(&["deploy", env.app(), "--digest", &missing])
        .await;
    assert!(out.status.success());
    let fourth = latest_final(
        &env,
        &[
            first["id"].as_str().unwrap(),
            second["id"].as_str().unwrap(),
            third["id"].as_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(fourth["state"], "failed");
    assert!(
        fourth["error"]
            .as_str()
            .unwrap()
            .contains("manifest unknown"),
        "{fourth:#}"
    );
    env.wait_app_version("v1", Duration::from_secs(5)).await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_registry_with_basic_auth_is_resolved_and_pulled_with_the_configured_credentials() {
    let password = "reg-s3cret-passw0rd";
    let env = TestEnv::builder()
        .registry_auth("pier", password)
        .start()
        .await;
    // This registry refuses anonymous requests.
    let (code, _) = http_get(&format!("{}/v2/", env.registry().url()))
        .await
        .unwrap();
    assert_eq!(code, 401);

    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d = latest_final(&env, &[]).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], v1.as_str());

    // The password shows nowhere Pier writes: its log, its pages, its API.
    let id = d["id"].as_str().unwrap();
    assert!(!env.pier().log().contains(password));
    for path in [
        "/".to_owned(),
        format!("/deployments/{id}"),
        format!("/apps/{}", env.app()),
    ] {
        let (_, page) = http_get(&env.pier_url(&path)).await.unwrap();
        assert!(!page.contains(password), "{path}");
    }
    let (_, api) = env.api_get(&format!("/deployments/{id}")).await;
    assert!(!api.to_string().contains(password));
    env.cleanup().await;
}

#[tokio::test]
async fn an_image_whose_labels_claim_to_be_piers_is_refused_before_anything_is_created() {
    let env = TestEnv::start().await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let good = latest_final(&env, &[]).await;

    env.push(&TestImage::spoofs_labels("v2"), "main").await;
    let refused = latest_final(&env, &[good["id"].as_str().unwrap()]).await;
    assert_eq!(refused["state"], "failed", "{refused:#}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("verify:") && error.contains("pier.app, pier.managed"),
        "{error}"
    );
    let steps = env
        .deployment_final(refused["id"].as_str().unwrap(), DEPLOY)
        .await["steps"]
        .clone();
    assert!(
        steps
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["step"] != "create"),
        "nothing was created: {steps:#}"
    );
    assert_eq!(running_digests(&env).await, vec![v1]);
    assert_eq!(env.engine.containers_of_app(env.app()).await.len(), 1);
    env.cleanup().await;
}
