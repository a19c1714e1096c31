//! `signature`: before anything is pulled, the resolved digest must carry a cosign
//! signature that a trusted key verifies and that names exactly this digest (for an index,
//! the index that was signed, and the platform manifest chosen must be one of its
//! entries). Only for an app that must be signed; it changes nothing on the engine.
//!
//! Journaled like every step: the intent (the subject and the keys accepted) is committed
//! before the registry is asked, so a policy changed between a crash and the replay is a
//! conflict, never a silent swap of the keys a deployment was checked against. A rejection
//! quarantines the digest (a push of it again is skipped) before it is journaled, and the
//! deployment fails with nothing pulled and nothing created; its notification goes out
//! with the failure, from the outbox.

use std::time::Duration;

use super::plan::Placed;
use super::records::{SignatureIntent, Signed};
use super::refusal::Refusal;
use super::{PipelineError, Run, Step, StepError};
use crate::backoff::Backoff;
use crate::registry::{Place, RegistryError, Resolved};
use crate::signature::{Envelope, Finding, Format, Policy, Rejected, Subject, verify};

impl<P: Placed> Run<'_, P> {
    /// `None` when the app need not be signed (no step is journaled then).
    pub(super) async fn signature(&self, r: &Resolved) -> Result<Option<Signed>, PipelineError> {
        let Some(policy) = self.app.signature.clone() else {
            return Ok(None);
        };
        let subject = r.index_digest.as_deref().unwrap_or(&r.digest);
        let intent = SignatureIntent {
            subject: format!("{}@{subject}", self.app.image_name),
            manifest: r.index_digest.as_ref().map(|_| r.digest.to_string()),
            keys: policy.keys(),
            annotations: policy
                .rules
                .iter()
                .flat_map(|rule| {
                    rule.annotations
                        .iter()
                        .map(move |(k, v)| format!("{}: {k}={v}", rule.name))
                })
                .collect(),
        };
        let signed = self
            .step(Step::Signature, &intent, || async {
                self.check_signature(&policy, r, subject).await
            })
            .await?;
        Ok(Some(signed))
    }

    /// An archive loaded by `pier import` comes with no registry to hold its signatures:
    /// an app that must be signed does not run one.
    pub(super) async fn refuse_unsigned_import(&self, archive: &str) -> Result<(), PipelineError> {
        let Some(policy) = &self.app.signature else {
            return Ok(());
        };
        let intent = SignatureIntent {
            subject: archive.to_owned(),
            manifest: None,
            keys: policy.keys(),
            annotations: vec![],
        };
        self.step(Step::Signature, &intent, || async {
            Err::<Signed, _>(Refusal::UnsignedArchive.into())
        })
        .await
        .map(|_| ())
    }

    async fn check_signature(
        &self,
        policy: &Policy,
        r: &Resolved,
        subject: &str,
    ) -> Result<Signed, StepError> {
        if let Some(index) = &r.index_digest {
            let entries = self.ctx.registry.index_entries(self.app, index).await?;
            if !entries.iter().any(|e| r.digest == *e) {
                return Err(Refusal::IndexOmits {
                    index: index.clone(),
                    digest: r.digest.to_string(),
                }
                .into());
            }
        }
        let subject = Subject {
            digest: subject,
            image: &self.app.image_name,
        };
        // Nothing at all may only mean the signer has not pushed yet: look again for a
        // while. A wrong signature is final at once.
        let mut wait =
            Backoff::new(Duration::from_millis(250), Duration::from_secs(2)).within(policy.wait);
        loop {
            match self.find_signature(policy, &subject).await? {
                Ok(signed) => return Ok(signed),
                Err(rejected) if rejected.found_nothing() && wait.wait().await => {}
                Err(rejected) => return Err(self.quarantine_unsigned(&r.digest, rejected).await),
            }
        }
    }

    /// The `.sig` tag first, then the referrers: the second is asked only when the first
    /// holds no signature that passes. A place whose content cannot be read (too large,
    /// not a manifest) is a finding, not the end: the other place may hold a good one.
    async fn find_signature(
        &self,
        policy: &Policy,
        subject: &Subject<'_>,
    ) -> Result<Result<Signed, Rejected>, StepError> {
        let mut unreadable = Vec::new();
        let mut found = self
            .signatures_at(Place::SigTag, subject.digest, &mut unreadable)
            .await?;
        if !found.is_empty()
            && let Ok(signed) = verify(&found, subject, policy)
        {
            return Ok(Ok(signed));
        }
        found.extend(
            self.signatures_at(Place::Referrers, subject.digest, &mut unreadable)
                .await?,
        );
        Ok(verify(&found, subject, policy).map_err(|mut rejected| {
            rejected.found.extend(unreadable);
            rejected
        }))
    }

    /// The signatures at `place`; a permanent refusal of what is there is noted in
    /// `unreadable`. Network trouble and refused credentials end the attempt (retried, or
    /// the step's error): they say nothing about the image.
    async fn signatures_at(
        &self,
        place: Place,
        digest: &str,
        unreadable: &mut Vec<Finding>,
    ) -> Result<Vec<Envelope>, StepError> {
        match self.ctx.registry.signatures(self.app, digest, place).await {
            Ok(found) => Ok(found),
            Err(e @ (RegistryError::Invalid { .. } | RegistryError::TooLarge { .. })) => {
                unreadable.push(Finding::Unreadable {
                    format: match place {
                        Place::SigTag => Format::SigTag,
                        Place::Referrers => Format::Bundle,
                    },
                    reason: e.to_string(),
                });
                Ok(vec![])
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Quarantined before the failure is journaled: a replay after a crash in between
    /// quarantines it again (the same row), and the digest is never left deployable by a
    /// push for lack of a journal write.
    async fn quarantine_unsigned(&self, digest: &str, rejected: Rejected) -> StepError {
        let why = format!(
            "no valid signature (deployment {}): {}",
            self.dep.id,
            Finding::summary(&rejected.found)
        );
        if let Err(e) = self
            .ctx
            .store
            .quarantine(&self.app.name, digest, &why, self.dep.id)
            .await
        {
            return StepError::Store(e);
        }
        tracing::warn!(%digest, reason = %rejected, "no valid signature: the digest is quarantined");
        Refusal::Unsigned(rejected).into()
    }
}
