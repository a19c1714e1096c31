//! Judging a claimed deployment: approvals first (an admin may approve at any hour), then
//! the app's freeze and its deploy windows, unless an admin overrode them for this
//! deployment. A deployment that must wait is put back in Postgres in a waiting state with
//! the moment it is looked at again; no task sleeps for it, so a restart, a crash or
//! another Pier process changes nothing.

use chrono::Utc;

use crate::config::{AppConfig, next_opening};
use crate::store::{ApprovalGate, Deployment, DeploymentState, Store, StoreError, Trigger};

/// What the gates decided for a claimed deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gate {
    /// It runs now (recorded: a resumed run is not held again).
    Pass,
    /// It waits, in Postgres; this worker holds it no more.
    Held,
    /// It ended here (its approval request expired).
    Ended,
}

/// Reconciliation restarting what already serves (a vanished container) is not a new
/// version: no gate holds it. A registry poll's deployment is (it carries its delivery).
fn exempt(dep: &Deployment) -> bool {
    dep.gated_at.is_some() || (dep.trigger == Trigger::Reconcile && dep.delivery_id.is_none())
}

/// A promotion of the digest that already serves the app everywhere (staging redeployed
/// what production runs) changes nothing: asking two admins to approve it would be a
/// no-op's paperwork. It passes; the pipeline then ends it as the no-op it is, recorded
/// with the container that serves, or redeploys that digest if its container is gone.
async fn promotes_what_serves(
    store: &Store,
    dep: &Deployment,
    app: &AppConfig,
) -> Result<bool, StoreError> {
    let Some(digest) = dep.claimed_digest.as_deref() else {
        return Ok(false);
    };
    if dep.trigger != Trigger::Promotion {
        return Ok(false);
    }
    store
        .serves_everywhere(&app.name, &app.targets, digest)
        .await
}

pub(crate) async fn check(
    store: &Store,
    owner: &str,
    dep: &Deployment,
    app: &AppConfig,
) -> Result<Gate, StoreError> {
    if exempt(dep) {
        return Ok(Gate::Pass);
    }
    if promotes_what_serves(store, dep, app).await? {
        tracing::info!("the promoted digest serves already: nothing to approve or wait for");
        store.pass_gates(dep.id, owner).await?;
        return Ok(Gate::Pass);
    }
    if let Some(a) = &app.gates.approval {
        match store
            .approval_gate(dep.id, owner, a.required, &a.from, a.expires)
            .await?
        {
            ApprovalGate::Approved(_) => {}
            ApprovalGate::Held(had) => {
                tracing::info!(
                    approvals = had.len(),
                    required = a.required,
                    "awaiting approval"
                );
                return Ok(Gate::Held);
            }
            ApprovalGate::Expired(had) => {
                let outcome = format!(
                    "cancelled: the approval request expired after {} with {} of {} approvals",
                    humantime::format_duration(a.expires),
                    had.len(),
                    a.required
                );
                store
                    .finish(
                        dep.id,
                        owner,
                        DeploymentState::Cancelled,
                        &outcome,
                        None,
                        None,
                    )
                    .await?;
                return Ok(Gate::Ended);
            }
        }
    }
    if store.override_of(dep.id).await?.is_none() {
        if let Some(f) = store.freeze_of(&app.name).await? {
            let why = format!(
                "app frozen by {} until {}: {}",
                f.frozen_by,
                f.until.format("%Y-%m-%d %H:%M:%S UTC"),
                f.reason
            );
            store.hold_for_window(dep.id, owner, &why, f.until).await?;
            tracing::info!(until = %f.until, "held by a freeze");
            return Ok(Gate::Held);
        }
        if let Some(open) = next_opening(&app.gates.windows, Utc::now()) {
            let windows: Vec<&str> = app.gates.windows.iter().map(|w| w.text.as_str()).collect();
            let why = format!("the next deploy window ({})", windows.join("; "));
            store.hold_for_window(dep.id, owner, &why, open).await?;
            tracing::info!(opens = %open, "held until the next deploy window");
            return Ok(Gate::Held);
        }
    }
    store.pass_gates(dep.id, owner).await?;
    Ok(Gate::Pass)
}
