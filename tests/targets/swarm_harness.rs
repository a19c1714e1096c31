//! The two-node swarm harness (`support::swarm::Swarm`) runs a real
//! service, pinned by digest, with a task on each node; and Pier's services adapter
//! updates it to a second digest and sees the rollout complete.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::swarm::Swarm;
use crate::support::*;
use bollard::Docker;
use bollard::models::{
    ServiceSpec, ServiceSpecMode, ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec,
    TaskSpecPlacement, TaskSpecPlacementPreferences, TaskSpecPlacementSpread, TaskState,
};
use bollard::query_parameters::ListTasksOptionsBuilder;

/// How long both tasks may take to run (pull on each node, start) on a loaded machine.
const RUNNING_TIMEOUT: Duration = Duration::from_secs(120);

/// A 2-replica service of `image`, spread over the nodes, at most one task per node.
fn two_replicas(name: &str, image: &str) -> ServiceSpec {
    ServiceSpec {
        name: Some(name.to_owned()),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(image.to_owned()),
                ..Default::default()
            }),
            placement: Some(TaskSpecPlacement {
                preferences: Some(vec![TaskSpecPlacementPreferences {
                    spread: Some(TaskSpecPlacementSpread {
                        spread_descriptor: Some("node.id".into()),
                    }),
                }]),
                max_replicas: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        }),
        mode: Some(ServiceSpecMode {
            replicated: Some(ServiceSpecModeReplicated { replicas: Some(2) }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The nodes of the service's tasks that run (desired and actual) `image`.
async fn nodes_running(docker: &Docker, service: &str, image: &str) -> Vec<String> {
    let filters = HashMap::from([("service", vec![service])]);
    let options = ListTasksOptionsBuilder::new().filters(&filters).build();
    let tasks = docker.list_tasks(Some(options)).await.unwrap_or_default();
    let mut nodes: Vec<String> = tasks
        .into_iter()
        .filter(|t| t.desired_state == Some(TaskState::RUNNING))
        .filter(|t| t.status.as_ref().and_then(|s| s.state) == Some(TaskState::RUNNING))
        .filter(|t| {
            let spec = t.spec.as_ref().and_then(|s| s.container_spec.as_ref());
            spec.and_then(|c| c.image.as_deref()) == Some(image)
        })
        .filter_map(|t| t.node_id)
        .collect();
    nodes.sort();
    nodes
}

/// The host's engine is in no swarm: `docker info` on it, not on the namespaced ones.
fn host_swarm_state() -> String {
    let out = std::process::Command::new("docker")
        .args(["info", "--format", "{{.Swarm.LocalNodeState}}"])
        .output()
        .expect("docker info on the host");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn netns_exists(name: &str) -> bool {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_swarm_runs_a_service_with_a_task_on_each_node() {
    assert_eq!(
        host_swarm_state(),
        "inactive",
        "the host's engine is in a swarm"
    );
    let registry = Registry::start(None, "unused").await;
    let repo = format!("demo/{}", unique_app("svc"));
    let digest = registry.push(&repo, "v1", &TestImage::healthy("v1")).await;
    let image = format!("{}/{repo}:v1@{digest}", registry.host());

    let started = Instant::now();
    let mut swarm = Swarm::start(registry.port()).await;
    eprintln!("swarm formed in {:?}", started.elapsed());
    let namespaces = [
        swarm.manager.netns().to_owned(),
        swarm.worker.netns().to_owned(),
    ];
    let (manager_id, worker_id) = swarm.node_ids();
    let docker = swarm.manager_client().await;

    let name = unique_app("svc");
    let created = Instant::now();
    docker
        .create_service(two_replicas(&name, &image), None)
        .await
        .expect("create the service");
    let mut expected = vec![manager_id, worker_id];
    expected.sort();
    wait_until(
        "a task of the digest runs on each node",
        RUNNING_TIMEOUT,
        || {
            let (docker, name, image, expected) = (&docker, &name, &image, &expected);
            async move { (nodes_running(docker, name, image).await == *expected).then_some(()) }
        },
    )
    .await;
    eprintln!("both tasks running {:?} after create", created.elapsed());

    docker
        .delete_service(&name)
        .await
        .expect("remove the service");
    swarm.cleanup();
    for ns in &namespaces {
        assert!(!netns_exists(ns), "namespace {ns} left behind");
    }
    assert_eq!(
        host_swarm_state(),
        "inactive",
        "the host's engine is in a swarm"
    );
}

/// Every task meant to run runs `image`, one on each of `nodes` (sorted).
async fn converged_on(
    engine: &pier::engine::Engine,
    name: &str,
    image: &str,
    nodes: &[String],
) -> bool {
    let Ok(tasks) = engine.service_tasks(name).await else {
        return false;
    };
    let meant: Vec<_> = tasks
        .iter()
        .filter(|t| t.desired == pier::engine::TaskState::Running)
        .collect();
    let mut on: Vec<String> = meant.iter().map(|t| t.node_id.clone()).collect();
    on.sort();
    meant.iter().all(|t| t.is_up() && t.image == image) && on == nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_updates_a_service_to_a_second_digest_and_sees_it_complete() {
    use pier::engine::{Engine, UpdateState};
    let registry = Registry::start(None, "unused").await;
    let repo = format!("demo/{}", unique_app("svc"));
    let d1 = registry.push(&repo, "v1", &TestImage::healthy("v1")).await;
    let d2 = registry.push(&repo, "v2", &TestImage::healthy("v2")).await;
    let (img1, img2) = (
        format!("{}/{repo}:v1@{d1}", registry.host()),
        format!("{}/{repo}:v2@{d2}", registry.host()),
    );
    let mut swarm = Swarm::start(registry.port()).await;
    let (m, w) = swarm.node_ids();
    let mut nodes = vec![m, w];
    nodes.sort();
    let engine = Engine::connect(Some(&swarm.manager.docker_host()))
        .await
        .expect("Pier's engine client of the manager");
    assert_eq!(engine.nodes().await.expect("nodes").len(), 2);

    let name = unique_app("svc");
    engine
        .create_service(two_replicas(&name, &img1), None)
        .await
        .expect("create the service");
    wait_until("both tasks run v1", RUNNING_TIMEOUT, || async {
        converged_on(&engine, &name, &img1, &nodes)
            .await
            .then_some(())
    })
    .await;
    let before = engine
        .service(&name)
        .await
        .expect("inspect")
        .expect("the service");
    assert_eq!(before.image, img1);
    eprintln!(
        "after create: version {} update {:?}",
        before.version, before.update
    );

    let mut spec = two_replicas(&name, &img2);
    spec.labels = Some(HashMap::from([("pier.deployment".into(), "d-2".into())]));
    let updated = Instant::now();
    engine
        .update_service(&name, before.version, spec.clone(), None)
        .await
        .expect("update the service");
    let stale = engine
        .update_service(&name, before.version, spec, None)
        .await
        .expect_err("a second update from the same version is refused");
    eprintln!("stale update: {stale}");
    assert!(
        !stale.is_transient(),
        "a stale version is a conflict: {stale}"
    );

    // Each change of UpdateStatus, with when it was seen: what a rollout watcher reads.
    let seen = std::sync::Mutex::new(None);
    let after = wait_until(
        "UpdateStatus completed, every task on v2",
        RUNNING_TIMEOUT,
        || {
            let (engine, name, img2, nodes, seen) = (&engine, &name, &img2, &nodes, &seen);
            async move {
                let s = engine.service(name).await.ok().flatten()?;
                {
                    let mut last = seen.lock().unwrap();
                    if last.as_ref() != Some(&s.update) {
                        eprintln!(
                            "{:?}: {:?} (version {})",
                            updated.elapsed(),
                            s.update,
                            s.version
                        );
                        *last = Some(s.update.clone());
                    }
                }
                let done = s.update.state == UpdateState::Completed
                    && converged_on(engine, name, img2, nodes).await;
                done.then_some(s)
            }
        },
    )
    .await;
    eprintln!("update converged {:?} after the call", updated.elapsed());
    assert_eq!(after.image, img2);
    assert_eq!(after.label("pier.deployment"), Some("d-2"));
    assert!(after.version > before.version);

    assert!(engine.remove_service(&name).await.expect("remove"));
    assert!(!engine.remove_service(&name).await.expect("remove again"));
    assert!(engine.service(&name).await.expect("inspect").is_none());
    swarm.cleanup();
    assert_eq!(
        host_swarm_state(),
        "inactive",
        "the host's engine is in a swarm"
    );
}
