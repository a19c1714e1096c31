//! What an operator can do to an app or a deployment: redeploy, roll back (which pins),
//! unpin, cancel or stop. The pages, the JSON API and the CLI all call these, so each
//! action has one set of rules and is recorded with who did it.

use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use crate::config::{AppConfig, Config};
use crate::domain::is_digest;
use crate::store::{
    CancelOutcome, Deployment, DeploymentState, Enqueued, NewDeployment, Pin, Store, StoreError,
    Trigger,
};

/// Who did it, as the record shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Actor {
    /// The shared `server.admin_token` as a bearer token (the API and the command line,
    /// which is its client), or the token form field.
    Token,
    /// A signed-in user of the pages (the name given at sign-in), or a named admin by
    /// their own bearer token.
    Session { user: String },
}

impl Actor {
    /// The text stored in `requested_by`, `cancel_requested_by` and the pin's row.
    pub(crate) fn describe(&self) -> String {
        match self {
            Actor::Token => "api token".to_owned(),
            Actor::Session { user } => format!("user {}", clip(user, 64)),
        }
    }
}

pub(crate) fn clip(s: &str, n: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(n).collect()
}

/// Why an action was refused. The web layer maps each to its status code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActionError {
    /// 404
    #[error("no app `{0}` in the configuration")]
    UnknownApp(String),
    /// 404
    #[error("no deployment {0}")]
    UnknownDeployment(Uuid),
    /// 400
    #[error("`{0}` is not a sha256 digest")]
    NotADigest(String),
    /// 400: a glob or range app before any tag deployed has nothing to redeploy.
    #[error("{0}")]
    NothingToRedeploy(String),
    /// 409
    #[error(
        "{digest} never deployed successfully for app `{app}`: only such a digest can be rolled back to"
    )]
    NeverSucceeded { app: String, digest: String },
    /// 409
    #[error(
        "app `{app}` is pinned to {digest} by {by}: roll back to choose another digest, or unpin it first"
    )]
    Pinned {
        app: String,
        digest: String,
        by: String,
    },
    /// 409
    #[error("app `{0}` is not pinned")]
    NotPinned(String),
    /// 409
    #[error("deployment {id} has already ended: {state}")]
    AlreadyFinal { id: Uuid, state: DeploymentState },
    /// 409: the deployment is not waiting for what the decision is about.
    #[error("deployment {id} is {state}, not waiting for {what}")]
    NotWaiting {
        id: Uuid,
        state: DeploymentState,
        what: &'static str,
    },
    /// 403: this admin's approval does not count for this app.
    #[error("admin `{admin}` may not approve deployments of `{app}` (approval.from: {from})")]
    NotAnApprover {
        admin: String,
        app: String,
        from: String,
    },
    /// 400: an override or a freeze needs its reason.
    #[error("{0}")]
    Invalid(String),
    /// 400: a freeze's `until` is neither a duration nor an RFC 3339 time (`given` is
    /// clipped to 64 characters).
    #[error("`{given}`: give a duration (2h) or a time (2026-12-24T18:00:00Z)")]
    BadUntil { given: String },
    /// 400: a freeze's `until` lies past the last time Pier can store.
    #[error("that is too long")]
    UntilTooLong,
    /// 503 when the database is unavailable, else 500.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What unpinning did.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Unpinned {
    pub app: String,
    /// The pin that was in force.
    pub was: Pin,
    pub by: String,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Cancelled {
    /// It was queued and is now cancelled; it never ran.
    Cancelled,
    /// It runs; it stops at its next step boundary before `switch` (after that it
    /// finishes on its own).
    StopRequested,
}

pub(crate) fn app<'c>(config: &'c Config, name: &str) -> Result<&'c AppConfig, ActionError> {
    config
        .app(name)
        .ok_or_else(|| ActionError::UnknownApp(clip(name, 64)))
}

fn manual(app: &AppConfig, trigger: Trigger, digest: Option<String>) -> NewDeployment {
    NewDeployment {
        app: app.name.to_string(),
        trigger,
        delivery_id: None,
        image: app.image.clone(),
        requested_tag: digest.is_none().then(|| app.tag.clone()),
        pinned: digest.is_some(),
        claimed_digest: digest,
    }
}

/// Redeploy: resolve the followed tag afresh (for a glob or range, the tag that serves
/// now) and deploy it, even when that digest already serves. A pinned app redeploys its
/// pinned digest: a redeploy never moves an app off its pin.
pub(crate) async fn redeploy(
    store: &Store,
    config: &Config,
    app: &str,
    actor: &Actor,
) -> Result<Enqueued, ActionError> {
    deploy(store, config, app, None, actor).await
}

/// Deploy exactly `digest` (`Some`) or redeploy (`None`). A digest other than the pinned
/// one is refused while the app is pinned: roll back to it instead, which moves the pin.
pub(crate) async fn deploy(
    store: &Store,
    config: &Config,
    name: &str,
    digest: Option<String>,
    actor: &Actor,
) -> Result<Enqueued, ActionError> {
    let app = app(config, name)?;
    if let Some(d) = &digest
        && !is_digest(d)
    {
        return Err(ActionError::NotADigest(clip(d, 80)));
    }
    let pin = store.pin(&app.name).await?;
    let d = match (digest, pin) {
        (Some(d), Some(pin)) if d != pin.digest => {
            return Err(ActionError::Pinned {
                app: app.name.to_string(),
                digest: pin.digest,
                by: pin.by,
            });
        }
        (_, Some(pin)) => manual(app, Trigger::Manual, Some(pin.digest)),
        (Some(d), None) => manual(app, Trigger::Manual, Some(d)),
        (None, None) => {
            let mut d = manual(app, Trigger::Manual, None);
            // A glob or range names no manifest: resolve the tag that serves now again.
            if app.rule.fixed().is_none() {
                let tag = store.serving_tag(&app.name).await?.ok_or_else(|| {
                    ActionError::NothingToRedeploy(format!(
                        "app `{}` follows {}, and no matching tag has deployed yet: deploy a digest",
                        app.name, app.rule
                    ))
                })?;
                d.requested_tag = Some(tag);
            }
            d
        }
    };
    Ok(store.enqueue_by(d, &actor.describe()).await?)
}

/// Roll back to `digest`, which must have deployed successfully for this app before, and
/// pin the app there: pushes and the poller are recorded but do not move it until
/// [`unpin`]. The pin and the queued deployment are one transaction.
pub(crate) async fn rollback(
    store: &Store,
    config: &Config,
    name: &str,
    digest: &str,
    actor: &Actor,
) -> Result<Enqueued, ActionError> {
    let app = app(config, name)?;
    if !is_digest(digest) {
        return Err(ActionError::NotADigest(clip(digest, 80)));
    }
    if !store.succeeded_for(&app.name, digest).await? {
        return Err(ActionError::NeverSucceeded {
            app: app.name.to_string(),
            digest: digest.to_owned(),
        });
    }
    let d = manual(app, Trigger::Rollback, Some(digest.to_owned()));
    let (enqueued, pin) = store.pin_and_enqueue(d, &actor.describe()).await?;
    tracing::info!(app = %pin.app, digest = %pin.digest, by = %pin.by, "rolled back and pinned");
    Ok(enqueued)
}

/// End the app's pin: the next push (or poll) deploys again.
pub(crate) async fn unpin(
    store: &Store,
    app: &str,
    actor: &Actor,
) -> Result<Unpinned, ActionError> {
    let by = actor.describe();
    let was = store
        .unpin(app, &by)
        .await?
        .ok_or_else(|| ActionError::NotPinned(clip(app, 64)))?;
    tracing::info!(app = %was.app, digest = %was.digest, %by, "unpinned");
    Ok(Unpinned {
        app: was.app.clone(),
        was,
        by,
    })
}

/// Cancel a queued deployment now, or ask a running one to stop at its next step boundary
/// (before `switch`), where it ends `cancelled` through the failure path: the candidate is
/// removed and the previous generation keeps serving.
pub(crate) async fn cancel(
    store: &Store,
    deployment: Uuid,
    actor: &Actor,
) -> Result<Cancelled, ActionError> {
    match store.cancel(deployment, &actor.describe()).await? {
        CancelOutcome::Cancelled { app } => {
            // The pipeline counts the deployments it ends; this one never reached it.
            metrics::counter!("pier_deployments_finished_total", "app" => app, "state" => "cancelled").increment(1);
            Ok(Cancelled::Cancelled)
        }
        CancelOutcome::StopRequested => Ok(Cancelled::StopRequested),
        CancelOutcome::AlreadyFinal(state) => Err(ActionError::AlreadyFinal {
            id: deployment,
            state,
        }),
        CancelOutcome::NotFound => Err(ActionError::UnknownDeployment(deployment)),
    }
}

/// Longest a caller may wait for a deployment to end in one call.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(120);

/// The deployment once it is final, or as it is when `within` has passed. Waits on the
/// queue's NOTIFY (sent at commit of every state change, by any Pier process), never by
/// polling the row; see [`crate::store::Store::wait_final`].
pub(crate) async fn wait_final(
    store: &Store,
    deployment: Uuid,
    within: Duration,
) -> Result<Deployment, ActionError> {
    store
        .wait_final(deployment, within.min(MAX_WAIT))
        .await?
        .ok_or(ActionError::UnknownDeployment(deployment))
}
