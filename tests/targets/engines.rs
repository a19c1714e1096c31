//! Pier's `Engine` on other Docker engines, each a real dockerd in its own
//! network namespace: over `tcp://` with TLS client certificates made here, and over
//! `ssh://` through a real sshd. It pings, pulls by digest from the test registry (same
//! image name as on the host engine), and creates, starts, inspects and removes a container
//! whose published port answers on that engine's own host. Refusals (a certificate of
//! another CA, an unknown or changed host key, an unauthorized login) are permanent and
//! leave known_hosts untouched; an engine that is down is `Unavailable` within the connect
//! deadline; a missing file stops the client being built, with the file named.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;
use pier::config::{Protocol, RestartPolicy};
use pier::domain::Endpoint;
use pier::engine::{
    ContainedSpec, ContainerSpec, Engine, EngineError, LABEL_APP, LABEL_DEPLOYMENT, LABEL_DIGEST,
    LABEL_MANAGED, PortSpec, Removed,
};

/// What an engine that is down or a refused peer may take to answer: Pier's connect
/// deadline (15 s) and margin for a loaded machine.
const ANSWER_WITHIN: Duration = Duration::from_secs(40);

/// A registry with one healthy image pushed: (registry, repository, digest).
async fn registry_with_image(prefix: &str) -> (Registry, String, String) {
    let registry = Registry::start(None, "unused").await;
    let repo = unique_app(prefix);
    let digest = registry.push(&repo, "v1", &TestImage::healthy("v1")).await;
    (registry, repo, digest)
}

/// `f` within [`ANSWER_WITHIN`], or the test fails saying what hung.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(ANSWER_WITHIN, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not answer within {ANSWER_WITHIN:?}"))
}

fn spec(app: &str, image: &str, digest: &str, publish: SocketAddr) -> ContainerSpec {
    ContainerSpec {
        name: format!("{app}-{}", random_hex(6)),
        image: image.to_owned(),
        env: Vec::new(),
        labels: HashMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_APP.to_owned(), app.to_owned()),
            (
                LABEL_DEPLOYMENT.to_owned(),
                "engine-targets-test".to_owned(),
            ),
            (LABEL_DIGEST.to_owned(), digest.to_owned()),
        ]),
        ports: vec![PortSpec {
            container: 8080,
            protocol: Protocol::Tcp,
            publish: Some(publish),
        }],
        memory_bytes: None,
        nano_cpus: None,
        no_new_privileges: true,
        pids_limit: None,
        restart: RestartPolicy::No,
        contained: ContainedSpec::default(),
        command: None,
    }
}

/// Everything the pipeline asks of an engine, through `engine`, on `remote`: ping, pull by
/// digest, then two containers, one published on the engine's loopback (as blue-green
/// candidates are) and one on its address, each answering its health check there.
async fn runs_a_container_there(
    engine: &Engine,
    remote: &ExtraEngine,
    registry: &Registry,
    repo: &str,
    digest: &str,
) {
    within("ping", engine.ping()).await.expect("ping");
    let repository = format!("{}/{repo}", registry.host());
    let image = format!("{repository}@{digest}");
    within(
        "pull",
        engine.pull(&repository, digest, None, Duration::from_secs(300)),
    )
    .await
    .expect("pull by digest");
    let facts = engine
        .image(&image)
        .await
        .expect("inspect image")
        .expect("pulled");
    assert!(
        facts.repo_digests.contains(&image),
        "{:?}",
        facts.repo_digests
    );
    let (on_host, _) = docker_cli(&["image", "inspect", &image]);
    assert!(
        !on_host,
        "the image landed on the host engine, not on {}",
        remote.netns()
    );

    let app = unique_app("remote");
    let loopback = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
    let address = SocketAddr::new(IpAddr::V4(remote.address()), 0);
    for publish in [loopback, address] {
        let id = engine
            .create_container(&spec(&app, &image, digest, publish))
            .await
            .expect("create");
        engine.start_container(&id).await.expect("start");
        let facts = engine
            .inspect_container(&id)
            .await
            .expect("inspect")
            .expect("exists");
        assert!(facts.running, "{facts:?}");
        assert_eq!(facts.label(LABEL_DIGEST), Some(digest));
        let bound = engine
            .published(&id, 8080)
            .await
            .expect("published")
            .expect("a port");
        let answer = wait_until(
            "the container answers on its engine's host",
            Duration::from_secs(30),
            || async {
                let got = if bound.ip().is_loopback() {
                    remote.http_get_inside(bound.port(), "/health").await
                } else {
                    assert_eq!(bound.ip(), IpAddr::V4(remote.address()));
                    http_get(&format!("http://{bound}/health")).await
                };
                got.filter(|(status, _)| *status == 200)
            },
        )
        .await;
        assert_eq!(answer.1, "ok\n");
        assert_eq!(
            engine.remove_container(&id).await.expect("remove"),
            Removed::Removed
        );
        assert!(
            engine
                .inspect_container(&id)
                .await
                .expect("inspect")
                .is_none()
        );
    }
    let host = crate::support::Engine::connect().await;
    assert!(
        host.containers_of_app(&app).await.is_empty(),
        "a container ran on the host engine"
    );
}

fn refused(e: EngineError) -> String {
    match e {
        EngineError::Refused { message, .. } => message,
        other => panic!("expected a permanent refusal, got {other:?}"),
    }
}

fn unavailable(e: EngineError) -> String {
    match e {
        EngineError::Unavailable { message, .. } => message,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn over_tls_pier_pulls_by_digest_and_runs_a_container_that_answers_on_that_engine() {
    let (registry, repo, digest) = registry_with_image("tls").await;
    let remote = ExtraEngine::builder()
        .forward(registry.port())
        .start()
        .await;
    let engine = Engine::for_endpoint(&remote.tls_endpoint()).expect("client");
    runs_a_container_there(&engine, &remote, &registry, &repo, &digest).await;
}

#[tokio::test]
async fn over_ssh_pier_pulls_by_digest_and_runs_a_container_that_answers_on_that_engine() {
    let (registry, repo, digest) = registry_with_image("ssh").await;
    let remote = ExtraEngine::builder()
        .forward(registry.port())
        .ssh()
        .start()
        .await;
    let before = std::fs::read(remote.known_hosts()).unwrap();
    let engine = Engine::for_endpoint(&remote.ssh_endpoint()).expect("client");
    runs_a_container_there(&engine, &remote, &registry, &repo, &digest).await;
    assert_eq!(
        std::fs::read(remote.known_hosts()).unwrap(),
        before,
        "known_hosts was written"
    );
}

#[tokio::test]
async fn an_engine_refuses_a_client_certificate_of_another_ca_for_good() {
    let remote = ExtraEngine::builder().start().await;
    let other = TestCa::new("another CA");
    let files = other.client_files(&remote.dir().join("other-client"), remote.ca());
    let engine =
        Engine::for_endpoint(&remote.tls_endpoint_with(&remote.address().to_string(), files))
            .unwrap();
    let message = refused(within("ping", engine.ping()).await.unwrap_err());
    assert!(
        message.contains("refused Pier's client certificate"),
        "{message}"
    );
    // The same engine with the right certificate answers: the refusal was the certificate.
    let right = Engine::for_endpoint(&remote.tls_endpoint()).unwrap();
    within("ping", right.ping())
        .await
        .expect("ping with the engine's CA");
}

#[tokio::test]
async fn pier_refuses_an_engine_certificate_of_another_ca_or_for_another_address() {
    let remote = ExtraEngine::builder().start().await;
    let other = TestCa::new("another CA");
    let trusting_other = remote
        .ca()
        .client_files(&remote.dir().join("trusts-other"), &other);
    let address = remote.address().to_string();
    let engine = Engine::for_endpoint(&remote.tls_endpoint_with(&address, trusting_other)).unwrap();
    let message = refused(within("ping", engine.ping()).await.unwrap_err());
    assert!(
        message.contains("engine's certificate is refused"),
        "{message}"
    );

    // The engine listens on its alias too, but its certificate names only its address.
    let alias = remote.alias_address().to_string();
    let engine =
        Engine::for_endpoint(&remote.tls_endpoint_with(&alias, remote.client_files().clone()))
            .unwrap();
    let message = refused(within("ping", engine.ping()).await.unwrap_err());
    assert!(
        message.contains("engine's certificate is refused")
            && message.contains("not valid for name"),
        "{message}"
    );
}

#[tokio::test]
async fn ssh_refuses_an_unknown_or_changed_host_key_and_leaves_known_hosts_as_it_was() {
    let remote = ExtraEngine::builder().ssh().start().await;
    let unknown = remote.dir().join("empty_known_hosts");
    std::fs::write(&unknown, "").unwrap();
    let changed = remote.dir().join("changed_known_hosts");
    let other_key = remote.dir().join("other_host_key");
    keygen(&other_key);
    let other_pub = std::fs::read_to_string(other_key.with_extension("pub")).unwrap();
    let key: Vec<&str> = other_pub.split_whitespace().take(2).collect();
    std::fs::write(
        &changed,
        format!("[{}]:{SSH_PORT} {}\n", remote.address(), key.join(" ")),
    )
    .unwrap();

    for known_hosts in [&unknown, &changed] {
        let before = std::fs::read(known_hosts).unwrap();
        let endpoint = remote.ssh_endpoint_with(known_hosts.clone(), Some(remote.ssh_identity()));
        let engine = Engine::for_endpoint(&endpoint).unwrap();
        let message = refused(within("ping", engine.ping()).await.unwrap_err());
        assert!(message.contains("host key refused"), "{message}");
        assert_eq!(
            std::fs::read(known_hosts).unwrap(),
            before,
            "{} was written",
            known_hosts.display()
        );
    }
    let engine = Engine::for_endpoint(&remote.ssh_endpoint()).unwrap();
    within("ping", engine.ping())
        .await
        .expect("ping with the right host key");
}

#[tokio::test]
async fn ssh_with_a_key_the_host_does_not_authorize_is_refused_for_good() {
    let remote = ExtraEngine::builder().ssh().start().await;
    let stranger = remote.dir().join("stranger_key");
    keygen(&stranger);
    let engine =
        Engine::for_endpoint(&remote.ssh_endpoint_with(remote.known_hosts(), Some(stranger)))
            .unwrap();
    let message = refused(within("ping", engine.ping()).await.unwrap_err());
    assert!(message.contains("login refused"), "{message}");
}

#[tokio::test]
async fn an_engine_that_is_down_is_unavailable_within_the_connect_deadline() {
    let mut remote = ExtraEngine::builder().ssh().start().await;
    let tls = Engine::for_endpoint(&remote.tls_endpoint()).unwrap();
    let ssh = Engine::for_endpoint(&remote.ssh_endpoint()).unwrap();
    // Up first, so each client holds a pooled connection that the engine's exit ends.
    within("tls ping", tls.ping()).await.expect("up over tls");
    within("ssh ping", ssh.ping()).await.expect("up over ssh");

    remote.stop_dockerd();
    let ssh_target = remote.ssh_endpoint().to_string();
    for (name, engine, says) in [
        // The pooled connection went with the engine; a new one finds no listener.
        ("tls", &tls, "Connection refused"),
        // sshd is up: the remote `docker system dial-stdio` fails, and its words (which
        // vary with the docker CLI's version) are passed on under the target's name.
        ("ssh", &ssh, ssh_target.as_str()),
    ] {
        let started = Instant::now();
        let message = unavailable(within(name, engine.ping()).await.unwrap_err());
        eprintln!("{name}: down after {:?}: {message}", started.elapsed());
        assert!(message.contains(says), "{message}");
    }
    // A client built while the engine is down fails at its first call the same way.
    let fresh = Engine::for_endpoint(&remote.tls_endpoint()).unwrap();
    let message = unavailable(within("fresh tls ping", fresh.ping()).await.unwrap_err());
    assert!(message.contains("Connection refused"), "{message}");

    remote.stop_sshd();
    let message = unavailable(within("ssh without sshd", ssh.ping()).await.unwrap_err());
    assert!(message.contains("Connection refused"), "{message}");
}

#[tokio::test]
async fn a_missing_key_or_known_hosts_file_fails_when_the_client_is_built_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("unused CA");
    let files = ca.client_files(&dir.path().join("client"), &ca);
    std::fs::remove_file(&files.key).unwrap();
    let tls = Endpoint::Tcp {
        host: "10.199.255.250".into(),
        port: 2376,
        tls: Some(files.clone()),
    };
    let message = refused(Engine::for_endpoint(&tls).unwrap_err());
    assert!(
        message.contains(&files.key.display().to_string()),
        "{message}"
    );
    assert!(!message.contains("BEGIN"), "{message}");

    let missing = dir.path().join("no_known_hosts");
    let ssh = Endpoint::Ssh(pier::domain::SshEndpoint {
        user: None,
        host: "10.199.255.250".into(),
        port: 22,
        known_hosts: missing.clone(),
        identity: None,
    });
    let message = refused(Engine::for_endpoint(&ssh).unwrap_err());
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );
}

/// The `ssh` processes this test process runs for `known_hosts`' engine, zombies included.
fn ssh_children(known_hosts: &Path) -> Vec<u32> {
    let me = std::process::id().to_string();
    let needle = format!("UserKnownHostsFile={}", known_hosts.display());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, a)| a.split_whitespace().nth(1));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(me.as_str()) && String::from_utf8_lossy(&cmdline).contains(&needle)
        })
        .collect()
}

#[tokio::test]
async fn ssh_connections_are_bounded_and_end_with_the_client() {
    let remote = ExtraEngine::builder().ssh().start().await;
    let engine = Engine::for_endpoint(&remote.ssh_endpoint()).unwrap();
    within("ping", engine.ping()).await.expect("up");
    // Many requests at once share at most 8 connections, and all succeed. They are reads
    // (a 30 s deadline), not pings: the 24th waits for a connection behind the other 23,
    // and on a loaded machine eight ssh handshakes at once can outlast a ping's 5 s.
    let mut most = 0;
    let results = {
        let requests =
            futures_util::future::join_all((0..24).map(|_| engine.image("pier-test/absent:none")));
        tokio::pin!(requests);
        loop {
            tokio::select! {
                r = &mut requests => break r,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    most = most.max(ssh_children(&remote.known_hosts()).len());
                }
            }
        }
    };
    assert!(results.iter().all(|r| matches!(r, Ok(None))), "{results:?}");
    assert!((1..=8).contains(&most), "{most} ssh processes at once");
    assert!(
        !ssh_children(&remote.known_hosts()).is_empty(),
        "idle connections are kept"
    );
    drop(engine);
    wait_until(
        "every ssh process of the dropped client is gone",
        Duration::from_secs(10),
        || async { ssh_children(&remote.known_hosts()).is_empty().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_new_client_whose_first_call_lists_or_creates_agrees_on_the_api_version_first() {
    // This engine speaks an older API (1.41) than bollard's default (1.53): the first
    // call on a new client must not depend on an agreement an earlier call made.
    let (registry, repo, digest) = registry_with_image("first").await;
    let remote = ExtraEngine::builder()
        .forward(registry.port())
        .start()
        .await;
    let (ok, out) = remote.docker(&["pull", &format!("{}/{repo}@{digest}", registry.host())]);
    assert!(ok, "{out}");
    let engine = Engine::for_endpoint(&remote.tls_endpoint()).unwrap();
    let listed = within("list", engine.managed_containers(None, None)).await;
    assert!(listed.expect("list as the first call").is_empty());

    let engine = Engine::for_endpoint(&remote.tls_endpoint()).unwrap();
    let image = format!("{}/{repo}@{digest}", registry.host());
    let app = unique_app("first");
    let loopback = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
    let id = within(
        "create",
        engine.create_container(&spec(&app, &image, &digest, loopback)),
    )
    .await
    .expect("create as the first call");
    assert_eq!(
        engine.remove_container(&id).await.unwrap(),
        Removed::Removed
    );
}
