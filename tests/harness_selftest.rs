//! Proves the test harness itself against the real registry, engine and database, without
//! Pier.

mod support;

use std::time::Duration;

use support::*;

/// Pushes, digests, an index, and what the registry's notifications look like.
#[tokio::test]
async fn registry_push_gives_distinct_digests_and_notifies() {
    let mut hooks = HookRecorder::start().await;
    let token = random_hex(16);
    let reg = Registry::start(Some(&hooks.url("/hooks/local")), &token).await;

    let d1 = reg.push("demo/x", "v1", &TestImage::healthy("v1")).await;
    let d2 = reg
        .push("demo/x", "v2", &TestImage::no_health_file("v2"))
        .await;
    assert!(d1.starts_with("sha256:") && d1.len() == 71, "{d1}");
    assert_ne!(d1, d2);
    // Same input, same bytes, same digest.
    assert_eq!(TestImage::healthy("v1").build("amd64").digest, d1);

    let (digest, ct) = reg.head_manifest("demo/x", "v1").await.expect("v1 exists");
    assert_eq!(digest, d1);
    assert_eq!(ct, MT_OCI_MANIFEST);
    let (digest, _) = reg.head_manifest("demo/x", "v2").await.expect("v2 exists");
    assert_eq!(digest, d2);

    // Without an Accept header Distribution 2.8 hides OCI manifests entirely.
    let plain = reqwest::Client::new()
        .head(format!("{}/v2/demo/x/manifests/v1", reg.url()))
        .send()
        .await
        .expect("HEAD without Accept");
    assert_eq!(plain.status().as_u16(), 404);

    let (index_digest, amd64) = reg.push_index("demo/x", "multi", "v3").await;
    assert_ne!(index_digest, amd64);
    let (digest, ct) = reg.head_manifest("demo/x", "multi").await.expect("index");
    assert_eq!(digest, index_digest);
    assert_eq!(ct, MT_OCI_INDEX);
    let (status, body) = http_get_accept(
        &format!("{}/v2/demo/x/manifests/{index_digest}", reg.url()),
        MANIFEST_ACCEPT,
    )
    .await;
    assert_eq!(status, 200);
    let index: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(index["mediaType"], MT_OCI_INDEX);
    assert_eq!(index["manifests"][0]["digest"], amd64.as_str());
    assert_eq!(index["manifests"][0]["platform"]["architecture"], "amd64");
    assert_eq!(index["manifests"][1]["platform"]["architecture"], "arm64");

    // The registry tells the endpoint about the tagged manifest pushes, with our token.
    let is_tag_push = |h: &RecordedHook, tag: &str| {
        h.json()["events"].as_array().is_some_and(|evs| {
            evs.iter()
                .any(|e| e["action"] == "push" && e["target"]["tag"] == tag)
        })
    };
    let got = hooks
        .collect_until(Duration::from_secs(15), |hs| {
            ["v1", "v2", "multi"]
                .iter()
                .all(|t| hs.iter().any(|h| is_tag_push(h, t)))
        })
        .await;
    let v1 = got.iter().find(|h| is_tag_push(h, "v1")).unwrap();
    assert_eq!(v1.path, "/hooks/local");
    assert_eq!(v1.headers["authorization"], format!("Bearer {token}"));
    assert_eq!(
        v1.headers["content-type"],
        "application/vnd.docker.distribution.events.v1+json"
    );
    let ev = &v1.json()["events"][0];
    assert_eq!(ev["target"]["digest"], d1.as_str());
    assert_eq!(ev["target"]["repository"], "demo/x");
    assert_eq!(ev["target"]["mediaType"], MT_OCI_MANIFEST);

    if let Ok(dir) = std::env::var("PIER_WRITE_FIXTURES") {
        let dir = std::path::Path::new(&dir);
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("distribution_push_v1.json"), &v1.body).unwrap();
        let all: Vec<serde_json::Value> = got
            .iter()
            .map(|h| serde_json::json!({ "headers": h.headers, "body": h.json() }))
            .collect();
        std::fs::write(
            dir.join("distribution_push_sequence.json"),
            serde_json::to_vec_pretty(&all).unwrap(),
        )
        .unwrap();
    }
}

async fn http_get_accept(url: &str, accept: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .get(url)
        .header("Accept", accept)
        .send()
        .await
        .expect("GET");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// Registry restart keeps port and storage.
#[tokio::test]
async fn registry_restarts_on_the_same_port_with_its_data() {
    let mut reg = Registry::start(None, "unused").await;
    let d = reg.push("demo/r", "main", &TestImage::healthy("r1")).await;
    reg.stop();
    assert!(!reg.is_running());
    assert!(http_get(&format!("{}/v2/", reg.url())).await.is_none());
    reg.restart().await;
    let (digest, _) = reg.head_manifest("demo/r", "main").await.expect("kept");
    assert_eq!(digest, d);
}

/// The built image really runs on this engine: pull by digest, run, probe, clean up.
#[tokio::test]
async fn pushed_image_runs_on_the_engine() {
    let reg = Registry::start(None, "unused").await;
    let app = unique_app("self");
    let mut guard = AppGuard::new(&app);
    let engine = Engine::connect().await;

    let digest = reg
        .push(&format!("demo/{app}"), "main", &TestImage::healthy("e1"))
        .await;
    let image = format!("{}/demo/{app}@{digest}", reg.host());
    engine.pull(&image).await;
    assert!(
        engine.repo_digests(&image).await.contains(&image),
        "repo digests name {image}"
    );
    let publish = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    engine.run_labelled(&app, &image, publish).await;
    assert_eq!(engine.running_containers_of_app(&app).await.len(), 1);

    let (status, body) = wait_until(
        "the container answers /health",
        Duration::from_secs(10),
        || http_get_ok(format!("http://{publish}/health")),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert_eq!(
        http_get(&format!("http://{publish}/version")).await,
        Some((200, "e1".to_owned()))
    );

    guard.cleanup().await;
    assert!(engine.containers_of_app(&app).await.is_empty());
    engine.remove_image(&image).await;
}

async fn http_get_ok(url: String) -> Option<(u16, String)> {
    http_get(&url).await.filter(|(s, _)| *s == 200)
}

/// An AppGuard dropped without cleanup still removes the app's containers.
#[tokio::test]
async fn app_guard_drop_removes_containers() {
    let reg = Registry::start(None, "unused").await;
    let app = unique_app("drop");
    let engine = Engine::connect().await;
    let digest = reg
        .push(
            &format!("demo/{app}"),
            "main",
            &TestImage::exits_at_once("x1"),
        )
        .await;
    let image = format!("{}/demo/{app}@{digest}", reg.host());
    engine.pull(&image).await;
    {
        let _guard = AppGuard::new(&app);
        let publish = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        engine.run_labelled(&app, &image, publish).await;
        assert_eq!(engine.containers_of_app(&app).await.len(), 1);
    }
    assert!(engine.containers_of_app(&app).await.is_empty());
    engine.remove_image(&image).await;
}

#[tokio::test]
async fn test_db_is_created_and_dropped() {
    let mut db = TestDb::create().await;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let name = db.name.clone();
    db.cleanup().await;

    let other = TestDb::create().await;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_one(&other.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "{name} was dropped");
    let other_name = other.name.clone();
    drop(other); // Drop alone also drops the database.

    let mut check = TestDb::create().await;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&other_name)
        .fetch_one(&check.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "{other_name} was dropped on Drop");
    check.cleanup().await;
}

/// A process that exits before /healthz answers is reported with its log.
#[tokio::test]
async fn pier_process_that_exits_is_reported_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-pier");
    std::fs::write(&fake, "#!/bin/sh\necho \"fake pier got: $*\" >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = format!("[server]\nlisten = \"127.0.0.1:{}\"\n", free_port());
    let err = match PierCommand::new(&config).program(&fake).try_start().await {
        Ok(_) => panic!("a process that exits at once must not count as started"),
        Err(e) => e,
    };
    assert!(err.contains("exited"), "{err}");
    assert!(err.contains("fake pier got: --config"), "{err}");
    assert!(err.contains("pier.toml serve"), "{err}");
    // The error names the kept log file: `... log /tmp/pier-process-XXXX/pier.log:\n<tail>`.
    let log = err
        .split_once(" log ")
        .and_then(|(_, rest)| rest.split_once(":\n"))
        .map(|(path, _)| std::path::PathBuf::from(path))
        .expect("error names the log file");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("fake pier got")
    );
    std::fs::remove_dir_all(log.parent().unwrap()).unwrap();

    let missing = PierCommand::new(&config)
        .program("/nonexistent/pier")
        .try_start()
        .await;
    assert!(matches!(missing, Err(e) if e.contains("/nonexistent/pier")));
}

/// The rendered pier.toml has every piece a test relies on; signatures are what the sources
/// expect.
#[tokio::test]
async fn test_env_renders_a_consistent_config() {
    let env = TestEnv::builder()
        .without_pier()
        .health_timeout(Duration::from_millis(1500))
        .workers(3)
        .add_app(AppSpec::new("api"))
        .start()
        .await;
    let toml: toml::Value = toml::from_str(&env.config_toml()).expect("valid TOML");
    assert_eq!(toml["server"]["workers"].as_integer(), Some(3));
    assert_eq!(
        listen_of(&env.config_toml()),
        Some(([127, 0, 0, 1], env.pier_port).into())
    );
    assert_eq!(toml["server"]["database_url"].as_str(), Some(&*env.db.url));
    assert_eq!(
        toml["registries"][0]["host"].as_str(),
        Some(&*env.registry().host())
    );
    let apps = toml["apps"].as_array().unwrap();
    assert_eq!(apps.len(), 2);
    assert_eq!(apps[0]["name"].as_str(), Some(env.app()));
    assert_eq!(apps[0]["image"].as_str(), Some(&*env.image()));
    assert_eq!(apps[0]["health"]["timeout"].as_str(), Some("1s 500ms"));
    assert_eq!(apps[0]["env"]["GREETING"].as_str(), Some("hello"));
    assert_ne!(apps[0]["publish"], apps[1]["publish"]);
    assert_eq!(
        toml["sources"][0]["token"].as_str(),
        Some(&*env.distribution_token)
    );

    // The registry is up and its config points at Pier's hook.
    let yml = std::fs::read_to_string(env.registry().config_path()).unwrap();
    assert!(yml.contains(&env.hook_url("local")), "{yml}");
    assert!(yml.contains(&format!("Bearer {}", env.distribution_token)));

    // RFC 4231 test case 2.
    assert_eq!(
        sign_hmac_sha256("Jefe", b"what do ya want for nothing?"),
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    env.cleanup().await;
}
