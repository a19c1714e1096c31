//! Pier killed before and after each new side effect (the network create, the
//! volume's ownership record, the volume create, the shared-network connect). After a restart
//! the deployment finishes, every volume is owned, and no container is on a network it
//! should not be on; nothing is orphaned.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);

struct SharedNetwork(String);

impl SharedNetwork {
    fn create() -> Self {
        let name = format!("shared-{}", random_hex(8));
        let (ok, out) = docker_cli(&["network", "create", &name]);
        assert!(ok, "{out}");
        Self(name)
    }
    fn members(&self) -> Vec<String> {
        let (_, out) = docker_cli(&[
            "network",
            "inspect",
            &self.0,
            "--format",
            "{{range $id, $c := .Containers}}{{$id}} {{end}}",
        ]);
        out.split_whitespace().map(str::to_owned).collect()
    }
}

impl Drop for SharedNetwork {
    fn drop(&mut self) {
        let _ = docker_cli(&["network", "rm", &self.0]);
    }
}

fn exists(kind: &str, name: &str) -> bool {
    docker_cli(&[kind, "inspect", name]).0
}

async fn env_for(shared: &SharedNetwork, crash: Option<&str>) -> TestEnv {
    let mut b = TestEnv::builder().lease("3s").app(|a| {
        a.extra_toml = format!(
            "networks = [\"{}\"]\nvolumes = [{{ name = \"data\", target = \"/www/data\" }}]",
            shared.0
        )
    });
    if let Some(point) = crash {
        b = b.pier_env("PIER_CRASH_AT", point);
    }
    b.start().await
}

/// The app's one container: on its own network and the shared one, nothing else; its
/// volume exists, labelled with the owner Postgres records.
async fn assert_contained(env: &TestEnv, shared: &SharedNetwork) {
    let app = env.app();
    let all = env.engine.containers_of_app(app).await;
    assert_eq!(all.len(), 1, "{all:#?}");
    let id = all[0].id.clone().unwrap();
    let c = docker().await.inspect_container(&id, None).await.unwrap();
    let mut nets: Vec<String> = c
        .network_settings
        .unwrap()
        .networks
        .unwrap()
        .into_keys()
        .collect();
    nets.sort();
    let mut want = vec![format!("pier-{app}"), shared.0.clone()];
    want.sort();
    assert_eq!(nets, want);
    assert_eq!(shared.members(), vec![id]);
    let volume = format!("pier-{app}-data");
    let labels = docker().await.inspect_volume(&volume).await.unwrap().labels;
    let (owner, incarnation): (String, String) =
        sqlx::query_as("SELECT app, incarnation::text FROM volumes WHERE name = $1")
            .bind(&volume)
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(owner, app);
    assert_eq!(labels.get("pier.app"), Some(&owner));
    assert_eq!(labels.get("pier.incarnation"), Some(&incarnation));
}

async fn dies_at(point: &str) {
    let shared = SharedNetwork::create();
    let mut env = env_for(&shared, Some(point)).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let pier = env.pier_mut();
    wait_until(&format!("pier aborts at {point}"), DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    assert!(env.pier().log().contains("PIER_CRASH_AT"));
    // What the crash left: a protected record is never an unowned volume.
    let volume = format!("pier-{app}-data");
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM volumes WHERE name = $1")
        .bind(&volume)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    if exists("volume", &volume) {
        assert_eq!(recorded, 1, "a volume exists without its owner's record");
    }
    match point {
        "network:before" => assert!(!exists("network", &format!("pier-{app}"))),
        "volumes:before" => assert_eq!(recorded, 0),
        "volume_owner:after" => {
            assert_eq!(recorded, 1);
            assert!(!exists("volume", &volume));
        }
        "connect:before" => assert!(shared.members().is_empty()),
        _ => {}
    }

    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_contained(&env, &shared).await;
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
    crash_before_the_network_is_created: "network:before";
    crash_after_the_network_is_created: "network:after";
    crash_before_the_volume_ownership_is_recorded: "volumes:before";
    crash_between_the_ownership_record_and_the_volume_create: "volume_owner:after";
    crash_after_the_volume_is_created: "volumes:after";
    crash_before_the_shared_network_connect: "connect:before";
    crash_after_the_shared_network_connect: "connect:after";
}

#[tokio::test]
async fn a_candidate_that_fails_leaves_the_shared_network_with_the_old_generation_alone_on_it() {
    let shared = SharedNetwork::create();
    let env = env_for(&shared, None).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let before = shared.members();
    env.push(&TestImage::no_health_file("v2"), "main").await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], Duration::from_secs(90))
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(shared.members(), before);
    assert_contained(&env, &shared).await;
    env.cleanup().await;
}
