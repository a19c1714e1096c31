//! create, stop_old, start and retire: the container side effects (rollback is in
//! `rollback.rs`), each idempotent on replay by the IDs in the journal and the `pier.*`
//! labels.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::records::{
    Candidate, CreateIntent, OldGeneration, PortIntent, RetireIntent, Retired, StartIntent,
};
use super::secret_files::ReadSecrets;
use super::{EngineRun, PipelineError, ServiceName, Step, StepError, error_chain};
use crate::config::PortConfig;
use crate::engine::{
    ContainerSpec, LABEL_APP, LABEL_DEPLOYMENT, LABEL_DIGEST, LABEL_MANAGED, LABEL_SERVICE,
    PortSpec, Removed, Stopped,
};
use crate::registry::Resolved;

/// Where a container's ports are published, as the strategy says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Publishing {
    /// Each port at its own fixed `publish` address, or nowhere without one: recreate,
    /// whose old generation frees those addresses first, and every further service.
    Fixed,
    /// Each port on an ephemeral loopback port the engine picks: blue-green, beside the
    /// old generation; only the proxy sends clients there.
    EphemeralLoopback,
}

impl Publishing {
    fn address(self, port: &PortConfig) -> Option<SocketAddr> {
        match self {
            Publishing::Fixed => port.publish,
            Publishing::EphemeralLoopback => Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        }
    }
}

impl EngineRun<'_> {
    /// The container of this service: its first port is the HTTP port (the intent's
    /// `port`), then the others in config order (its `more_ports`). `volumes`: the engine
    /// names the `volumes` step chose.
    fn spec(
        &self,
        r: &Resolved,
        publishing: Publishing,
        volumes: &[String],
        secrets: &ReadSecrets,
    ) -> ContainerSpec {
        let labels = HashMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_APP.to_owned(), self.app.name.to_string()),
            (LABEL_DEPLOYMENT.to_owned(), self.dep.id.to_string()),
            (LABEL_DIGEST.to_owned(), r.digest.to_string()),
            (LABEL_SERVICE.to_owned(), self.app.contained.service.clone()),
        ]);
        // The primary service's container keeps the one-service name.
        let name = match self.service {
            ServiceName::Primary => format!("pier-{}-{}", self.app.name, self.dep.short_id()),
            ServiceName::Named(service) => {
                format!("pier-{}-{service}-{}", self.app.name, self.dep.short_id())
            }
        };
        let secrets_dir = (!secrets.files.is_empty()).then(|| self.secrets_dir_of(&name));
        ContainerSpec {
            name,
            command: self.app.command.clone(),
            image: self.reference(r),
            env: self.env(&secrets.env),
            labels,
            ports: std::iter::once(self.app.ports.http())
                .chain(self.app.ports.others())
                .map(|p| PortSpec {
                    container: p.container,
                    protocol: p.protocol,
                    publish: publishing.address(p),
                })
                .collect(),
            memory_bytes: self.app.memory_bytes,
            nano_cpus: self.app.cpus.map(|c| (c * 1e9) as i64),
            no_new_privileges: self.app.no_new_privileges,
            pids_limit: self.app.pids_limit,
            restart: self.app.restart,
            contained: self.contained_spec(volumes, secrets_dir),
        }
    }

    /// Without the app's `user`, the image's own numeric `USER` owns the tmpfs mounts (see
    /// `config/tmpfs.rs`): an image that runs as uid 10001 over its root-owned 0755 `/tmp`
    /// could not write it otherwise. The image is the digest the intent names, so a replay
    /// reads the same `USER`.
    async fn image_user_owner(
        &self,
        image: &str,
    ) -> Result<Option<crate::config::TmpfsOwner>, super::StepError> {
        let facts = self.engine().image(image).await?;
        Ok(facts
            .and_then(|f| f.user)
            .and_then(|u| crate::config::TmpfsOwner::of_user(&u))
            .filter(|o| o.uid != 0))
    }

    /// Journaled in its own committed write before anything starts it, so a crash cannot
    /// leave an untracked container; a replay adopts the container its label names.
    /// `publishing`: where the container's ports are published, as the strategy says;
    /// `volumes`: the engine names the `volumes` step chose.
    pub(super) async fn create(
        &self,
        r: &Resolved,
        publishing: Publishing,
        volumes: &[String],
    ) -> Result<Candidate, PipelineError> {
        let secrets = match self.read_secrets() {
            Ok(s) => s,
            Err(e) => return Err(self.failed_before_begin(Step::Create, e).await),
        };
        let spec = self.spec(r, publishing, volumes, &secrets);
        let intent = self.create_intent(&spec, &secrets);
        self.step(Step::Create, &intent, || {
            self.adopt_or_create(&spec, &secrets.files)
        })
        .await
    }

    /// What `create` journals: every setting of the container, with env values and host
    /// paths only as keyed hashes (the journal is read on the pages).
    fn create_intent(&self, spec: &ContainerSpec, secrets: &ReadSecrets) -> CreateIntent {
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
        CreateIntent {
            name: spec.name.clone(),
            image: spec.image.clone(),
            env_names: self.app.env.keys().cloned().collect(),
            env_hmac,
            port: spec.ports[0].container,
            publish: spec.ports[0].publish,
            more_ports: self
                .app
                .ports
                .others()
                .zip(&spec.ports[1..])
                .map(|(p, s)| PortIntent {
                    name: p.name.clone(),
                    container: s.container,
                    protocol: s.protocol,
                    publish: s.publish,
                })
                .collect(),
            memory_bytes: spec.memory_bytes,
            nano_cpus: spec.nano_cpus,
            no_new_privileges: spec.no_new_privileges,
            pids_limit: spec.pids_limit,
            restart: spec.restart.as_str().to_owned(),
            secret_names: secrets.env.iter().map(|(k, _)| k.clone()).collect(),
            secret_files: secrets.files.iter().map(|f| f.name.clone()).collect(),
            secret_files_hmac: (!secrets.files.is_empty()).then(|| {
                let all: Vec<String> = secrets
                    .files
                    .iter()
                    .map(|f| format!("{}={}", f.name, String::from_utf8_lossy(&f.value)))
                    .collect();
                self.keyed_hash(&all.join("\n"))
            }),
            network: c.network.as_ref().map(|(n, _)| n.clone()),
            aliases: c
                .network
                .iter()
                .flat_map(|(_, a)| a.iter().cloned())
                .collect(),
            volumes: c
                .volumes
                .iter()
                .map(|(n, t, ro)| format!("{n}:{t}{}", if *ro { ":ro" } else { "" }))
                .collect(),
            host_mounts,
            cap_keep: c.cap_keep.clone(),
            read_only_root: c.read_only_root,
            tmpfs: c.tmpfs.iter().map(|t| t.intent()).collect(),
            user: c.user.clone(),
            command: self.app.command.clone(),
        }
    }

    /// The `create` step's effect: a replay adopts this service's container of this
    /// deployment; otherwise the policy is checked again and the container made.
    async fn adopt_or_create(
        &self,
        spec: &ContainerSpec,
        files: &[crate::engine::SecretFile],
    ) -> Result<Candidate, StepError> {
        let dep = self.dep.id.to_string();
        let existing = self
            .engine()
            .managed_containers(Some(&self.app.name), Some(&dep))
            .await?;
        // This service's container only (a primary made before services existed has no
        // service label): a replay never adopts a sibling service's container.
        let service = &self.app.contained.service;
        let mine = |c: &crate::engine::ContainerFacts| match c.label(LABEL_SERVICE) {
            Some(s) => s == service,
            None => self.service == ServiceName::Primary,
        };
        let owner = self.secret_owner(&spec.image, files).await?;
        if let Some(c) = existing.into_iter().find(mine) {
            // Never started yet (`start` follows this step): its files are written again.
            self.write_secret_files(&c.id, files, owner).await?;
            return Ok(Candidate {
                id: c.id,
                name: c.name,
                adopted: true,
            });
        }
        // The policy as reloaded, right before the engine is asked: a host path revoked
        // since the deployment was queued makes nothing.
        self.policy_check()?;
        let mut spec = spec.clone();
        if !spec.contained.tmpfs.is_empty() && spec.contained.tmpfs_owner.is_none() {
            spec.contained.tmpfs_owner = self.image_user_owner(&spec.image).await?;
        }
        let id = self.engine().create_container(&spec).await?;
        self.write_secret_files(&id, files, owner).await?;
        Ok(Candidate {
            id,
            name: spec.name.clone(),
            adopted: false,
        })
    }

    /// `recreate` frees the fixed host port: the serving generation is stopped (kept, not
    /// removed) so that a failed candidate can give the port back to it.
    pub(super) async fn stop_old(
        &self,
        candidates: &[&Candidate],
    ) -> Result<OldGeneration, PipelineError> {
        let observed = self.observe_old(candidates).await?;
        self.observed_step(Step::StopOld, observed, |plan: OldGeneration| async move {
            for id in &plan.running {
                match self
                    .engine()
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
    /// Every service's containers count: the old generation is all of them.
    async fn observe_old(&self, candidates: &[&Candidate]) -> Result<OldGeneration, PipelineError> {
        let all = match self
            .engine()
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
        let new = |id: &str| candidates.iter().any(|c| c.id == id);
        for c in all.into_iter().filter(|c| !new(&c.id)) {
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
        let intent = StartIntent {
            container: candidate.id.clone(),
            publish: None,
            more_ports: vec![],
        };
        self.step(Step::Start, &intent, || async {
            Ok(self
                .engine()
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
        candidates: &[&Candidate],
        old: &OldGeneration,
    ) -> Result<Retired, PipelineError> {
        let mut ids: Vec<String> = old.running.iter().chain(&old.idle).cloned().collect();
        ids.retain(|i| candidates.iter().all(|c| &c.id != i));
        let intent = RetireIntent { containers: ids };
        self.step(Step::Retire, &intent, || async {
            let mut retired = Retired::default();
            for id in &intent.containers {
                match self.engine().remove_container(id).await {
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
}
