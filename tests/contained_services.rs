//! Issue 10: several services per app. A `web` and a `worker` built from the image one push
//! names are deployed as one generation: both created, started and healthy, then switched
//! together, or neither is. Pier killed between the services' creates and starts converges
//! to one container per service. Real engine, registry and Postgres.

mod support;

use std::time::Duration;

use support::*;

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
         env = {{ ROLE = \"worker\" }}\n\
         settle = \"1500ms\"\n"
    )
}

async fn env_with(crash: Option<&str>) -> TestEnv {
    let mut b = TestEnv::builder()
        .lease("3s")
        .app(|a| a.extra_toml = services_toml("v2"));
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
    // The worker got its own command and env, not the web's.
    let worker = inspect(&found[1].1).await.config.unwrap();
    assert_eq!(worker.entrypoint.unwrap()[0], "/bin/busybox");
    let env_vars = worker.env.unwrap_or_default();
    assert!(env_vars.contains(&"ROLE=worker".to_owned()), "{env_vars:?}");
    assert!(
        !env_vars.iter().any(|e| e.starts_with("GREETING=")),
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
