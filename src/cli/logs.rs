//! `pier logs APP`: an app's log through Pier's API (`GET /api/apps/{app}/logs`), as the
//! engine keeps it, with the app's secrets masked by the server. Lines the app wrote to
//! stderr go to stderr, the rest to stdout, so that `2>/dev/null` keeps its meaning.


use anyhow::bail;

use super::client::segment;
use super::credentials::{self, Need};
use super::Remote;

/// What `pier logs` was asked.
#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    pub app: String,
    /// One of the app's services (default: its primary one).
    #[arg(long)]
    pub service: Option<String>,
    /// Which of the app's targets (default: its first).
    #[arg(long)]
    pub target: Option<String>,
    /// Keep reading as the app writes.
    #[arg(long, short)]
    pub follow: bool,
    /// Only lines since then: a duration (`10m`, `2h`) or an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// The last N lines (at most 5000).
    #[arg(long, default_value_t = 100)]
    pub tail: usize,
    /// A deployment's containers (a candidate that failed, while it is kept) instead of
    /// what serves.
    #[arg(long)]
    pub deployment: Option<uuid::Uuid>,
    /// Print each line's time (the engine's) before it.
    #[arg(long, short)]
    pub timestamps: bool,
}

pub(super) async fn run(remote: Remote, args: LogsArgs) -> anyhow::Result<()> {
    let client = credentials::connect(&remote, Need::Token)?;
    let mut query = vec![
        ("tail", args.tail.to_string()),
        ("follow", args.follow.to_string()),
    ];
    for (key, value) in [
        ("service", args.service),
        ("target", args.target),
        ("since", args.since),
        ("deployment", args.deployment.map(|d| d.to_string())),
    ] {
        if let Some(v) = value {
            query.push((key, v));
        }
    }
    let path = format!(
        "/api/apps/{}/logs?{}",
        segment(&args.app),
        serde_urlencoded::to_string(&query)?
    );
    let mut failed = None;
    let (stamps, mut out, mut err) = (args.timestamps, std::io::stdout(), std::io::stderr());
    client
        .get_lines(&path, !args.follow, |line| {
            if let Some(e) = line.get("error").and_then(|e| e.as_str()) {
                failed = Some(e.to_owned());
                return;
            }
            let text = line["text"].as_str().unwrap_or_default();
            let at = line["at"].as_str().filter(|_| stamps);
            let sink: &mut dyn std::io::Write = match line["stream"].as_str() {
                Some("stderr") => &mut err,
                _ => &mut out,
            };
            let _ = match at {
                Some(at) => writeln!(sink, "{at} {text}"),
                None => writeln!(sink, "{text}"),
            };
        })
        .await?;
    match failed {
        Some(e) => bail!("the log ended early: {e}"),
        None => Ok(()),
    }
}
