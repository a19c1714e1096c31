//! network, volumes and connect: what an app's containers stand in, made before (network,
//! volumes) or right after (connect) the candidate is journaled, each through the journal's
//! runner with its crash points. Every effect re-checks the admin policy from the live
//! config immediately before it touches the engine: a reload may have revoked a host path
//! since the deployment was queued, and then nothing is made (fail closed).

use std::collections::HashMap;

use super::plan::Placed;
use super::records::{Candidate, ConnectIntent, Connected, NetworkIntent, VolumeIntent, Volumes};
use super::refusal::Refusal;
use super::{EngineRun, PipelineError, Step, StepError};
use crate::config::Contained;
use crate::engine::{ContainedSpec, LABEL_APP, LABEL_INCARNATION, LABEL_MANAGED, LABEL_SERVICE};

impl EngineRun<'_> {
    fn contained(&self) -> &Contained {
        &self.app.contained
    }

    /// The engine's words about a container with host mounts or devices may quote a host
    /// path (a failed mount at start, say): only the kind of failure is kept.
    pub(super) fn hide_paths(&self, e: crate::engine::EngineError) -> crate::engine::EngineError {
        if self.contained().has_host_paths() {
            e.redacted()
        } else {
            e
        }
    }

    /// Plain env, then env secrets as this deployment read them (never both for one key:
    /// refused at load), then the port.
    pub(super) fn env(&self, secrets: &[(String, crate::config::Secret)]) -> Vec<String> {
        let c = &self.app.contained;
        let mut env: Vec<String> = self
            .app
            .env
            .iter()
            .chain(secrets.iter().map(|(k, v)| (k, v)))
            .map(|(k, v)| format!("{k}={}", v.expose()))
            .collect();
        if let Some(p) = &c.port_env {
            env.push(format!("{p}={}", self.app.port()));
        }
        env
    }

    /// `volumes`: the engine names the `volumes` step chose, in the config's order;
    /// `secrets_dir`: the host directory bound at `/run/secrets`, when the app has files.
    pub(super) fn contained_spec(
        &self,
        volumes: &[String],
        secrets_dir: Option<std::path::PathBuf>,
    ) -> ContainedSpec {
        let c = &self.app.contained;
        let app = &self.app.name;
        ContainedSpec {
            network: Some((Contained::network(app), vec![c.service.clone()])),
            volumes: c
                .volumes
                .iter()
                .zip(volumes)
                .map(|(v, name)| (name.clone(), v.target.clone(), v.read_only))
                .collect(),
            host_mounts: c
                .files
                .iter()
                .chain(&c.binds)
                .map(|m| (m.source.clone(), m.target.clone(), m.read_only))
                .collect(),
            devices: c.devices.clone(),
            cap_keep: Some(c.cap_keep.clone()),
            read_only_root: c.read_only_root,
            tmpfs: c.tmpfs.clone(),
            tmpfs_owner: c.tmpfs_owner(),
            user: c.user.clone(),
            secrets_dir,
        }
    }

    /// Before any container of the app exists: its private network `pier-<app>`, made by
    /// Pier and labelled for the app. A network of that name that Pier did not make for
    /// this app is never joined: another app's containers could be on it.
    pub(super) async fn network(&self) -> Result<String, PipelineError> {
        let name = Contained::network(&self.app.name);
        let intent = NetworkIntent {
            network: name.clone(),
        };
        self.step(Step::Network, &intent, || async {
            self.policy_check()?;
            match self.engine().network(&name).await? {
                Some(n) if n.is_apps(&self.app.name) => return Ok(name.clone()),
                Some(_) => {
                    return Err(Refusal::NetworkNotOurs { name: name.clone() }.into());
                }
                None => {}
            }
            let labels = HashMap::from([
                (LABEL_MANAGED.to_owned(), "true".to_owned()),
                (LABEL_APP.to_owned(), self.app.name.to_string()),
            ]);
            self.engine().create_network(&name, labels).await?;
            // Made meanwhile by someone else under the same name (a 409 is not an error):
            // only one with our labels is ours.
            match self.engine().network(&name).await? {
                Some(n) if n.is_apps(&self.app.name) => Ok(name.clone()),
                _ => Err(Refusal::NetworkUnlabelled { name: name.clone() }.into()),
            }
        })
        .await
    }

    /// The app's named volumes: each is recorded as the app's in Postgres (committed)
    /// before it is created, labelled with app, incarnation and service. A name recorded
    /// for another app is refused before anything is made; a volume on the engine that no
    /// record gives to this app is never adopted, whatever its name says, and never gets a
    /// record either (a record is what `pier volumes rm` deletes by). Returns the engine
    /// names, in the config's order: what `create` mounts.
    pub(super) async fn volumes(&self) -> Result<Vec<String>, PipelineError> {
        let c = self.contained();
        if c.volumes.is_empty() {
            return Ok(vec![]);
        }
        let names = self.volume_names().await?;
        let intent: Vec<VolumeIntent> = c
            .volumes
            .iter()
            .zip(&names)
            .map(|(v, name)| VolumeIntent {
                name: name.clone(),
                target: v.target.clone(),
            })
            .collect();
        self.step(Step::Volumes, &intent, || async {
            self.policy_check()?;
            let mut out = Volumes {
                created: vec![],
                reused: vec![],
            };
            for v in &intent {
                if self.own_volume(&v.name).await? {
                    out.created.push(v.name.clone());
                } else {
                    out.reused.push(v.name.clone());
                }
            }
            Ok(out)
        })
        .await?;
        Ok(names)
    }

    /// Each volume's engine name for the app's live incarnation on this engine (see
    /// [`volume_for`]). A replay computes the same names: what the interrupted run
    /// recorded is the live incarnation's now, and what it did not record is still free.
    async fn volume_names(&self) -> Result<Vec<String>, PipelineError> {
        let store = &self.ctx.store;
        let target = self.target.name();
        let live = self
            .store_retry(|| store.incarnation(&self.app.name))
            .await?;
        let owned: Vec<String> = self
            .store_retry(|| store.volumes_owned(target, live))
            .await?
            .into_iter()
            .map(|o| o.name)
            .collect();
        let mut names = Vec::new();
        for v in &self.contained().volumes {
            let plain = v.engine_name(&self.app.name);
            // Another app's record of the plain name is refused by `own_volume`, as any
            // name collision between apps is; only this app's earlier lives step aside.
            let earlier = self
                .store_retry(|| store.volume_owner(target, &plain))
                .await?
                .is_some_and(|o| o.app == *self.app.name);
            names.push(volume_for(&plain, live, &owned, earlier));
        }
        Ok(names)
    }

    /// One volume made or found as this app's; `true` if this call created it. Replay-safe:
    /// a replay finds the record (and maybe the volume) the interrupted run left, and the
    /// volume's labels decide whether it is the record's.
    async fn own_volume(&self, name: &str) -> Result<bool, StepError> {
        let app = &self.app.name;
        let recorded = self
            .ctx
            .store
            .volume_owner(self.target.name(), name)
            .await?;
        if let Some(o) = &recorded
            && o.app != *app
        {
            return Err(Refusal::VolumeOwnedByOther {
                name: name.to_owned(),
                owner: o.app.clone(),
            }
            .into());
        }
        // Chosen by name for the live incarnation, a volume an ended one owns is reached
        // only if an incarnation ended meanwhile; its data is never handed over silently.
        if let Some(o) = &recorded
            && !o.live
        {
            return Err(Refusal::VolumeOfEndedIncarnation {
                name: name.to_owned(),
            }
            .into());
        }
        // The engine is looked at before anything is recorded: a volume that exists
        // without a record of this app is someone else's data, and gets no record.
        match (self.engine().volume(name).await?, &recorded) {
            (Some(found), Some(o)) if found.carries(app, o.made_in) => return Ok(false),
            (Some(_), _) => return Err(self.not_pier_made(name).await),
            (None, _) => {}
        }
        let owner = self
            .ctx
            .store
            .claim_volume(
                self.target.name(),
                name,
                app,
                &self.contained().service,
                self.dep.id,
            )
            .await?;
        if owner.app != *app {
            return Err(Refusal::VolumeOwnedByOther {
                name: name.to_owned(),
                owner: owner.app,
            }
            .into());
        }
        crate::faults::crash_point("volume_owner", "after");
        let labels = HashMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_APP.to_owned(), app.to_string()),
            (LABEL_INCARNATION.to_owned(), owner.made_in.to_string()),
            (LABEL_SERVICE.to_owned(), owner.service.clone()),
        ]);
        self.engine().create_volume(name, labels).await?;
        // Creating a volume that was made meanwhile by hand returns that one unchanged:
        // only one that carries the record's labels is the app's.
        match self.engine().volume(name).await? {
            Some(found) if found.carries(app, owner.made_in) => Ok(true),
            _ => Err(self.not_pier_made(name).await),
        }
    }

    /// Refuses a volume Pier did not make for this app, first undoing the ownership
    /// record this deployment wrote for it (a crash between record and create, then a
    /// hand-made volume, leaves one). A record of an earlier deployment stays: it is why
    /// `pier volumes` shows the mismatch, and `pier volumes rm` refuses such a volume.
    async fn not_pier_made(&self, name: &str) -> StepError {
        if let Err(e) = self
            .ctx
            .store
            .unclaim_volume(self.target.name(), name, &self.app.name, self.dep.id)
            .await
        {
            return e.into();
        }
        // A crash here replays the step: it finds no record and the same volume, and
        // refuses again (the undo is idempotent).
        crate::faults::crash_point("volume_unclaim", "after");
        Refusal::VolumeNotOurs {
            name: name.to_owned(),
        }
        .into()
    }

    /// Shared networks, joined only once the candidate is journaled (so a crash cannot
    /// leave an untracked container on them); retiring or removing it leaves them.
    pub(super) async fn connect(&self, candidate: &Candidate) -> Result<(), PipelineError> {
        let c = self.contained();
        if c.networks.is_empty() {
            return Ok(());
        }
        let intent = ConnectIntent {
            container: candidate.id.clone(),
            networks: c.networks.clone(),
        };
        self.step(Step::Connect, &intent, || async {
            self.policy_check()?;
            let aliases = vec![c.service.clone()];
            for n in &c.networks {
                if self.engine().network(n).await?.is_none() {
                    return Err(Refusal::SharedNetworkMissing { name: n.clone() }.into());
                }
                self.engine()
                    .join_network(n, &candidate.id, &aliases)
                    .await?;
            }
            Ok(Connected {
                joined: c.networks.clone(),
            })
        })
        .await
        .map(|_: Connected| ())
    }
}

/// The engine volume that serves the mount whose plain name is `plain`
/// (`pier-<app>-<name>`) for the live incarnation `live`:
/// - one `live` owns (`owned`, adopted ones first) that is this mount's: the plain name,
///   or the plain name with an incarnation's suffix;
/// - otherwise the plain name, unless an earlier incarnation of the app recorded it
///   (`earlier`);
/// - otherwise the plain name and `.` and the live incarnation's first 8 hex digits: a
///   new, empty volume, while the old one keeps its data and its owner. Neither app nor
///   volume names contain `.`, so no configured name can collide with it.
fn volume_for(plain: &str, live: uuid::Uuid, owned: &[String], earlier: bool) -> String {
    if let Some(name) = owned.iter().find(|n| serves(plain, n)) {
        return name.clone();
    }
    if !earlier {
        return plain.to_owned();
    }
    format!("{plain}.{}", &live.simple().to_string()[..8])
}

/// `name` is the plain volume name or it with an incarnation's suffix.
fn serves(plain: &str, name: &str) -> bool {
    match name.strip_prefix(plain) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('.')
            .is_some_and(|h| h.len() == 8 && h.bytes().all(|b| b.is_ascii_hexdigit())),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::volume_for;
    use uuid::Uuid;

    const LIVE: Uuid = Uuid::from_u128(0x1a2b3c4d_0000_4000_8000_000000000000);

    #[test]
    fn a_first_incarnation_uses_the_plain_name() {
        assert_eq!(volume_for("pier-x-data", LIVE, &[], false), "pier-x-data");
    }

    #[test]
    fn a_later_incarnation_gets_its_own_volume_while_the_old_one_keeps_its_data() {
        assert_eq!(
            volume_for("pier-x-data", LIVE, &[], true),
            "pier-x-data.1a2b3c4d"
        );
    }

    #[test]
    fn an_owned_volume_of_the_mount_wins_adopted_first() {
        let owned = vec![
            "pier-x-cache".to_owned(),
            "pier-x-data".to_owned(),
            "pier-x-data.1a2b3c4d".to_owned(),
        ];
        assert_eq!(volume_for("pier-x-data", LIVE, &owned, true), "pier-x-data");
        let other_mounts = vec!["pier-x-data-old".to_owned(), "pier-x-data.xyz".to_owned()];
        assert_eq!(
            volume_for("pier-x-data", LIVE, &other_mounts, true),
            "pier-x-data.1a2b3c4d"
        );
    }
}
