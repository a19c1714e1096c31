//! Extra Docker engines for the tests of remote targets: each a real `dockerd` in its own
//! network namespace with its own address, reached over `tcp://` with TLS client
//! certificates made in the test and, when asked, over `ssh://` through an `sshd` in the
//! same namespace. The recipe is the one in the design notes, checked on this machine kind:
//! `nsenter --net` (not `ip netns exec`), `fuse-overlayfs`, and never a second dockerd in
//! the host's own namespace (one there once deleted the host engine's `docker0`).
//!
//! Images keep their names on every engine: `127.0.0.1:PORT` inside a namespace reaches
//! the host's `127.0.0.1:PORT` ([`ExtraEngineBuilder::forward`]: a `socat` on each side of
//! the veth), so the test registry's references pull as they do on the host engine.
//!
//! Everything an engine starts is stopped by pid on `Drop` (also when the test panics):
//! sshd, the forwarders, dockerd (after removing its containers), then anything else still
//! in the namespace; then the namespace, the veth and the directory go. An engine left by a
//! test process that was killed is cleaned up by the next one that starts an engine.

mod certs;
mod load_inside;
mod netns;
mod procs;
mod proxy;
mod sshd;
mod start;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bollard::Docker;
use pier::domain::{Endpoint, SshEndpoint, TlsFiles};
use tempfile::TempDir;

#[allow(unused_imports)] // not every test makes its own pairs or keys
pub use certs::{IssuedPair, TestCa};
use netns::Slot;
use procs::Scope;
use sshd::SshFiles;
#[allow(unused_imports)]
pub use sshd::{SSH_PORT, keygen};

/// The engine's TLS port (Docker's usual one), on its address and its alias.
pub const TLS_PORT: u16 = 2376;
/// How long an engine may take to come up on a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// What to start besides the engine.
#[derive(Default)]
pub struct ExtraEngineBuilder {
    ssh: bool,
    forwards: Vec<u16>,
    dockerd_args: Vec<String>,
}

impl ExtraEngineBuilder {
    /// Also an sshd in the namespace, for `ssh://` targets.
    pub fn ssh(mut self) -> Self {
        self.ssh = true;
        self
    }

    /// `127.0.0.1:port` inside the namespace reaches `127.0.0.1:port` on the host: the
    /// test registry (so image names are the same on every engine), Postgres for a
    /// `pier proxy` run in the namespace.
    pub fn forward(mut self, port: u16) -> Self {
        self.forwards.push(port);
        self
    }

    /// [`ExtraEngineBuilder::forward`] each of `ports`.
    pub fn forwards(mut self, ports: &[u16]) -> Self {
        self.forwards.extend_from_slice(ports);
        self
    }

    /// More `dockerd` arguments: a host configured unlike the others (e.g.
    /// `--default-ulimit nofile=1111:1111`).
    pub fn dockerd_args(mut self, args: &[&str]) -> Self {
        self.dockerd_args
            .extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    pub async fn start(self) -> ExtraEngine {
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(netns::sweep_orphans);
        let slot = Slot::claim();
        let dir = tempfile::Builder::new()
            .prefix(&slot.dir_prefix())
            .tempdir_in(std::env::temp_dir())
            .expect("create the engine's directory");
        netns::record_owner(dir.path(), &slot.netns);
        let ca = TestCa::new("pier test engine CA");
        let client = ca.client_files(&dir.path().join("client"), &ca);
        // Constructed before anything is started, so a panic from here on cleans up.
        let mut engine = ExtraEngine {
            slot: Some(slot),
            dir: Some(dir),
            ca,
            client,
            ssh: None,
            dockerd: None,
            sshd: None,
            forwarders: Vec::new(),
        };
        engine.start_dockerd(&self.dockerd_args).await;
        for port in self.forwards {
            engine.forward_host_port(port).await;
        }
        if self.ssh {
            engine.start_sshd().await;
        }
        engine
    }
}

/// A real Docker engine in its own network namespace; see the module docs.
pub struct ExtraEngine {
    slot: Option<Slot>,
    dir: Option<TempDir>,
    ca: TestCa,
    client: TlsFiles,
    ssh: Option<SshFiles>,
    dockerd: Option<Child>,
    sshd: Option<Child>,
    forwarders: Vec<Child>,
}

impl ExtraEngine {
    pub fn builder() -> ExtraEngineBuilder {
        ExtraEngineBuilder::default()
    }

    fn slot(&self) -> &Slot {
        self.slot.as_ref().expect("the engine's namespace")
    }

    /// The engine's directory: data, sockets, certificates, logs.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the engine's directory").path()
    }

    /// The network namespace's name (`ip netns list`).
    pub fn netns(&self) -> &str {
        &self.slot().netns
    }

    /// The engine's own address: its API listens here, its published ports answer here.
    pub fn address(&self) -> Ipv4Addr {
        self.slot().ns_ip
    }

    /// A second address of the namespace where the API also listens, which the engine's
    /// certificate does not name.
    pub fn alias_address(&self) -> Ipv4Addr {
        self.slot().alias_ip
    }

    /// The host's end of the veth, as the namespace sees the host.
    pub fn host_address(&self) -> Ipv4Addr {
        self.slot().host_ip
    }

    /// The CA that signed the engine's certificate and the one it checks clients against.
    pub fn ca(&self) -> &TestCa {
        &self.ca
    }

    /// A client certificate of the engine's CA, and that CA: what a target's `tls` names.
    pub fn client_files(&self) -> &TlsFiles {
        &self.client
    }

    /// `tcp://ADDRESS:2376` with [`ExtraEngine::client_files`].
    pub fn tls_endpoint(&self) -> Endpoint {
        self.tls_endpoint_with(&self.address().to_string(), self.client.clone())
    }

    /// `tcp://host:2376` with other files (another CA's, a missing key).
    pub fn tls_endpoint_with(&self, host: &str, tls: TlsFiles) -> Endpoint {
        Endpoint::Tcp {
            host: host.to_owned(),
            port: TLS_PORT,
            tls: Some(tls),
        }
    }

    fn ssh_files(&self) -> &SshFiles {
        self.ssh
            .as_ref()
            .expect("this engine has no sshd: start it with ExtraEngine::builder().ssh()")
    }

    /// `ssh://root@ADDRESS:2222` with the engine's host key as the only known host and
    /// the generated client key.
    pub fn ssh_endpoint(&self) -> Endpoint {
        let files = self.ssh_files();
        self.ssh_endpoint_with(files.known_hosts(), Some(files.identity()))
    }

    pub fn ssh_endpoint_with(&self, known_hosts: PathBuf, identity: Option<PathBuf>) -> Endpoint {
        Endpoint::Ssh(SshEndpoint {
            user: Some("root".into()),
            host: self.address().to_string(),
            port: SSH_PORT,
            known_hosts,
            identity,
        })
    }

    /// The known-hosts file naming this engine's host key.
    pub fn known_hosts(&self) -> PathBuf {
        self.ssh_files().known_hosts()
    }

    /// The client key sshd accepts.
    pub fn ssh_identity(&self) -> PathBuf {
        self.ssh_files().identity()
    }

    /// A `[[targets]]` entry reaching this engine over TLS.
    pub fn tls_target_toml(&self, name: &str) -> String {
        let f = &self.client;
        format!(
            "[[targets]]\nname = \"{name}\"\nhost = \"tcp://{}:{TLS_PORT}\"\n\
             tls = {{ ca = \"{}\", cert = \"{}\", key = \"{}\" }}\n",
            self.address(),
            f.ca.display(),
            f.cert.display(),
            f.key.display()
        )
    }

    /// A `[[targets]]` entry reaching this engine over SSH.
    pub fn ssh_target_toml(&self, name: &str) -> String {
        format!(
            "[[targets]]\nname = \"{name}\"\nhost = \"ssh://root@{}:{SSH_PORT}\"\n\
             ssh = {{ known_hosts = \"{}\", identity = \"{}\" }}\n",
            self.address(),
            self.known_hosts().display(),
            self.ssh_identity().display()
        )
    }

    fn docker_sock(&self) -> PathBuf {
        self.dir().join("docker.sock")
    }

    /// `unix:///…/docker.sock`: the engine's local socket, for the harness's own calls.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.docker_sock().display())
    }

    /// `docker -H <this engine> <args>` to completion: (success, stdout and stderr).
    pub fn docker(&self, args: &[&str]) -> (bool, String) {
        match Command::new("docker")
            .arg("-H")
            .arg(self.docker_host())
            .args(args)
            .output()
        {
            Ok(o) => (
                o.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            ),
            Err(e) => (false, format!("run docker: {e}")),
        }
    }

    /// A bollard client over the engine's local socket (not over Pier's transports).
    pub async fn client(&self) -> Docker {
        Docker::connect_with_unix(
            &self.docker_sock().to_string_lossy(),
            30,
            bollard::API_DEFAULT_VERSION,
        )
        .expect("connect to the extra engine's socket")
        .negotiate_version()
        .await
        .expect("negotiate with the extra engine")
    }

    /// `program` to run inside the namespace (its network only): e.g. `pier proxy`. The
    /// caller owns the child; whatever is still running in the namespace at cleanup is
    /// killed.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        procs::in_namespace(self.netns(), program)
    }

    /// `GET path` on `127.0.0.1:port` inside the namespace, where the engine's loopback
    /// publishes are: `Some((status, body))`, or `None` without an answer within 5 s.
    pub async fn http_get_inside(&self, port: u16, path: &str) -> Option<(u16, String)> {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::from(self.command("socat"));
        cmd.args(["-T", "5", "-", &format!("TCP4:127.0.0.1:{port}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().ok()?;
        let mut stdin = child.stdin.take()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        stdin.write_all(request.as_bytes()).await.ok()?;
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(8), child.wait_with_output())
            .await
            .ok()?
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((status, body))
    }

    /// Stops dockerd with SIGSTOP: its port still accepts connections (the kernel
    /// does that), and nothing answers on them, as with a wedged engine. `stop_dockerd`
    /// (and so cleanup) lets it run again first.
    pub fn hang_dockerd(&self) {
        self.signal_dockerd("-STOP");
    }

    /// Lets a dockerd stopped by [`ExtraEngine::hang_dockerd`] run again.
    pub fn resume_dockerd(&self) {
        self.signal_dockerd("-CONT");
    }

    fn signal_dockerd(&self, signal: &str) {
        if let Some(d) = &self.dockerd {
            procs::attempt(Command::new("kill").args([signal, &d.id().to_string()]));
        }
    }

    /// Stops dockerd (the engine is down; its namespace, address and sshd stay).
    pub fn stop_dockerd(&mut self) {
        self.resume_dockerd();
        self.remove_all_containers();
        if let Some(mut d) = self.dockerd.take() {
            procs::stop_child(&mut d, Scope::Leader, Duration::from_secs(30));
        }
    }

    /// Stops sshd's listener (connections it already accepted are not cut).
    pub fn stop_sshd(&mut self) {
        if let Some(mut s) = self.sshd.take() {
            procs::stop_child(&mut s, Scope::Leader, Duration::from_secs(5));
        }
    }

    fn remove_all_containers(&self) {
        let alive = self
            .dockerd
            .as_ref()
            .is_some_and(|d| procs::start_time(d.id()).is_some());
        if !alive {
            return;
        }
        // `timeout`: cleanup must end even when the engine hangs.
        let ids = Command::new("timeout")
            .args(["20", "docker", "-H", &self.docker_host(), "ps", "-aq"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            procs::attempt(
                Command::new("timeout")
                    .args(["30", "docker", "-H", &self.docker_host(), "rm", "-f", "-v"])
                    .args(&ids),
            );
        }
    }

    /// Stops everything this engine started and deletes its namespace, veth and
    /// directory. Idempotent; `Drop` calls it.
    pub fn cleanup(&mut self) {
        self.stop_sshd();
        for mut f in self.forwarders.drain(..) {
            procs::stop_child(&mut f, Scope::Group, Duration::from_secs(2));
        }
        self.stop_dockerd();
        if let Some(slot) = self.slot.take() {
            slot.release();
        }
        if let Some(dir) = self.dir.take() {
            procs::unmount_under(dir.path());
            let path = dir.path().to_path_buf();
            if let Err(e) = dir.close() {
                eprintln!("test harness: cannot delete {}: {e}", path.display());
            }
        }
    }
}

impl Drop for ExtraEngine {
    fn drop(&mut self) {
        self.cleanup();
    }
}
