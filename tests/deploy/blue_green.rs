//! Zero-downtime deploys through Pier's own proxy, with the real engine, registry, Postgres
//! and `pier proxy`: under continuous load, across failed and dying versions, across a
//! SIGKILL of `pier serve`, and across a proxy restart without its database.

use std::time::Duration;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);

/// A blue-green app behind a running proxy, `v1` serving through it.
async fn serving_v1(route: &str) -> (TestEnv, PierProcess, String) {
    serving_v1_with(route, "").await
}

async fn serving_v1_with(route: &str, server: &str) -> (TestEnv, PierProcess, String) {
    let env = TestEnv::builder()
        .server_toml(server)
        .lease("5s")
        .health_timeout(Duration::from_secs(5))
        .app(|a| a.blue_green(route))
        .start()
        .await;
    let proxy = env.start_proxy().await;
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let first = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    (env, proxy, v1)
}

fn version_of(a: &Answer) -> Option<&str> {
    match a {
        Answer::Ok { status: 200, body } => Some(body.as_str()),
        _ => None,
    }
}

#[tokio::test]
async fn ten_deploys_under_load_drop_no_request_even_when_a_version_fails_or_dies() {
    let (env, _proxy, _) =
        serving_v1("soak = \"13s\"\nsoak_failures = 2\ndrain_timeout = \"5s\"").await;
    let app = env.app().to_owned();
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    let load = Load::start(&env.app_url("/version"), 400_000, Duration::from_secs(400));
    let mut seen: Vec<String> = vec![first["id"].as_str().unwrap().to_owned()];
    for n in 2..=11 {
        let version = format!("v{n}");
        let image = match n {
            5 => TestImage::no_health_file(&version),
            // Dies 11 s after it starts: about ten seconds after its switch, well inside
            // the 13 s soak.
            8 => TestImage::dies_after(&version, 11),
            _ => TestImage::healthy(&version),
        };
        env.push(&image, "main").await;
        let not: Vec<&str> = seen.iter().map(String::as_str).collect();
        let done = env.latest_final_of(&app, &not, DEPLOY).await;
        seen.push(done["id"].as_str().unwrap().to_owned());
        let want = match n {
            5 => "failed",
            8 => "rolled_back",
            _ => "succeeded",
        };
        assert_eq!(done["state"], want, "{version}: {done:#}");
        if n == 8 {
            // It died during its soak, long after the switch had put it in front.
            let (_, full) = env
                .api_get(&format!("/deployments/{}", done["id"].as_str().unwrap()))
                .await;
            let soak = full["steps"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["step"] == "soak"))
                .unwrap_or_else(|| panic!("v8 has a soak step: {full:#}"));
            let at =
                |k: &str| chrono::DateTime::parse_from_rfc3339(soak[k].as_str().unwrap()).unwrap();
            let watched = at("finished_at") - at("started_at");
            assert!(
                watched >= chrono::Duration::seconds(7),
                "v8 died {watched} into its soak: {soak:#}"
            );
            // The page and the API show why, in the candidate's own last words.
            assert!(
                full["candidate_logs"]
                    .as_str()
                    .is_some_and(|l| l.contains("out of memory: giving up")),
                "v8's last log lines: {full:#}"
            );
        }
    }
    env.wait_app_version("v11", Duration::from_secs(10)).await;
    let answers = load.finish().await;
    let failed = failures(&answers);
    eprintln!(
        "{} requests through the proxy during ten deploys, {} failed",
        answers.len(),
        failed.len()
    );
    assert!(answers.len() > 100, "the load ran: {}", answers.len());
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(10)]
    );

    // Who answered, in order: never v5 (never healthy); versions only move forward, but
    // for the switch back from v8 to v7.
    let order: Vec<u32> = answers
        .iter()
        .filter_map(version_of)
        .map(|v| v.trim_start_matches('v').parse().unwrap())
        .collect();
    assert!(!order.contains(&5), "v5 never served");
    for w in order.windows(2) {
        assert!(
            w[1] >= w[0] || (w[0] == 8 && w[1] == 7),
            "went back from v{} to v{}",
            w[0],
            w[1]
        );
    }
    assert_eq!(*order.last().unwrap(), 11);

    // The dead version is quarantined, and shown as such.
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let q = view["quarantine"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        q.len(),
        2,
        "v5 (health) and v8 (soak) are quarantined: {view:#}"
    );
    assert_eq!(env.engine.running_containers_of_app(&app).await.len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn a_slow_request_started_before_a_switch_completes_on_the_old_version() {
    let (env, _proxy, _) = serving_v1("soak = \"0s\"\ndrain_timeout = \"60s\"").await;
    let app = env.app().to_owned();
    let before = env.latest_final_of(&app, &[], DEPLOY).await;
    let v1 = env.engine.running_containers_of_app(&app).await;
    let v1 = v1[0].id.clone().expect("v1's container id");
    let url = env.app_url("/cgi-bin/slow");
    let slow = tokio::spawn(async move { http_get_within(&url, Duration::from_secs(90)).await });
    // The slow request is in flight on v1 (the proxy counts it) before v2 is pushed.
    wait_until(
        "the slow request is in flight",
        Duration::from_secs(10),
        || async {
            let v = env.proxy_routes().await;
            let busy = v["upstreams"]
                .as_object()
                .is_some_and(|u| u.values().any(|x| x["in_flight"].as_u64() > Some(0)));
            busy.then_some(())
        },
    )
    .await;
    env.push(&TestImage::healthy("v2"), "main").await;
    // The switch is made and the drain waits for the request still running on v1.
    wait_until("the drain waits for the slow request", DEPLOY, || async {
        let state: Option<String> = sqlx::query_scalar(
            "SELECT s.state FROM deployment_steps s JOIN deployments d ON d.id = s.deployment_id
             WHERE d.app = $1 AND s.step = 'drain'",
        )
        .bind(&app)
        .fetch_optional(&env.db.pool)
        .await
        .ok()?;
        (state.as_deref() == Some("started")).then_some(())
    })
    .await;
    env.wait_app_version("v2", DEPLOY).await;
    let (released, out) = docker_cli(&["exec", &v1, "/bin/busybox", "touch", "/tmp/release"]);
    assert!(released, "release the slow request on v1: {out}");
    let (status, body) = slow.await.unwrap().expect("the slow request is answered");
    assert_eq!((status, body.as_str()), (200, "slow-v1"));
    let done = env
        .latest_final_of(&app, &[before["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let full = env
        .deployment_final(done["id"].as_str().unwrap(), DEPLOY)
        .await;
    let drain = full["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "drain")
        .expect("a drain step")
        .clone();
    assert_eq!(drain["result"]["in_flight_at_switch"], 1, "{drain:#}");
    assert_eq!(drain["result"]["timed_out"], false, "{drain:#}");
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    env.cleanup().await;
}

#[tokio::test]
async fn pier_serve_killed_mid_blue_green_deploy_drops_no_request_and_finishes() {
    let (mut env, _proxy, _) = serving_v1("soak = \"1s\"").await;
    let app = env.app().to_owned();
    let before = env.latest_final_of(&app, &[], DEPLOY).await;
    let load = Load::start(&env.app_url("/version"), 100_000, Duration::from_secs(120));
    env.pier_mut()
        .restart_with(|c| c.env("PIER_PAUSE_AT", "applied:before"))
        .await;
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.pier()
        .wait_for_log("PIER_PAUSE_AT reached", DEPLOY)
        .await;
    env.pier_mut().kill();
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_PAUSE_AT"))
        .await;
    let done = env
        .latest_final_of(&app, &[before["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    env.wait_app_version("v2", Duration::from_secs(10)).await;
    let answers = load.finish().await;
    let failed = failures(&answers);
    assert!(answers.len() > 20, "the load ran: {}", answers.len());
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(10)]
    );
    assert_eq!(env.running_digests_of(&app).await, vec![v2]);
    assert_eq!(
        env.engine.containers_of_app(&app).await.len(),
        1,
        "one generation"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn the_proxy_restarted_without_its_database_serves_the_last_known_routes() {
    let (env, mut proxy, _) = serving_v1("soak = \"0s\"").await;
    proxy.kill();
    // The same config, but the database is unreachable (a closed port).
    let dead = format!("postgres://pier:pier@127.0.0.1:{}/gone", free_port());
    let config = env.config_toml().replace(&env.db.url, &dead);
    let _restarted = PierCommand::new(&config)
        .args(["proxy"])
        .wait_healthy(false)
        .start()
        .await;
    env.wait_app_version("v1", Duration::from_secs(20)).await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_quarantined_digest_is_skipped_by_pushes_until_an_admin_deploys_it() {
    let (env, _proxy, _) = serving_v1("soak = \"0s\"").await;
    let app = env.app().to_owned();
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    let bad = env.push(&TestImage::no_health_file("v2"), "main").await;
    let failed = env
        .latest_final_of(&app, &[first["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(failed["state"], "failed", "{failed:#}");

    // The same digest pushed again (under another tag the app follows) is skipped.
    env.push(&TestImage::no_health_file("v2"), "main").await;
    let (status, _) = env
        .post_generic(
            format!(
                r#"{{"repository": "{}", "tag": "main", "id": "again"}}"#,
                env.repo()
            )
            .as_bytes(),
        )
        .await;
    assert!(status == 202 || status == 200);
    // Two notices of the same push may queue two deployments (the newer supersedes the
    // older before it starts): wait for the one that reached the quarantine check.
    let skipped = wait_until(
        "a deployment skipped for the quarantine",
        DEPLOY,
        || async {
            let (_, a) = env.api_get(&format!("/apps/{app}")).await;
            a["deployments"]
                .as_array()?
                .iter()
                .find(|d| {
                    d["state"] == "cancelled"
                        && d["outcome"]
                            .as_str()
                            .is_some_and(|o| o.contains("quarantined"))
                })
                .cloned()
        },
    )
    .await;
    assert_eq!(skipped["state"], "cancelled", "{skipped:#}");
    assert!(
        skipped["outcome"].as_str().unwrap().contains("quarantined"),
        "{skipped:#}"
    );
    env.wait_app_version("v1", Duration::from_secs(10)).await;

    // An admin deploys exactly that digest: the quarantine is lifted.
    let before: Vec<String> = env
        .deployment_rows(&app)
        .await
        .into_iter()
        .map(|d| d.id)
        .collect();
    let out = env
        .pier()
        .run_cli(&["deploy", &app, "--digest", &bad])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let forced = env
        .latest_final_of(
            &app,
            &before.iter().map(String::as_str).collect::<Vec<_>>(),
            DEPLOY,
        )
        .await;
    assert_ne!(forced["state"], "cancelled", "it ran: {forced:#}");
    let cleared: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM quarantine WHERE app = $1 AND digest = $2 AND at < $3::timestamptz",
    )
    .bind(&app)
    .bind(&bad)
    .bind(forced["started_at"].as_str().unwrap())
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(cleared, 0, "the old quarantine entry is gone");
    env.cleanup().await;
}

#[tokio::test]
async fn a_route_to_a_container_removed_behind_piers_back_is_repaired_and_recorded() {
    let (env, _proxy, v1) = serving_v1_with("soak = \"0s\"", "sweep_interval = \"1s\"").await;
    let app = env.app().to_owned();
    let first = env.latest_final_of(&app, &[], DEPLOY).await;
    env.engine.remove_app_containers(&app).await;
    let again = env
        .latest_final_of(&app, &[first["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(again["trigger"], "reconcile", "{again:#}");
    assert_eq!(again["state"], "succeeded", "{again:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_eq!(env.running_digests_of(&app).await, vec![v1]);
    let (_, view) = env.api_get(&format!("/apps/{app}")).await;
    let actions = view["reconcile_actions"].as_array().unwrap();
    assert!(
        actions.iter().any(|a| a["action"] == "removed_route"),
        "{actions:#?}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn the_proxy_answers_for_itself_when_an_app_is_too_slow_too_big_or_unknown() {
    let (env, _proxy, _) = serving_v1("soak = \"0s\"\ntimeout = \"1s\"\nmax_body = \"1k\"").await;
    // Slower than the route's timeout: 504 from the proxy, not a hang.
    let (status, body) = http_get_within(&env.app_url("/cgi-bin/slow"), Duration::from_secs(10))
        .await
        .expect("an answer");
    assert_eq!(status, 504, "{body}");
    // A body larger than the route takes: 413 before the app sees it.
    let resp = reqwest::Client::new()
        .post(env.app_url("/version"))
        .body(vec![b'x'; 4096])
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    // A host no app is routed for on a shared address would be 404; here the app takes
    // any host, and ordinary requests go through.
    let (status, body) = http_get(&env.app_url("/version")).await.unwrap();
    assert_eq!((status, body.as_str()), (200, "v1"));
    env.cleanup().await;
}

#[tokio::test]
async fn the_proxy_terminates_tls_with_the_certificate_named_for_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["app.test".to_owned()]).unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("key.pem"), cert.signing_key.serialize_pem()).unwrap();
    let route = format!(
        "soak = \"0s\"\nhosts = [\"app.test\"]\ntls = {{ cert = {:?}, key = {:?} }}",
        dir.path().join("cert.pem"),
        dir.path().join("key.pem")
    );
    let env = TestEnv::builder()
        .lease("5s")
        .app(|a| a.blue_green(&route))
        .start()
        .await;
    let _proxy = env.start_proxy().await;
    env.push(&TestImage::healthy("v1"), "main").await;
    let addr = env.apps[0].publish();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .resolve("app.test", addr)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let url = format!("https://app.test:{}/version", addr.port());
    let body = wait_until("v1 answers over TLS", DEPLOY, || async {
        let r = client.get(&url).send().await.ok()?;
        (r.status() == 200).then_some(())?;
        r.text().await.ok()
    })
    .await;
    assert_eq!(body, "v1");
    // An HTTP/2 client (agreed by ALPN) is served too.
    assert_eq!(h2_over_tls(addr, cert.cert.der().clone()).await, "v1");
    // Plain HTTP on a TLS address gets nowhere.
    assert!(
        http_get(&env.app_url("/version"))
            .await
            .is_none_or(|(s, _)| s != 200)
    );
    env.cleanup().await;
}

/// `GET /version` from `app.test` at `addr` over TLS with ALPN `h2`, HTTP/2 checked.
async fn h2_over_tls(
    addr: std::net::SocketAddr,
    root: rustls::pki_types::CertificateDer<'static>,
) -> String {
    use http_body_util::BodyExt;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("app.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("a TLS handshake with the proxy");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("an HTTP/2 handshake over TLS");
    tokio::spawn(conn);
    let req = hyper::Request::get("https://app.test/version")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(req))
        .await
        .expect("an answer in time")
        .expect("an HTTP/2 answer");
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}
