//! What the pages and the JSON API show, built from the same rows the workers write plus
//! the engine's live view of Pier's containers, side by side, so the page cannot lie.

use serde::Serialize;
use uuid::Uuid;

use super::engines::{EngineRow, Snapshot};
use super::{AppState, WebError};
use crate::config::AppConfig;
use crate::engine::{ContainerFacts, LABEL_APP, LABEL_DEPLOYMENT, LABEL_DIGEST, LABEL_SERVICE};
use crate::store::{Deployment, Generation, Quarantined, ReconcileAction, Route, StepRecord};

#[derive(Serialize)]
pub(crate) struct AppView {
    pub name: String,
    pub image: String,
    pub tag: String,
    /// The app's tag rule: `tag main`, `glob v1.*` or `semver >=1.2, <2`.
    pub rule: String,
    /// How often the reconcile poller checks the registry (`5m`), or `off`.
    pub poll: String,
    /// The HTTP port's fixed host address (recreate), as before several ports.
    pub publish: Option<String>,
    /// Every port of the app's container as configured, the HTTP one marked.
    pub ports: Vec<PortView>,
    /// What the admin should know about the app's settings (a `publish` on every
    /// interface), shown at the top of its page.
    pub warnings: Vec<String>,
    /// What the journal says serves (written by the `switch` step).
    pub generation: Option<Generation>,
    /// What the engine says exists for this app, found by label.
    pub containers: Vec<ContainerView>,
    /// Each service of the app (the primary first) and its container in the serving
    /// generation, as the engine sees it.
    pub services: Vec<ServiceView>,
    /// Why the first target's engine could not be asked (see `engines` for each).
    pub engine_error: Option<String>,
    /// A row per target of the app: what serves there, the engine's view of it, and where
    /// a deployment in progress stands on it. An engine that could not be asked within
    /// its deadline says so, and the others' rows are whole.
    pub engines: Vec<EngineRow>,
    pub latest_deployment: Option<Deployment>,
    pub deployments: Vec<Deployment>,
    /// What reconciliation removed or requeued for this app, newest first.
    pub reconcile_actions: Vec<ReconcileAction>,
    /// Digests that failed their health check or soak: pushes skip them.
    pub quarantine: Vec<Quarantined>,
    /// Blue-green apps: what the proxy is told to serve.
    pub route: Option<Route>,
    /// The step the deployment in progress is at, if one is.
    pub current_step: Option<String>,
    /// The pin in force (a rollback's): pushes do not move the app until it is unpinned.
    pub pin: Option<crate::store::Pin>,
    /// Which key signed what serves: the `signature` step of the serving deployment (none
    /// for an app that need not be signed).
    pub signature: Option<crate::pipeline::records::Signed>,
    /// What its containers use (CPU, memory, network, block I/O, restarts), as last
    /// sampled, with the last hour of it.
    pub resources: crate::background::stats::Resources,
}

impl AppView {
    /// The serving container as the engine sees it, if it exists.
    pub(crate) fn serving(&self) -> Option<&ContainerFacts> {
        let g = self.generation.as_ref()?;
        self.containers
            .iter()
            .find(|c| c.id == g.container_id && c.target == g.target)
            .map(|c| &c.facts)
    }

    /// One line for the page: does the engine agree with the journal?
    pub(crate) fn serving_state(&self) -> String {
        if self.engines.len() > 1 {
            return self.engines_state();
        }
        match (&self.generation, self.serving(), &self.engine_error) {
            (_, _, Some(_)) => "engine unreachable".into(),
            (None, _, _) => "nothing deployed yet".into(),
            (Some(_), Some(c), _) if c.running => "running".into(),
            (Some(_), Some(c), _) => format!("not running ({})", c.status),
            (Some(_), None, _) => "container missing".into(),
        }
    }

    pub(crate) fn is_healthy_view(&self) -> bool {
        if self.engines.len() > 1 {
            return self.engines.iter().all(|e| e.running);
        }
        self.serving().is_some_and(|c| c.running)
    }

    /// An app on several engines: on how many it runs, and which cannot be asked.
    fn engines_state(&self) -> String {
        let n = self.engines.len();
        let running = self.engines.iter().filter(|e| e.running).count();
        let down: Vec<&str> = self
            .engines
            .iter()
            .filter(|e| !e.reachable)
            .map(|e| e.target.as_str())
            .collect();
        let mut line = if running == n {
            format!("running on all {n} engines")
        } else {
            format!("running on {running} of {n} engines")
        };
        if !down.is_empty() {
            line.push_str(&format!(" ({} unreachable)", down.join(", ")));
        }
        line
    }

    /// Whether any of the app's engines has a rollout row to show.
    pub(crate) fn rolling_out(&self) -> bool {
        self.engines.iter().any(|e| e.rollout.is_some())
    }

    /// The tag the serving deployment resolved, when it is among those shown.
    pub(crate) fn serving_tag(&self) -> Option<&str> {
        let g = self.generation.as_ref()?;
        self.deployments
            .iter()
            .find(|d| d.id == g.deployment_id)
            .and_then(|d| d.requested_tag.as_deref())
    }

    /// "Signed by …" for what serves, in words.
    pub(crate) fn signed_by(&self) -> Option<String> {
        self.signature.as_ref().map(super::timeline::signed_by)
    }

    /// The newest deployment that has ended.
    pub(crate) fn latest_final(&self) -> Option<&Deployment> {
        self.deployments.iter().find(|d| d.state.is_final())
    }

    /// A deployment waiting or running, the running one first.
    pub(crate) fn in_progress(&self) -> Option<&Deployment> {
        let mut open = self.deployments.iter().filter(|d| !d.state.is_final());
        let first = open.next()?;
        Some(
            std::iter::once(first)
                .chain(open)
                .find(|d| d.state == crate::store::DeploymentState::Running)
                .unwrap_or(first),
        )
    }
}

/// One port of the app's container, as configured.
#[derive(Serialize)]
pub(crate) struct PortView {
    pub name: String,
    pub container: u16,
    pub protocol: crate::config::Protocol,
    /// The HTTP port: what `pier proxy` routes to and the health check asks.
    pub http: bool,
    /// Its fixed host address (recreate); `None`: an ephemeral loopback port (blue-green,
    /// see the route and the `start` step), or not published.
    pub publish: Option<String>,
}

impl PortView {
    fn of(app: &AppConfig, p: &crate::config::PortConfig) -> Self {
        PortView {
            name: p.name.clone(),
            container: p.container,
            protocol: p.protocol,
            http: p == app.ports.http(),
            publish: p.publish.map(|a| a.to_string()),
        }
    }
}

/// One service of an app and its container of the serving generation (none: nothing
/// deployed yet, or the container is gone).
#[derive(Serialize)]
pub(crate) struct ServiceView {
    pub name: String,
    /// The repository the service runs (the app's own, or the service's `image`).
    pub image: String,
    /// The digest its container of the serving generation runs (its `pier.digest` label).
    pub digest: Option<String>,
    pub container_id: Option<String>,
    pub container_name: Option<String>,
    pub running: bool,
    pub status: Option<String>,
}

/// Every service's container of the serving generation: the primary's is the one the
/// generation names; a further service's carries the generation's deployment and its
/// service label.
fn services_of(
    app: &AppConfig,
    generation: Option<&Generation>,
    mine: &[&ContainerFacts],
) -> Vec<ServiceView> {
    let deployment = generation.map(|g| g.deployment_id.to_string());
    let images =
        std::iter::once(app.image.as_str()).chain(app.services.iter().map(|s| s.image.as_str()));
    app.service_names()
        .into_iter()
        .zip(images)
        .enumerate()
        .map(|(i, (name, image))| {
            let found = generation.and_then(|g| {
                mine.iter().find(|c| {
                    if i == 0 {
                        c.id == g.container_id
                    } else {
                        c.label(LABEL_DEPLOYMENT) == deployment.as_deref()
                            && c.label(LABEL_SERVICE) == Some(name)
                    }
                })
            });
            ServiceView {
                name: name.to_owned(),
                image: image.to_owned(),
                digest: found.and_then(|c| c.label(LABEL_DIGEST)).map(str::to_owned),
                container_id: found.map(|c| c.id.clone()),
                container_name: found.map(|c| c.name.clone()),
                running: found.is_some_and(|c| c.running),
                status: found.map(|c| c.status.clone()),
            }
        })
        .collect()
}

/// A container labelled for an app, and whether Pier's journal created it. One it did not
/// (started by hand with Pier's labels) is shown, and never stopped or removed.
#[derive(Serialize)]
pub(crate) struct ContainerView {
    #[serde(flatten)]
    pub facts: ContainerFacts,
    pub accounted_for: bool,
    /// The target whose engine listed it.
    pub target: String,
}

impl std::ops::Deref for ContainerView {
    type Target = ContainerFacts;
    fn deref(&self) -> &ContainerFacts {
        &self.facts
    }
}

#[derive(Serialize)]
pub(crate) struct DeploymentView {
    #[serde(flatten)]
    pub deployment: Deployment,
    pub steps: Vec<StepRecord>,
    /// Approvals, rejections and overrides, oldest first.
    pub decisions: Vec<crate::store::Decision>,
    /// What its containers did after they started (OOM kills, restart loops), oldest first.
    pub events: Vec<crate::store::ContainerEvent>,
}

/// Pier's containers on every engine some app runs on, each engine asked at once within
/// its deadline: for the overview and the apps list.
pub(crate) async fn containers_of_all(s: &AppState, apps: &[AppConfig]) -> Snapshot {
    let targets = apps
        .iter()
        .flat_map(|a| a.targets.iter().map(String::as_str));
    s.targets.snapshot(targets, None).await
}

/// The overview's line for engines that could not be asked, if any could not.
pub(crate) fn unreachable_line(snapshot: &Snapshot) -> Option<String> {
    let failed = snapshot.failures();
    (!failed.is_empty()).then(|| failed.join("; "))
}

pub(crate) async fn app_view(
    s: &AppState,
    app: &AppConfig,
    snapshot: &Snapshot,
    history: i64,
) -> Result<AppView, WebError> {
    // The fields from before several engines (`generation`, `services`, `route`,
    // `engine_error`) describe the app's first target, as they always did; `engines` has
    // a row for each.
    let first = app.targets[0].as_str();
    // The journal, the generations and the route as of one commit (`store/snapshot.rs`).
    let rows = s.store.app_rows(&app.name, first, history).await?;
    let generation = rows.generations.iter().find(|g| g.target == first).cloned();
    let reconcile_actions = s.store.reconcile_actions(&app.name, 10).await?;
    let quarantine = s.store.quarantine_of(&app.name).await?;
    let pin = s.store.pin(&app.name).await?;
    let mine = containers_of(app, snapshot);
    let ids: Vec<String> = mine.iter().map(|(_, c)| c.id.clone()).collect();
    let known = s.store.known_containers(&ids).await?;
    let running = rows.running();
    let current_step = running.and(rows.steps.last()).map(|st| st.step.to_string());
    let engines = super::engines::engine_rows(
        &s.targets,
        app,
        snapshot,
        &rows.generations,
        running.map(|d| (d, rows.steps.as_slice())),
    );
    let on_first: Vec<&ContainerFacts> = mine
        .iter()
        .filter(|(t, _)| *t == first)
        .map(|(_, c)| *c)
        .collect();
    let services = services_of(app, generation.as_ref(), &on_first);
    let signature = signature_of(s, generation.as_ref()).await?;
    Ok(AppView {
        resources: s.stats.app(&app.name, &app.targets),
        signature,
        services,
        engines,
        name: app.name.to_string(),
        image: app.image.clone(),
        tag: app.tag.clone(),
        rule: app.rule.to_string(),
        poll: app.poll.map_or_else(
            || "off".to_owned(),
            |p| humantime::format_duration(p).to_string(),
        ),
        publish: app.publish().map(|a| a.to_string()),
        ports: app.ports.iter().map(|p| PortView::of(app, p)).collect(),
        warnings: config_warnings(app),
        generation,
        containers: mine
            .into_iter()
            .map(|(target, c)| ContainerView {
                accounted_for: known.contains(&c.id),
                target: target.to_owned(),
                facts: c.clone(),
            })
            .collect(),
        engine_error: snapshot.of(first).err().map(ToString::to_string),
        latest_deployment: rows.deployments.first().cloned(),
        reconcile_actions,
        quarantine,
        route: rows.route,
        deployments: rows.deployments,
        current_step,
        pin,
    })
}

/// The app's containers on each of its targets, with the target's name.
fn containers_of<'a>(
    app: &'a AppConfig,
    snapshot: &'a Snapshot,
) -> Vec<(&'a str, &'a ContainerFacts)> {
    app.targets
        .iter()
        .flat_map(|t| {
            let listed = snapshot.of(t).unwrap_or_default();
            listed.iter().map(move |c| (t.as_str(), c))
        })
        .filter(|(_, c)| c.label(LABEL_APP) == Some(app.name.as_str()))
        .collect()
}

/// What the serving generation's signature step recorded, if it checked one.
async fn signature_of(
    s: &AppState,
    generation: Option<&crate::store::Generation>,
) -> Result<Option<crate::pipeline::records::Signed>, WebError> {
    let Some(g) = generation else {
        return Ok(None);
    };
    Ok(s.store
        .step(
            g.deployment_id,
            crate::store::Step::Signature,
            crate::store::Lane::WHOLE,
        )
        .await?
        .and_then(|st| st.result)
        .and_then(|r| serde_json::from_value(r).ok()))
}

/// The app as the config says now (after any reload).
pub(crate) fn find_app(s: &AppState, name: &str) -> Result<AppConfig, WebError> {
    s.current()
        .app(name)
        .cloned()
        .ok_or_else(|| WebError::NotFound(format!("app `{name}`")))
}

/// One app, for its page, its live view and `GET /api/apps/{app}`: someone looks, so its
/// resource use is sampled for a while (see `background/stats/`).
pub(crate) async fn one_app(s: &AppState, name: &str, history: i64) -> Result<AppView, WebError> {
    let app = find_app(s, name)?;
    s.stats.want();
    let targets = app.targets.iter().map(String::as_str);
    let mut snapshot = s.targets.snapshot(targets, Some(name)).await;
    snapshot.add_services(&s.targets, [&app]).await;
    app_view(s, &app, &snapshot, history).await
}

/// The app's page: its view with one page of history, newest first, older than `before`
/// when given (keyset on `(created_at, id)`).
pub(crate) async fn app_page(
    s: &AppState,
    name: &str,
    before: Option<Uuid>,
    limit: i64,
) -> Result<(AppView, Option<Uuid>), WebError> {
    let mut view = one_app(s, name, limit).await?;
    if let Some(before) = before {
        let at = s
            .store
            .deployment(before)
            .await?
            .filter(|d| d.app == name)
            .ok_or_else(|| {
                WebError::BadRequest("before must be a deployment of this app".into())
            })?;
        view.deployments = s
            .store
            .app_deployments_before(name, (at.created_at, at.id), limit)
            .await?;
    }
    let next = (view.deployments.len() as i64 == limit)
        .then(|| view.deployments.last().map(|d| d.id))
        .flatten();
    Ok((view, next))
}

pub(crate) async fn deployment_view(s: &AppState, id: Uuid) -> Result<DeploymentView, WebError> {
    let deployment = s
        .store
        .deployment(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("deployment {id}")))?;
    let steps = s.store.steps(id).await?;
    let decisions = s.store.decisions(id).await?;
    let events = s.store.container_events(id).await?;
    Ok(DeploymentView {
        deployment,
        steps,
        decisions,
        events,
    })
}

/// Settings the config accepted only because the admin said so: they stay visible.
fn config_warnings(app: &AppConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(addr) = app.public_publish() {
        out.push(format!(
            "Published on every interface of the host ({addr}, publish_public = true): anyone \
             who can reach this host on port {} reaches the app directly, past any proxy or \
             TLS in front of it.",
            addr.port()
        ));
    }
    out
}
