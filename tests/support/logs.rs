//! Apps that talk, for the log tests: a command that prints a secret (as written and
//! base64-encoded), a line on stderr and a numbered tick a second; and `pier logs -f` run
//! as an operator runs it (only `PIER_URL` and `PIER_TOKEN`), read line by line.

use super::*;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// What the talking app prints as its secret (given to it as `API_TOKEN`, from Pier's
/// environment through `env:PIER_TEST_LOG_TOKEN`).
pub const LOG_SECRET: &str = "s3cret-log-token";

/// Prints its secret (plain and base64), a line on stderr, then `tick N` a second while
/// httpd serves.
const TALKING: &str = "trap 'exit 0' TERM; /bin/busybox echo \"token=$API_TOKEN\"; \
    /bin/busybox printf 'b64:%s\\n' \"$(/bin/busybox printf %s \"$API_TOKEN\" | /bin/busybox base64)\"; \
    /bin/busybox echo 'oops on stderr' >&2; /bin/busybox httpd -f -p 8080 -h /www & \
    i=0; while true; do /bin/busybox echo tick $i; i=$((i+1)); /bin/busybox sleep 1; done";

/// The app's `command` and `env` lines that make it the talking app; Pier must run with
/// `PIER_TEST_LOG_TOKEN` = [`LOG_SECRET`] (see [`talking_app`]).
pub fn talking_toml() -> String {
    command_toml(TALKING)
}

/// An app's `command` line that runs `script` with busybox sh.
pub fn command_toml(script: &str) -> String {
    format!(
        "command = [\"/bin/busybox\", \"sh\", \"-c\", {}]",
        toml::Value::String(script.into())
    )
}

/// Makes `a` the talking app, its secret from Pier's environment; the builder gets that
/// environment.
pub fn talking_app(b: TestEnvBuilder) -> TestEnvBuilder {
    app_running(b, TALKING)
}

/// Makes `a` run `script` (busybox sh) instead of its image's command, with the talking
/// app's secret as `API_TOKEN` (from Pier's environment, which the builder gets), so that
/// its lines pass through the mask as an app's with a secret do.
pub fn app_running(b: TestEnvBuilder, script: &str) -> TestEnvBuilder {
    let command = command_toml(script);
    b.app(|a| {
        a.env
            .insert("API_TOKEN".into(), "env:PIER_TEST_LOG_TOKEN".into());
        a.extra_toml = format!("{}\n{command}", a.extra_toml.trim_end());
    })
    .pier_env("PIER_TEST_LOG_TOKEN", LOG_SECRET)
}

/// The tick numbers among `lines`.
pub fn ticks<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<u32> {
    lines
        .into_iter()
        .filter_map(|t| t.trim().strip_prefix("tick ")?.parse().ok())
        .collect()
}

/// `pier logs ARGS` as an operator on another machine runs it: no config, only
/// `PIER_URL` and `PIER_TOKEN`; its stdout read line by line, its stderr kept.
pub struct PierLogs {
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

impl PierLogs {
    pub fn start(url: &str, token: &str, args: &[&str]) -> PierLogs {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pier"))
            .arg("logs")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::temp_dir())
            .env("PIER_URL", url)
            .env("PIER_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run pier logs");
        let out = BufReader::new(child.stdout.take().expect("stdout")).lines();
        PierLogs { child, out }
    }

    /// Reads stdout until a line names a tick above `above`; that tick. Every line read
    /// must pass `check`. Panics at `deadline` or if the output ends first.
    pub async fn tick_above(
        &mut self,
        above: u32,
        deadline: Duration,
        check: impl Fn(&str),
    ) -> u32 {
        let read = async {
            while let Ok(Some(line)) = self.out.next_line().await {
                check(&line);
                if let Some(&n) = ticks([line.as_str()]).first()
                    && n > above
                {
                    return n;
                }
            }
            panic!("pier logs ended before a tick above {above}");
        };
        tokio::time::timeout(deadline, read)
            .await
            .unwrap_or_else(|_| panic!("no tick above {above} from pier logs within {deadline:?}"))
    }

    /// The next line of its stdout; `None` once it ends.
    pub async fn next_line(&mut self) -> Option<String> {
        self.out.next_line().await.ok().flatten()
    }

    /// Whether it still runs (a followed log goes on until it is stopped).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("pier logs' status").is_none()
    }

    /// Stops it; what it wrote to stderr.
    pub async fn stop(mut self) -> String {
        let _ = self.child.start_kill();
        let out = self.child.wait_with_output().await.expect("pier logs ends");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}
