//! Several services per app. A `web` and a `worker` built from the image one push
//! names are deployed as one generation: both created, started and healthy, then switched
//! together, or neither is. Pier killed between the services' creates and starts converges
//! to one container per service. A worker with its own repository runs the digest that
//! repository has at the pushed tag, pulled and verified before anything is created.
//! Real engine, registry and Postgres.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

/// A worker that runs until stopped, except in an image whose version is `fail_in`: there
/// it exits at once, as a worker with a bad setting would.
fn services_toml(fail_in: &str) -> String {
    format!(
        "service = \"web\"\n\
         [apps.services.worker]\n\
         command = [\"/bin/busybox\", \"sh\", \"-c\", \"trap 'exit 0' TERM; \
         if /bin/busybox grep -qx {fail_in} /www/version; then echo worker cannot start; exit 3; fi; \
         /bin/busybox sleep 3600 & wait\"]\n\
         env = {{ ROLE = \"worker\", GREETING = \"hi from the worker\" }}\n\
         settle = \"1500ms\"\n"
    )
}

async fn env_with(crash: Option<&str>) -> TestEnv {
    let mut b = TestEnv::builder().lease("3s").app(|a| {
        a.extra_toml = services_toml("v2");
        a.env.insert("SHARED".into(), "for every service".into());
    });
    if let Some(point) = crash {
        b = b.pier_env("PIER_CRASH_AT", point);
    }
    b.start().await
}

async fn inspect(id: &str) -> bollard::models::ContainerInspectResponse {
    docker().await.inspect_container(id, None).await.unwrap()
}

/// The app's containers by service label: exactly one per service, `(service, id, running)`.
async fn one_per_service(env: &TestEnv) -> Vec<(String, String, bool)> {
    let all = env.engine.containers_of_app(env.app()).await;
    let mut out: Vec<(String, String, bool)> = all
        .iter()
        .map(|c| {
            let labels = c.labels.clone().unwrap_or_default();
            (
                labels.get("pier.service").cloned().unwrap_or_default(),
                c.id.clone().unwrap(),
                c.state.as_ref().map(|s| s.to_string()) == Some("running".to_owned()),
            )
        })
        .collect();
    out.sort();
    let services: Vec<&str> = out.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(services, ["web", "worker"], "{all:#?}");
    out
}

#[tokio::test]
async fn a_two_service_app_deploys_both_on_the_app_network_and_shows_both() {
    let env = env_with(None).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let d1_id = d1["id"].as_str().unwrap().to_owned();

    let found = one_per_service(&env).await;
    let network = format!("pier-{app}");
    for (service, id, running) in &found {
        assert!(running, "{service} is not running");
        let c = inspect(id).await;
        let labels = c
            .config
            .as_ref()
            .unwrap()
            .labels
            .clone()
            .unwrap_or_default();
        assert_eq!(labels.get("pier.deployment"), Some(&d1_id));
        // Each on the app's own network, under its service name.
        let nets = c.network_settings.unwrap().networks.unwrap();
        assert_eq!(nets.keys().collect::<Vec<_>>(), [&network], "{service}");
        let aliases = nets[&network].aliases.clone().unwrap_or_default();
        assert!(aliases.contains(service), "{service}: {aliases:?}");
    }
    // The worker got its own command, the app-wide env, and its own env where it sets a
    // key the app sets too.
    let worker = inspect(&found[1].1).await.config.unwrap();
    assert_eq!(worker.entrypoint.unwrap()[0], "/bin/busybox");
    let env_vars = worker.env.unwrap_or_default();
    for want in [
        "ROLE=worker",
        "SHARED=for every service",
        "GREETING=hi from the worker",
    ] {
        assert!(env_vars.contains(&want.to_owned()), "{want}: {env_vars:?}");
    }
    assert!(
        !env_vars.contains(&"GREETING=hello".to_owned()),
        "{env_vars:?}"
    );
    // web can reach the worker by its service name on the app's network.
    let (ok, out) = docker_cli(&["exec", &found[0].1, "/bin/busybox", "nslookup", "worker"]);
    assert!(ok && out.contains("Address"), "{out}");

    // The API and the page show both services' containers of the serving generation.
    let (code, view) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(code, 200);
    let services = view["services"].as_array().expect("services").clone();
    let shown: Vec<(&str, &str, bool)> = services
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["container_id"].as_str().unwrap_or(""),
                s["running"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("web", found[0].1.as_str(), true),
            ("worker", found[1].1.as_str(), true)
        ],
        "{view:#}"
    );
    let page = reqwest::Client::new()
        .get(env.pier_url(&format!("/apps/{app}")))
        .bearer_auth(&env.admin_token)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("id=\"service-worker\""), "{page}");
    assert!(page.contains(&format!("pier-{app}-worker-")), "{page}");

    // v3 replaces both: one container per service again, both new.
    env.push(&TestImage::healthy("v3"), "main").await;
    env.wait_app_version("v3", DEPLOY).await;
    let d3 = env.latest_final_of(&app, &[&d1_id], DEPLOY).await;
    assert_eq!(d3["state"], "succeeded", "{d3:#}");
    let after = one_per_service(&env).await;
    assert!(
        after
            .iter()
            .all(|(_, id, running)| *running && found.iter().all(|(_, old, _)| old != id))
    );
    // Reconciliation at start-up knows the worker belongs to the serving generation: it is
    // no orphan.
    let mut env = env;
    env.pier_mut().restart_with(|c| c).await;
    let (code, _) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(code, 200);
    assert_eq!(one_per_service(&env).await, after);
    env.cleanup().await;
}

#[tokio::test]
async fn one_service_failing_its_health_check_leaves_the_previous_generation_of_both_serving() {
    let env = env_with(None).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let before = one_per_service(&env).await;

    // v2's web is healthy; its worker exits at once.
    env.push(&TestImage::healthy("v2"), "main").await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], Duration::from_secs(90))
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");
    let error = d2["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("health") && error.contains("service `worker`"),
        "the reason names the step and the service: {d2:#}"
    );
    // Both v1 containers serve again, the same ones; no v2 container is left.
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    let after = one_per_service(&env).await;
    assert_eq!(after, before);
    assert!(after.iter().all(|(_, _, running)| *running), "{after:?}");
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(view["generation"]["deployment_id"], d1["id"], "{view:#}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_lost_worker_is_redeployed_by_reconciliation_not_taken_for_a_no_op() {
    let mut env = env_with(None).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let before = one_per_service(&env).await;

    // The worker's container disappears (removed by hand): a restart's reconciliation
    // requeues the serving digest, which is no no-op while the worker is missing even though
    // the web still runs it; the generation is whole again.
    let (ok, out) = docker_cli(&["rm", "-f", &before[1].1]);
    assert!(ok, "{out}");
    env.pier_mut().restart_with(|c| c).await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    assert_eq!(d2["trigger"], "reconcile", "{d2:#}");
    let after = one_per_service(&env).await;
    assert!(after.iter().all(|(_, _, running)| *running), "{after:?}");
    assert_ne!(after[1].1, before[1].1);
    env.cleanup().await;
}

/// Pier killed at `point` during the first deployment: after a restart it finishes with
/// exactly one container per service, both running, nothing orphaned.
async fn dies_at(point: &str) {
    let mut env = env_with(Some(point)).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let pier = env.pier_mut();
    wait_until(&format!("pier aborts at {point}"), DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    assert!(env.pier().log().contains("PIER_CRASH_AT"));
    let left = env.engine.containers_of_app(&app).await;
    match point {
        // Between the two creates: the web's container exists, the worker's does not.
        "create@worker:before" => assert_eq!(left.len(), 1, "{left:#?}"),
        _ => assert_eq!(left.len(), 2, "{left:#?}"),
    }

    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    let found = one_per_service(&env).await;
    assert!(found.iter().all(|(_, _, running)| *running), "{found:?}");
    // Each service's create is journaled once, and names the container that runs.
    let created: Vec<(String, String)> = sqlx::query_as(
        "SELECT service, result->>'id' FROM deployment_steps
         WHERE deployment_id = $1::uuid AND step = 'create' ORDER BY service",
    )
    .bind(done["id"].as_str().unwrap())
    .fetch_all(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(
        created,
        [
            (String::new(), found[0].1.clone()),
            ("worker".to_owned(), found[1].1.clone())
        ]
    );
    env.cleanup().await;
}

macro_rules! crash_tests {
    ($($name:ident: $point:literal;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                dies_at($point).await;
            }
        )*
    };
}

crash_tests! {
    crash_between_the_two_creates: "create@worker:before";
    crash_after_the_second_create: "create@worker:after";
    crash_between_the_two_starts: "start@worker:before";
    crash_after_the_second_start: "start@worker:after";
}

// ---------------------------------------------------------------------------------------------
// A worker with its own repository (`image = ...`), resolved at the tag the push named.

/// The app follows tags `v*`; its worker runs `demo/<app>-worker` at the same tag.
async fn two_repos(crash: Option<&str>) -> TestEnv {
    let mut b = TestEnv::builder().lease("3s").app(|a| {
        a.tag = "v*".into();
        a.extra_toml = format!(
            "service = \"web\"\n\
             [apps.services.worker]\n\
             image = \"@REGISTRY@/demo/{}-worker\"\n\
             command = [\"/bin/busybox\", \"sh\", \"-c\", \"trap 'exit 0' TERM; \
             /bin/busybox sleep 3600 & wait\"]\n\
             settle = \"1s\"\n",
            a.name
        );
    });
    if let Some(point) = crash {
        b = b.pier_env("PIER_CRASH_AT", point);
    }
    b.start().await
}

/// Pushes the worker's image (version `w<n>`) to its repository, then the web's (`v<n>`)
/// to the app's: the second push triggers. Returns `(web digest, worker digest)`.
async fn push_release(env: &TestEnv, tag: &str, worker: bool) -> (String, Option<String>) {
    let w = if worker {
        let repo = format!("{}-worker", env.repo());
        let image = TestImage::healthy(&tag.replace('v', "w"));
        Some(env.registry().push(&repo, tag, &image).await)
    } else {
        None
    };
    (env.push(&TestImage::healthy(tag), tag).await, w)
}

/// `(step, service, state)` of a deployment's journal, in the order written.
async fn journal(env: &TestEnv, dep: &str) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT step, service, state FROM deployment_steps WHERE deployment_id = $1::uuid
         ORDER BY id",
    )
    .bind(dep)
    .fetch_all(&env.db.pool)
    .await
    .unwrap()
}

async fn digest_label(id: &str) -> String {
    inspect(id).await.config.unwrap().labels.unwrap()["pier.digest"].clone()
}

#[tokio::test]
async fn a_worker_with_its_own_repository_runs_its_digest_at_the_pushed_tag() {
    let env = two_repos(None).await;
    let app = env.app().to_owned();
    let (_, w1) = push_release(&env, "v1", true).await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let first = one_per_service(&env).await;
    let web1 = digest_label(&first[0].1).await;
    let w1 = w1.unwrap();
    assert_eq!(digest_label(&first[1].1).await, w1);

    let (web2, w2) = push_release(&env, "v2", true).await;
    let w2 = w2.unwrap();
    env.wait_app_version("v2", DEPLOY).await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    let d2_id = d2["id"].as_str().unwrap();
    let found = one_per_service(&env).await;
    assert!(found.iter().all(|(_, _, running)| *running), "{found:?}");
    assert_eq!(digest_label(&found[0].1).await, web2);
    assert_eq!(digest_label(&found[1].1).await, w2);
    // The worker runs its own repository's content, not the web's.
    let (ok, out) = docker_cli(&["exec", &found[1].1, "/bin/busybox", "cat", "/www/version"]);
    assert!(ok && out.trim() == "w2", "{out}");
    let worker_image = inspect(&found[1].1).await.config.unwrap().image.unwrap();
    assert!(
        worker_image.ends_with(&format!("{}-worker@{w2}", env.repo())),
        "{worker_image}"
    );

    // Each image resolved, pulled and verified (journaled per service) before any create.
    let steps = journal(&env, d2_id).await;
    let at = |step: &str, service: &str| {
        steps
            .iter()
            .position(|(s, sv, st)| s == step && sv == service && st == "succeeded")
            .unwrap_or_else(|| panic!("{step}@{service} did not succeed: {steps:?}"))
    };
    let first_create = at("create", "").min(at("create", "worker"));
    for (step, service) in [
        ("resolve", ""),
        ("resolve", "worker"),
        ("pull", ""),
        ("pull", "worker"),
        ("verify", ""),
        ("verify", "worker"),
    ] {
        assert!(
            at(step, service) < first_create,
            "{step}@{service}: {steps:?}"
        );
    }
    let resolved: String = sqlx::query_scalar(
        "SELECT result->>'digest' FROM deployment_steps
         WHERE deployment_id = $1::uuid AND step = 'resolve' AND service = 'worker'",
    )
    .bind(d2_id)
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(resolved, w2);

    // The API shows each service's image and digest.
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let shown: Vec<(&str, &str)> = view["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["digest"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [("web", web2.as_str()), ("worker", w2.as_str())],
        "{view:#}"
    );
    let worker_repo = format!("{}/{}-worker", env.registry_host(), env.repo());
    assert_eq!(
        view["services"][1]["image"],
        worker_repo.as_str(),
        "{view:#}"
    );

    // A rollback to v1's web digest brings back v1's worker digest too (from the journal
    // of the deployment that ran it), though the worker's tag v2 is newer.
    let resp = reqwest::Client::new()
        .post(env.pier_url(&format!("/api/apps/{app}/rollback")))
        .bearer_auth(&env.admin_token)
        .json(&serde_json::json!({ "digest": web1 }))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{:?}", resp.text().await);
    env.wait_app_version("v1", DEPLOY).await;
    let d3 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap(), d2_id], DEPLOY)
        .await;
    assert_eq!(d3["state"], "succeeded", "{d3:#}");
    let back = one_per_service(&env).await;
    assert_eq!(digest_label(&back[0].1).await, web1);
    assert_eq!(digest_label(&back[1].1).await, w1);
    let (ok, out) = docker_cli(&["exec", &back[1].1, "/bin/busybox", "cat", "/www/version"]);
    assert!(ok && out.trim() == "w1", "{out}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_worker_repository_lacking_the_tag_fails_before_anything_is_created() {
    let env = two_repos(None).await;
    let app = env.app().to_owned();
    push_release(&env, "v1", true).await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let before = one_per_service(&env).await;

    // web:v2 is pushed; the worker's repository has no v2.
    push_release(&env, "v2", false).await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");
    let error = d2["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("resolve") && error.contains("service `worker`"),
        "the reason names the step and the service: {d2:#}"
    );
    // Nothing of v2 was created; both v1 containers serve on, untouched.
    let steps = journal(&env, d2["id"].as_str().unwrap()).await;
    assert!(
        !steps
            .iter()
            .any(|(s, _, _)| s == "create" || s == "stop_old"),
        "{steps:?}"
    );
    assert_eq!(one_per_service(&env).await, before);
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(view["generation"]["deployment_id"], d1["id"], "{view:#}");
    env.cleanup().await;
}

/// Pier killed at `point` among the images' steps of the first two-repo deployment: no
/// container exists yet; after a restart it finishes with one container per service, each
/// `create` journaled once, the worker at its own repository's digest.
async fn two_repos_die_at(point: &str) {
    let mut env = two_repos(Some(point)).await;
    let app = env.app().to_owned();
    let (_, w1) = push_release(&env, "v1", true).await;
    let pier = env.pier_mut();
    wait_until(&format!("pier aborts at {point}"), DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    assert!(env.pier().log().contains("PIER_CRASH_AT"));
    let left = env.engine.containers_of_app(&app).await;
    assert!(
        left.is_empty(),
        "nothing is created before every image is verified: {left:#?}"
    );

    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    let found = one_per_service(&env).await;
    assert!(found.iter().all(|(_, _, running)| *running), "{found:?}");
    assert_eq!(digest_label(&found[1].1).await, w1.unwrap());
    let steps = journal(&env, done["id"].as_str().unwrap()).await;
    for (step, service) in [("pull", "worker"), ("create", ""), ("create", "worker")] {
        let n = steps
            .iter()
            .filter(|(s, sv, st)| s == step && sv == service && st == "succeeded")
            .count();
        assert_eq!(n, 1, "{step}@{service}: {steps:?}");
    }
    env.cleanup().await;
}

#[tokio::test]
async fn crash_between_the_two_pulls() {
    two_repos_die_at("pull@worker:before").await;
}

#[tokio::test]
async fn crash_after_the_workers_verify() {
    two_repos_die_at("verify@worker:after").await;
}

#[tokio::test]
async fn the_serving_web_digest_pushed_again_deploys_the_workers_moved_tag() {
    let env = two_repos(None).await;
    let app = env.app().to_owned();
    push_release(&env, "v1", true).await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");

    // The worker's v1 moves to new content; the web's v1 is pushed again unchanged. That
    // is no no-op: the release's worker is not what runs.
    let repo = format!("{}-worker", env.repo());
    let moved = env
        .registry()
        .push(&repo, "v1", &TestImage::healthy("w1-fixed"))
        .await;
    env.push(&TestImage::healthy("v1"), "v1").await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    assert!(
        !d2["outcome"]
            .as_str()
            .unwrap_or_default()
            .starts_with("no-op"),
        "{d2:#}"
    );
    let found = one_per_service(&env).await;
    assert_eq!(digest_label(&found[1].1).await, moved);
    env.cleanup().await;
}
