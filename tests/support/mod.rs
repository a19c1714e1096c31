//! Integration-test harness: a real Postgres database, a real Distribution registry, real
//! images pushed to it, the real `pier` binary and the real Docker engine. Nothing is mocked;
//! every wait is a condition polled against a deadline.
//!
//! Each test binary declares it once, in its `main.rs` (`#[path = "../support/mod.rs"] mod
//! support;`; the benches include the same file), and its modules use
//! `crate::support::*`. The usual entry point is [`TestEnv`]:
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

mod cosign;
mod db;
mod engine;
mod engines;
mod env;
mod hooks;
mod hostile_registry;
mod images;
mod load;
mod logs;
mod pg_pair;
mod pgproxy;
mod pier_process;
mod procfs;
mod proxies;
mod recording_app;
mod registry;
mod reload;
/// An app on three engines (`support::rollout::Fleet`).
pub mod rollout;
mod signin;
mod sse;
/// A two-node swarm of namespaced engines (`support::swarm::Swarm`).
pub mod swarm;
mod udp_echo;
mod web_only;

#[allow(unused_imports)] // only the signature tests sign images
pub use cosign::*;
pub use db::*;
pub use engine::*;
#[allow(unused_imports)] // only the remote-target tests start extra engines
pub use engines::*;
#[allow(unused_imports)] // the store-only tests need no environment
pub use env::*;
#[allow(unused_imports)] // only some test binaries record hooks
pub use hooks::*;
#[allow(unused_imports)] // only the hostile-registry tests misbehave
pub use hostile_registry::*;
pub use images::*;
#[allow(unused_imports)] // only the zero-downtime tests put load on an app
pub use load::*;
#[allow(unused_imports)] // only the log tests make apps talk
pub use logs::*;
#[allow(unused_imports)] // only the failover tests run a primary and a standby
pub use pg_pair::*;
#[allow(unused_imports)] // only some test binaries relay Postgres
pub use pgproxy::*;
pub use pier_process::*;
#[allow(unused_imports)] // only the memory tests and the benches read /proc
pub use procfs::*;
#[allow(unused_imports)] // only the proxy tests put a proxy in front of an app
pub use proxies::*;
#[allow(unused_imports)]
pub use recording_app::*;
pub use registry::*;
#[allow(unused_imports)] // only the reload and network tests change the config
pub use reload::*;
#[allow(unused_imports)] // only the page tests sign in
pub use signin::*;
#[allow(unused_imports)] // only the live-page tests read event streams
pub use sse::*;
#[allow(unused_imports)] // only the ports tests echo over UDP
pub use udp_echo::*;
#[allow(unused_imports)] // only some tests serve the web side in-process
pub use web_only::*;

// ---------------------------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------------------------

/// A loopback TCP port that was free a moment ago, never the same twice in one test binary,
/// so ports picked up front for a config (Pier's, the registry's, the apps' publish ports)
/// cannot collide with each other. Picked below the kernel's ephemeral range (32768 and
/// up), where Docker also takes the ports of blue-green candidates (`127.0.0.1:0`): a port
/// handed out here and taken there a moment later would fail a test for nothing.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let candidate = 20_000 + (uuid::Uuid::new_v4().as_u128() % 12_000) as u16;
        let mut seen = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(&candidate) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            seen.push(candidate);
            return candidate;
        }
    }
}

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

pub fn http_client() -> reqwest::Client {
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
    http_get_within(url, Duration::from_secs(2)).await
}

/// `GET url` with the given timeout.
pub async fn http_get_within(url: &str, timeout: Duration) -> Option<(u16, String)> {
    let resp = http_client().get(url).timeout(timeout).send().await.ok()?;
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
