//! An app with several ports, TCP and UDP, behind Pier's proxy, with the real engine,
//! registry, Postgres and `pier proxy`: every port published on loopback, read back from
//! the engine and journaled by `start`; the UDP one echoes through its published port; the
//! HTTP one serves through the proxy with no failed request across a deploy.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);

/// The example: the HTTP port, a metrics port and a UDP port.
const PORTS: &str = "[{ container = 8080 }, { container = 9090, name = \"metrics\" }, \
                     { container = 5353, protocol = \"udp\" }]";

/// A blue-green app with [`PORTS`] behind a running proxy.
async fn several_ports_app(route: &str) -> (TestEnv, PierProcess) {
    let env = TestEnv::builder()
        .lease("5s")
        .health_timeout(Duration::from_secs(20))
        .app(|a| {
            a.blue_green(route);
            a.ports_toml = Some(PORTS.to_owned());
        })
        .start()
        .await;
    let proxy = env.start_proxy().await;
    (env, proxy)
}

/// One journaled binding: `(name, "container/protocol", host)`.
type Journaled = (String, String, SocketAddr);

/// What deployment `d`'s `start` step journaled for each port, in config order.
fn journaled_bindings(d: &Value) -> Vec<Journaled> {
    let start = d["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["step"] == "start"))
        .unwrap_or_else(|| panic!("a start step: {d:#}"));
    start["result"]["bindings"]
        .as_array()
        .unwrap_or_else(|| panic!("start journals its bindings: {start:#}"))
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_owned(),
                format!("{}/{}", b["container"], b["protocol"].as_str().unwrap()),
                b["host"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// The candidate container deployment `d` created.
fn created_container(d: &Value) -> String {
    d["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["step"] == "create"))
        .and_then(|s| s["result"]["id"].as_str())
        .unwrap_or_else(|| panic!("a created container: {d:#}"))
        .to_owned()
}

/// What the engine itself says container `id` is bound to: `"5353/udp"` to host addresses.
async fn engine_bindings(env: &TestEnv, id: &str) -> BTreeMap<String, Vec<SocketAddr>> {
    let c = env
        .engine
        .docker
        .inspect_container(id, None)
        .await
        .unwrap_or_else(|e| panic!("inspect {id}: {e}"));
    c.network_settings
        .and_then(|n| n.ports)
        .unwrap_or_default()
        .into_iter()
        .map(|(key, bound)| {
            let hosts = bound
                .unwrap_or_default()
                .into_iter()
                .map(|b| {
                    format!("{}:{}", b.host_ip.unwrap(), b.host_port.unwrap())
                        .parse()
                        .unwrap()
                })
                .collect();
            (key, hosts)
        })
        .collect()
}

/// Deployment `d` (succeeded) journaled a loopback binding for each of the three ports,
/// exactly what the engine reports; the route sends HTTP to the HTTP port's; the metrics
/// port answers HTTP and the UDP port echoes, each on its own binding. Its bindings.
async fn every_port_answers(env: &TestEnv, d: &Value, version: &str) -> Vec<Journaled> {
    let bindings = journaled_bindings(d);
    let names: Vec<(&str, &str)> = bindings
        .iter()
        .map(|(n, k, _)| (n.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("http", "8080/tcp"),
            ("metrics", "9090/tcp"),
            ("5353-udp", "5353/udp")
        ],
        "{d:#}"
    );
    let engine = engine_bindings(env, &created_container(d)).await;
    for (name, key, host) in &bindings {
        assert!(host.ip().is_loopback(), "{name} on loopback: {host}");
        assert_eq!(engine.get(key), Some(&vec![*host]), "{name}: {engine:?}");
    }
    let (_, view) = env.api_get(&format!("/apps/{}", env.app())).await;
    assert_eq!(
        view["route"]["upstream"],
        bindings[0].2.to_string(),
        "the proxy routes to the HTTP port: {view:#}"
    );
    let metrics = format!("http://{}/version", bindings[1].2);
    assert_eq!(
        http_get_within(&metrics, Duration::from_secs(10)).await,
        Some((200, version.to_owned())),
        "the metrics port answers on its own binding"
    );
    let udp = bindings[2].2;
    let payload = format!("echo {version} {}", random_hex(8));
    let echoed = tokio::task::spawn_blocking(move || {
        udp_echo_answers(udp, payload.as_bytes(), Duration::from_secs(30))
    })
    .await
    .unwrap();
    assert!(echoed, "the UDP port echoes through {udp}");
    bindings
}

#[tokio::test]
async fn http_metrics_and_udp_ports_are_bound_on_loopback_journaled_and_serve_across_a_deploy() {
    let (env, _proxy) = several_ports_app("soak = \"2s\"\ndrain_timeout = \"5s\"").await;
    let app = env.app().to_owned();
    env.push(&TestImage::several_ports("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    let id1 = first["id"].as_str().unwrap().to_owned();
    let (_, d1) = env.api_get(&format!("/deployments/{id1}")).await;
    let v1 = every_port_answers(&env, &d1, "v1").await;

    // The API lists the ports as configured, the HTTP one marked.
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let ports: Vec<(String, bool)> = view["ports"]
        .as_array()
        .unwrap_or_else(|| panic!("ports in the app view: {view:#}"))
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{} {}",
                    p["container"],
                    p["protocol"].as_str().unwrap(),
                    p["name"].as_str().unwrap()
                ),
                p["http"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("8080/tcp http".to_owned(), true),
            ("9090/tcp metrics".to_owned(), false),
            ("5353/udp 5353-udp".to_owned(), false)
        ]
    );
    let page = http_get(&env.pier_url(&format!("/apps/{app}")))
        .await
        .expect("the app page answers")
        .1;
    for port in ["port-http", "port-metrics", "port-5353-udp"] {
        assert!(
            page.contains(&format!("id=\"{port}\"")),
            "the page lists {port}"
        );
    }

    // v2 under load through the proxy: not one request fails.
    let load = Load::start(&env.app_url("/version"), 200_000, Duration::from_secs(300));
    env.push(&TestImage::several_ports("v2"), "main").await;
    let second = env.latest_final_of(&app, &[&id1], DEPLOY).await;
    assert_eq!(second["state"], "succeeded", "{second:#}");
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    let answers = load.finish().await;
    let failed = failures(&answers);
    eprintln!(
        "{} requests through the proxy during the deploy, {} failed",
        answers.len(),
        failed.len()
    );
    assert!(answers.len() > 20, "the load ran: {}", answers.len());
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        answers.len(),
        &failed[..failed.len().min(5)]
    );
    let id2 = second["id"].as_str().unwrap().to_owned();
    let (_, d2) = env.api_get(&format!("/deployments/{id2}")).await;
    let v2 = every_port_answers(&env, &d2, "v2").await;
    // Both generations ran side by side: each port of v2 got its own loopback port.
    for (old, new) in v1.iter().zip(&v2) {
        assert_ne!(old.2, new.2, "{} moved to v2's own binding", new.0);
    }
    assert_eq!(env.engine.running_containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}

/// Pier dies at `point` of v2's `start`; once restarted, the deployment finishes, and what
/// `start` journaled is exactly what the engine bound for the one container that serves.
async fn dies_at_start(point: &str) {
    let (mut env, _proxy) = several_ports_app("soak = \"1s\"\ndrain_timeout = \"5s\"").await;
    let app = env.app().to_owned();
    env.push(&TestImage::several_ports("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");

    env.pier_mut()
        .restart_with(|c| c.env("PIER_CRASH_AT", point))
        .await;
    env.push(&TestImage::several_ports("v2"), "main").await;
    env.pier_mut()
        .wait_dead(&format!("pier aborts at {point}"), DEPLOY)
        .await;
    let crashed = env.deployment_rows(&app).await.pop().unwrap();
    assert_eq!(crashed.state, "running", "{crashed:?}");
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.deployment_final(&crashed.id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    let starts: Vec<&Value> = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step"] == "start")
        .collect();
    assert_eq!(starts.len(), 1, "one start entry: {done:#}");
    every_port_answers(&env, &done, "v2").await;
    assert_eq!(env.engine.containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn a_start_resumed_after_a_crash_before_it_journals_every_binding() {
    dies_at_start("start:before").await;
}

#[tokio::test]
async fn a_start_finished_before_a_crash_keeps_its_journaled_bindings() {
    dies_at_start("start:after").await;
}

/// `pier check` on a file whose app `[[apps]]` lines are `apps`; its stderr, once it failed.
async fn check_refuses(apps: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[server]\ndatabase_url = \"postgres://pier@127.0.0.1:{db}/pier\"\n{apps}",
        db = free_port()
    );
    let config = dir.path().join("pier.toml");
    std::fs::write(&config, text).unwrap();
    let c = config.display().to_string();
    let out = run_pier_client(dir.path(), &[], &["--config", &c, "check"]).await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    err
}

#[tokio::test]
async fn check_refuses_a_udp_http_port_and_two_apps_on_one_host_port_naming_the_keys() {
    let e = check_refuses(
        "[[apps]]\nname = \"dns\"\nimage = \"127.0.0.1:5000/demo/dns\"\n\
         ports = [{ container = 8080 }, { container = 53, protocol = \"udp\", http = true }]\n",
    )
    .await;
    assert!(
        e.contains("app `dns`: ports[1].http: 53/udp cannot be the HTTP port"),
        "{e}"
    );
    let e = check_refuses(
        "[[apps]]\nname = \"web\"\nimage = \"127.0.0.1:5000/demo/web\"\nport = 8080\n\
         publish = \"127.0.0.1:8081\"\n\
         [[apps]]\nname = \"api\"\nimage = \"127.0.0.1:5000/demo/api\"\n\
         ports = [{ container = 80 }, { container = 81, publish = \"0.0.0.0:8081\" }]\n\
         publish_public = true\n",
    )
    .await;
    assert!(
        e.contains(
            "apps `web` (publish = \"127.0.0.1:8081\") and `api` (ports[1].publish = \
             \"0.0.0.0:8081\") both publish 8081/tcp on one engine"
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_recreate_app_keeps_each_fixed_publish_tcp_and_udp_across_a_deploy() {
    let udp_port = free_port();
    let env = TestEnv::builder()
        .health_timeout(Duration::from_secs(20))
        .app(|a| {
            a.no_publish = true;
            a.ports_toml = Some(format!(
                "[{{ container = 8080, publish = \"127.0.0.1:{http}\" }}, \
                 {{ container = 9090, name = \"metrics\" }}, \
                 {{ container = 5353, protocol = \"udp\", name = \"echo\", \
                 publish = \"127.0.0.1:{udp_port}\" }}]",
                http = a.publish_port
            ));
        })
        .start()
        .await;
    let app = env.app().to_owned();
    let udp = SocketAddr::from(([127, 0, 0, 1], udp_port));
    let mut seen: Vec<String> = Vec::new();
    for version in ["v1", "v2"] {
        env.push(&TestImage::several_ports(version), "main").await;
        env.wait_app_version(version, DEPLOY).await;
        let not: Vec<&str> = seen.iter().map(String::as_str).collect();
        let done = env.latest_final_of(&app, &not, DEPLOY).await;
        assert_eq!(done["state"], "succeeded", "{version}: {done:#}");
        seen.push(done["id"].as_str().unwrap().to_owned());
        let (_, d) = env
            .api_get(&format!("/deployments/{}", seen.last().unwrap()))
            .await;
        // The HTTP and UDP ports on their fixed addresses, the metrics port on none.
        let engine = engine_bindings(&env, &created_container(&d)).await;
        assert_eq!(
            engine.get("8080/tcp"),
            Some(&vec![env.publish()]),
            "{engine:?}"
        );
        assert_eq!(engine.get("5353/udp"), Some(&vec![udp]), "{engine:?}");
        assert_eq!(
            engine.get("9090/tcp"),
            Some(&vec![]),
            "exposed only: {engine:?}"
        );
        let payload = format!("echo {version}");
        let echoed = tokio::task::spawn_blocking(move || {
            udp_echo_answers(udp, payload.as_bytes(), Duration::from_secs(30))
        })
        .await
        .unwrap();
        assert!(echoed, "{version} echoes on the fixed UDP address {udp}");
    }
    assert_eq!(env.engine.running_containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}
