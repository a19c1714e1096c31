//! Incarnations of apps that left the config. An app name's incarnation is what its
//! volumes are owned by; it ends once the app is gone for good, so that a different app
//! added later under the same name starts a new one, with new, empty volumes, instead of
//! inheriting the old one's data by name (the old volumes keep their records, and
//! `pier volumes adopt` hands one over on purpose).
//!
//! An incarnation ends only when all of these hold:
//! - the app is not in the config (as reloaded);
//! - every engine target was listed in this pass (an engine that did not answer may still
//!   run the app) and none has a container labelled for the app, in any state. Pier never
//!   removes the containers of an app that left the config, so an app whose containers
//!   still exist keeps its incarnation until an operator removes them;
//! - no deployment of the app is queued or running, or was queued since the containers
//!   were listed (a reload that added the app back deploys it before this runs).
//!
//! Each end is logged and recorded in `reconcile_actions`.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::{ReconcileError, Reconciled};
use crate::config::Config;
use crate::store::{ReconcileKind, Store};

pub(super) async fn end_incarnations_of_gone_apps(
    config: &Config,
    store: &Store,
    seen_apps: &HashSet<String>,
    seen_at: DateTime<Utc>,
    out: &mut Reconciled,
) -> Result<(), ReconcileError> {
    let keep: Vec<String> = config
        .apps
        .iter()
        .map(|a| a.name.to_string())
        .chain(seen_apps.iter().cloned())
        .collect();
    for (app, incarnation) in store.end_incarnations(&keep, seen_at).await? {
        let detail = format!(
            "ended incarnation {incarnation} of app {app}: it left the config and none of \
             its containers is left; an app added again under this name gets new volumes"
        );
        tracing::info!(%app, %incarnation, "{detail}");
        store
            .record_reconcile(
                crate::config::LOCAL,
                &app,
                ReconcileKind::EndedIncarnation,
                None,
                None,
                &detail,
            )
            .await?;
        out.incarnations_ended.push(app);
    }
    Ok(())
}
