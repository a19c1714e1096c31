//! The operator's command line is a client of Pier's HTTP API with the caller's own token:
//! it needs no config, no other admin's secret and no database. `pier check` validates a
//! config without connecting to anything.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits until the app's latest deployment is in `state`; returns it.
async fn latest_in(env: &TestEnv, state: &str) -> Value {
    let app = env.app().to_owned();
    wait_until(
        &format!("{app}'s latest deployment {state}"),
        DEPLOY,
        || {
            let app = app.clone();
            async move {
                let (_, v) = env.api_get(&format!("/apps/{app}")).await;
                let d = v.get("latest_deployment")?.clone();
                (d.get("state")?.as_str()? == state).then_some(d)
            }
        },
    )
    .await
}

#[tokio::test]
async fn approve_from_the_cli_needs_only_the_callers_own_token() {
    // release's token is a file the server reads at start; the operator's machine has
    // neither it nor the config, nor a database URL.
    let secrets = tempfile::tempdir().expect("tempdir");
    let release_file = secrets.path().join("release.token");
    std::fs::write(&release_file, random_hex(32)).unwrap();
    let ops = random_hex(32);
    let admins = format!(
        "[[admins]]\nname = \"ops\"\ntoken = \"{ops}\"\n\n[[admins]]\nname = \"release\"\n\
         token = \"file:{}\"\n",
        release_file.display()
    );
    let env = TestEnv::builder()
        .sources_toml(&admins)
        .app(|a| a.extra_toml = "approval = { required = 1, from = [\"ops\", \"release\"] }".into())
        .start()
        .await;
    std::fs::remove_file(&release_file).unwrap();
    env.push(&TestImage::healthy("v1"), "main").await;
    latest_in(&env, "awaiting_approval").await;

    let home = tempfile::tempdir().expect("tempdir");
    let url = env.pier_url("");
    let as_ops = [("PIER_URL", url.as_str()), ("PIER_TOKEN", ops.as_str())];
    // `deploy --wait` gives up with exit 2 while the deployment waits, and says so.
    let out = run_pier_client(
        home.path(),
        &as_ops,
        &["deploy", env.app(), "--wait", "--timeout", "2s"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains("is still"), "{}", stderr(&out));
    let waiting = latest_in(&env, "awaiting_approval").await;
    assert_eq!(waiting["requested_by"], "user ops", "{waiting:#}");
    let id = waiting["id"].as_str().unwrap().to_owned();

    // `--as` is checked against the server's word before anything is done.
    let out = run_pier_client(home.path(), &as_ops, &["approve", &id, "--as", "release"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not `release`'s"), "{}", stderr(&out));
    // The shared token names nobody: refused, naming why.
    let shared = [("PIER_URL", url.as_str()), ("PIER_TOKEN", &env.admin_token)];
    let out = run_pier_client(home.path(), &shared, &["approve", &id]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("named admin"), "{}", stderr(&out));
    let (_, d) = env.api_get(&format!("/deployments/{id}")).await;
    assert!(d["decisions"].as_array().unwrap().is_empty(), "{d:#}");

    let out = run_pier_client(home.path(), &as_ops, &["approve", &id, "--as", "ops"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("as ops"), "{}", stdout(&out));
    for text in [stdout(&out), stderr(&out)] {
        assert!(!text.contains(&ops), "the token is never printed: {text}");
    }
    let done = env.deployment_final(&id, DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let who: Vec<&str> = done["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["admin"].as_str())
        .collect();
    assert_eq!(who, ["ops"], "{done:#}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_cli_action_without_a_server_says_where_it_looked() {
    let home = tempfile::tempdir().expect("tempdir");
    let kept = home.path().join("config/pier/credentials");
    for args in [&["deploy", "web"][..], &["status"], &["approve", &uuid()]] {
        let out = run_pier_client(home.path(), &[], args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let e = stderr(&out);
        for said in [
            "PIER_URL",
            "--url",
            "pier login",
            &kept.display().to_string(),
        ] {
            assert!(e.contains(said), "{args:?} does not say {said}: {e}");
        }
        assert!(!e.contains("pier.toml"), "needs no config: {e}");
    }

    // A URL where nothing listens: said plainly, and the token is not in it.
    let url = format!("http://127.0.0.1:{}", free_port());
    let token = random_hex(32);
    let env = [("PIER_URL", url.as_str()), ("PIER_TOKEN", token.as_str())];
    let out = run_pier_client(home.path(), &env, &["unpin", "web"]).await;
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(e.contains(&format!("no Pier answers at {url}")), "{e}");
    assert!(!e.contains(&token), "{e}");
    // A URL but no token: says how to give one, before any request.
    let out = run_pier_client(home.path(), &env[..1], &["cancel", &uuid()]).await;
    assert!(
        stderr(&out).contains("needs your token"),
        "{}",
        stderr(&out)
    );
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test]
async fn login_keeps_the_url_and_token_for_its_owner_only_and_logout_deletes_them() {
    let env = TestEnv::start().await;
    let home = tempfile::tempdir().expect("tempdir");
    let url = env.pier_url("");
    let kept = home.path().join("config/pier/credentials");

    let wrong = random_hex(32);
    let out = run_pier_client(home.path(), &[("PIER_TOKEN", &wrong)], &["login", &url]).await;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains(&format!("the token was refused by {url}")),
        "{e}"
    );
    assert!(!e.contains(&wrong), "{e}");
    assert!(!kept.exists(), "a refused token is not kept");

    let token = [("PIER_TOKEN", env.admin_token.as_str())];
    let out = run_pier_client(home.path(), &token, &["login", &url]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("server.admin_token"),
        "{}",
        stdout(&out)
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    // Then neither URL nor token is given again.
    let out = run_pier_client(home.path(), &[], &["status", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let apps: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(apps[0]["name"], env.app(), "{apps:#}");
    // The kept token is never sent to another server.
    let elsewhere = format!("http://127.0.0.1:{}", free_port());
    let other = [("PIER_URL", elsewhere.as_str())];
    let out = run_pier_client(home.path(), &other, &["unpin", env.app()]).await;
    assert!(
        stderr(&out).contains("needs your token"),
        "{}",
        stderr(&out)
    );
    // A kept file others may read is refused.
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_pier_client(home.path(), &[], &["status"]).await;
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));

    let out = run_pier_client(home.path(), &[], &["logout"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!kept.exists());
    env.cleanup().await;
}

/// A TLS terminator in front of Pier (as nginx would be), with a certificate for
/// 127.0.0.1 signed by `ca`: every connection is decrypted and relayed to `pier`.
async fn tls_in_front_of(
    pier: SocketAddr,
    ca: &TestCa,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let pair = ca.server(&[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("server certificate");
    let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).expect("server key");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut upstream) = tokio::net::TcpStream::connect(pier).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn over_https_the_cli_trusts_the_ca_file_it_is_given_and_no_other() {
    let env = TestEnv::start().await;
    let ca = TestCa::new("pier-test-ca");
    let pier: SocketAddr = env
        .pier_url("")
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let (addr, relay) = tls_in_front_of(pier, &ca).await;
    let home = tempfile::tempdir().expect("tempdir");
    let ca_file = home.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let url = format!("https://{addr}");
    let token = env.admin_token.as_str();

    let plain = [("PIER_URL", url.as_str()), ("PIER_TOKEN", token)];
    let out = run_pier_client(home.path(), &plain, &["status"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--ca-file"), "{}", stderr(&out));

    let ca_path = ca_file.display().to_string();
    let with_ca = [
        ("PIER_URL", url.as_str()),
        ("PIER_TOKEN", token),
        ("PIER_CA_FILE", ca_path.as_str()),
    ];
    let out = run_pier_client(home.path(), &with_ca, &["unpin", env.app()]).await;
    // It reached Pier, which answered for itself: the app is not pinned.
    assert!(
        stderr(&out).contains(&format!(
            "{url} answered 409: app `{}` is not pinned",
            env.app()
        )),
        "{}",
        stderr(&out)
    );
    relay.abort();
    env.cleanup().await;
}

/// A config whose every part is at fault somewhere: `(path, folder)`.
fn faulty_config(dir: &Path) -> std::path::PathBuf {
    let folder = dir.join("a-folder");
    std::fs::create_dir(&folder).unwrap();
    let text = format!(
        r#"[server]
listen = "127.0.0.1:{listen}"
database_url = "postgres://pier:pier@127.0.0.1:{db}/pier"
admin_token = "env:PIER_CHECK_TEST_UNSET"
workers = 0

[[sources]]
name = "local"
kind = "distribution"
token = "file:{folder}"

[[admins]]
name = "ops"
token = "env:PIER_CHECK_TEST_OPS"

[[admins]]
name = "release"
token = "file:release.token"

[[apps]]
name = "web"
image = "127.0.0.1:5000/demo/web"
port = 8080
publish = "127.0.0.1:{publish}"
"#,
        listen = free_port(),
        db = free_port(),
        publish = free_port(),
        folder = folder.display(),
    );
    let path = dir.join("pier.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn check_names_every_field_at_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = faulty_config(dir.path());
    let ops_value = format!("ops-{}", random_hex(32));
    let c = config.display().to_string();
    let env = [("PIER_CHECK_TEST_OPS", ops_value.as_str())];
    let out = run_pier_client(dir.path(), &env, &["--config", &c, "check"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let e = stderr(&out);
    for fault in [
        "server.admin_token: environment variable PIER_CHECK_TEST_UNSET is not set",
        "sources[local].token",
        "admins[release].token",
        "release.token: No such file or directory",
        "server.workers must be at least 1",
        "4 problem(s)",
    ] {
        assert!(e.contains(fault), "does not name {fault:?}:\n{e}");
    }
    assert!(
        !e.contains(&ops_value),
        "a secret's value is never printed:\n{e}"
    );
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
}

#[tokio::test]
async fn check_needs_no_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hook.token"), random_hex(32)).unwrap();
    // Nothing listens where the database and the engine would be.
    let text = format!(
        r#"[server]
database_url = "env:PIER_CHECK_TEST_DB"
docker_host = "tcp://127.0.0.1:{engine}"

[[sources]]
name = "local"
kind = "distribution"
token = "file:hook.token"

[[apps]]
name = "web"
image = "127.0.0.1:5000/demo/web"
port = 8080
publish = "127.0.0.1:{publish}"
"#,
        engine = free_port(),
        publish = free_port(),
    );
    let config = dir.path().join("pier.toml");
    std::fs::write(&config, text).unwrap();
    let db = format!("postgres://pier:pier@127.0.0.1:{}/pier", free_port());
    let c = config.display().to_string();
    let out = run_pier_client(
        dir.path(),
        &[("PIER_CHECK_TEST_DB", &db)],
        &["--config", &c, "check"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stdout(&out);
    for part in [
        "valid",
        "1 app(s) (web)",
        "1 source(s) (local)",
        "target(s) (local)",
    ] {
        assert!(summary.contains(part), "{part}: {summary}");
    }
    assert!(!summary.contains(&db), "{summary}");
}

#[tokio::test]
async fn check_decrypts_every_age_secret_and_names_the_one_it_cannot_read() {
    use age::secrecy::ExposeSecret;
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = age::x25519::Identity::generate();
    let value = format!("age-{}", random_hex(24));
    let write = |name: &str, to: &age::x25519::Recipient| {
        let lines = format!("DB_PASSWORD={value}\n");
        let cipher = age::encrypt(to, lines.as_bytes()).unwrap();
        std::fs::write(dir.path().join(name), cipher).unwrap();
    };
    write("good.age", &ours.to_public());
    write("bad.age", &age::x25519::Identity::generate().to_public());
    let text = format!(
        r#"[server]
database_url = "postgres://pier:pier@127.0.0.1:{db}/pier"
age_identity = "env:PIER_CHECK_TEST_AGE_ID"

[[apps]]
name = "web"
image = "127.0.0.1:5000/demo/web"
port = 8080
publish = "127.0.0.1:{publish}"
secrets = {{ DB_PASSWORD = {{ from = "age:good.age#DB_PASSWORD", as = "file" }} }}

[[apps]]
name = "api"
image = "127.0.0.1:5000/demo/api"
port = 8080
publish = "127.0.0.1:{other}"
secrets = {{ DB_PASSWORD = {{ from = "age:bad.age#DB_PASSWORD", as = "file" }} }}
"#,
        db = free_port(),
        publish = free_port(),
        other = free_port(),
    );
    let config = dir.path().join("pier.toml");
    std::fs::write(&config, text).unwrap();
    let c = config.display().to_string();
    let id = ours.to_string().expose_secret().to_owned();
    let env = [("PIER_CHECK_TEST_AGE_ID", id.as_str())];
    let out = run_pier_client(dir.path(), &env, &["--config", &c, "check"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let e = stderr(&out);
    assert!(
        e.contains("apps.api.secrets.DB_PASSWORD: age file")
            && e.contains("bad.age: decryption failed")
            && e.contains("1 problem(s)"),
        "{e}"
    );
    assert!(!e.contains("good.age"), "{e}");
    assert!(!e.contains(&value) && !e.contains(&id), "{e}");
}
