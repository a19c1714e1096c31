//! The reconcile poller: with the registry's notifications switched off, a push
//! still deploys, within one poll interval, as a `reconcile` deployment recorded as a
//! delivery of source `poller`; a glob app polls the repository's tag list and deploys the
//! highest match; a registry that goes away is backed off from, and polling resumes when it
//! is back. Real registry, real engine, real Postgres.

use std::time::{Duration, Instant};

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);
const INTERVAL: Duration = Duration::from_secs(1);

/// `(trigger, requested_tag, delivery source)` of the app's deployments, oldest first.
async fn deployments(env: &TestEnv) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT d.trigger, coalesce(d.requested_tag, ''), coalesce(v.source, '')
         FROM deployments d LEFT JOIN deliveries v ON v.id = d.delivery_id
         WHERE d.app = $1 ORDER BY d.created_at",
    )
    .bind(env.app())
    .fetch_all(&env.db.pool)
    .await
    .expect("read deployments")
}

/// Requests for the app's `main` manifest in the registry's own log.
fn manifest_requests(env: &TestEnv) -> usize {
    let needle = format!("/v2/{}/manifests/main HTTP", env.repo());
    env.registry()
        .log()
        .lines()
        .filter(|l| l.contains(&needle) && l.contains("\"GET "))
        .count()
}

async fn polled_env(app: impl FnOnce(&mut AppSpec)) -> TestEnv {
    TestEnv::builder()
        .without_notifications()
        .app(|a| {
            a.extra_toml = format!("poll = \"{}\"", humantime::format_duration(INTERVAL));
            app(a);
        })
        .start()
        .await
}

#[tokio::test]
async fn with_notifications_off_a_push_is_deployed_within_one_poll_interval() {
    let env = polled_env(|_| {}).await;

    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    let pushed = Instant::now();
    // Queued within one interval (plus the registry round trips and a margin for a
    // loaded machine), not at the next sweep or never.
    wait_until(
        "a deployment queued by the poller",
        INTERVAL * 5,
        || async { (!deployments(&env).await.is_empty()).then_some(()) },
    )
    .await;
    let queued_after = pushed.elapsed();
    env.wait_app_version("v1", DEPLOY).await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["trigger"], "reconcile");
    assert_eq!(d["resolved_digest"], v1.as_str());
    assert_eq!(
        deployments(&env).await,
        vec![("reconcile".into(), "main".into(), "poller".into())],
        "queued after {queued_after:?}"
    );

    // While the digest serves, polls queue nothing more: three more polls (each asks the
    // registry for the tag's manifest, as its log shows) add no deployment.
    let before = deployments(&env).await.len();
    let asked = manifest_requests(&env);
    wait_until("three more polls", INTERVAL * 15, || async {
        (manifest_requests(&env) >= asked + 3).then_some(())
    })
    .await;
    assert_eq!(deployments(&env).await.len(), before);

    // The tag moves: the next poll deploys the new digest.
    let v2 = env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let d2 = env
        .latest_final_of(env.app(), &[d["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["resolved_digest"], v2.as_str());
    assert_eq!(d2["trigger"], "reconcile");

    // The deliveries page lists the poller's deliveries, filtered by source.
    let (code, page) = http_get(&env.pier_url("/deliveries?source=poller"))
        .await
        .unwrap();
    assert_eq!(code, 200);
    assert_eq!(page.matches("class=\"delivery\"").count(), 2, "{page}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_polled_glob_app_deploys_the_highest_matching_tag_of_the_list() {
    let env = polled_env(|a| a.tag = "v1.*".into()).await;

    env.push(&TestImage::healthy("v1.2.0"), "v1.2.0").await;
    env.push(&TestImage::healthy("v2.0.0"), "v2.0.0").await;
    let v110 = env.push(&TestImage::healthy("v1.10.0"), "v1.10.0").await;
    env.wait_app_version("v1.10.0", DEPLOY).await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d["resolved_digest"], v110.as_str(), "{d:#}");
    let rows = deployments(&env).await;
    assert!(
        rows.iter().all(|(_, tag, _)| tag.starts_with("v1.")),
        "never v2.0.0: {rows:?}"
    );
    assert_eq!(rows.last().unwrap().1, "v1.10.0");
    env.cleanup().await;
}

#[tokio::test]
async fn a_registry_that_goes_away_is_backed_off_from_and_polled_again_when_back() {
    let mut env = polled_env(|_| {}).await;
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;

    env.registry_mut().stop();
    env.pier()
        .wait_for_log("poll failed; backing off", Duration::from_secs(20))
        .await;
    assert!(env.pier_mut().is_running(), "pier survives its registry");
    env.registry_mut().restart().await;
    // The backoff started at the interval and doubles: back within a few intervals.
    env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    env.cleanup().await;
}

/// A registry that answers every request `429 Too Many Requests` with `Retry-After`, and
/// notes when each request came: a fault injector, not a fake of a working registry.
async fn rate_limiting_registry(
    retry_after_secs: u64,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Instant>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            log.lock().unwrap().push(Instant::now());
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let answer = format!(
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {retry_after_secs}\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    (port, seen)
}

#[tokio::test]
async fn a_rate_limiting_registry_is_asked_again_only_after_its_retry_after() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let (port, seen) = rate_limiting_registry(3).await;
    let toml = format!(
        "[server]\ndatabase_url = \"postgres://127.0.0.1:1/unused\"\n\
         [[registries]]\nhost = \"127.0.0.1:{port}\"\ninsecure = true\n\
         [[apps]]\nname = \"api\"\nimage = \"127.0.0.1:{port}/acme/api\"\ntag = \"v1.*\"\n\
         poll = \"1s\"\nport = 8000\n"
    );
    let config =
        std::sync::Arc::new(pier::config::Config::parse(&toml, std::path::Path::new(".")).unwrap());
    let poller = pier::background::poller::Poller {
        store: pier::store::Store::connect_lazy_many(&config.server.database_urls()).unwrap(),
        registry: pier::registry::Registry::new(&config.registries, config.server.registry_limits),
        tags: pier::registry::tags::TagLister::new(&config.registries),
        platform: pier::domain::Platform::from_engine("linux", "amd64"),
        live: pier::config::LiveConfig::new(config, None),
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    pier::background::poller::spawn(&mut tasks, poller, &shutdown);

    // The interval is 1 s; the registry asks for 3 s: three requests span at least 6 s.
    wait_until(
        "three polls of the rate-limiting registry",
        Duration::from_secs(30),
        || {
            let n = seen.lock().unwrap().len();
            async move { (n >= 3).then_some(()) }
        },
    )
    .await;
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    let at = seen.lock().unwrap().clone();
    for pair in at.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(2900),
            "asked again after {gap:?}, before its Retry-After of 3 s"
        );
    }
}
