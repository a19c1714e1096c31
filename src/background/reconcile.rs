//! Reconciliation: makes the engine agree with the journal. Runs at start-up, before any
//! claim, and then on every sweep.
//!
//! - An orphan is a container labelled for an app that is neither of the app's serving
//!   generation (any of its services' containers) nor a container of a queued or running deployment (a candidate a crashed
//!   worker left, which its resumer will adopt). Orphans are removed, and the removal is
//!   recorded. Only a container the journal created (by id) is ever removed: one that merely
//!   carries Pier's labels is left alone and reported. Pier never removes what it cannot
//!   account for.
//! - An app whose serving container (or one of its further services' containers) is gone
//!   gets a `reconcile` deployment of the digest it served, unless something is already queued or running for it.
//! - The private network of an app that left the config is removed once nothing is
//!   attached (`networks.rs`).
//! - The incarnation of an app that left the config ends once none of its containers is
//!   left on any engine (`incarnations.rs`).

mod incarnations;
mod networks;

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use uuid::Uuid;

use crate::config::Config;
use crate::engine::{ContainerFacts, EngineError, LABEL_APP, LABEL_DEPLOYMENT, LABEL_SERVICE};
use crate::store::{
    DeploymentState, Enqueued, Generation, NewDeployment, ReconcileKind, Store, StoreError, Trigger,
};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

#[derive(Debug, Default, Serialize)]
pub struct Reconciled {
    pub removed: Vec<String>,
    pub unaccounted: Vec<String>,
    pub requeued: Vec<Uuid>,
    pub routes_removed: Vec<String>,
    /// Names of networks of apps no longer configured that were removed.
    pub networks_removed: Vec<String>,
    /// Apps whose incarnation ended.
    pub incarnations_ended: Vec<String>,
    pub warnings: Vec<String>,
    /// Apps with a container (in any state) on an engine listed in this pass.
    #[serde(skip)]
    apps_seen: HashSet<String>,
    /// Engines that could not be listed in this pass.
    #[serde(skip)]
    unreached: usize,
}

/// Reconciles every target's engine, each against its own journal rows. An engine that
/// cannot be reached is reported and skipped: it never holds up the others.
pub async fn reconcile_all(
    config: &Config,
    store: &Store,
    targets: &crate::target::Targets,
) -> Result<Reconciled, ReconcileError> {
    let mut all = Reconciled::default();
    let seen_at = store.clock().await?;
    // A swarm keeps its own tasks to the spec (it restarts and replaces them): there is
    // no container of Pier's there to adopt, restore or remove.
    let engines = targets
        .iter()
        .filter(|t| t.kind == crate::config::TargetKind::Engine);
    for target in engines {
        match reconcile(config, store, target).await {
            Ok(r) => all.absorb(r),
            Err(ReconcileError::Engine(e)) if !target.is_local() => {
                all.unreached += 1;
                all.warnings
                    .push(format!("target {}: not reconciled: {e}", target.name));
            }
            Err(e) => return Err(e),
        }
    }
    if all.unreached == 0 {
        let seen = std::mem::take(&mut all.apps_seen);
        incarnations::end_incarnations_of_gone_apps(config, store, &seen, seen_at, &mut all)
            .await?;
    }
    Ok(all)
}

impl Reconciled {
    fn absorb(&mut self, o: Reconciled) {
        self.removed.extend(o.removed);
        self.unaccounted.extend(o.unaccounted);
        self.requeued.extend(o.requeued);
        self.routes_removed.extend(o.routes_removed);
        self.networks_removed.extend(o.networks_removed);
        self.incarnations_ended.extend(o.incarnations_ended);
        self.warnings.extend(o.warnings);
        self.apps_seen.extend(o.apps_seen);
        self.unreached += o.unreached;
    }
}

/// Reconciles one target's engine with the journal's rows for that target: orphans,
/// routes to containers that are gone, lost generations, then networks of gone apps.
pub(crate) async fn reconcile(
    config: &Config,
    store: &Store,
    target: &crate::target::Target,
) -> Result<Reconciled, ReconcileError> {
    let seen = Seen::take(store, target).await?;
    let mut out = Reconciled {
        apps_seen: seen
            .containers
            .iter()
            .filter_map(|c| c.label(LABEL_APP).map(str::to_owned))
            .collect(),
        ..Reconciled::default()
    };
    for c in &seen.containers {
        remove_if_orphan(config, store, target, &seen, c, &mut out).await?;
    }
    let present: HashSet<&str> = seen.containers.iter().map(|c| c.id.as_str()).collect();
    remove_dead_routes(store, target, &present, &mut out).await?;
    for generation in store.generations().await? {
        if generation.target != target.name {
            continue;
        }
        let Some(app) = config
            .app(&generation.app)
            .filter(|a| a.targets.contains(&target.name))
        else {
            continue;
        };
        let lost = Lost {
            app,
            generation: &generation,
            present: &present,
        };
        restore_if_lost(store, target, &seen.containers, lost, &mut out).await?;
    }
    networks::remove_networks_of_gone_apps(config, store, target, &mut out).await?;
    Ok(out)
}

/// What the engine has and what the journal says of it, read once per pass.
struct Seen {
    containers: Vec<ContainerFacts>,
    /// Per app: the serving generation's primary container and its deployment.
    generations: HashMap<String, (String, Uuid)>,
    states: HashMap<Uuid, DeploymentState>,
    /// The containers the journal created (by id).
    known: HashSet<String>,
}

impl Seen {
    /// Containers first, then the rows: a container whose deployment finishes meanwhile
    /// is then seen as current (or still running), never wrongly as an orphan.
    async fn take(store: &Store, target: &crate::target::Target) -> Result<Self, ReconcileError> {
        let containers = target.engine.managed_containers(None, None).await?;
        let generations = store
            .generations()
            .await?
            .into_iter()
            .filter(|g| g.target == target.name)
            .map(|g| (g.app, (g.container_id, g.deployment_id)))
            .collect();
        let ids: Vec<Uuid> = containers.iter().filter_map(deployment_of).collect();
        let states = store.deployment_states(&ids).await?;
        let all_ids: Vec<String> = containers.iter().map(|c| c.id.clone()).collect();
        let known = store.known_containers(&all_ids).await?;
        Ok(Self {
            containers,
            generations,
            states,
            known,
        })
    }
}

fn deployment_of(c: &ContainerFacts) -> Option<Uuid> {
    c.label(LABEL_DEPLOYMENT)
        .and_then(|d| Uuid::parse_str(d).ok())
}

/// Removes `c` if it is an orphan the journal created; reports it if the journal did not.
async fn remove_if_orphan(
    config: &Config,
    store: &Store,
    target: &crate::target::Target,
    seen: &Seen,
    c: &ContainerFacts,
    out: &mut Reconciled,
) -> Result<(), ReconcileError> {
    let Some(app) = c.label(LABEL_APP) else {
        return Ok(());
    };
    let deployment = deployment_of(c);
    // The serving generation is every service's container of the deployment that
    // switched (the generation names the primary's), when the journal created it.
    let serving = seen.generations.get(app).is_some_and(|(id, dep)| {
        *id == c.id || (deployment == Some(*dep) && seen.known.contains(&c.id))
    });
    let on_target = config
        .app(app)
        .is_some_and(|a| a.targets.contains(&target.name));
    if !on_target || serving {
        return Ok(());
    }
    // While a deployment of the app is under way, its journal decides what it retires
    // or restores: a blue-green deployment's previous generation is its standby until
    // the soak ends, and must not be taken for an orphan.
    if store.app_busy(app).await? {
        return Ok(());
    }
    let state = deployment.and_then(|d| seen.states.get(&d)).copied();
    match state {
        Some(s) if !s.is_final() => {}
        Some(s) if seen.known.contains(&c.id) => {
            target.engine.remove_container(&c.id).await?;
            let detail = format!(
                "removed orphan container {} ({}) of {s} deployment {}",
                c.name,
                c.id,
                deployment.map(|d| d.to_string()).unwrap_or_default()
            );
            tracing::info!(%app, container = %c.id, "{detail}");
            store
                .record_reconcile(
                    &target.name,
                    app,
                    ReconcileKind::RemovedOrphan,
                    Some(&c.id),
                    deployment,
                    &detail,
                )
                .await?;
            out.removed.push(c.id.clone());
        }
        _ => {
            let msg = format!(
                "container {} ({}) is labelled for {app} but Pier's journal did not create it; left alone",
                c.name, c.id
            );
            out.unaccounted.push(c.id.clone());
            out.warnings.push(msg);
        }
    }
    Ok(())
}

/// A route to a container that is gone sends every request to a closed port: removed
/// (the proxy then answers 503 at once), and the app's lost generation is requeued by
/// [`restore_if_lost`] like any other.
async fn remove_dead_routes(
    store: &Store,
    target: &crate::target::Target,
    present: &HashSet<&str>,
    out: &mut Reconciled,
) -> Result<(), ReconcileError> {
    for route in store.routes_of_target(&target.name).await? {
        if present.contains(route.container_id.as_str()) || store.app_busy(&route.app).await? {
            continue;
        }
        if store.delete_route(&route).await? {
            let detail = format!(
                "proxy route to {} (container {}) removed: the container is gone",
                route.upstream, route.container_id
            );
            tracing::warn!(app = %route.app, "{detail}");
            store
                .record_reconcile(
                    &target.name,
                    &route.app,
                    ReconcileKind::RemovedRoute,
                    Some(&route.container_id),
                    Some(route.deployment_id),
                    &detail,
                )
                .await?;
            out.routes_removed.push(route.app.clone());
        }
    }
    Ok(())
}

/// One serving generation of a configured app, and the containers the engine has.
struct Lost<'a> {
    app: &'a crate::config::AppConfig,
    generation: &'a Generation,
    present: &'a HashSet<&'a str>,
}

/// Requeues the digest a generation served when its primary container, or one container
/// of a further service, is gone; once per loss, and never while the app is busy.
async fn restore_if_lost(
    store: &Store,
    target: &crate::target::Target,
    containers: &[ContainerFacts],
    lost: Lost<'_>,
    out: &mut Reconciled,
) -> Result<(), ReconcileError> {
    let Lost {
        app,
        generation,
        present,
    } = lost;
    // The generation is whole when its primary container and one container of each
    // further service (labelled with the generation's deployment) exist.
    let deployment = generation.deployment_id.to_string();
    let lost_service = app.services.iter().find(|s| {
        !containers.iter().any(|c| {
            c.label(LABEL_DEPLOYMENT) == Some(deployment.as_str())
                && c.label(LABEL_SERVICE) == Some(s.contained.service.as_str())
        })
    });
    let whole = present.contains(generation.container_id.as_str()) && lost_service.is_none();
    if whole || store.app_busy(&app.name).await? {
        return Ok(());
    }
    // One try per loss: if the last attempt to restore it failed, say so and wait for a
    // push or an operator instead of failing again every sweep.
    let latest = store
        .app_deployments(&app.name, 1)
        .await?
        .into_iter()
        .next();
    if latest.is_some_and(|d| d.trigger == Trigger::Reconcile && d.state == DeploymentState::Failed)
    {
        out.warnings.push(format!(
            "{}: serving container is gone and restoring it failed; waiting for a push or a redeploy",
            app.name
        ));
        return Ok(());
    }
    let enqueued = store
        .enqueue(NewDeployment {
            app: app.name.to_string(),
            trigger: Trigger::Reconcile,
            delivery_id: None,
            image: app.image.clone(),
            requested_tag: None,
            claimed_digest: Some(generation.digest.clone()),
            pinned: true,
        })
        .await?;
    let Enqueued::Queued { id, .. } = enqueued else {
        return Ok(());
    };
    let detail = match lost_service {
        Some(s) if present.contains(generation.container_id.as_str()) => format!(
            "service {}'s serving container is gone; queued deployment {id} of {}",
            s.contained.service, generation.digest
        ),
        _ => format!(
            "serving container {} is gone; queued deployment {id} of {}",
            generation.container_id, generation.digest
        ),
    };
    tracing::warn!(app = %app.name, "{detail}");
    store
        .record_reconcile(
            &target.name,
            &app.name,
            ReconcileKind::RequeuedMissing,
            Some(&generation.container_id),
            Some(id),
            &detail,
        )
        .await?;
    out.requeued.push(id);
    Ok(())
}
