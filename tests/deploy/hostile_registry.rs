//! A hostile or slow registry cannot wedge an app or exhaust Pier's
//! memory. Each app's image points at a `HostileRegistry` (a fault injector on loopback);
//! the deployment is queued with `pier deploy` and must end with a clear reason within its
//! deadlines, or, for a 429 with `Retry-After`, succeed with the real pushed digest after
//! waiting as asked.

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

/// An environment whose first app's image lives on `double`, with `limits` in its
/// `[[registries]]` entry and `server` lines in `[server]`.
async fn env_on(double: &HostileRegistry, limits: &str, server: &str) -> TestEnv {
    TestEnv::builder()
        .without_notifications()
        .app(|a| a.registry = Some(double.host()))
        .registries_toml(&double.registry_toml(limits))
        .server_toml(server)
        .start()
        .await
}

/// `pier deploy APP`, then the deployment once final, and how long that took.
async fn deploy(env: &TestEnv, app: &str) -> (Value, Duration) {
    let started = Instant::now();
    let out = env.pier().run_cli(&["deploy", app]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("queued deployment "))
        .unwrap_or_else(|| panic!("no deployment queued: {stdout}"))
        .trim()
        .to_owned();
    let d = env.deployment_final(&id, DEPLOY).await;
    (d, started.elapsed())
}

fn error_of(d: &Value) -> &str {
    d["error"].as_str().unwrap_or_default()
}

/// Peak resident memory of a process (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kb << 10
}

#[tokio::test]
async fn a_manifest_trickled_byte_by_byte_fails_the_deployment_within_its_deadlines() {
    // ~100 bytes at 2 a second: the whole answer would take almost a minute, and no single
    // read ever waits long enough for a per-read timeout to fire.
    let double = HostileRegistry::start(Fault::Trickle {
        every: Duration::from_millis(500),
    })
    .await;
    let env = env_on(
        &double,
        "first_byte_timeout = \"2s\"\ntimeout = \"3s\"",
        "retry_budget = \"4s\"",
    )
    .await;

    let (d, took) = deploy(&env, env.app()).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    let error = error_of(&d);
    assert!(
        error.starts_with("resolve:") && error.contains("not complete within 3s"),
        "{error}"
    );
    // A timeout is transient: retried, but only within the 4 s budget (one more attempt
    // may start inside it and run its own 3 s), instead of the minutes seen before.
    let hits = double.manifest_hits();
    assert!((1..=3).contains(&hits.len()), "{hits:#?}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(env.engine.containers_of_app(env.app()).await.is_empty());
    eprintln!(
        "trickle: failed after {took:?}, {} attempts: {error}",
        hits.len()
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_huge_manifest_is_refused_at_the_cap_and_pier_memory_stays_bounded() {
    const HUGE: u64 = 256 << 20;
    let streamed = HostileRegistry::start(Fault::HugeStreamed { bytes: HUGE }).await;
    let announced = HostileRegistry::start(Fault::HugeAnnounced { bytes: HUGE }).await;
    let mut second = AppSpec::new("announced");
    second.registry = Some(announced.host());
    let env = TestEnv::builder()
        .without_notifications()
        .app(|a| a.registry = Some(streamed.host()))
        .add_app(second)
        .registries_toml(&streamed.registry_toml(""))
        .registries_toml(&announced.registry_toml(""))
        .start()
        .await;
    let pid = env.pier().pid().expect("pier runs");
    let before = peak_rss(pid);

    let (a, b) = tokio::join!(
        deploy(&env, &env.apps[0].name),
        deploy(&env, &env.apps[1].name)
    );
    for (d, took) in [&a, &b] {
        assert_eq!(d["state"], "failed", "{d:#}");
        let error = error_of(d);
        assert!(
            error.contains("larger than the 4 MiB cap (max_manifest)"),
            "{error}"
        );
        // Permanent: failed at once, not retried for the budget.
        assert!(*took < Duration::from_secs(20), "took {took:?}");
    }
    assert_eq!(streamed.manifest_hits().len(), 1, "not retried");
    assert_eq!(announced.manifest_hits().len(), 1, "not retried");
    // Pier stopped reading at the cap: the double got rid of little more than the cap and
    // what the sockets' buffers hold, never the 256 MiB.
    assert!(
        streamed.body_bytes_sent() < 64 << 20,
        "{} bytes",
        streamed.body_bytes_sent()
    );
    assert!(
        announced.body_bytes_sent() < 64 << 20,
        "{} bytes",
        announced.body_bytes_sent()
    );
    let peak = peak_rss(pid);
    eprintln!(
        "huge manifests: pier peak RSS {} MiB (before the deployments {} MiB); double sent \
         {} KiB streamed, {} KiB announced",
        peak >> 20,
        before >> 20,
        streamed.body_bytes_sent() >> 10,
        announced.body_bytes_sent() >> 10
    );
    assert!(peak < 100 << 20, "peak RSS {} MiB", peak >> 20);
    env.cleanup().await;
}

#[tokio::test]
async fn redirect_loops_and_redirects_off_http_fail_at_once_with_the_reason() {
    let looping = HostileRegistry::start(Fault::RedirectLoop).await;
    let ftp = HostileRegistry::start(Fault::RedirectTo("ftp://127.0.0.1/manifest".into())).await;
    let file = HostileRegistry::start(Fault::RedirectTo("file:///etc/passwd".into())).await;
    let mut env = TestEnv::builder().without_notifications();
    for (i, double) in [&looping, &ftp, &file].into_iter().enumerate() {
        env = env.registries_toml(&double.registry_toml(""));
        if i == 0 {
            env = env.app(|a| a.registry = Some(double.host()));
        } else {
            let mut app = AppSpec::new("redirected");
            app.registry = Some(double.host());
            env = env.add_app(app);
        }
    }
    let env = env.start().await;

    let (l, f, p) = tokio::join!(
        deploy(&env, &env.apps[0].name),
        deploy(&env, &env.apps[1].name),
        deploy(&env, &env.apps[2].name)
    );
    for (d, _) in [&l, &f, &p] {
        assert_eq!(d["state"], "failed", "{d:#}");
    }
    assert!(
        error_of(&l.0).contains("more than 5 redirects"),
        "{:#}",
        l.0
    );
    assert!(
        error_of(&f.0).contains("redirect to a `ftp:` URL was refused"),
        "{:#}",
        f.0
    );
    assert!(
        error_of(&p.0).contains("redirect to a `file:` URL was refused"),
        "{:#}",
        p.0
    );
    // Bounded and permanent: the first request and five hops, once; one request each for
    // the others.
    assert_eq!(
        looping.manifest_hits().len(),
        6,
        "{:#?}",
        looping.manifest_hits()
    );
    assert_eq!(ftp.manifest_hits().len(), 1);
    assert_eq!(file.manifest_hits().len(), 1);
    for (_, took) in [&l, &f, &p] {
        assert!(*took < Duration::from_secs(20), "took {took:?}");
    }
    env.cleanup().await;
}

#[tokio::test]
async fn a_registry_answering_429_is_waited_for_as_asked_then_the_real_digest_deploys() {
    let double = HostileRegistry::start(Fault::TooManyRequests(vec![
        RetryAfter::Seconds(2),
        RetryAfter::DateIn(Duration::from_secs(3)),
    ]))
    .await;
    let env = env_on(&double, "", "retry_budget = \"30s\"").await;
    // A real image in the real registry, reached through the double once it relents.
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    double.set_upstream(&env.registry().url());

    let (d, took) = deploy(&env, env.app()).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], digest.as_str());
    env.wait_app_version("v1", DEPLOY).await;
    assert_eq!(
        env.running_digests_of(env.app()).await,
        vec![digest.clone()]
    );

    let hits = double.manifest_hits();
    let statuses: Vec<u16> = hits.iter().map(|h| h.status).collect();
    assert_eq!(&statuses[..3], [429, 429, 200], "{hits:#?}");
    // Seconds, then an HTTP date three seconds ahead (whole seconds: at least two remain).
    let first_wait = hits[1].at - hits[0].at;
    let second_wait = hits[2].at - hits[1].at;
    assert!(first_wait >= Duration::from_secs(2), "{first_wait:?}");
    assert!(second_wait >= Duration::from_secs(2), "{second_wait:?}");
    eprintln!("429: waited {first_wait:?} and {second_wait:?}; deployed in {took:?}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_registry_behind_a_token_service_is_asked_with_the_token_from_its_realm() {
    // Past the token, a manifest one byte over the cap: reaching that error proves the
    // dance worked without needing the engine to dance too.
    let double = HostileRegistry::start_behind_token(Fault::HugeAnnounced {
        bytes: (1 << 20) + 1,
    })
    .await;
    let env = TestEnv::builder()
        .without_notifications()
        .app(|a| a.registry = Some(double.host()))
        .registries_toml(&double.registry_toml(
            // Inline: `pier deploy` reads the same config without the server's environment.
            "username = \"bot\"\npassword = \"s3cret-hostile\"\nmax_manifest = \"1m\"",
        ))
        .start()
        .await;

    let (d, _) = deploy(&env, env.app()).await;
    assert_eq!(d["state"], "failed", "{d:#}");
    assert!(
        error_of(&d).contains("larger than the 1 MiB cap"),
        "{}",
        error_of(&d)
    );
    let hits = double.manifest_hits();
    let seen: Vec<(u16, bool)> = hits
        .iter()
        .map(|h| {
            let bearer = h
                .authorization
                .as_deref()
                .is_some_and(|a| a.starts_with("Bearer tok-"));
            (h.status, bearer)
        })
        .collect();
    assert_eq!(seen, [(401, false), (200, true)], "{hits:#?}");
    let tokens = double.token_requests();
    assert_eq!(tokens.len(), 1, "{tokens:#?}");
    let want_scope = format!(
        "scope=repository%3A{}%3Apull",
        env.repo().replace('/', "%2F")
    );
    assert!(
        tokens[0].query.contains("service=hostile") && tokens[0].query.contains(&want_scope),
        "{tokens:#?}"
    );
    // The configured credentials go to the realm, as Basic.
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode("bot:s3cret-hostile");
    assert_eq!(
        tokens[0].authorization.as_deref(),
        Some(format!("Basic {basic}").as_str())
    );
    env.cleanup().await;
}
