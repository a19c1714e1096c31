//! `pier logs APP`: an app's log through Pier's API (`GET /api/apps/{app}/logs`), as the
//! engine keeps it, with the app's secrets masked by the server. Lines the app wrote to
//! stderr go to stderr, the rest to stdout, so that `2>/dev/null` keeps its meaning; a
//! closed output (`| head`) ends the read.

use std::io::Write;

use anyhow::bail;
use serde_json::Value;

use super::Remote;
use super::client::segment;
use super::credentials::{self, Need};

/// What `pier logs` was asked.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Which log: on an engine target, the container of the generation that serves there (or of
--deployment); on a Swarm target, the service's (every task's). Lines keep their stream
(stderr to stderr) and the engine's time (--timestamps shows it). The server masks the
app's secrets (env: and file: values, also base64-encoded), cuts a line at 16 KiB and reads
back at most 5000 lines; a followed log ends when its container stops.

Examples:
  pier logs web                     the last 100 lines
  pier logs web -f --since 10m      the last ten minutes, then new lines as they come
  pier logs web --service worker --target edge-2 --tail 20")]
pub struct LogsArgs {
    /// The app, as in pier.toml.
    pub app: String,
    /// One of the app's services (default: its primary one).
    #[arg(long)]
    pub service: Option<String>,
    /// One of the app's targets (default: its first).
    #[arg(long)]
    pub target: Option<String>,
    /// Keep reading: print new lines as the app writes them, until interrupted.
    #[arg(long, short)]
    pub follow: bool,
    /// Only lines since then: a duration ago (`10m`, `2h`, a year at most) or an RFC 3339
    /// time (`2026-12-05T10:00:00Z`).
    #[arg(long)]
    pub since: Option<String>,
    /// The last N lines (at most 5000; default 100, or all allowed with --since); 0 with
    /// --follow prints only new lines.
    #[arg(long, short = 'n')]
    pub tail: Option<usize>,
    /// The containers of this deployment (a candidate that failed, while it is kept)
    /// instead of what serves; not on a Swarm target.
    #[arg(long)]
    pub deployment: Option<uuid::Uuid>,
    /// Print the engine's time of each line before it.
    #[arg(long, short)]
    pub timestamps: bool,
}

impl LogsArgs {
    fn path(&self) -> anyhow::Result<String> {
        let mut query = Vec::new();
        let deployment = self.deployment.map(|d| d.to_string());
        let tail = self.tail.map(|t| t.to_string());
        for (key, value) in [
            ("service", self.service.as_deref()),
            ("target", self.target.as_deref()),
            ("since", self.since.as_deref()),
            ("tail", tail.as_deref()),
            ("deployment", deployment.as_deref()),
            ("follow", self.follow.then_some("true")),
        ] {
            if let Some(v) = value {
                query.push((key, v));
            }
        }
        Ok(format!(
            "/api/apps/{}/logs?{}",
            segment(&self.app),
            serde_urlencoded::to_string(&query)?
        ))
    }
}

pub(super) async fn run(remote: Remote, args: LogsArgs) -> anyhow::Result<()> {
    let client = credentials::connect(&remote, Need::Token)?;
    let path = args.path()?;
    let mut ended = None;
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    client
        .get_lines(&path, args.follow, |line| {
            if let Some(why) = line.get("error").and_then(Value::as_str) {
                ended = Some(why.to_owned());
                return false;
            }
            let sink: &mut dyn Write = match line["stream"].as_str() {
                Some("stderr") => &mut err,
                _ => &mut out,
            };
            print_line(sink, &line, args.timestamps).is_ok()
        })
        .await?;
    match ended {
        Some(why) => bail!("the log ended early: {why}"),
        None => Ok(()),
    }
}

/// One line as the app wrote it, after the engine's time with `stamps`.
fn print_line(sink: &mut dyn Write, line: &Value, stamps: bool) -> std::io::Result<()> {
    let text = line["text"].as_str().unwrap_or_default();
    match line["at"].as_str().filter(|_| stamps) {
        Some(at) => writeln!(sink, "{at} {text}"),
        None => writeln!(sink, "{text}"),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn args(line: &[&str]) -> LogsArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            logs: LogsArgs,
        }
        Cli::parse_from(std::iter::once("pier-logs").chain(line.iter().copied())).logs
    }

    #[test]
    fn the_arguments_become_the_apis_query() {
        let path = args(&["web app", "-f", "--since", "10m", "--service", "worker"])
            .path()
            .unwrap();
        assert_eq!(
            path,
            "/api/apps/web%20app/logs?service=worker&since=10m&follow=true"
        );
        assert_eq!(
            args(&["web", "-n", "5"]).path().unwrap(),
            "/api/apps/web/logs?tail=5"
        );
    }

    #[test]
    fn a_line_is_printed_with_its_time_when_asked() {
        let line = serde_json::json!({"stream": "stdout", "at": "2026-12-05T01:02:03.000000000Z", "text": "hi"});
        let mut out = Vec::new();
        print_line(&mut out, &line, true).unwrap();
        assert_eq!(out, b"2026-12-05T01:02:03.000000000Z hi\n");
        out.clear();
        print_line(&mut out, &line, false).unwrap();
        assert_eq!(out, b"hi\n");
    }
}
