//! The real `pier` binary as a child process.

use super::*;

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

    /// Runs a one-shot CLI command against this process: `pier --config <path> <args...>`,
    /// with `PIER_URL` and `PIER_TOKEN` (the config's inline `server.admin_token`) for the
    /// operator's commands, which are clients of its API.
    pub async fn run_cli(&self, args: &[&str]) -> std::process::Output {
        run_pier_cli(&self.config_path(), args).await
    }

    /// `pier <args>` with this process's config: (success, stdout then stderr).
    pub async fn cli_text(&self, args: &[&str]) -> (bool, String) {
        let out = self.run_cli(args).await;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

/// The inline `server.admin_token` of a pier.toml (none for an `env:`/`file:` reference).
pub fn admin_token_of(config_toml: &str) -> Option<String> {
    let v: toml::Value = toml::from_str(config_toml).ok()?;
    let t = v.get("server")?.get("admin_token")?.as_str()?;
    (!t.starts_with("env:") && !t.starts_with("file:")).then(|| t.to_owned())
}

/// `pier --config <config> <args...>` to completion (60 s at most), with `PIER_URL` and
/// `PIER_TOKEN` from the config's `server.listen` and inline `server.admin_token`.
pub async fn run_pier_cli(config: &Path, args: &[&str]) -> std::process::Output {
    let toml = std::fs::read_to_string(config).unwrap_or_default();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_pier"));
    cmd.arg("--config")
        .arg(config)
        .args(args)
        .env("RUST_LOG", "pier=debug,info")
        .env_remove("PIER_TOKEN_FILE")
        .env_remove("PIER_CA_FILE");
    match listen_of(&toml) {
        Some(listen) => cmd.env("PIER_URL", format!("http://{listen}")),
        None => cmd.env_remove("PIER_URL"),
    };
    match admin_token_of(&toml) {
        Some(token) => cmd.env("PIER_TOKEN", token),
        None => cmd.env_remove("PIER_TOKEN"),
    };
    finish(cmd, args).await
}

/// `pier <args...>` as an operator on another machine runs it: no config file, none of
/// the test's environment (no database URL, no Docker host), only PATH, `HOME` and
/// `XDG_CONFIG_HOME` under `home` (its working directory too), and `env`.
pub async fn run_pier_client(
    home: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_pier"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .current_dir(home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    finish(cmd, args).await
}

async fn finish(mut cmd: tokio::process::Command, args: &[&str]) -> std::process::Output {
    let fut = cmd.stdin(Stdio::null()).kill_on_drop(true).output();
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
