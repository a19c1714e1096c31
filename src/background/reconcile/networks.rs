//! The private networks of apps that left the config. Each app's containers stand in
//! `pier-<app>`, and the engine's default address pools hold about 30 networks: without
//! this, every app that ever came and went keeps one, and a new app's deploy fails once the
//! pools are used up.
//!
//! A network is removed only when all of these hold, checked in this order:
//! - it carries `pier.managed=true` and `pier.app=<app>`, and its name is `pier-<app>` (the
//!   name the `network` step gives it; a label alone could be copied onto anything);
//! - `<app>` is not in the config (as reloaded);
//! - no container, in any state and whoever made it, is attached. Containers of an app
//!   that left the config are never removed by reconciliation, so the network goes only
//!   after an operator removed them;
//! - this installation's queue has deployed `<app>` (another Pier on the same engine, with
//!   its own database, may run an app this one never had), and no deployment of `<app>` is
//!   queued or running (a reload that adds the app back queues one before its `network`
//!   step adopts or makes the network): one statement for all such networks, and none
//!   while every leftover network still has containers on it. On an engine other than
//!   `local`, the app must also have run on that engine (see `apps_deployed_and_idle`).
//!
//! Each engine is swept on its own. Every removal is logged and recorded in
//! `reconcile_actions` with the network's id and the engine's target.

use super::{ReconcileError, Reconciled};
use crate::config::{Config, Contained};
use crate::engine::{ManagedNetwork, NetworkRemoved};
use crate::store::Store;
use crate::target::Target;

pub(super) async fn remove_networks_of_gone_apps(
    config: &Config,
    store: &Store,
    target: &Target,
    out: &mut Reconciled,
) -> Result<(), ReconcileError> {
    let engine = &target.engine;
    // Listed before the queue is read: a deployment queued meanwhile is then seen as busy
    // below, and the network it is about to join is never taken for a leftover.
    let networks = engine.managed_networks().await?;
    let mut unattached: Vec<(&ManagedNetwork, &str)> = Vec::new();
    for (network, app) in networks.iter().filter_map(|n| Some((n, n.app()?))) {
        if config.app(app).is_some() || network.name != Contained::network(app) {
            continue;
        }
        // The engine first: on an engine shared with other Piers most such networks have
        // containers on them, and asking the engine costs the database nothing.
        let users = engine.network_users(&network.id).await?;
        if users.is_empty() {
            unattached.push((network, app));
        } else {
            tracing::debug!(%app, network = %network.name, attached = users.len(),
                "network of an app no longer configured kept: containers are attached");
        }
    }
    if unattached.is_empty() {
        return Ok(());
    }
    let apps: Vec<String> = unattached.iter().map(|(_, a)| (*a).to_owned()).collect();
    let removable = store.apps_deployed_and_idle(&apps, &target.name).await?;
    for (network, app) in unattached {
        if !removable.contains(app) {
            continue;
        }
        // By id: a network made since under the same name is not the one checked above.
        // The engine still refuses (InUse) if a container was attached meanwhile.
        if engine.remove_network(&network.id).await? != NetworkRemoved::Removed {
            continue;
        }
        let detail = format!(
            "removed network {} ({}) of app {app}, which is no longer configured: nothing was attached",
            network.name, network.id
        );
        tracing::info!(%app, network = %network.id, "{detail}");
        store
            .record_network_removed(&target.name, app, &network.id, &detail)
            .await?;
        out.networks_removed.push(network.name.clone());
    }
    Ok(())
}
