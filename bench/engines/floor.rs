//! The floor of the three-engine bench: the docker CLI doing, on one engine, what Pier's
//! container steps do there (pull by digest, create, stop the old container, start, poll
//! the image's HEALTHCHECK through `docker inspect` until it says healthy), over the same
//! transport Pier uses for that engine: the local socket, `tcp://` with `--tlsverify` and
//! the target's client certificate, or `ssh://` with the target's known-hosts file and key.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::ExtraEngine;

/// One docker CLI call may take this long (a pull over a forwarded port on a loaded
/// machine); beyond it the bench fails rather than hang.
const CALL_DEADLINE: Duration = Duration::from_secs(120);
/// How long a container may take to report healthy (its HEALTHCHECK runs every second).
const HEALTHY_DEADLINE: Duration = Duration::from_secs(90);
/// Between two `docker inspect` polls, as push_to_healthy's floor polls its URL.
const POLL_GAP: Duration = Duration::from_millis(10);

/// The CLI's view of one engine and the floor's own container on it.
pub struct FloorEngine {
    /// The target's name in Pier's config: the same engine.
    pub target: String,
    /// `-H … --tlsverify …`, or nothing for the local engine.
    flags: Vec<String>,
    /// `PATH` with the ssh wrapper first, for an `ssh://` engine.
    path: Option<String>,
    /// The floor's app label and network (created on this engine by [`FloorEngine::setup`]).
    app: String,
    /// The fixed loopback port the floor's container publishes on that engine's host.
    port: u16,
    /// The serving container, stopped by the next round.
    serving: Option<String>,
    /// Containers stopped in a timed round, removed after it (as Pier's `retire` is after
    /// its health step).
    stopped: Vec<String>,
}

/// What one floor deployment took on one engine, by step.
pub struct FloorSteps {
    pub target: String,
    pub steps: Vec<(&'static str, Duration)>,
}

impl FloorEngine {
    /// The host's own engine, as `docker` reaches it here (`DOCKER_HOST` or the socket).
    pub fn local(target: &str, app: &str, port: u16) -> FloorEngine {
        FloorEngine::new(target, Vec::new(), None, app, port)
    }

    /// `engine` over TLS with the client certificate Pier's target names.
    pub fn tls(target: &str, engine: &ExtraEngine, app: &str, port: u16) -> FloorEngine {
        let f = engine.client_files();
        let flags = vec![
            "-H".to_owned(),
            format!("tcp://{}:{}", engine.address(), crate::support::TLS_PORT),
            "--tlsverify".to_owned(),
            format!("--tlscacert={}", f.ca.display()),
            format!("--tlscert={}", f.cert.display()),
            format!("--tlskey={}", f.key.display()),
        ];
        FloorEngine::new(target, flags, None, app, port)
    }

    /// `engine` over SSH. The docker CLI runs `ssh` from `PATH`; a wrapper in `dir` gives it
    /// the target's known-hosts file (strictly checked) and key, as Pier's dialer does, and
    /// one multiplexed connection (the control master [`start_ssh_master`] starts, once per
    /// `dir`) so that each CLI call does not pay a new handshake: the strongest floor the
    /// CLI can be over SSH.
    pub fn ssh(target: &str, engine: &ExtraEngine, app: &str, port: u16, dir: &Path) -> Self {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("create the ssh wrapper's directory");
        let wrapper = bin.join("ssh");
        let script = format!(
            "#!/bin/sh\nexec {ssh} {options} -o ControlMaster=no \"$@\"\n",
            ssh = real_ssh().display(),
            options = ssh_options(engine, dir).join(" "),
        );
        std::fs::write(&wrapper, script).expect("write the ssh wrapper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
            .expect("make the ssh wrapper executable");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let flags = vec![
            "-H".to_owned(),
            format!(
                "ssh://root@{}:{}",
                engine.address(),
                crate::support::SSH_PORT
            ),
        ];
        FloorEngine::new(target, flags, Some(path), app, port)
    }

    fn new(
        target: &str,
        flags: Vec<String>,
        path: Option<String>,
        app: &str,
        port: u16,
    ) -> FloorEngine {
        FloorEngine {
            target: target.to_owned(),
            flags,
            path,
            app: app.to_owned(),
            port,
            serving: None,
            stopped: Vec::new(),
        }
    }

    /// The floor's app label, network and container name prefix.
    pub fn app_name(&self) -> &str {
        &self.app
    }

    /// The floor's own user-defined network on this engine, as Pier makes one per app.
    pub async fn setup(&self) {
        self.docker(&["network", "create", &self.app]).await;
    }

    /// `docker <this engine> args` within [`CALL_DEADLINE`]; its trimmed stdout. Panics,
    /// with stderr, on a failure: a floor that did not do the work measures nothing.
    async fn docker(&self, args: &[&str]) -> String {
        let mut cmd = tokio::process::Command::new("docker");
        cmd.args(&self.flags).args(args).kill_on_drop(true);
        if let Some(path) = &self.path {
            cmd.env("PATH", path);
        }
        let out = tokio::time::timeout(CALL_DEADLINE, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("docker {args:?} on {} hung", self.target))
            .expect("run docker");
        assert!(
            out.status.success(),
            "docker {args:?} on {}: {}",
            self.target,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// One deployment of `reference` (`repo@sha256:…`) on this engine: pull, create, stop
    /// the serving container, start, poll health. Returns each step's time, or why the
    /// container never became healthy (on an overloaded machine its one-second HEALTHCHECK
    /// can time out twice in a row, as Pier's can).
    pub async fn deploy(&mut self, reference: &str) -> Result<FloorSteps, String> {
        let mut steps = Vec::new();
        let mut t = Instant::now();
        let mut lap = |name: &'static str, t: &mut Instant| {
            steps.push((name, t.elapsed()));
            *t = Instant::now();
        };
        self.docker(&["pull", "-q", reference]).await;
        lap("pull", &mut t);
        let label = format!("pier.app={}", self.app);
        let publish = format!("127.0.0.1:{}:8080", self.port);
        let net = format!("--network={}", self.app);
        let id = self
            .docker(&["create", &net, "--label", &label, "-p", &publish, reference])
            .await;
        lap("create", &mut t);
        if let Some(old) = self.serving.take() {
            self.docker(&["stop", &old]).await;
            self.stopped.push(old);
        }
        lap("stop_old", &mut t);
        self.docker(&["start", &id]).await;
        lap("start", &mut t);
        self.serving = Some(id.clone());
        self.wait_healthy(&id).await?;
        lap("health", &mut t);
        Ok(FloorSteps {
            target: self.target.clone(),
            steps,
        })
    }

    /// Polls the container's HEALTHCHECK status until `healthy`, within [`HEALTHY_DEADLINE`].
    async fn wait_healthy(&self, id: &str) -> Result<(), String> {
        let started = Instant::now();
        let format = "{{if .State.Health}}{{.State.Health.Status}}{{end}}";
        loop {
            match self.docker(&["inspect", "-f", format, id]).await.as_str() {
                "healthy" => return Ok(()),
                // Where Pier's health step stops too.
                "unhealthy" => {
                    return Err(format!("{}: HEALTHCHECK reports unhealthy", self.target));
                }
                _ => {}
            }
            if started.elapsed() > HEALTHY_DEADLINE {
                return Err(format!(
                    "{}: not healthy within {HEALTHY_DEADLINE:?}",
                    self.target
                ));
            }
            tokio::time::sleep(POLL_GAP).await;
        }
    }

    /// Removes the containers the last round stopped (outside the timed part).
    pub async fn remove_stopped(&mut self) {
        let stopped = std::mem::take(&mut self.stopped);
        if !stopped.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(stopped.iter().map(String::as_str));
            self.docker(&args).await;
        }
    }

    /// Everything of the floor's on this engine: its containers and its network.
    pub async fn cleanup(&mut self) {
        self.stopped.extend(self.serving.take());
        self.remove_stopped().await;
        self.docker(&["network", "rm", &self.app]).await;
    }
}

/// The `ssh` the wrapper runs: the first on `PATH`.
fn real_ssh() -> PathBuf {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("ssh"))
        .find(|p| p.is_file())
        .expect("ssh on PATH")
}

/// What every ssh of the floor is given: the target's files and the control socket.
fn ssh_options(engine: &ExtraEngine, dir: &Path) -> Vec<String> {
    vec![
        "-F none".to_owned(),
        "-o BatchMode=yes".to_owned(),
        "-o StrictHostKeyChecking=yes".to_owned(),
        format!("-o UserKnownHostsFile={}", engine.known_hosts().display()),
        "-o GlobalKnownHostsFile=/dev/null".to_owned(),
        "-o UpdateHostKeys=no".to_owned(),
        format!("-i {}", engine.ssh_identity().display()),
        "-o IdentitiesOnly=yes".to_owned(),
        "-o ConnectTimeout=10".to_owned(),
        format!("-o ControlPath={}/cm-%C", dir.display()),
    ]
}

/// The control master, in the background (`-f` after authentication, `-N` no command),
/// its output not on any pipe of ours: a master that held a pipe the docker CLI reads
/// would make every call wait for it.
pub fn start_ssh_master(engine: &ExtraEngine, dir: &Path) {
    let options: Vec<String> = ssh_options(engine, dir)
        .iter()
        .flat_map(|o| o.splitn(2, ' ').map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let status = std::process::Command::new(real_ssh())
        .args(&options)
        .args(["-o", "ControlMaster=yes", "-N", "-f", "-l", "root", "-p"])
        .arg(crate::support::SSH_PORT.to_string())
        .arg(engine.address().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run ssh");
    assert!(
        status.success(),
        "the floor's ssh control master did not start"
    );
}

/// Ends the floor's SSH control master (it would outlive the bench otherwise).
pub fn stop_ssh_master(engine: &ExtraEngine, dir: &Path) {
    let _ = std::process::Command::new(real_ssh())
        .args(["-F", "none", "-o"])
        .arg(format!("ControlPath={}/cm-%C", dir.display()))
        .args(["-O", "exit", "-l", "root", "-p"])
        .arg(crate::support::SSH_PORT.to_string())
        .arg(engine.address().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}
