//! Secrets as files: `secrets = { K = { from = "...", as = "file" } }` reaches the
//! container as `/run/secrets/K` (mode 0400, owned by the app's user) and appears in no
//! `docker inspect`, journal, log or page; an `age:` file is read at each deployment, so a
//! rotated file reaches the next push without a reload; an undecryptable one fails the
//! deployment before any container is made. Real engine, registry and Postgres.

use std::path::PathBuf;
use std::time::Duration;

use age::secrecy::ExposeSecret;
use serde_json::Value;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(60);
const USER: &str = "10001:10001";

/// The engine host's secrets directory of one test (on the host's tmpfs), removed with
/// every container's files whatever happens to the test.
struct SecretsDir(PathBuf);

impl SecretsDir {
    fn new() -> Self {
        Self(PathBuf::from(format!(
            "/dev/shm/pier-test-secrets-{}",
            random_hex(12)
        )))
    }
}

impl Drop for SecretsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An age identity and the folder its encrypted files are written to.
struct AgeStore {
    identity: age::x25519::Identity,
    dir: tempfile::TempDir,
}

impl AgeStore {
    fn new() -> Self {
        Self {
            identity: age::x25519::Identity::generate(),
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn identity_text(&self) -> String {
        self.identity.to_string().expose_secret().to_owned()
    }
    fn path(&self) -> PathBuf {
        self.dir.path().join("web.age")
    }
    /// Writes `lines` encrypted to `recipient` (this store's own unless given).
    fn write(&self, lines: &str, recipient: Option<&age::x25519::Recipient>) {
        let own = self.identity.to_public();
        let cipher = age::encrypt(recipient.unwrap_or(&own), lines.as_bytes()).unwrap();
        std::fs::write(self.path(), cipher).unwrap();
    }
}

async fn env_with(store: &AgeStore, dir: &SecretsDir, crash: Option<&str>) -> TestEnv {
    let age_path = store.path();
    let mut b = TestEnv::builder()
        .lease("3s")
        .server_toml(&format!(
            "age_identity = \"env:PIER_TEST_AGE_IDENTITY\"\nsecrets_dir = \"{}\"",
            dir.0.display()
        ))
        .pier_env("PIER_TEST_AGE_IDENTITY", &store.identity_text())
        .app(move |a| {
            a.extra_toml = format!(
                "user = \"{USER}\"\nsecrets = {{ DB_PASSWORD = {{ from = \"age:{}#DB_PASSWORD\", \
                 as = \"file\" }} }}",
                age_path.display()
            )
        });
    if let Some(point) = crash {
        b = b.pier_env("PIER_CRASH_AT", point);
    }
    b.start().await
}

fn only_container(all: &[bollard::models::ContainerSummary]) -> String {
    assert_eq!(all.len(), 1, "{all:#?}");
    all[0].id.clone().unwrap()
}

/// `docker exec` as `user` in `id`.
fn exec_as(id: &str, user: &str, cmd: &[&str]) -> (bool, String) {
    let mut args = vec!["exec", "-u", user, id, "/bin/busybox"];
    args.extend_from_slice(cmd);
    docker_cli(&args)
}

/// The file is the value, mode 0400, owned by the app's user, readable by it alone.
fn assert_secret_file(id: &str, value: &str) {
    let file = "/run/secrets/DB_PASSWORD";
    let (ok, out) = exec_as(id, USER, &["cat", file]);
    assert!(ok, "{out}");
    assert_eq!(out, value);
    let (ok, out) = exec_as(id, USER, &["stat", "-c", "%a %u", file]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "400 10001");
    let (ok, out) = exec_as(id, "10002:10002", &["cat", file]);
    assert!(!ok, "another user read the secret: {out}");
}

/// Every secret file under the test's secrets directory, with its content.
fn host_secret_files(dir: &SecretsDir) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for container in std::fs::read_dir(&dir.0).unwrap() {
        for file in std::fs::read_dir(container.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let content = std::fs::read_to_string(&path).unwrap();
            out.push((path, content));
        }
    }
    out.sort();
    out
}

fn create_intent(d: &Value) -> Value {
    let steps = d["steps"].as_array().cloned().unwrap_or_default();
    steps
        .into_iter()
        .find(|s| s["step"] == "create")
        .map(|s| s["intent"].clone())
        .unwrap_or(Value::Null)
}

fn pg_dump(url: &str) -> String {
    let out = std::process::Command::new("pg_dump")
        .args(["--data-only", url])
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every page and API answer Pier gives for `app`, as text.
async fn everything_shown(env: &TestEnv, app: &str) -> String {
    let client = reqwest::Client::new();
    let mut paths = vec![
        "/".to_owned(),
        format!("/apps/{app}"),
        format!("/apps/{app}/logs"),
        format!("/api/apps/{app}/logs"),
        "/deliveries".to_owned(),
        "/api/apps".to_owned(),
        format!("/api/apps/{app}"),
    ];
    for row in env.deployment_rows(app).await {
        paths.push(format!("/deployments/{}", row.id));
        paths.push(format!("/api/deployments/{}", row.id));
    }
    let mut all = String::new();
    for p in paths {
        let r = client
            .get(env.pier_url(&p))
            .bearer_auth(&env.admin_token)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        all.push_str(&format!("GET {p}: {}\n", r.status()));
        all.push_str(&r.text().await.unwrap());
    }
    all
}

fn inspect_text(id: &str) -> String {
    let (ok, out) = docker_cli(&["inspect", id]);
    assert!(ok, "{out}");
    out
}

#[tokio::test]
async fn a_secret_file_is_the_apps_alone_in_no_inspect_journal_log_or_page_and_a_rotated_age_file_reaches_the_next_push()
 {
    let (store, dir) = (AgeStore::new(), SecretsDir::new());
    let first = format!("first-{}", random_hex(24));
    store.write(&format!("# web\nDB_PASSWORD={first}\nOTHER=x\n"), None);
    let env = env_with(&store, &dir, None).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let v1 = only_container(&env.engine.containers_of_app(&app).await);
    assert_secret_file(&v1, &first);
    let inspected = inspect_text(&v1);
    assert!(
        !inspected.contains(&first),
        "the value is in docker inspect"
    );
    assert!(
        !inspected.contains("DB_PASSWORD="),
        "the secret is an env variable"
    );

    let d1 = env
        .deployment_final(d1["id"].as_str().unwrap(), DEPLOY)
        .await;
    let intent1 = create_intent(&d1);
    assert_eq!(intent1["secret_files"], serde_json::json!(["DB_PASSWORD"]));
    assert_eq!(intent1["secret_names"], serde_json::json!([]));

    // Rotated in the file only: no reload, no restart; the next push reads it.
    let second = format!("second-{}", random_hex(24));
    store.write(&format!("DB_PASSWORD={second}\n"), None);
    env.push(&TestImage::healthy("v2"), "main").await;
    env.wait_app_version("v2", DEPLOY).await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "succeeded", "{d2:#}");
    let v2 = only_container(&env.engine.containers_of_app(&app).await);
    assert_ne!(v1, v2);
    assert_secret_file(&v2, &second);
    // The retired container's directory stays on the host's tmpfs, its file emptied.
    let host_files = host_secret_files(&dir);
    assert_eq!(host_files.len(), 2, "{host_files:?}");
    for (path, content) in &host_files {
        let live = content == &second;
        assert!(live || content.is_empty(), "{path:?} still holds a value");
    }
    let d2 = env
        .deployment_final(d2["id"].as_str().unwrap(), DEPLOY)
        .await;
    assert_ne!(
        create_intent(&d2)["secret_files_hmac"],
        intent1["secret_files_hmac"],
        "a rotated value shows as a change"
    );

    let shown = everything_shown(&env, &app).await;
    let dump = pg_dump(&env.db.url);
    let log = env.pier().log();
    for (what, text) in [("pages and API", &shown), ("pg_dump", &dump), ("log", &log)] {
        for value in [&first, &second] {
            assert!(!text.contains(value.as_str()), "a secret is in the {what}");
        }
    }
    assert!(dump.contains("DB_PASSWORD"), "the key is journaled");
    env.cleanup().await;
}

#[tokio::test]
async fn an_undecryptable_age_file_fails_the_deploy_before_any_container_and_the_old_one_serves() {
    let (store, dir) = (AgeStore::new(), SecretsDir::new());
    let value = format!("kept-{}", random_hex(24));
    store.write(&format!("DB_PASSWORD={value}\n"), None);
    let env = env_with(&store, &dir, None).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    let d1 = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d1["state"], "succeeded", "{d1:#}");
    let v1 = only_container(&env.engine.containers_of_app(&app).await);

    // Encrypted to someone else: Pier's identity cannot read it.
    let stranger = age::x25519::Identity::generate().to_public();
    store.write(&format!("DB_PASSWORD=new-{value}\n"), Some(&stranger));
    env.push(&TestImage::healthy("v2"), "main").await;
    let d2 = env
        .latest_final_of(&app, &[d1["id"].as_str().unwrap()], DEPLOY)
        .await;
    assert_eq!(d2["state"], "failed", "{d2:#}");
    let error = d2["error"].as_str().unwrap_or_default();
    let path = store.path().display().to_string();
    assert!(
        error.starts_with("create:")
            && error.contains("secret `DB_PASSWORD`")
            && error.contains(&path)
            && error.contains("decryption failed"),
        "{error}"
    );
    assert!(!error.contains(&value), "{error}");
    // Nothing was made: the one container is v1's, serving as before.
    let created: Vec<String> = env
        .engine
        .containers_of_app(&app)
        .await
        .iter()
        .filter_map(|c| c.id.clone())
        .collect();
    assert_eq!(created, vec![v1.clone()]);
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    assert_secret_file(&v1, &value);
    env.cleanup().await;
}

/// Killed after the container is made and before its files are written: the replay
/// adopts the container and writes them before anything starts it.
#[tokio::test]
async fn a_crash_between_the_container_create_and_its_secret_files_resumes_with_the_files() {
    let (store, dir) = (AgeStore::new(), SecretsDir::new());
    let value = format!("crash-{}", random_hex(24));
    store.write(&format!("DB_PASSWORD={value}\n"), None);
    let mut env = env_with(&store, &dir, Some("secret_files:before")).await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let pier = env.pier_mut();
    wait_until("pier aborts at secret_files:before", DEPLOY, || {
        let gone = !pier.is_running();
        async move { gone.then_some(()) }
    })
    .await;
    assert!(env.pier().log().contains("PIER_CRASH_AT"));
    let made = only_container(&env.engine.containers_of_app(&app).await);
    env.pier_mut()
        .restart_with(|c| c.without_env("PIER_CRASH_AT"))
        .await;
    let done = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    let running = only_container(&env.engine.containers_of_app(&app).await);
    assert_eq!(running, made, "the replay adopted the journaled container");
    assert_secret_file(&running, &value);
    env.cleanup().await;
}
