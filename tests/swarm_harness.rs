//! Issue 24 groundwork: the two-node swarm harness (`support::swarm::Swarm`) runs a real
//! service, pinned by digest, with a task on each node; and Pier's services adapter
//! updates it to a second digest and sees the rollout complete.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{
    ServiceSpec, ServiceSpecMode, ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec,
    TaskSpecPlacement, TaskSpecPlacementPreferences, TaskSpecPlacementSpread, TaskState,
};
use bollard::query_parameters::ListTasksOptionsBuilder;
use support::swarm::Swarm;
use support::*;

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
    assert_eq!(host_swarm_state(), "inactive", "the host's engine is in a swarm");
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
    wait_until("a task of the digest runs on each node", RUNNING_TIMEOUT, || {
        let (docker, name, image, expected) = (&docker, &name, &image, &expected);
        async move { (nodes_running(docker, name, image).await == *expected).then_some(()) }
    })
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
    assert_eq!(host_swarm_state(), "inactive", "the host's engine is in a swarm");
}
