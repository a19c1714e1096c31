//! Each engine an app runs on, as the app page, `GET /api/apps/{app}` and `pier status`
//! show it: what the journal says serves there beside what that engine says
//! of its container, and where a rollout in progress stands on it.
//!
//! Every engine is asked at once, each within [`ENGINE_DEADLINE`]: an engine that is down
//! or unreachable costs a page at most that long, and the other engines' rows are shown
//! whatever it does. An engine that failed is not asked again for [`DOWN_MEMO`]: the live
//! pages render again after every change, and a black-holed host would otherwise cost
//! each render the whole deadline. The memo holds one entry per configured target.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use uuid::Uuid;

pub use super::format::short_digest;
use super::swarm_rows::{ServiceRow, ServiceSeen};
use crate::config::{AppConfig, LOCAL, TargetKind};
use crate::engine::{ContainerFacts, EngineView, LABEL_DIGEST};
use crate::store::{Deployment, Generation, Step, StepRecord, StepState};
use crate::target::Targets;

/// How long one engine may take to list Pier's containers for a page.
pub(crate) const ENGINE_DEADLINE: Duration = Duration::from_secs(2);
/// How long an engine that failed is shown as unreachable without being asked again.
const DOWN_MEMO: Duration = Duration::from_secs(5);

struct TargetView {
    kind: TargetKind,
    /// The address as the operator wrote it, without the paths of key files.
    endpoint: String,
    view: EngineView,
}

/// The read-only view of every target's engine. Cheap to clone.
#[derive(Clone, Default)]
pub struct TargetViews {
    all: Arc<BTreeMap<String, TargetView>>,
    /// Targets whose last answer was a failure: when, and what it was.
    down: Arc<Mutex<HashMap<String, (Instant, Unreachable)>>>,
}

impl TargetViews {
    pub(crate) fn of(targets: &Targets) -> Self {
        let all = targets
            .iter()
            .map(|t| {
                let v = TargetView {
                    kind: t.kind,
                    endpoint: t.endpoint.to_string(),
                    view: EngineView::new(t.engine.clone()),
                };
                (t.name.clone(), v)
            })
            .collect();
        Self {
            all: Arc::new(all),
            down: Default::default(),
        }
    }

    /// The read-only view of `target`'s engine, and whether it is a Swarm manager.
    pub(crate) fn view(&self, target: &str) -> Option<(&EngineView, TargetKind)> {
        self.all.get(target).map(|t| (&t.view, t.kind))
    }

    /// One engine as the only target `local` (tools and tests with one client).
    pub fn single(view: EngineView) -> Self {
        let v = TargetView {
            kind: TargetKind::Engine,
            endpoint: crate::domain::Endpoint::Default.to_string(),
            view,
        };
        Self {
            all: Arc::new(BTreeMap::from([(LOCAL.to_owned(), v)])),
            down: Default::default(),
        }
    }

    /// Pier's containers (of `app`, or all) on each of `names`, every engine asked at
    /// once and each within [`ENGINE_DEADLINE`].
    pub(crate) async fn snapshot<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        app: Option<&str>,
    ) -> Snapshot {
        let mut wanted: Vec<&str> = names.into_iter().collect();
        wanted.sort_unstable();
        wanted.dedup();
        let asks = wanted.into_iter().map(|name| async move {
            let answer = match self.all.get(name) {
                None => Err(Unreachable::NotConfigured {
                    target: name.to_owned(),
                }),
                Some(t) => self.ask(name, t, app).await,
            };
            (name.to_owned(), answer)
        });
        Snapshot(
            futures_util::future::join_all(asks)
                .await
                .into_iter()
                .collect(),
            BTreeMap::new(),
        )
    }

    async fn ask(
        &self,
        name: &str,
        t: &TargetView,
        app: Option<&str>,
    ) -> Result<Vec<ContainerFacts>, Unreachable> {
        if let Some(memo) = self.recently_down(name) {
            return Err(memo);
        }
        let answer =
            match tokio::time::timeout(ENGINE_DEADLINE, t.view.managed_containers(app, None)).await
            {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(Unreachable::engine(&e)),
                Err(_) => Err(Unreachable::NoAnswer {
                    deadline: ENGINE_DEADLINE,
                }),
            };
        let mut down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        match &answer {
            Ok(_) => {
                down.remove(name);
            }
            Err(reason) => {
                down.insert(name.to_owned(), (Instant::now(), reason.clone()));
            }
        }
        answer
    }

    fn recently_down(&self, name: &str) -> Option<Unreachable> {
        let down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        let (at, reason) = down.get(name)?;
        let ago = at.elapsed();
        (ago < DOWN_MEMO).then(|| Unreachable::Remembered {
            reason: Box::new(reason.clone()),
            ago,
        })
    }

    fn describe(&self, name: &str) -> (String, String) {
        match self.all.get(name) {
            Some(t) => (kind_name(t.kind).to_owned(), t.endpoint.clone()),
            None => ("unknown".to_owned(), String::new()),
        }
    }
}

fn kind_name(kind: TargetKind) -> &'static str {
    kind.as_str()
}

/// Why an engine's row shows no answer from it. Shown on pages and by `pier status`, so
/// it names no file path: an engine's own message passes through [`public_reason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unreachable {
    #[error("target `{target}` is not configured")]
    NotConfigured { target: String },
    /// The engine's error, its paths already withheld (see [`Unreachable::engine`]).
    #[error("{reason}")]
    Engine { reason: String },
    #[error("no answer within {}", humantime::format_duration(*deadline))]
    NoAnswer { deadline: Duration },
    /// The target failed moments ago and was not asked again (see [`DOWN_MEMO`]).
    #[error("{reason} (asked {} s ago)", ago.as_secs())]
    Remembered {
        reason: Box<Unreachable>,
        ago: Duration,
    },
    #[error("not asked")]
    NotAsked,
}

impl Unreachable {
    /// Only the redacted text is kept: the engine's error itself may name a key or
    /// known_hosts file, and would reach a page through any later `to_string()`.
    pub(crate) fn engine(e: &crate::engine::EngineError) -> Self {
        Unreachable::Engine {
            reason: public_reason(&e.to_string()),
        }
    }
}

/// What each engine asked said: its containers, or why it could not be asked; and, once
/// [`Snapshot::add_services`] ran, each swarm app's service.
#[derive(Default)]
pub(crate) struct Snapshot(
    BTreeMap<String, Result<Vec<ContainerFacts>, Unreachable>>,
    BTreeMap<(String, String), Result<Option<ServiceSeen>, Unreachable>>,
);

impl Snapshot {
    /// Asks each swarm target of `apps` for the app's service, all at once, each within
    /// [`ENGINE_DEADLINE`].
    pub(crate) async fn add_services<'a>(
        &mut self,
        views: &TargetViews,
        apps: impl IntoIterator<Item = &'a AppConfig>,
    ) {
        let asks = apps.into_iter().flat_map(|a| {
            a.targets.iter().filter_map(move |t| {
                let view = views.all.get(t).filter(|v| v.kind == TargetKind::Swarm)?;
                Some(async move {
                    let answer =
                        match tokio::time::timeout(ENGINE_DEADLINE, view.view.service(&a.name))
                            .await
                        {
                            Ok(Ok(seen)) => Ok(seen),
                            Ok(Err(e)) => Err(Unreachable::engine(&e)),
                            Err(_) => Err(Unreachable::NoAnswer {
                                deadline: ENGINE_DEADLINE,
                            }),
                        };
                    ((t.clone(), a.name.to_string()), answer)
                })
            })
        });
        self.1.extend(futures_util::future::join_all(asks).await);
    }

    /// The containers `target`'s engine listed, or why it is unreachable.
    pub(crate) fn of(&self, target: &str) -> Result<&[ContainerFacts], &Unreachable> {
        match self.0.get(target) {
            Some(Ok(c)) => Ok(c),
            Some(Err(e)) => Err(e),
            None => Err(&Unreachable::NotAsked),
        }
    }

    /// `target: reason` for every engine that could not be asked.
    pub(crate) fn failures(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|(t, r)| r.as_ref().err().map(|e| format!("{t}: {e}")))
            .collect()
    }
}

/// An engine's failure in words a page may show: the engine's own message, with every
/// absolute path withheld (a transport's message may name a key or known_hosts file).
pub(crate) fn public_reason(message: &str) -> String {
    message
        .split(' ')
        .map(|word| {
            let bare = word.trim_start_matches(['\'', '"', '(', '[', '`']);
            if bare.starts_with('/') && bare.len() > 1 {
                "<path>"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One engine of an app: what its journal says serves there and what the engine says.
#[derive(Serialize, Debug, Clone)]
pub(crate) struct EngineRow {
    pub target: String,
    pub kind: String,
    /// The engine's address as configured, without the paths of key files.
    pub endpoint: String,
    pub reachable: bool,
    /// Why the engine could not be asked (no secrets, no file paths), when it could not.
    pub unreachable: Option<String>,
    /// The serving generation on this engine, as the `switch` step journaled it.
    pub generation: Option<Generation>,
    /// The digest the journal says serves here.
    pub digest: Option<String>,
    pub container_id: Option<String>,
    /// The serving container as this engine sees it (none: unreachable or gone).
    pub container_name: Option<String>,
    /// The `pier.digest` label of that container.
    pub container_digest: Option<String>,
    pub running: bool,
    /// The engine's own status line for it (`Up 3 minutes (healthy)`).
    pub container_status: Option<String>,
    /// One line: `running`, `not running (…)`, `container missing`, `unreachable`,
    /// `nothing deployed yet`.
    pub state: String,
    /// Where the deployment in progress stands on this engine.
    pub rollout: Option<EngineProgress>,
    /// A swarm target: the app's service, as its manager keeps it.
    pub service: Option<ServiceRow>,
}

/// A running deployment on one engine: its last journaled step there.
#[derive(Serialize, Debug, Clone)]
pub(crate) struct EngineProgress {
    pub deployment_id: Uuid,
    /// None: no step has run on this engine yet (its batch has not started).
    pub step: Option<String>,
    pub step_state: Option<String>,
    pub error: Option<String>,
}

impl EngineProgress {
    /// `health started`, `switch succeeded`, `waiting for its batch`.
    pub(crate) fn words(&self) -> String {
        match (&self.step, &self.step_state) {
            (Some(step), Some(state)) => format!("{step} {state}"),
            _ => "waiting for its batch".to_owned(),
        }
    }
}

/// A row per target of `app`, in the app's order. `running` is the deployment in
/// progress and its journal, if one runs.
pub(crate) fn engine_rows(
    views: &TargetViews,
    app: &AppConfig,
    snapshot: &Snapshot,
    generations: &[Generation],
    running: Option<(&Deployment, &[StepRecord])>,
) -> Vec<EngineRow> {
    app.targets
        .iter()
        .map(|target| {
            let generation = generations.iter().find(|g| &g.target == target).cloned();
            let seen = snapshot.of(target);
            let container = match (&generation, &seen) {
                (Some(g), Ok(all)) => all.iter().find(|c| c.id == g.container_id),
                _ => None,
            };
            let state = match (&seen, &generation, container) {
                (Err(_), _, _) => "unreachable".to_owned(),
                (Ok(_), None, _) => "nothing deployed yet".to_owned(),
                (Ok(_), Some(_), Some(c)) if c.running => "running".to_owned(),
                (Ok(_), Some(_), Some(c)) => format!("not running ({})", c.status),
                (Ok(_), Some(_), None) => "container missing".to_owned(),
            };
            let (kind, endpoint) = views.describe(target);
            let serving = generation.as_ref().map(|g| g.digest.as_str());
            let service = snapshot.1.get(&(target.clone(), app.name.to_string()));
            let (state, service, reachable, unreachable) = match service {
                None => (
                    state,
                    None,
                    seen.is_ok(),
                    seen.err().map(ToString::to_string),
                ),
                Some(Err(e)) => ("unreachable".to_owned(), None, false, Some(e.to_string())),
                Some(Ok(None)) => ("no service yet".to_owned(), None, true, None),
                Some(Ok(Some(s))) => {
                    let row = super::swarm_rows::service_row(s, serving);
                    (row.words(), Some(row), true, None)
                }
            };
            EngineRow {
                target: target.clone(),
                kind,
                endpoint,
                reachable,
                unreachable,
                digest: generation.as_ref().map(|g| g.digest.clone()),
                container_id: generation.as_ref().map(|g| g.container_id.clone()),
                container_name: container.map(|c| c.name.clone()),
                container_digest: container
                    .and_then(|c| c.label(LABEL_DIGEST))
                    .map(str::to_owned),
                running: container.is_some_and(|c| c.running)
                    || service.as_ref().is_some_and(ServiceRow::whole),
                container_status: container.map(|c| c.status.clone()),
                state,
                generation,
                rollout: running.map(|(d, steps)| progress_on(d, steps, target)),
                service,
            }
        })
        .collect()
}

/// The last journaled step of `d` on `target`. Every engine's `reach` runs at once before
/// the first batch: an engine that only answered it still waits for its batch.
fn progress_on(d: &Deployment, steps: &[StepRecord], target: &str) -> EngineProgress {
    let last = steps
        .iter()
        .rev()
        .find(|s| s.target == target)
        .filter(|s| !(s.step == Step::Reach && s.state == StepState::Succeeded));
    EngineProgress {
        deployment_id: d.id,
        step: last.map(|s| s.step.to_string()),
        step_state: last.map(|s| s.state.to_string()),
        error: last.and_then(|s| s.error.clone()),
    }
}

#[cfg(test)]
mod tests;
