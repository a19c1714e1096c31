//! An app on a two-node Docker Swarm (the manager and a worker, each a real
//! dockerd in its own network namespace). A push updates the service to exactly the
//! pushed digest on every replica; a version that never becomes healthy is rolled back
//! by Swarm and the deployment says why; tasks that cannot be placed hit Pier's own
//! deadline and are rolled back; a push of the digest that runs sends no update. The
//! crash tests are in `swarm_crash.rs`.

use crate::support::swarm::*;
use crate::support::*;
use serde_json::Value;

fn step<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["step"] == name))
        .unwrap_or_else(|| panic!("no step {name}: {d:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_updates_a_three_replica_service_to_exactly_the_pushed_digest_on_both_nodes() {
    let s = SwarmEnv::start("replicas = 3, update = { monitor = \"2s\", parallelism = 1 }").await;
    let v1 = s.env.push(&TestImage::healthy("v1"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], v1.as_str());
    assert_eq!(
        step(&d, "update")["intent"]["previous"],
        Value::Null,
        "{d:#}"
    );
    let first = s.assert_tasks_run(&v1, 3).await;
    let nodes: std::collections::BTreeSet<_> = first.iter().map(|t| t.node).collect();
    assert_eq!(nodes.len(), 2, "Swarm spread the replicas over both nodes");

    let v2 = s.env.push(&TestImage::healthy("v2"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], v2.as_str());
    let service = s.service().await;
    let pinned = format!("{}:main@{v2}", s.env.image());
    assert_eq!(
        service.image, pinned,
        "the spec names the tag and pins the digest"
    );
    assert_eq!(service.label("pier.deployment"), d["id"].as_str());
    for name in ["resolve", "verify", "update", "converge"] {
        assert_eq!(step(&d, name)["state"], "succeeded", "{name}: {d:#}");
    }
    assert_eq!(
        step(&d, "update")["intent"]["previous"]["image"],
        format!("{}:main@{v1}", s.env.image())
    );
    let second = s.assert_tasks_run(&v2, 3).await;

    // The API and `pier status` show the service per node, from the manager.
    let (status, app) = s.env.api_get(&format!("/apps/{}", s.env.app())).await;
    assert_eq!(status, 200);
    let service = &app["engines"][0]["service"];
    assert_eq!(service["desired"], 3, "{app:#}");
    assert_eq!(service["running"], 3, "{app:#}");
    assert_eq!(service["on_digest"], 3, "{app:#}");
    let per_node: Vec<u64> = service["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["on_digest"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(per_node.iter().sum::<u64>(), 3, "{app:#}");
    assert!(
        per_node.iter().all(|n| *n > 0),
        "both nodes run the digest: {app:#}"
    );
    let out = s.env.pier().run_cli(&["status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("3/3 running, 3 on the serving digest"),
        "{text}"
    );
    assert_eq!(text.matches("    node ").count(), 2, "{text}");
    for t in &second {
        assert!(
            first.iter().all(|f| f.task.id != t.task.id),
            "every task was replaced"
        );
    }
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_never_becomes_healthy_is_rolled_back_and_the_deployment_says_why() {
    let s = SwarmEnv::start("replicas = 2, update = { monitor = \"3s\" }").await;
    let v1 = s.env.push(&TestImage::healthy("v1"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let v1_id = d["id"].as_str().unwrap().to_owned();

    // httpd runs, but /health is 404 forever: the task's health check never passes.
    let v2 = s.env.push(&TestImage::no_health_file("v2"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "rolled_back", "{d:#}");
    assert_eq!(d["resolved_digest"], v2.as_str());
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains("converge"), "{d:#}");
    assert!(
        error.contains("tasks:"),
        "the tasks' errors are given: {d:#}"
    );
    assert_eq!(step(&d, "rollback")["state"], "succeeded", "{d:#}");
    s.assert_tasks_run(&v1, 2).await;
    let service = s.service().await;
    assert_eq!(service.label("pier.deployment"), Some(v1_id.as_str()));
    assert!(service.image.ends_with(&v1), "{}", service.image);
    // The digest whose tasks failed is quarantined: the same push does not deploy again.
    let (status, app) = s.env.api_get(&format!("/apps/{}", s.env.app())).await;
    assert_eq!(status, 200);
    assert!(app.to_string().contains(&v2), "quarantine listed: {app:#}");
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_that_cannot_be_placed_hit_piers_deadline_and_are_rolled_back() {
    let s =
        SwarmEnv::start("replicas = 2, rollout_timeout = \"25s\", update = { monitor = \"2s\" }")
            .await;
    let v1 = s.env.push(&TestImage::healthy("v1"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");

    // The same app, now constrained to a node label no node has.
    let unplaceable = s.env.config_text().replace(
        "update = { monitor = \"2s\" }",
        "update = { monitor = \"2s\" }, placement = { constraints = [\"node.labels.pier_test == nowhere\"] }",
    );
    assert_ne!(unplaceable, s.env.config_text());
    s.env.reload(&unplaceable, 1, SWARM_DEPLOY).await;
    let v2 = s.env.push(&TestImage::healthy("v2"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "rolled_back", "{d:#}");
    assert_eq!(d["resolved_digest"], v2.as_str());
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains("rollout_timeout"), "{d:#}");
    assert!(
        error.contains("no suitable node"),
        "the pending tasks say why: {d:#}"
    );
    s.assert_tasks_run(&v1, 2).await;
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_of_the_digest_that_runs_sends_no_update() {
    let s = SwarmEnv::start("replicas = 2, update = { monitor = \"1s\" }").await;
    let v1 = s.env.push(&TestImage::healthy("v1"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let before = s.service().await;

    // The same image pushed again: the same digest, a new delivery and deployment.
    let again = s.env.push(&TestImage::healthy("v1"), "main").await;
    assert_eq!(again, v1);
    let d = s.final_deployment().await;
    assert!(
        d["outcome"]
            .as_str()
            .unwrap_or_default()
            .starts_with("no-op"),
        "{d:#}"
    );
    let after = s.service().await;
    assert_eq!(
        after.label("pier.deployment"),
        before.label("pier.deployment")
    );
    assert_eq!(after.image, before.image);
    assert!(
        d["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["step"] != "update"),
        "{d:#}"
    );

    // An operator's redeploy of that digest does replace every task.
    let old: Vec<String> = s
        .assert_tasks_run(&v1, 2)
        .await
        .into_iter()
        .map(|t| t.task.id)
        .collect();
    let out = s
        .env
        .pier()
        .run_cli(&["deploy", s.env.app(), "--digest", &v1])
        .await;
    assert!(out.status.success(), "{out:?}");
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let redeployed = s.service().await;
    assert_eq!(redeployed.force_update, after.force_update + 1);
    for t in s.assert_tasks_run(&v1, 2).await {
        assert!(
            !old.contains(&t.task.id),
            "task {} was not replaced",
            t.task.id
        );
    }
    s.cleanup().await;
}

/// `cat /run/secrets/<file>` inside the task's container, on the node that runs it.
fn secret_file(s: &SwarmEnv, t: &TaskOn, file: &str) -> String {
    let node = match t.node {
        "manager" => &s.swarm.manager,
        _ => &s.swarm.worker,
    };
    let path = format!("/run/secrets/{file}");
    let (ok, out) = node.docker(&["exec", &t.task.container_id, "/bin/busybox", "cat", &path]);
    assert!(ok, "cat {path} in task {}: {out}", t.task.id);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_swarm_secrets_mounted_as_files_and_rotate_with_their_value() {
    let token = "PIER_TEST_SWARM_TOKEN";
    let mut s = SwarmEnv::start_with(
        "replicas = 2, update = { monitor = \"1s\" }",
        &format!("secrets = {{ API_TOKEN = \"env:{token}\" }}\n"),
        &[(token, "first-s3cret-value")],
    )
    .await;
    let v1 = s.env.push(&TestImage::healthy("v1"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    for t in s.assert_tasks_run(&v1, 2).await {
        assert_eq!(secret_file(&s, &t, "API_TOKEN"), "first-s3cret-value");
    }
    let (ok, inspect) = s.swarm.manager.docker(&["service", "inspect", s.env.app()]);
    assert!(ok, "{inspect}");
    assert!(
        !inspect.contains("first-s3cret-value"),
        "the value is in no spec: {inspect}"
    );
    assert!(
        !d.to_string().contains("first-s3cret-value"),
        "nor in the journal"
    );

    // A new value is a new secret: the next deployment mounts it, and the old one goes.
    s.env
        .pier_mut()
        .restart_with(|c| c.env(token, "second-s3cret-value"))
        .await;
    let v2 = s.env.push(&TestImage::healthy("v2"), "main").await;
    let d = s.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    for t in s.assert_tasks_run(&v2, 2).await {
        assert_eq!(secret_file(&s, &t, "API_TOKEN"), "second-s3cret-value");
    }
    let (ok, secrets) = s
        .swarm
        .manager
        .docker(&["secret", "ls", "--format", "{{.Name}}"]);
    assert!(ok, "{secrets}");
    let names: Vec<&str> = secrets.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        names.len(),
        1,
        "the superseded secret was removed: {names:?}"
    );
    assert!(
        names[0].starts_with(&format!("pier-{}-api_token-", s.env.app())),
        "{names:?}"
    );
    s.cleanup().await;
}
