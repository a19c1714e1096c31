//! An app's secrets as one deployment reads them: `env:`/`file:` values from the config,
//! `age:` files decrypted now (so a rotated file reaches the next container without a
//! reload), then given as env variables or as files under `/run/secrets`.
//!
//! Invariants:
//! - every secret of every service of the generation is read before anything is made
//!   (`check_secrets`, in front of the network step): an unreadable one fails the
//!   deployment with no container created and the serving generation untouched;
//! - the journal gets names and keyed hashes only (`create`'s `secret_files`,
//!   `secret_files_hmac`), and refusals name the key and the file, never a value;
//! - the files are written inside the `create` step, after the container is made and
//!   before anything can start it, and again when a replay adopts the container, so a
//!   crash between the two never starts a container without its files.

use std::path::PathBuf;

use super::refusal::Refusal;
use super::{EngineRun, PipelineError, Step, StepError};
use crate::config::{AppConfig, Secret, SecretAs, SecretFrom, TmpfsOwner};
use crate::engine::{FileOwner, SecretFile};

/// The app's secrets, read for this deployment.
pub(super) struct ReadSecrets {
    /// Given as `KEY=value` env variables.
    pub env: Vec<(String, Secret)>,
    /// Written to `/run/secrets/KEY`.
    pub files: Vec<SecretFile>,
}

/// Every secret of `app` (one service), read now.
fn read(app: &AppConfig, identity: Option<&Secret>) -> Result<ReadSecrets, Refusal> {
    let mut out = ReadSecrets {
        env: Vec::new(),
        files: Vec::new(),
    };
    for (key, secret) in &app.contained.secrets {
        let value = match &secret.from {
            SecretFrom::Loaded(v) => v.clone(),
            SecretFrom::Age(r) => r
                .read(identity)
                .map_err(|source| Refusal::SecretUnreadable {
                    key: key.clone(),
                    source,
                })?,
        };
        match secret.delivery {
            SecretAs::Env => out.env.push((key.clone(), value)),
            SecretAs::File => out.files.push(SecretFile {
                name: key.clone(),
                value: value.expose().as_bytes().to_vec(),
            }),
        }
    }
    Ok(out)
}

impl EngineRun<'_> {
    /// This service's secrets, read now.
    pub(super) fn read_secrets(&self) -> Result<ReadSecrets, StepError> {
        Ok(read(self.app, self.ctx.age_identity.as_ref())?)
    }

    /// Before anything of the generation is made: every service's secrets can be read. A
    /// failure is journaled as the `create` step's (where they are used), so the timeline
    /// and the deployment say why, and nothing was created.
    pub(super) async fn check_secrets(&self) -> Result<(), PipelineError> {
        let all = std::iter::once(self.app).chain(&self.app.services);
        for app in all {
            if let Err(e) = read(app, self.ctx.age_identity.as_ref()) {
                let e = match app.contained.service == self.app.contained.service {
                    true => StepError::from(e),
                    false => StepError::InService {
                        service: app.contained.service.clone(),
                        source: Box::new(e.into()),
                    },
                };
                return Err(self.failed_before_begin(Step::Create, e).await);
            }
        }
        Ok(())
    }

    /// The host directory bound at `/run/secrets` for the container `name`: one per
    /// container, so two generations never share (or overwrite) each other's files.
    pub(super) fn secrets_dir_of(&self, name: &str) -> PathBuf {
        self.ctx.secrets_dir.join(name)
    }

    /// Who owns the files: the app's numeric `user`, else the image's numeric `USER`, else
    /// root (an image without `USER` runs as root). A name cannot be resolved without the
    /// image's `/etc/passwd` and is refused, naming what to set.
    async fn file_owner(&self, image: &str) -> Result<FileOwner, StepError> {
        let user = match &self.app.contained.user {
            Some(u) => Some(u.clone()),
            None => self.engine().image(image).await?.and_then(|f| f.user),
        };
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            return Ok(FileOwner { uid: 0, gid: 0 });
        };
        match TmpfsOwner::of_user(&user) {
            Some(o) => Ok(FileOwner {
                uid: o.uid,
                gid: o.gid.unwrap_or(0),
            }),
            None => Err(Refusal::SecretFileOwner { user }.into()),
        }
    }

    /// Who owns `files` in a container of `image`; `None` when there are none. Decided
    /// before the container is made, so a refusal leaves nothing behind.
    pub(super) async fn secret_owner(
        &self,
        image: &str,
        files: &[SecretFile],
    ) -> Result<Option<FileOwner>, StepError> {
        if files.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.file_owner(image).await?))
    }

    /// Writes the secret files into the created (not yet started) container `id`.
    pub(super) async fn write_secret_files(
        &self,
        id: &str,
        files: &[SecretFile],
        owner: Option<FileOwner>,
    ) -> Result<(), StepError> {
        let Some(owner) = owner else { return Ok(()) };
        // A crash here leaves a journaled container without its files: the replay of
        // `create` adopts it and writes them, before `start` can run.
        crate::faults::crash_point("secret_files", "before");
        self.engine().put_secret_files(id, files, owner).await?;
        Ok(())
    }
}
