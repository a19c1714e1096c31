//! What an operator does from the command line, each a request to Pier's JSON API with the
//! caller's own token: the server applies its rules (`crate::actions`, `crate::gates`) and
//! records who did it by that token, as for the pages and scripts.

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use tokio::time::Instant;
use uuid::Uuid;

use super::client::{Client, segment};
use super::credentials::{self, Need};
use super::{Command, Remote, StillRunning};
use crate::store::Enqueued;

/// The longest one long-poll asks the server to wait (it allows up to two minutes).
const LONG_POLL: Duration = Duration::from_secs(60);

pub(super) async fn run(remote: Remote, command: Command) -> anyhow::Result<()> {
    let client = credentials::connect(&remote, Need::Token)?;
    match command {
        Command::Deploy { app, digest, wait } => {
            let body = match digest {
                Some(d) => json!({ "digest": d }),
                None => json!({}),
            };
            let answer = client
                .post(&format!("/api/apps/{}/deploy", segment(&app)), body)
                .await?;
            let id = queued(&client, &answer)?;
            follow(&client, id, wait.within()).await
        }
        Command::Rollback { app, digest, wait } => {
            let path = format!("/api/apps/{}/rollback", segment(&app));
            let answer = client.post(&path, json!({ "digest": digest })).await?;
            println!("pinned {app} to {digest}");
            let id = queued(&client, &answer)?;
            follow(&client, id, wait.within()).await
        }
        Command::Unpin { app } => {
            let path = format!("/api/apps/{}/unpin", segment(&app));
            let u = client.post(&path, json!({})).await?;
            println!(
                "unpinned {} (was pinned to {} by {})",
                text(&u["app"]),
                text(&u["unpinned"]["digest"]),
                text(&u["unpinned"]["by"])
            );
            Ok(())
        }
        Command::Cancel { deployment } => {
            let path = format!("/api/deployments/{deployment}/cancel");
            let answer = client.post(&path, json!({})).await?;
            match answer["result"].as_str() {
                Some("stop_requested") => println!(
                    "stop requested: deployment {deployment} stops at its next step boundary"
                ),
                _ => println!("cancelled deployment {deployment}"),
            }
            Ok(())
        }
        command => gate_action(&client, command).await,
    }
}

/// Approvals, overrides and freezes.
async fn gate_action(client: &Client, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Approve { deployment, admin } => {
            let who = named_admin(client, admin.as_deref()).await?;
            let path = format!("/api/deployments/{deployment}/approve");
            let answer = client.post(&path, json!({})).await?;
            println!("{}", approved(deployment, &who, &answer["decision"]));
            Ok(())
        }
        Command::Reject {
            deployment,
            admin,
            reason,
        } => {
            let who = named_admin(client, admin.as_deref()).await?;
            let path = format!("/api/deployments/{deployment}/reject");
            client.post(&path, json!({ "reason": reason })).await?;
            println!("rejected deployment {deployment} as {who}");
            Ok(())
        }
        Command::Override {
            deployment,
            admin,
            reason,
        } => {
            let who = named_admin(client, admin.as_deref()).await?;
            let path = format!("/api/deployments/{deployment}/override");
            client.post(&path, json!({ "reason": reason })).await?;
            println!("overridden by {who}: deployment {deployment} runs now");
            Ok(())
        }
        Command::Freeze { app, until, reason } => {
            let path = format!("/api/apps/{}/freeze", segment(&app));
            let body = json!({ "until": until, "reason": reason });
            let f = &client.post(&path, body).await?["freeze"];
            println!(
                "froze {} until {}: {}",
                text(&f["app"]),
                text(&f["until"]),
                text(&f["reason"])
            );
            Ok(())
        }
        Command::Unfreeze { app } => {
            let path = format!("/api/apps/{}/unfreeze", segment(&app));
            let f = &client.post(&path, json!({})).await?["lifted"];
            if f.is_null() {
                println!("{app} was not frozen");
            } else {
                println!(
                    "unfroze {} (frozen by {}: {})",
                    text(&f["app"]),
                    text(&f["frozen_by"]),
                    text(&f["reason"])
                );
            }
            Ok(())
        }
        // `super::dispatch` and `run` take every other command before this.
        other => unreachable!("not an operator command: {other:?}"),
    }
}

/// The named admin whose token this is, as the server says; with `--as NAME`, refused
/// before anything is done unless it is NAME's. An approval records a person: the
/// shared token names nobody, and the server would refuse it too.
async fn named_admin(client: &Client, expected: Option<&str>) -> anyhow::Result<String> {
    let Some(name) = credentials::whoami(client).await? else {
        bail!(
            "this needs a named admin's own token ([[admins]]); {} says yours is the shared \
             server.admin_token",
            client.base()
        );
    };
    if let Some(want) = expected
        && want != name
    {
        bail!("your token is admin `{name}`'s, not `{want}`'s: nothing was done");
    }
    Ok(name)
}

fn approved(id: Uuid, who: &str, d: &Value) -> String {
    let approvals: Vec<&str> = d["approvals"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let again = if d["again"] == true {
        " (again: counted once)"
    } else {
        ""
    };
    let next = if d["released"] == true {
        "it runs now"
    } else {
        "it waits for more"
    };
    format!(
        "approved deployment {id} as {who}{again}; approvals so far: {}; {next}",
        approvals.join(", ")
    )
}

/// A string field of an answer, or `-`.
fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("-")
}

/// Says what was queued (the answer's `deployment`); its id.
fn queued(client: &Client, answer: &Value) -> anyhow::Result<Uuid> {
    let e: Enqueued = serde_json::from_value(answer["deployment"].clone())
        .with_context(|| format!("{} answered no deployment", client.base()))?;
    Ok(match e {
        Enqueued::Queued { id, superseded, .. } => {
            println!("queued deployment {id}");
            for s in superseded {
                println!("superseded queued deployment {s}");
            }
            id
        }
        Enqueued::AlreadyPending { id, .. } => {
            println!("already queued or running: {id}");
            id
        }
    })
}

/// With `--wait`, follows the deployment to its end through the API's long-poll
/// (`GET /api/deployments/{id}?wait=`, answered once it is final or the wait is over) and
/// fails unless it succeeded; [`StillRunning`] when `within` passed first.
async fn follow(client: &Client, id: Uuid, within: Option<Duration>) -> anyhow::Result<()> {
    let Some(within) = within else { return Ok(()) };
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = left.min(LONG_POLL);
        let path = format!("/api/deployments/{id}?wait={}ms", wait.as_millis());
        let d = client.get_waiting(&path, wait).await?;
        let state = text(&d["state"]).to_owned();
        if d["final"] == true {
            println!("{id} {state}: {}", d["outcome"].as_str().unwrap_or(""));
            if let Some(e) = d["error"].as_str() {
                println!("error: {e}");
            }
            return match state.as_str() {
                "succeeded" => Ok(()),
                other => bail!("deployment {id} ended {other}"),
            };
        }
        if left.is_zero() {
            return Err(StillRunning {
                id,
                state,
                after: humantime::format_duration(within).to_string(),
            }
            .into());
        }
    }
}
