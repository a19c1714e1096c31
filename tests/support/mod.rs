//! Integration-test harness: a real Postgres database, a real Distribution registry, real
//! images pushed to it, the real `pier` binary and the real Docker engine. Nothing is mocked;
//! every wait is a condition polled against a deadline.
//!
//! Use it from a test file with `mod support;`. The usual entry point is [`TestEnv`]:
//!
//! ```ignore
//! let env = TestEnv::builder().health_timeout(Duration::from_secs(5)).start().await;
//! let digest = env.push(&TestImage::healthy("v1"), "main").await;
//! // ... the registry notifies Pier, Pier deploys ...
//! env.cleanup().await;
//! ```
//!
//! Everything also cleans up on `Drop` (best effort), so a failing test leaves no containers,
//! databases or processes behind; explicit `cleanup().await` is still preferred.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, ContainerSummary, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, ListContainersOptions, RemoveContainerOptions,
    RemoveImageOptions,
};
use futures_util::StreamExt;
use hmac::{Hmac, KeyInit, Mac};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client as OciClient, Reference};
use sha2::{Digest as _, Sha256};
use sqlx::{Connection, PgPool};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------------------------

/// A loopback TCP port that was free a moment ago (bind 127.0.0.1:0, read it, release it).
/// Never the same port twice in one test binary, so ports picked up front for a config
/// (Pier's, the registry's, the apps' publish ports) cannot collide with each other.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        let mut seen = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains(&port) {
            seen.push(port);
            return port;
        }
    }
}

/// A random lower-case hex string of `len` characters (at most 32).
pub fn random_hex(len: usize) -> String {
    let s = uuid::Uuid::new_v4().simple().to_string();
    s[..len.min(s.len())].to_owned()
}

/// A unique app name like `web-1a2b3c4d`.
pub fn unique_app(prefix: &str) -> String {
    format!("{prefix}-{}", random_hex(8))
}

/// `"sha256=<hex>"`: HMAC-SHA256 of `body` under `secret`, as GitHub-style signature headers
/// carry it.
pub fn sign_hmac_sha256(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hmac_sha256_hex(secret, body))
}

/// Bare lower-case hex HMAC-SHA256 (Gitea/Forgejo style).
pub fn hmac_sha256_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// `"sha256:<hex>"` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// Polls `probe` until it yields `Some`, with a short growing backoff (25 ms up to 500 ms).
/// Returns `None` once `timeout` has passed.
pub async fn poll_until<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(25);
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Like [`poll_until`], but panics with `what` once `timeout` has passed.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match poll_until(timeout, probe).await {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting until {what}"),
    }
}

fn http_client() -> reqwest::Client {
    // Building a client loads TLS roots (hundreds of ms), far more than a loopback request,
    // so each thread keeps one. Every #[tokio::test] runs its runtime on its own thread, and
    // no idle connection is pooled, so nothing outlives the runtime that made it.
    thread_local! {
        static CLIENT: reqwest::Client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .expect("build reqwest client");
    }
    CLIENT.with(|c| c.clone())
}

/// `GET url` with a 2 s timeout: `Some((status, body))`, or `None` if there was no answer.
pub async fn http_get(url: &str) -> Option<(u16, String)> {
    let resp = http_client()
        .get(url)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.text().await.ok()?))
}

/// `POST url` with the given headers and body, 10 s timeout: `Some((status, body))`, or `None`
/// if there was no answer.
pub async fn http_post(
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Option<(u16, String)> {
    let mut req = http_client()
        .post(url)
        .timeout(Duration::from_secs(10))
        .body(body.into());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.text().await.ok()?))
}

fn child_alive(child: &mut Option<Child>) -> bool {
    child
        .as_mut()
        .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
}

fn kill_child(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `f` to completion on a fresh runtime in a fresh thread. For async cleanup from `Drop`,
/// which may run inside (or outside) a test's runtime.
fn block_on_side_thread<F>(f: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = std::thread::spawn(move || {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(f),
            Err(e) => eprintln!("test harness: cannot build a runtime for cleanup: {e}"),
        }
    });
    let _ = handle.join();
}

fn open_log(path: &Path) -> (File, File) {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open log {}: {e}", path.display()));
    let err = out.try_clone().expect("clone log file handle");
    (out, err)
}

fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Sends SIGTERM through the `kill` utility (the crate has no libc dependency).
fn send_sigterm(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

// ---------------------------------------------------------------------------------------------
// Postgres
// ---------------------------------------------------------------------------------------------

/// The server the tests create their databases on.
pub fn base_database_url() -> String {
    std::env::var("PIER_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://pier:pier@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh, empty database `pier_test_<uuid>`, dropped `WITH (FORCE)` by [`TestDb::cleanup`]
/// or, failing that, on `Drop`.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    dropped: bool,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let base = base_database_url();
        let name = format!("pier_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&base)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "connect to {base}: {e} (is Postgres running? `pg_ctlcluster 15 main start`)"
                )
            });
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let _ = conn.close().await;

        let mut url = reqwest::Url::parse(&base).expect("PIER_TEST_DATABASE_URL is a URL");
        url.set_path(&format!("/{name}"));
        let url = url.to_string();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        TestDb {
            name,
            url,
            pool,
            dropped: false,
        }
    }

    /// Applies the crate's `migrations/` (Pier normally does this itself at start-up).
    pub async fn migrate(&self) {
        sqlx::migrate!("./migrations")
            .run(&self.pool)
            .await
            .expect("run migrations");
    }

    /// Closes the pool and drops the database.
    pub async fn cleanup(&mut self) {
        if self.dropped {
            return;
        }
        self.pool.close().await;
        drop_database(&self.name).await;
        self.dropped = true;
    }
}

async fn drop_database(name: &str) {
    let base = base_database_url();
    match sqlx::PgConnection::connect(&base).await {
        Ok(mut conn) => {
            let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
            if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
            {
                eprintln!("test harness: DROP DATABASE {name}: {e}");
            }
            let _ = conn.close().await;
        }
        Err(e) => eprintln!("test harness: cannot drop {name}: connect {base}: {e}"),
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if !self.dropped {
            self.dropped = true;
            let name = self.name.clone();
            block_on_side_thread(async move { drop_database(&name).await });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Distribution registry
// ---------------------------------------------------------------------------------------------

const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// A `docker-registry serve` (CNCF Distribution 2.8) on a loopback port, storing in a tempdir,
/// optionally sending its notifications to `notify_url` with `Authorization: Bearer <token>`.
/// Killed on `Drop`.
pub struct Registry {
    dir: Option<TempDir>,
    port: u16,
    child: Option<Child>,
}

impl Registry {
    pub async fn start(notify_url: Option<&str>, token: &str) -> Registry {
        Self::start_on(free_port(), notify_url, token).await
    }

    /// Like [`Registry::start`] on a port chosen in advance (e.g. written into a pier.toml).
    pub async fn start_on(port: u16, notify_url: Option<&str>, token: &str) -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("pier-registry-")
            .tempdir()
            .expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).expect("create registry storage dir");
        let mut yml = format!(
            "version: 0.1\n\
             log:\n  level: warn\n  formatter: text\n\
             storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n  \
             maintenance:\n    uploadpurging:\n      enabled: false\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: {secret}\n",
            data = data.display(),
            secret = random_hex(32),
        );
        if let Some(url) = notify_url {
            yml.push_str(&format!(
                "notifications:\n  endpoints:\n    - name: pier\n      url: {url}\n      \
                 headers:\n        Authorization: [\"Bearer {token}\"]\n      timeout: 2s\n      \
                 threshold: 3\n      backoff: 1s\n"
            ));
        }
        std::fs::write(dir.path().join("config.yml"), yml).expect("write registry config.yml");
        let mut reg = Registry {
            dir: Some(dir),
            port,
            child: None,
        };
        reg.spawn().await;
        reg
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("registry dir").path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir().join("registry.log")
    }

    pub fn log(&self) -> String {
        read_lossy(&self.log_path())
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir().join("config.yml")
    }

    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "registry already running");
        let (out, err) = open_log(&self.log_path());
        let mut child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(self.config_path())
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {REGISTRY_BIN}: {e}"));
        let url = format!("{}/v2/", self.url());
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some((200, _)) = http_get(&url).await {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "docker-registry exited ({status}) before answering {url}; log {}:\n{}",
                    self.log_path().display(),
                    tail(&self.log(), 30)
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "docker-registry did not answer {url} within 15s; log {}:\n{}",
                    self.log_path().display(),
                    tail(&self.log(), 30)
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
        self.child = Some(child);
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`: the registry part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn is_running(&mut self) -> bool {
        child_alive(&mut self.child)
    }

    /// Kills the registry (SIGKILL). Its storage stays; pending notifications are lost, as in
    /// a real crash.
    pub fn stop(&mut self) {
        kill_child(&mut self.child);
    }

    /// Starts the registry again on the same port with the same storage and config.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    /// Pushes `image` as `<host>/<repo>:<tag>`; returns the manifest digest the registry
    /// stores (checked against its `Docker-Content-Digest`).
    pub async fn push(&self, repo: &str, tag: &str, image: &TestImage) -> String {
        push_image(&self.host(), repo, tag, image).await
    }

    /// Pushes a two-platform OCI index under `tag`; see [`push_index`].
    pub async fn push_index(&self, repo: &str, tag: &str, version: &str) -> (String, String) {
        push_index(&self.host(), repo, tag, version).await
    }

    /// `HEAD /v2/<repo>/manifests/<reference>` with the OCI and Docker manifest media types
    /// accepted: `Some((digest, content_type))`, or `None` when absent.
    pub async fn head_manifest(&self, repo: &str, reference: &str) -> Option<(String, String)> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.url());
        let resp = http_client()
            .head(&url)
            .timeout(Duration::from_secs(5))
            .header("Accept", MANIFEST_ACCEPT)
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let h = resp.headers();
        let digest = h.get("docker-content-digest")?.to_str().ok()?.to_owned();
        let ct = h
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Some((digest, ct))
    }

    /// Deletes a manifest by digest (storage.delete is enabled).
    pub async fn delete_manifest(&self, repo: &str, digest: &str) -> u16 {
        let url = format!("{}/v2/{repo}/manifests/{digest}", self.url());
        http_client()
            .delete(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            let log = kept.join("registry.log");
            eprintln!(
                "test harness: registry log kept at {}; tail:\n{}",
                log.display(),
                tail(&read_lossy(&log), 20)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Test images
// ---------------------------------------------------------------------------------------------

pub const MT_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MT_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MT_OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// What a client must accept to see OCI manifests and indexes at all: Distribution 2.8
/// answers 404 MANIFEST_UNKNOWN ("OCI manifest found, but accept header does not support OCI
/// manifests") to a GET/HEAD without it.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// The test images: one layer with the static busybox, `/www/health` ("ok\n") and
/// `/www/version` (the given string, so every version has its own digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestImage {
    /// `busybox httpd -f -p 8080 -h /www` under a shell that exits on SIGTERM;
    /// `GET /health` answers 200 "ok\n".
    Healthy { version: String },
    /// httpd runs, but `/www/health` is missing: `GET /health` is 404 forever.
    NoHealthFile { version: String },
    /// Prints its environment and exits 1 at once.
    ExitsAtOnce { version: String },
    /// Like `Healthy`, plus an image HEALTHCHECK (`busybox wget` of /health every second).
    WithHealthcheck { version: String },
    /// Like `Healthy`, but httpd starts only after `secs` seconds: a deployment that
    /// spends that long in its `health` step.
    SlowStart { version: String, secs: u32 },
}

impl TestImage {
    pub fn healthy(version: &str) -> Self {
        TestImage::Healthy {
            version: version.to_owned(),
        }
    }
    pub fn no_health_file(version: &str) -> Self {
        TestImage::NoHealthFile {
            version: version.to_owned(),
        }
    }
    pub fn exits_at_once(version: &str) -> Self {
        TestImage::ExitsAtOnce {
            version: version.to_owned(),
        }
    }
    pub fn with_healthcheck(version: &str) -> Self {
        TestImage::WithHealthcheck {
            version: version.to_owned(),
        }
    }

    pub fn slow_start(version: &str, secs: u32) -> Self {
        TestImage::SlowStart {
            version: version.to_owned(),
            secs,
        }
    }

    pub fn version(&self) -> &str {
        match self {
            TestImage::SlowStart { version, .. } => version,
            TestImage::Healthy { version }
            | TestImage::NoHealthFile { version }
            | TestImage::ExitsAtOnce { version }
            | TestImage::WithHealthcheck { version } => version,
        }
    }

    /// Builds the blobs and manifest for `architecture` (`amd64`, `arm64`, ...). The busybox
    /// binary is the host's (amd64) either way; only the config says otherwise.
    pub fn build(&self, architecture: &str) -> BuiltImage {
        let with_health_file = !matches!(self, TestImage::NoHealthFile { .. });
        let (tar, layer) = build_layer(with_health_file, self.version());
        let diff_id = sha256_digest(&tar);

        let slow;
        let entrypoint: Vec<&str> = match self {
            // Prints its environment first, as a crashing app's log might.
            TestImage::ExitsAtOnce { .. } => {
                vec!["/bin/busybox", "sh", "-c", "/bin/busybox env; exit 1"]
            }
            TestImage::SlowStart { secs, .. } => {
                slow = format!(
                    "trap 'exit 0' TERM; /bin/busybox sleep {secs} & wait; \
                     /bin/busybox httpd -f -p 8080 -h /www & wait"
                );
                vec!["/bin/busybox", "sh", "-c", &slow]
            }
            // A well-behaved PID 1: exits on SIGTERM (a bare httpd as PID 1 ignores it and
            // every stop would wait out the engine's grace period).
            _ => vec![
                "/bin/busybox",
                "sh",
                "-c",
                "trap 'exit 0' TERM; /bin/busybox httpd -f -p 8080 -h /www & wait",
            ],
        };
        let mut cfg = serde_json::json!({
            "Entrypoint": entrypoint,
            "ExposedPorts": { "8080/tcp": {} },
            "Env": ["PATH=/bin"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.version": self.version(),
                "pier.test": "true",
            },
        });
        if let TestImage::WithHealthcheck { .. } = self {
            cfg["Healthcheck"] = serde_json::json!({
                "Test": ["CMD", "/bin/busybox", "wget", "-q", "-O", "/dev/null",
                         "http://127.0.0.1:8080/health"],
                "Interval": 1_000_000_000u64,
                "Timeout": 1_000_000_000u64,
                "StartPeriod": 0u64,
                "Retries": 2,
            });
        }
        let config = serde_json::json!({
            "created": "2024-01-01T00:00:00Z",
            "architecture": architecture,
            "os": "linux",
            "config": cfg,
            "rootfs": { "type": "layers", "diff_ids": [diff_id] },
            "history": [{ "created": "2024-01-01T00:00:00Z",
                          "created_by": "pier test harness" }],
        });
        let config = serde_json::to_vec(&config).expect("serialize image config");
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MT_OCI_MANIFEST,
            "config": {
                "mediaType": MT_OCI_CONFIG,
                "digest": sha256_digest(&config),
                "size": config.len(),
            },
            "layers": [{
                "mediaType": MT_OCI_LAYER_GZIP,
                "digest": sha256_digest(&layer),
                "size": layer.len(),
            }],
        });
        let manifest = serde_json::to_vec(&manifest).expect("serialize manifest");
        BuiltImage {
            digest: sha256_digest(&manifest),
            manifest,
            config,
            layer,
            diff_id,
        }
    }
}

/// The bytes of one built image.
pub struct BuiltImage {
    /// `sha256:` of `manifest`: the digest the registry stores it under.
    pub digest: String,
    pub manifest: Vec<u8>,
    pub config: Vec<u8>,
    /// The gzip layer blob.
    pub layer: Vec<u8>,
    /// `sha256:` of the uncompressed layer tar.
    pub diff_id: String,
}

fn busybox() -> &'static [u8] {
    static BUSYBOX: OnceLock<Vec<u8>> = OnceLock::new();
    BUSYBOX.get_or_init(|| {
        std::fs::read("/bin/busybox").expect("read /bin/busybox (apt-get install busybox-static)")
    })
}

/// Returns (uncompressed tar, gzip of it). Deterministic: fixed mtimes, owners and gzip header.
fn build_layer(with_health_file: bool, version: &str) -> (Vec<u8>, Vec<u8>) {
    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(1_704_067_200); // 2024-01-01
        h.set_uid(0);
        h.set_gid(0);
        h
    }
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32| {
        let mut h = header(tar::EntryType::Directory, mode, 0);
        b.append_data(&mut h, path, std::io::empty())
            .expect("append dir");
    };
    let file = |b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]| {
        let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
        b.append_data(&mut h, path, data).expect("append file");
    };
    dir(&mut b, "bin/", 0o755);
    file(&mut b, "bin/busybox", 0o755, busybox());
    dir(&mut b, "tmp/", 0o1777);
    dir(&mut b, "www/", 0o755);
    if with_health_file {
        file(&mut b, "www/health", 0o644, b"ok\n");
    }
    file(&mut b, "www/version", 0o644, version.as_bytes());
    let tar = b.into_inner().expect("finish tar");

    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).expect("gzip layer");
    let gz = gz.finish().expect("finish gzip");
    (tar, gz)
}

fn oci_client(host: &str) -> OciClient {
    OciClient::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![host.to_owned()]),
        ..Default::default()
    })
}

fn oci_ref(host: &str, repo: &str, tag_or_digest: &str) -> Reference {
    if tag_or_digest.starts_with("sha256:") {
        Reference::with_digest(host.to_owned(), repo.to_owned(), tag_or_digest.to_owned())
    } else {
        Reference::with_tag(host.to_owned(), repo.to_owned(), tag_or_digest.to_owned())
    }
}

/// Pushes the blobs of `img` and then its manifest under `reference` (a tag, or the
/// manifest's own digest for a digest-only push).
async fn push_built(client: &OciClient, host: &str, repo: &str, reference: &str, img: &BuiltImage) {
    let r = oci_ref(host, repo, reference);
    client
        .store_auth_if_needed(host, &RegistryAuth::Anonymous)
        .await;
    for (data, digest) in [
        (&img.layer, sha256_digest(&img.layer)),
        (&img.config, sha256_digest(&img.config)),
    ] {
        let present = client.blob_exists(&r, &digest).await.unwrap_or(false);
        if !present {
            client
                .push_blob(&r, data.clone(), &digest)
                .await
                .unwrap_or_else(|e| panic!("push blob {digest} to {host}/{repo}: {e}"));
        }
    }
    client
        .push_manifest_raw(
            &r,
            img.manifest.clone(),
            reqwest::header::HeaderValue::from_static(MT_OCI_MANIFEST),
        )
        .await
        .unwrap_or_else(|e| panic!("push manifest {host}/{repo}:{reference}: {e}"));
}

/// Pushes `image` (linux/amd64) as `<host>/<repo>:<tag>` with the OCI client, anonymously,
/// over plain HTTP. Returns the manifest digest as the registry reports it for the tag.
pub async fn push_image(host: &str, repo: &str, tag: &str, image: &TestImage) -> String {
    let built = image.build("amd64");
    let client = oci_client(host);
    push_built(&client, host, repo, tag, &built).await;
    let stored = client
        .fetch_manifest_digest(&oci_ref(host, repo, tag), &RegistryAuth::Anonymous)
        .await
        .unwrap_or_else(|e| panic!("fetch digest of {host}/{repo}:{tag}: {e}"));
    assert_eq!(
        stored, built.digest,
        "the registry stores {host}/{repo}:{tag} under another digest than the pushed bytes"
    );
    stored
}

/// Pushes a two-platform OCI image index as `<host>/<repo>:<tag>`: linux/amd64 is
/// `Healthy{version}` (runnable here), linux/arm64 a manifest whose config says arm64. Both
/// platform manifests are pushed by digest only (no tag). Returns
/// `(index_digest, amd64_manifest_digest)`.
pub async fn push_index(host: &str, repo: &str, tag: &str, version: &str) -> (String, String) {
    let client = oci_client(host);
    let image = TestImage::healthy(version);
    let amd64 = image.build("amd64");
    let arm64 = image.build("arm64");
    push_built(&client, host, repo, &amd64.digest, &amd64).await;
    push_built(&client, host, repo, &arm64.digest, &arm64).await;
    let entry = |img: &BuiltImage, arch: &str| {
        serde_json::json!({
            "mediaType": MT_OCI_MANIFEST,
            "digest": img.digest,
            "size": img.manifest.len(),
            "platform": { "architecture": arch, "os": "linux" },
        })
    };
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MT_OCI_INDEX,
        "manifests": [entry(&amd64, "amd64"), entry(&arm64, "arm64")],
    });
    let index = serde_json::to_vec(&index).expect("serialize index");
    let index_digest = sha256_digest(&index);
    client
        .push_manifest_raw(
            &oci_ref(host, repo, tag),
            index,
            reqwest::header::HeaderValue::from_static(MT_OCI_INDEX),
        )
        .await
        .unwrap_or_else(|e| panic!("push index {host}/{repo}:{tag}: {e}"));
    let stored = client
        .fetch_manifest_digest(&oci_ref(host, repo, tag), &RegistryAuth::Anonymous)
        .await
        .unwrap_or_else(|e| panic!("fetch digest of {host}/{repo}:{tag}: {e}"));
    assert_eq!(stored, index_digest, "index stored under another digest");
    (index_digest, amd64.digest)
}

// ---------------------------------------------------------------------------------------------
// A webhook recorder (to see what a real sender sends)
// ---------------------------------------------------------------------------------------------

/// One request the recorder received.
#[derive(Debug, Clone)]
pub struct RecordedHook {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl RecordedHook {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("hook body is JSON")
    }
}

/// A tiny HTTP server on a loopback port that answers 200 to every POST and keeps what it got.
pub struct HookRecorder {
    pub addr: SocketAddr,
    rx: tokio::sync::mpsc::UnboundedReceiver<RecordedHook>,
    server: tokio::task::JoinHandle<()>,
}

impl HookRecorder {
    pub async fn start() -> HookRecorder {
        use axum::extract::{OriginalUri, State};
        use axum::http::HeaderMap;

        type Tx = tokio::sync::mpsc::UnboundedSender<RecordedHook>;
        async fn record(
            State(tx): State<Tx>,
            OriginalUri(uri): OriginalUri,
            headers: HeaderMap,
            body: axum::body::Bytes,
        ) -> &'static str {
            let headers = headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let _ = tx.send(RecordedHook {
                path: uri.path().to_owned(),
                headers,
                body: body.to_vec(),
            });
            "ok"
        }

        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind recorder");
        let addr = listener.local_addr().expect("recorder addr");
        let app = axum::Router::new()
            .fallback(axum::routing::post(record))
            .with_state(tx);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        HookRecorder { addr, rx, server }
    }

    /// `http://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The next request, or `None` if none arrives within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<RecordedHook> {
        tokio::time::timeout(timeout, self.rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// Collects requests until `done(all so far)` holds; panics after `timeout`.
    pub async fn collect_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&[RecordedHook]) -> bool,
    ) -> Vec<RecordedHook> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::new();
        while !done(&got) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(h) => got.push(h),
                None => panic!(
                    "timed out after {timeout:?} collecting hooks; got {} so far: {:#?}",
                    got.len(),
                    got.iter()
                        .map(|h| String::from_utf8_lossy(&h.body).into_owned())
                        .collect::<Vec<_>>()
                ),
            }
        }
        got
    }
}

impl Drop for HookRecorder {
    fn drop(&mut self) {
        self.server.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// Docker engine
// ---------------------------------------------------------------------------------------------

/// Connects to the engine from `DOCKER_HOST` or the platform default, negotiating the API
/// version (the engine here speaks 1.41, older than bollard's default).
pub async fn docker() -> Docker {
    Docker::connect_with_defaults()
        .expect("connect to the Docker engine")
        .negotiate_version()
        .await
        .expect("negotiate the Docker API version")
}

/// Test-side helpers over the real engine.
#[derive(Clone)]
pub struct Engine {
    pub docker: Docker,
}

impl Engine {
    pub async fn connect() -> Engine {
        Engine {
            docker: docker().await,
        }
    }

    /// Every container (running or not) labelled `pier.app=<app>`.
    pub async fn containers_of_app(&self, app: &str) -> Vec<ContainerSummary> {
        let filters = std::collections::HashMap::from([(
            "label".to_owned(),
            vec![format!("pier.app={app}")],
        )]);
        self.docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .unwrap_or_else(|e| panic!("list containers of {app}: {e}"))
    }

    /// The running containers labelled `pier.app=<app>`.
    pub async fn running_containers_of_app(&self, app: &str) -> Vec<ContainerSummary> {
        self.containers_of_app(app)
            .await
            .into_iter()
            .filter(|c| c.state.as_ref().is_some_and(|s| s.to_string() == "running"))
            .collect()
    }

    /// Force-removes (with anonymous volumes) every container labelled `pier.app=<app>`.
    /// Returns how many were removed.
    pub async fn remove_app_containers(&self, app: &str) -> usize {
        remove_app_containers_with(&self.docker, app).await
    }

    /// Pulls `reference` (`host/repo:tag` or `host/repo@sha256:...`), panicking on failure.
    pub async fn pull(&self, reference: &str) {
        let mut stream = self.docker.create_image(
            Some(CreateImageOptions {
                from_image: Some(reference.to_owned()),
                ..Default::default()
            }),
            None,
            None,
        );
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                panic!("pull {reference}: {e}");
            }
        }
    }

    /// Creates and starts a container of `image` labelled `pier.managed=true` and
    /// `pier.app=<app>`, container port 8080 published on `publish`. Returns its id.
    pub async fn run_labelled(&self, app: &str, image: &str, publish: SocketAddr) -> String {
        let bindings = std::collections::HashMap::from([(
            "8080/tcp".to_owned(),
            Some(vec![PortBinding {
                host_ip: Some(publish.ip().to_string()),
                host_port: Some(publish.port().to_string()),
            }]),
        )]);
        let labels = std::collections::HashMap::from([
            ("pier.managed".to_owned(), "true".to_owned()),
            ("pier.app".to_owned(), app.to_owned()),
            ("pier.test".to_owned(), "true".to_owned()),
        ]);
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(format!("{app}-{}", random_hex(6))),
                    ..Default::default()
                }),
                ContainerCreateBody {
                    image: Some(image.to_owned()),
                    labels: Some(labels),
                    host_config: Some(HostConfig {
                        port_bindings: Some(bindings),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create container of {image}: {e}"));
        self.docker
            .start_container(&created.id, None)
            .await
            .unwrap_or_else(|e| panic!("start container {}: {e}", created.id));
        created.id
    }

    /// Creates (does not start) a container as Pier's `create` step would for deployment
    /// `deployment` of `app`: Pier's labels, the publish port, `image` (`repo@digest`).
    pub async fn create_labelled_for(
        &self,
        app: &str,
        deployment: &str,
        digest: &str,
        image: &str,
        publish: SocketAddr,
    ) -> String {
        let bindings = std::collections::HashMap::from([(
            "8080/tcp".to_owned(),
            Some(vec![PortBinding {
                host_ip: Some(publish.ip().to_string()),
                host_port: Some(publish.port().to_string()),
            }]),
        )]);
        let labels = std::collections::HashMap::from([
            ("pier.managed".to_owned(), "true".to_owned()),
            ("pier.app".to_owned(), app.to_owned()),
            ("pier.deployment".to_owned(), deployment.to_owned()),
            ("pier.digest".to_owned(), digest.to_owned()),
        ]);
        self.docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(format!("{app}-made-by-test-{}", random_hex(6))),
                    ..Default::default()
                }),
                ContainerCreateBody {
                    image: Some(image.to_owned()),
                    labels: Some(labels),
                    exposed_ports: Some(vec!["8080/tcp".to_owned()]),
                    host_config: Some(HostConfig {
                        port_bindings: Some(bindings),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create container of {image}: {e}"))
            .id
    }

    /// Removes an image by reference or id (force); ignores "no such image".
    pub async fn remove_image(&self, reference: &str) {
        let _ = self
            .docker
            .remove_image(
                reference,
                Some(RemoveImageOptions {
                    force: true,
                    ..Default::default()
                }),
                None,
            )
            .await;
    }

    /// The repo digests (`host/repo@sha256:...`) the engine records for a local image.
    pub async fn repo_digests(&self, image: &str) -> Vec<String> {
        self.docker
            .inspect_image(image)
            .await
            .ok()
            .and_then(|i| i.repo_digests)
            .unwrap_or_default()
    }
}

async fn remove_app_containers_with(docker: &Docker, app: &str) -> usize {
    let filters =
        std::collections::HashMap::from([("label".to_owned(), vec![format!("pier.app={app}")])]);
    let list = match docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("test harness: list containers of {app}: {e}");
            return 0;
        }
    };
    let mut removed = 0;
    for c in list {
        let Some(id) = c.id else { continue };
        match docker
            .remove_container(
                &id,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(()) => removed += 1,
            Err(e) => {
                let msg = e.to_string();
                if !msg.contains("No such container") && !msg.contains("is already in progress") {
                    eprintln!("test harness: remove container {id} of {app}: {e}");
                }
            }
        }
    }
    removed
}

/// Force-removes every container labelled `pier.app=<app>` on `cleanup().await` or `Drop`.
pub struct AppGuard {
    pub app: String,
    done: bool,
}

impl AppGuard {
    pub fn new(app: &str) -> AppGuard {
        AppGuard {
            app: app.to_owned(),
            done: false,
        }
    }

    pub async fn cleanup(&mut self) {
        if !self.done {
            let docker = docker().await;
            remove_app_containers_with(&docker, &self.app).await;
            self.done = true;
        }
    }
}

impl Drop for AppGuard {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            let app = self.app.clone();
            block_on_side_thread(async move {
                match Docker::connect_with_defaults() {
                    Ok(d) => {
                        let d = d.negotiate_version().await.unwrap_or_else(|_| {
                            Docker::connect_with_defaults().expect("docker client")
                        });
                        remove_app_containers_with(&d, &app).await;
                    }
                    Err(e) => eprintln!("test harness: cannot clean up app {app}: {e}"),
                }
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The pier process
// ---------------------------------------------------------------------------------------------

/// How to start a `pier` process: the config to write, extra env, the subcommand.
#[derive(Debug, Clone)]
pub struct PierCommand {
    pub config_toml: String,
    pub program: PathBuf,
    /// Arguments after `--config <path>`; `["serve"]` by default.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Wait until `GET /healthz` on `[server].listen` answers 200; off for `worker`.
    pub wait_healthy: bool,
    pub ready_timeout: Duration,
}

impl PierCommand {
    pub fn new(config_toml: &str) -> PierCommand {
        PierCommand {
            config_toml: config_toml.to_owned(),
            program: PathBuf::from(env!("CARGO_BIN_EXE_pier")),
            args: vec!["serve".to_owned()],
            env: Vec::new(),
            wait_healthy: true,
            ready_timeout: Duration::from_secs(30),
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn without_env(mut self, key: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self
    }

    /// `pier --config <path> worker`: no HTTP, so no readiness wait.
    pub fn worker(mut self) -> Self {
        self.args = vec!["worker".to_owned()];
        self.wait_healthy = false;
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    pub fn wait_healthy(mut self, wait: bool) -> Self {
        self.wait_healthy = wait;
        self
    }

    pub async fn start(self) -> PierProcess {
        match self.try_start().await {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    pub async fn try_start(self) -> Result<PierProcess, String> {
        PierProcess::try_start(self).await
    }
}

/// The `server.listen` address of a pier.toml.
pub fn listen_of(config_toml: &str) -> Option<SocketAddr> {
    let v: toml::Value = toml::from_str(config_toml).ok()?;
    v.get("server")?.get("listen")?.as_str()?.parse().ok()
}

/// A running `pier` process. SIGKILLed on `Drop`; its log is printed if the test panics.
pub struct PierProcess {
    dir: Option<TempDir>,
    child: Option<Child>,
    cmd: PierCommand,
    pub listen: Option<SocketAddr>,
}

impl PierProcess {
    /// `pier --config <tmp>/pier.toml serve` with `RUST_LOG=pier=debug,info`; waits for
    /// `/healthz` (30 s). Panics with the log's tail if it does not get there.
    pub async fn start(config_toml: &str) -> PierProcess {
        PierCommand::new(config_toml).start().await
    }

    /// Like [`PierProcess::start`] with extra environment variables.
    pub async fn start_with_env(config_toml: &str, env: &[(&str, &str)]) -> PierProcess {
        let mut cmd = PierCommand::new(config_toml);
        for (k, v) in env {
            cmd = cmd.env(k, v);
        }
        cmd.start().await
    }

    pub async fn try_start(cmd: PierCommand) -> Result<PierProcess, String> {
        let dir = tempfile::Builder::new()
            .prefix("pier-process-")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        std::fs::write(dir.path().join("pier.toml"), &cmd.config_toml)
            .map_err(|e| format!("write pier.toml: {e}"))?;
        let mut p = PierProcess {
            listen: listen_of(&cmd.config_toml),
            dir: Some(dir),
            child: None,
            cmd,
        };
        match p.spawn().await {
            Ok(()) => Ok(p),
            Err(e) => {
                // When the error names the log file, keep it for whoever reads the error.
                if e.contains(&*p.log_path().to_string_lossy())
                    && let Some(dir) = p.dir.take()
                {
                    let _ = dir.keep();
                }
                Err(e)
            }
        }
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("pier dir").path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir().join("pier.toml")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir().join("pier.log")
    }

    /// Everything the process (and earlier runs of it) wrote to stdout and stderr.
    pub fn log(&self) -> String {
        read_lossy(&self.log_path())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `http://<listen><path>`.
    pub fn url(&self, path: &str) -> String {
        let listen = self.listen.expect("config has no [server].listen");
        format!("http://{listen}{path}")
    }

    async fn spawn(&mut self) -> Result<(), String> {
        if self.child.is_some() {
            return Err("pier is already running".to_owned());
        }
        let log_path = self.log_path();
        let (out, err) = open_log(&log_path);
        let mut command = Command::new(&self.cmd.program);
        command
            .arg("--config")
            .arg(self.config_path())
            .args(&self.cmd.args)
            .current_dir(self.dir())
            .env("RUST_LOG", "pier=debug,info")
            .env_remove("PIER_CRASH_AT")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in &self.cmd.env {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.cmd.program.display()))?;
        self.child = Some(child);
        if !self.cmd.wait_healthy {
            return Ok(());
        }
        let Some(listen) = self.listen else {
            return Err("pier.toml has no [server].listen to wait on".to_owned());
        };
        let url = format!("http://{listen}/healthz");
        let deadline = Instant::now() + self.cmd.ready_timeout;
        let mut pause = Duration::from_millis(25);
        loop {
            if let Some((200, _)) = http_get(&url).await {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(format!(
                    "pier exited ({status}) before {url} answered 200; log {}:\n{}",
                    log_path.display(),
                    tail(&self.log(), 40)
                ));
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "pier did not answer 200 on {url} within {:?}; log {}:\n{}",
                    self.cmd.ready_timeout,
                    log_path.display(),
                    tail(&self.log(), 40)
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        child_alive(&mut self.child)
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        kill_child(&mut self.child);
    }

    /// Waits until the process has died by itself (a crash, an abort); panics otherwise.
    pub async fn wait_dead(&mut self, what: &str, timeout: Duration) {
        wait_until(what, timeout, || {
            let gone = !child_alive(&mut self.child);
            async move { gone.then_some(()) }
        })
        .await
    }

    /// SIGTERM, then wait up to `grace` for the exit (SIGKILL after that). Returns the exit
    /// status's code if it exited by itself (`None` if it had to be killed or was not
    /// running).
    pub async fn terminate(&mut self, grace: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        send_sigterm(child.id());
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits for the process to exit by itself; its exit code, or `None` on timeout (the
    /// process keeps running) or death by signal.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let status = poll_until(timeout, || {
            let r = child.try_wait().ok().flatten();
            async move { r }
        })
        .await?;
        self.child = None;
        status.code()
    }

    /// Starts the same command again (after `kill`/`terminate`/an exit), same config and log.
    pub async fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn().await {
            panic!("{e}");
        }
    }

    /// Like [`PierProcess::restart`] after changing the command (e.g. dropping `PIER_CRASH_AT`).
    pub async fn restart_with(&mut self, change: impl FnOnce(PierCommand) -> PierCommand) {
        self.kill();
        self.cmd = change(self.cmd.clone());
        if let Err(e) = self.spawn().await {
            panic!("{e}");
        }
    }

    /// Waits until the log contains `needle`; panics with the log's tail after `timeout`.
    pub async fn wait_for_log(&self, needle: &str, timeout: Duration) {
        let found = poll_until(timeout, || {
            let hit = self.log().contains(needle).then_some(());
            async move { hit }
        })
        .await;
        if found.is_none() {
            panic!(
                "pier log has no {needle:?} after {timeout:?}; tail:\n{}",
                tail(&self.log(), 40)
            );
        }
    }

    /// Runs a one-shot CLI command against this process's config:
    /// `pier --config <path> <args...>`.
    pub async fn run_cli(&self, args: &[&str]) -> std::process::Output {
        run_pier_cli(&self.config_path(), args).await
    }
}

/// `pier --config <config> <args...>` to completion (60 s at most).
pub async fn run_pier_cli(config: &Path, args: &[&str]) -> std::process::Output {
    let fut = tokio::process::Command::new(env!("CARGO_BIN_EXE_pier"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env("RUST_LOG", "pier=debug,info")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("pier {args:?} did not finish within 60s"))
        .unwrap_or_else(|e| panic!("run pier {args:?}: {e}"))
}

impl Drop for PierProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            let log = kept.join("pier.log");
            eprintln!(
                "test harness: pier log kept at {}; tail:\n{}",
                log.display(),
                tail(&read_lossy(&log), 60)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The whole environment
// ---------------------------------------------------------------------------------------------

/// One app in the rendered pier.toml.
#[derive(Debug, Clone)]
pub struct AppSpec {
    pub name: String,
    /// Repository inside the registry: `demo/<name>`.
    pub repo: String,
    pub tag: String,
    /// Host port that container port 8080 is published on (127.0.0.1).
    pub publish_port: u16,
    /// `None`: no `health` table at all.
    pub health_timeout: Option<Duration>,
    pub health_path: String,
    pub env: BTreeMap<String, String>,
    /// Extra TOML lines appended to the app's table verbatim (e.g. `memory = "64m"`).
    pub extra_toml: String,
}

impl AppSpec {
    /// An app `<prefix>-<8 hex>` on repo `demo/<name>`, tag `main`, health `/health` 20 s,
    /// env `GREETING=hello`, a fresh publish port.
    pub fn new(prefix: &str) -> AppSpec {
        let name = unique_app(prefix);
        AppSpec {
            repo: format!("demo/{name}"),
            name,
            tag: "main".to_owned(),
            publish_port: free_port(),
            health_timeout: Some(Duration::from_secs(20)),
            health_path: "/health".to_owned(),
            env: BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]),
            extra_toml: String::new(),
        }
    }

    pub fn publish(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.publish_port))
    }

    fn render(&self, registry_host: &str) -> String {
        let mut s = format!(
            "\n[[apps]]\nname = \"{name}\"\nimage = \"{registry_host}/{repo}\"\ntag = \"{tag}\"\n\
             port = 8080\npublish = \"127.0.0.1:{publish}\"\n",
            name = self.name,
            repo = self.repo,
            tag = self.tag,
            publish = self.publish_port,
        );
        if let Some(t) = self.health_timeout {
            s.push_str(&format!(
                "health = {{ path = \"{}\", timeout = \"{}\" }}\n",
                self.health_path,
                humantime::format_duration(t)
            ));
        }
        if !self.env.is_empty() {
            let pairs: Vec<String> = self
                .env
                .iter()
                .map(|(k, v)| format!("{k} = {}", toml_str(v)))
                .collect();
            s.push_str(&format!("env = {{ {} }}\n", pairs.join(", ")));
        }
        if !self.extra_toml.is_empty() {
            s.push_str(self.extra_toml.trim_end());
            s.push('\n');
        }
        s
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Builder for [`TestEnv`].
pub struct TestEnvBuilder {
    apps: Vec<AppSpec>,
    workers: usize,
    lease: String,
    start_pier: bool,
    notify: bool,
    pier_env: Vec<(String, String)>,
    extra_server_toml: String,
}

impl TestEnvBuilder {
    /// The first app's health timeout (default 20 s).
    pub fn health_timeout(mut self, t: Duration) -> Self {
        self.apps[0].health_timeout = Some(t);
        self
    }

    /// Drops the first app's `health` table.
    pub fn no_health(mut self) -> Self {
        self.apps[0].health_timeout = None;
        self
    }

    /// Edits the first app.
    pub fn app(mut self, change: impl FnOnce(&mut AppSpec)) -> Self {
        change(&mut self.apps[0]);
        self
    }

    /// Adds another app (e.g. `AppSpec::new("api")`).
    pub fn add_app(mut self, app: AppSpec) -> Self {
        self.apps.push(app);
        self
    }

    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// `[server].lease`, e.g. `"5s"` (default `"10s"`).
    pub fn lease(mut self, lease: &str) -> Self {
        self.lease = lease.to_owned();
        self
    }

    /// Extra lines for the `[server]` table, e.g. `sweep_interval = "1s"`.
    pub fn server_toml(mut self, lines: &str) -> Self {
        self.extra_server_toml.push_str(lines.trim_end());
        self.extra_server_toml.push('\n');
        self
    }

    /// Environment for the pier process (e.g. `PIER_CRASH_AT`).
    pub fn pier_env(mut self, key: &str, value: &str) -> Self {
        self.pier_env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Do not start Pier (start it later with [`TestEnv::start_pier`]); the config is written
    /// anyway and the registry still notifies Pier's port (it retries until Pier is up).
    pub fn without_pier(mut self) -> Self {
        self.start_pier = false;
        self
    }

    /// The registry sends no notifications at all.
    pub fn without_notifications(mut self) -> Self {
        self.notify = false;
        self
    }

    pub async fn start(self) -> TestEnv {
        let pier_port = free_port();
        let registry_port = free_port();
        let db = TestDb::create().await;
        let mut env = TestEnv {
            pier: None,
            guards: self.apps.iter().map(|a| AppGuard::new(&a.name)).collect(),
            registry: None,
            db,
            engine: Engine::connect().await,
            apps: self.apps,
            pier_port,
            registry_port,
            admin_token: random_hex(32),
            distribution_token: random_hex(32),
            generic_secret: random_hex(32),
            workers: self.workers,
            lease: self.lease,
            extra_server_toml: self.extra_server_toml,
            pier_env: self.pier_env,
        };
        if self.start_pier {
            env.start_pier().await;
        }
        let notify = self.notify.then(|| env.hook_url("local"));
        env.registry = Some(
            Registry::start_on(registry_port, notify.as_deref(), &env.distribution_token).await,
        );
        env
    }
}

/// A database, a registry that notifies Pier's `/hooks/local`, a Pier process and one or
/// more uniquely named apps with their own publish ports. Fields drop in declaration order:
/// Pier first, then the apps' containers, then the registry, then the database.
pub struct TestEnv {
    pub pier: Option<PierProcess>,
    guards: Vec<AppGuard>,
    registry: Option<Registry>,
    pub db: TestDb,
    pub engine: Engine,
    pub apps: Vec<AppSpec>,
    pub pier_port: u16,
    pub registry_port: u16,
    pub admin_token: String,
    /// `[[sources]] local` (distribution): sent as `Authorization: Bearer <token>`.
    pub distribution_token: String,
    /// `[[sources]] gen` (generic): HMAC-SHA256 secret for `X-Pier-Signature`.
    pub generic_secret: String,
    workers: usize,
    lease: String,
    extra_server_toml: String,
    pier_env: Vec<(String, String)>,
}

impl TestEnv {
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder {
            apps: vec![AppSpec::new("web")],
            workers: 2,
            lease: "10s".to_owned(),
            start_pier: true,
            notify: true,
            pier_env: Vec::new(),
            extra_server_toml: String::new(),
        }
    }

    /// The default environment, Pier started.
    pub async fn start() -> TestEnv {
        Self::builder().start().await
    }

    /// The first app's name.
    pub fn app(&self) -> &str {
        &self.apps[0].name
    }

    /// The first app's repository inside the registry (`demo/<app>`).
    pub fn repo(&self) -> &str {
        &self.apps[0].repo
    }

    /// The first app's published address.
    pub fn publish(&self) -> SocketAddr {
        self.apps[0].publish()
    }

    /// `http://127.0.0.1:<publish><path>`, the first app as its users see it.
    pub fn app_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.publish())
    }

    pub fn registry(&self) -> &Registry {
        self.registry.as_ref().expect("registry not started")
    }

    pub fn registry_mut(&mut self) -> &mut Registry {
        self.registry.as_mut().expect("registry not started")
    }

    /// `127.0.0.1:<registry port>`.
    pub fn registry_host(&self) -> String {
        format!("127.0.0.1:{}", self.registry_port)
    }

    /// The first app's image without tag: `127.0.0.1:PORT/demo/<app>`.
    pub fn image(&self) -> String {
        format!("{}/{}", self.registry_host(), self.repo())
    }

    pub fn pier(&self) -> &PierProcess {
        self.pier.as_ref().expect("pier not started")
    }

    pub fn pier_mut(&mut self) -> &mut PierProcess {
        self.pier.as_mut().expect("pier not started")
    }

    /// `http://127.0.0.1:<pier port><path>`.
    pub fn pier_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.pier_port)
    }

    /// Pier's `/hooks/<source>` URL.
    pub fn hook_url(&self, source: &str) -> String {
        self.pier_url(&format!("/hooks/{source}"))
    }

    /// The pier.toml for a process listening on `listen_port` (several processes may share
    /// the database; give each its own port).
    pub fn config_toml_on(&self, listen_port: u16) -> String {
        let mut s = format!(
            "[server]\nlisten = \"127.0.0.1:{listen_port}\"\ndatabase_url = {db}\n\
             admin_token = \"{admin}\"\nworkers = {workers}\nlease = \"{lease}\"\n{extra}\
             \n[[registries]]\nhost = \"{reg}\"\ninsecure = true\n\
             \n[[sources]]\nname = \"local\"\nkind = \"distribution\"\ntoken = \"{token}\"\n\
             \n[[sources]]\nname = \"gen\"\nkind = \"generic\"\nhmac_secret = \"{hmac}\"\n",
            db = toml_str(&self.db.url),
            admin = self.admin_token,
            workers = self.workers,
            lease = self.lease,
            extra = self.extra_server_toml,
            reg = self.registry_host(),
            token = self.distribution_token,
            hmac = self.generic_secret,
        );
        for app in &self.apps {
            s.push_str(&app.render(&self.registry_host()));
        }
        s
    }

    /// The pier.toml of the main Pier process.
    pub fn config_toml(&self) -> String {
        self.config_toml_on(self.pier_port)
    }

    /// The command that starts the main Pier process (config, env from the builder).
    pub fn pier_command(&self) -> PierCommand {
        let mut cmd = PierCommand::new(&self.config_toml());
        for (k, v) in &self.pier_env {
            cmd = cmd.env(k, v);
        }
        cmd
    }

    /// Starts the main Pier process (panics if it is already running).
    pub async fn start_pier(&mut self) {
        assert!(
            self.pier.as_mut().is_none_or(|p| !p.is_running()),
            "pier is already running"
        );
        self.pier = Some(self.pier_command().start().await);
    }

    /// Starts an additional `pier serve` on another port against the same database.
    pub async fn start_another_pier(&self) -> PierProcess {
        let mut cmd = PierCommand::new(&self.config_toml_on(free_port()));
        for (k, v) in &self.pier_env {
            cmd = cmd.env(k, v);
        }
        cmd.start().await
    }

    /// Pushes `image` to the first app's repository under `tag`; returns its digest.
    pub async fn push(&self, image: &TestImage, tag: &str) -> String {
        self.registry().push(self.repo(), tag, image).await
    }

    /// Sends a raw webhook to `/hooks/<source>`.
    pub async fn post_hook(
        &self,
        source: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        http_post(&self.hook_url(source), headers, body.to_vec())
            .await
            .unwrap_or_else(|| panic!("no answer from {}", self.hook_url(source)))
    }

    /// Sends `body` to the generic source, signed with `X-Pier-Signature: sha256=<hex>`.
    pub async fn post_generic(&self, body: &[u8]) -> (u16, String) {
        let sig = sign_hmac_sha256(&self.generic_secret, body);
        self.post_hook(
            "gen",
            &[
                ("Content-Type", "application/json"),
                ("X-Pier-Signature", &sig),
            ],
            body,
        )
        .await
    }

    /// GETs `/api/<path>` with the admin bearer token and parses the JSON; `(status, json)`
    /// (`Value::Null` if the body is not JSON).
    pub async fn api_get(&self, path: &str) -> (u16, serde_json::Value) {
        let url = self.pier_url(&format!("/api{path}"));
        let resp = http_client()
            .get(&url)
            .timeout(Duration::from_secs(5))
            .bearer_auth(&self.admin_token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap_or_default();
        (
            status,
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Waits until the first app answers `GET /version` with `version`; panics after
    /// `timeout`.
    pub async fn wait_app_version(&self, version: &str, timeout: Duration) {
        let url = self.app_url("/version");
        let want = version.to_owned();
        wait_until(
            &format!("{url} serves version {version:?}"),
            timeout,
            || {
                let url = url.clone();
                let want = want.clone();
                async move {
                    match http_get(&url).await {
                        Some((200, body)) if body == want => Some(()),
                        _ => None,
                    }
                }
            },
        )
        .await
    }

    /// Kills Pier, removes the apps' containers, stops the registry, drops the database.
    pub async fn cleanup(mut self) {
        if let Some(mut p) = self.pier.take() {
            p.kill();
        }
        for g in &mut self.guards {
            g.cleanup().await;
        }
        if let Some(mut r) = self.registry.take() {
            r.stop();
        }
        self.db.cleanup().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Reading Pier's own answers
// ---------------------------------------------------------------------------------------------

impl TestEnv {
    /// Waits until `app`'s latest deployment is final and is none of `not`; returns it.
    pub async fn latest_final_of(
        &self,
        app: &str,
        not: &[&str],
        timeout: Duration,
    ) -> serde_json::Value {
        let not: Vec<String> = not.iter().map(|s| s.to_string()).collect();
        wait_until(&format!("a new final deployment of {app}"), timeout, || {
            let not = not.clone();
            async move {
                let (status, v) = self.api_get(&format!("/apps/{app}")).await;
                let d = v.get("latest_deployment")?.clone();
                let id = d.get("id")?.as_str()?.to_owned();
                let state = d.get("state")?.as_str()?;
                (status == 200 && !not.contains(&id) && !matches!(state, "queued" | "running"))
                    .then_some(d)
            }
        })
        .await
    }

    /// Waits until deployment `id` is final; returns it with its steps.
    pub async fn deployment_final(&self, id: &str, timeout: Duration) -> serde_json::Value {
        wait_until(&format!("deployment {id} final"), timeout, || async move {
            let (_, d) = self.api_get(&format!("/deployments/{id}")).await;
            let state = d.get("state")?.as_str()?;
            (!matches!(state, "queued" | "running")).then_some(d.clone())
        })
        .await
    }

    /// The `pier.digest` labels of the app's running containers.
    pub async fn running_digests_of(&self, app: &str) -> Vec<String> {
        self.engine
            .running_containers_of_app(app)
            .await
            .into_iter()
            .map(|c| {
                c.labels
                    .unwrap_or_default()
                    .get("pier.digest")
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    }

    /// All deployments of `app`, oldest first, straight from the database.
    pub async fn deployment_rows(&self, app: &str) -> Vec<DeploymentRow> {
        sqlx::query_as(
            "SELECT id::text, state, trigger, resolved_digest, superseded_by::text, attempt,
                    started_at, finished_at
             FROM deployments WHERE app = $1 ORDER BY created_at",
        )
        .bind(app)
        .fetch_all(&self.db.pool)
        .await
        .expect("read deployments")
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeploymentRow {
    pub id: String,
    pub state: String,
    pub trigger: String,
    pub resolved_digest: Option<String>,
    pub superseded_by: Option<String>,
    pub attempt: i32,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
}
