//! create, stop_old, start, retire and rollback: the container side effects, each
//! idempotent on replay by the IDs in the journal and the `pier.*` labels.

use std::collections::HashMap;
use std::net::SocketAddr;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::{PipelineError, Run, Step, error_chain};
use crate::config::{Origin, Strategy};
use crate::engine::{
    ContainerSpec, LABEL_APP, LABEL_DEPLOYMENT, LABEL_DIGEST, LABEL_MANAGED, Removed, Stopped,
};
use crate::registry::Resolved;
use crate::store::StepState;

/// What `create` asks for. Env values are journaled only as a keyed hash (HMAC-SHA256 with
/// the installation's key): a changed value shows as a change, but a plain hash would let
/// anyone who reads the page confirm a guessed secret.
#[derive(Serialize)]
struct CreateIntent<'a> {
    name: &'a str,
    image: &'a str,
    env_names: Vec<&'a str>,
    env_hmac: String,
    port: u16,
    publish: Option<SocketAddr>,
    memory_bytes: Option<i64>,
    nano_cpus: Option<i64>,
    no_new_privileges: bool,
    pids_limit: Option<i64>,
    restart: &'static str,
    /// Issue 10: secret keys (values only inside `env_hmac`), network, mounts, hardening.
    secret_names: Vec<&'a str>,
    network: Option<&'a str>,
    aliases: Vec<&'a str>,
    volumes: Vec<String>,
    /// Host mounts and devices by container path, each with a keyed hash of its host path:
    /// a changed path shows as a change, and no host path is written to the journal.
    host_mounts: Vec<String>,
    cap_keep: Option<Vec<String>>,
    read_only_root: bool,
    tmpfs: Vec<String>,
    user: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    pub id: String,
    pub name: String,
    /// True when a replay found the container already created and took it over.
    #[serde(default)]
    pub adopted: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OldGeneration {
    /// Containers that were running when the step began: stopped now, and started
    /// again if the deployment fails.
    pub running: Vec<String>,
    /// Other containers of the app (stopped leftovers): removed by `retire`.
    pub idle: Vec<String>,
    /// Containers labelled for the app that Pier's journal does not know (started by hand,
    /// say): never stopped or removed, only reported.
    #[serde(default)]
    pub unaccounted: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Retired {
    pub removed: Vec<String>,
    pub already_gone: Vec<String>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RolledBack {
    pub removed_candidates: Vec<String>,
    pub restarted: Vec<String>,
    pub warnings: Vec<String>,
    pub logs: Option<String>,
}

impl RolledBack {
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.removed_candidates.is_empty() {
            parts.push("no candidate container to remove".to_owned());
        } else {
            parts.push(format!(
                "removed candidate {}",
                short(&self.removed_candidates)
            ));
        }
        if !self.restarted.is_empty() {
            parts.push(format!(
                "restarted previous generation {}",
                short(&self.restarted)
            ));
        }
        parts.extend(self.warnings.iter().cloned());
        parts.join("; ")
    }
}

fn short(ids: &[String]) -> String {
    ids.iter()
        .map(|i| i.chars().take(12).collect::<String>())
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Clone, Serialize, Deserialize)]
struct RollbackIntent {
    candidates: Vec<String>,
    restore: Vec<String>,
    /// Blue-green, after a revert: the route version the proxy must serve before the
    /// candidate is removed, so that no request is sent to a container being removed.
    #[serde(default)]
    after_route: Option<i64>,
}

impl Run<'_> {
    /// The candidate's logs are shown on the status page: env values that came from a
    /// secret reference are masked, in case the app printed them.
    fn redact(&self, text: &str) -> String {
        let secrets = self
            .app
            .env
            .values()
            .filter(|v| v.origin() == Origin::Reference)
            .chain(self.app.contained.secrets.values())
            .map(|v| v.expose());
        super::redact::storable(&super::redact::redact(text, secrets))
    }

    fn spec(&self, r: &Resolved) -> ContainerSpec {
        let labels = HashMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_APP.to_owned(), self.app.name.clone()),
            (LABEL_DEPLOYMENT.to_owned(), self.dep.id.to_string()),
            (LABEL_DIGEST.to_owned(), r.digest.clone()),
        ]);
        ContainerSpec {
            name: format!("pier-{}-{}", self.app.name, self.dep.short_id()),
            image: self.reference(r),
            env: self.env(),
            labels,
            port: self.app.port,
            // A blue-green generation gets an ephemeral loopback port; clients reach it
            // through the proxy only.
            publish: match self.app.strategy {
                Strategy::BlueGreen => Some(SocketAddr::from(([127, 0, 0, 1], 0))),
                Strategy::Recreate => self.app.publish,
            },
            memory_bytes: self.app.memory_bytes,
            nano_cpus: self.app.cpus.map(|c| (c * 1e9) as i64),
            no_new_privileges: self.app.no_new_privileges,
            pids_limit: self.app.pids_limit,
            restart: self.app.restart,
            contained: self.contained_spec(),
        }
    }

    pub(super) fn keyed_hash(&self, text: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.ctx.env_key)
            .expect("HMAC takes a key of any length");
        mac.update(text.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Journaled in its own committed write before anything starts it, so a crash cannot
    /// leave an untracked container; a replay adopts the container its label names.
    pub(super) async fn create(&self, r: &Resolved) -> Result<Candidate, PipelineError> {
        let spec = self.spec(r);
        let env_hmac = self.keyed_hash(&spec.env.join("\n"));
        let c = &spec.contained;
        let host_mounts = c
            .host_mounts
            .iter()
            .map(|(src, target, ro)| {
                let mode = if *ro { "ro" } else { "rw" };
                let h = self.keyed_hash(&src.to_string_lossy());
                format!("{target}:{mode}:{}", &h[..16])
            })
            .chain(c.devices.iter().enumerate().map(|(i, d)| {
                let h = self.keyed_hash(&d.to_string_lossy());
                format!("device#{}:{}", i + 1, &h[..16])
            }))
            .collect();
        let intent = CreateIntent {
            name: &spec.name,
            image: &spec.image,
            env_names: self.app.env.keys().map(String::as_str).collect(),
            env_hmac,
            port: spec.port,
            publish: spec.publish,
            memory_bytes: spec.memory_bytes,
            nano_cpus: spec.nano_cpus,
            no_new_privileges: spec.no_new_privileges,
            pids_limit: spec.pids_limit,
            restart: spec.restart.as_str(),
            secret_names: self
                .app
                .contained
                .secrets
                .keys()
                .map(String::as_str)
                .collect(),
            network: c.network.as_ref().map(|(n, _)| n.as_str()),
            aliases: c
                .network
                .iter()
                .flat_map(|(_, a)| a.iter().map(String::as_str))
                .collect(),
            volumes: c
                .volumes
                .iter()
                .map(|(n, t, ro)| format!("{n}:{t}{}", if *ro { ":ro" } else { "" }))
                .collect(),
            host_mounts,
            cap_keep: c.cap_keep.clone(),
            read_only_root: c.read_only_root,
            tmpfs: c.tmpfs.clone(),
            user: c.user.clone(),
        };
        self.step(Step::Create, &intent, || async {
            let dep = self.dep.id.to_string();
            let existing = self
                .ctx
                .engine
                .managed_containers(Some(&self.app.name), Some(&dep))
                .await?;
            if let Some(c) = existing.into_iter().next() {
                return Ok(Candidate {
                    id: c.id,
                    name: c.name,
                    adopted: true,
                });
            }
            // The policy as reloaded, right before the engine is asked: a host path revoked
            // since the deployment was queued makes nothing.
            self.policy_check()?;
            let id = self.ctx.engine.create_container(&spec).await?;
            Ok(Candidate {
                id,
                name: spec.name.clone(),
                adopted: false,
            })
        })
        .await
    }

    /// `recreate` frees the fixed host port: the serving generation is stopped (kept, not
    /// removed) so that a failed candidate can give the port back to it.
    pub(super) async fn stop_old(
        &self,
        candidate: &Candidate,
    ) -> Result<OldGeneration, PipelineError> {
        let observed = self.observe_old(candidate).await?;
        self.observed_step(Step::StopOld, observed, |plan: OldGeneration| async move {
            for id in &plan.running {
                match self
                    .ctx
                    .engine
                    .stop_container(id, self.app.stop_timeout)
                    .await?
                {
                    Stopped::Stopped | Stopped::WasNotRunning | Stopped::Gone => {}
                }
            }
            Ok(plan.clone())
        })
        .await
    }

    /// What serves and what is left over, among the containers Pier can account for: the
    /// ones its journal created or its generations name, by id. A container that merely
    /// carries the app's labels is someone else's and is left alone.
    async fn observe_old(&self, candidate: &Candidate) -> Result<OldGeneration, PipelineError> {
        let all = match self
            .ctx
            .engine
            .managed_containers(Some(&self.app.name), None)
            .await
        {
            Ok(all) => all,
            Err(e) => return Err(self.failed_before_begin(Step::StopOld, e.into()).await),
        };
        let ids: Vec<String> = all.iter().map(|c| c.id.clone()).collect();
        let known = self
            .store_retry(|| self.ctx.store.known_containers(&ids))
            .await?;
        let mut old = OldGeneration::default();
        for c in all.into_iter().filter(|c| c.id != candidate.id) {
            if !known.contains(&c.id) {
                tracing::warn!(container = %c.id, name = %c.name,
                    "a container labelled for this app is unknown to the journal; left alone");
                old.unaccounted.push(c.id);
            } else if c.running {
                old.running.push(c.id);
            } else {
                old.idle.push(c.id);
            }
        }
        Ok(old)
    }

    pub(super) async fn start(&self, candidate: &Candidate) -> Result<(), PipelineError> {
        let intent = serde_json::json!({ "container": candidate.id });
        self.step(Step::Start, &intent, || async {
            Ok(self
                .ctx
                .engine
                .start_container(&candidate.id)
                .await
                .map_err(|e| self.hide_paths(e))?)
        })
        .await
    }

    /// The new generation serves: the old containers are removed. A container already gone
    /// counts as retired; any other trouble is a warning, never a failed deployment, since
    /// the new generation is healthy and switched.
    pub(super) async fn retire(
        &self,
        candidate: &Candidate,
        old: &OldGeneration,
    ) -> Result<Retired, PipelineError> {
        let mut ids: Vec<String> = old.running.iter().chain(&old.idle).cloned().collect();
        ids.retain(|i| i != &candidate.id);
        let intent = serde_json::json!({ "containers": ids });
        self.step(Step::Retire, &intent, || async {
            let mut retired = Retired::default();
            for id in &ids {
                match self.ctx.engine.remove_container(id).await {
                    Ok(Removed::Removed) => retired.removed.push(id.clone()),
                    Ok(Removed::AlreadyGone) => retired.already_gone.push(id.clone()),
                    Err(e) => retired
                        .warnings
                        .push(format!("remove {id}: {}", error_chain(&e))),
                }
            }
            Ok(retired)
        })
        .await
    }

    /// Undoes a failed deployment: removes every container of this deployment (by the
    /// journal and by label) and starts the generation `stop_old` stopped. Does nothing once
    /// `switch` succeeded: then the new generation is the one serving.
    pub(super) async fn rollback(
        &self,
        reverted: Option<i64>,
    ) -> Result<RolledBack, PipelineError> {
        let steps = self
            .store_retry(|| self.ctx.store.steps(self.dep.id))
            .await?;
        let find = |s: Step| steps.iter().find(|r| r.step == s);
        if reverted.is_none() && find(Step::Switch).is_some_and(|r| r.state == StepState::Succeeded)
        {
            return Ok(RolledBack {
                warnings: vec!["new generation already switched; nothing rolled back".into()],
                ..Default::default()
            });
        }
        // What this deployment created and what it stopped, read from its journal. An entry
        // that does not decode fails the rollback loudly: guessing "nothing to restore"
        // would leave the app down while the record says all is well.
        let mut candidates: Vec<String> = match find(Step::Create).and_then(|r| r.result.clone()) {
            Some(v) => vec![
                serde_json::from_value::<Candidate>(v)
                    .map_err(|e| PipelineError::journal(Step::Create, "result", e))?
                    .id,
            ],
            None => vec![],
        };
        let dep = self.dep.id.to_string();
        let labelled = self
            .ctx
            .engine
            .managed_containers(Some(&self.app.name), Some(&dep))
            .await
            .map_err(|e| PipelineError::Failed {
                step: Step::Rollback,
                source: e.into(),
            })?;
        for c in labelled {
            if !candidates.contains(&c.id) {
                candidates.push(c.id);
            }
        }
        let restore: Vec<String> = match find(Step::StopOld) {
            // After a revert the previous generation already runs and serves.
            _ if reverted.is_some() => vec![],
            Some(r) if r.intent != serde_json::json!({}) => {
                serde_json::from_value::<OldGeneration>(r.intent.clone())
                    .map_err(|e| PipelineError::journal(Step::StopOld, "intent", e))?
                    .running
            }
            _ => vec![],
        };
        let intent = RollbackIntent {
            candidates,
            restore,
            after_route: reverted,
        };
        if intent.candidates.is_empty()
            && intent.restore.is_empty()
            && find(Step::Rollback).is_none()
        {
            return Ok(RolledBack::default());
        }
        self.observed_step(Step::Rollback, intent, |plan: RollbackIntent| async move {
            let mut out = RolledBack::default();
            if let Some(version) = plan.after_route {
                self.proxy_applied(version).await?;
            }
            for id in &plan.candidates {
                if out.logs.is_none() {
                    match self.ctx.engine.logs_tail(id, 30).await {
                        Ok(l) if !l.is_empty() => out.logs = Some(self.redact(&l)),
                        Ok(_) => {}
                        Err(e) => out
                            .warnings
                            .push(format!("read candidate {id}'s logs: {}", error_chain(&e))),
                    }
                }
                match self.ctx.engine.remove_container(id).await {
                    Ok(_) => out.removed_candidates.push(id.clone()),
                    Err(e) => out
                        .warnings
                        .push(format!("remove candidate {id}: {}", error_chain(&e))),
                }
            }
            for id in &plan.restore {
                match self
                    .ctx
                    .engine
                    .start_container(id)
                    .await
                    .map_err(|e| self.hide_paths(e))
                {
                    Ok(()) => out.restarted.push(id.clone()),
                    Err(e) => out.warnings.push(format!(
                        "restart previous generation {id}: {}",
                        error_chain(&e)
                    )),
                }
            }
            Ok(out)
        })
        .await
    }
}
