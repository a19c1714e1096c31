//! Approval links: what a notification carries so that an approver gets from a message to
//! the deployment's Approve or Reject button in one click. A link is signed (HMAC-SHA256
//! with a key derived from the installation key) over the deployment, the action, the
//! approver it is for, its expiry and a nonce; it opens once (Postgres records the nonce);
//! and it decides nothing itself: it needs a signed-in named admin allowed to approve the
//! app, and only takes them to the page with the action preselected, where the button (a
//! form with the session's form token) does the rest.

use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use strum::{Display, EnumString, IntoStaticStr};
use uuid::Uuid;

use crate::actions::{ActionError, clip};
use crate::config::Config;
use crate::store::{DeploymentState, Store};

/// The key links are signed with, derived from the installation key: a link cannot be
/// made without the database's secret, and the env hash's key is never used for links
/// as it is.
#[derive(Clone)]
pub struct LinkKey([u8; 32]);

impl LinkKey {
    pub(crate) fn derive(installation_key: &[u8]) -> LinkKey {
        let mut mac =
            <Hmac<Sha256> as KeyInit>::new_from_slice(installation_key).expect("any key length");
        mac.update(b"pier approval links v1");
        let mut key = [0u8; 32];
        key.copy_from_slice(&mac.finalize().into_bytes());
        LinkKey(key)
    }

    fn mac(&self, link: &ApprovalLink) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("any key length");
        // Fields joined by a byte none of them can hold, so no two links sign alike.
        let action: &str = link.action.into();
        let text = format!(
            "{}\n{action}\n{}\n{}\n{}",
            link.deployment,
            link.approver.as_deref().unwrap_or("*"),
            link.expires.timestamp(),
            link.nonce
        );
        mac.update(text.as_bytes());
        mac
    }
}

/// What a link asks the page to preselect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum LinkAction {
    Approve,
    Reject,
}

/// One link, as signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalLink {
    pub deployment: Uuid,
    pub action: LinkAction,
    /// The named admin it is for; `None`: any admin the app's `approval.from` names.
    pub approver: Option<String>,
    /// Whole seconds: the link carries it as a Unix time.
    pub expires: DateTime<Utc>,
    /// Unique per notification; with the action, what Postgres records on use.
    pub nonce: Uuid,
}

/// The query string of a link as it came back: every field as text, checked here.
#[derive(Debug, Default, serde::Deserialize)]
pub struct LinkQuery {
    pub action: Option<String>,
    #[serde(rename = "for")]
    pub approver: Option<String>,
    pub expires: Option<i64>,
    pub nonce: Option<String>,
    pub sig: Option<String>,
}

/// Why a link does not open the approval. Each becomes a page of its own (4xx).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// 403: a field was changed, or Pier did not make it.
    #[error("this approval link is not valid: it was changed, or it was not made by this Pier")]
    Altered,
    /// 410
    #[error("this approval link expired at {0}; open the deployment's page to decide")]
    Expired(DateTime<Utc>),
    /// 410
    #[error("this approval link was used already; open the deployment's page to decide")]
    Used,
    /// 403: signed in, but not as someone who may approve this app.
    #[error("{0}")]
    NotYours(String),
    /// 409: the deployment no longer waits for approval.
    #[error("deployment {id} is {state}: it no longer waits for approval")]
    NotWaiting { id: Uuid, state: DeploymentState },
    #[error(transparent)]
    Action(#[from] ActionError),
}

impl From<crate::store::StoreError> for LinkError {
    fn from(e: crate::store::StoreError) -> Self {
        LinkError::Action(e.into())
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

impl ApprovalLink {
    /// The link's path and query on Pier's site: `/deployments/{id}/link?action=…&sig=…`.
    pub(crate) fn path(&self, key: &LinkKey) -> String {
        use base64::Engine as _;
        let sig = b64().encode(key.mac(self).finalize().into_bytes());
        let action: &str = self.action.into();
        let mut q = vec![("action", action.to_owned())];
        if let Some(a) = &self.approver {
            q.push(("for", a.clone()));
        }
        q.push(("expires", self.expires.timestamp().to_string()));
        q.push(("nonce", self.nonce.to_string()));
        q.push(("sig", sig));
        let q = serde_urlencoded::to_string(q).unwrap_or_default();
        format!("/deployments/{}/link?{q}", self.deployment)
    }

    /// The link `q` names for deployment `id`, if Pier signed exactly it and it has not
    /// expired at `now`. The signature is checked first (in constant time), so nothing of
    /// an altered link is believed, not even its expiry.
    pub(crate) fn verify(
        key: &LinkKey,
        id: Uuid,
        q: &LinkQuery,
        now: DateTime<Utc>,
    ) -> Result<ApprovalLink, LinkError> {
        use base64::Engine as _;
        let parsed = (|| {
            Some(ApprovalLink {
                deployment: id,
                action: q.action.as_deref()?.parse().ok()?,
                approver: q.approver.clone(),
                expires: DateTime::from_timestamp(q.expires?, 0)?,
                nonce: Uuid::parse_str(q.nonce.as_deref()?).ok()?,
            })
        })();
        let link = parsed.ok_or(LinkError::Altered)?;
        let sig = q
            .sig
            .as_deref()
            .and_then(|s| b64().decode(s).ok())
            .ok_or(LinkError::Altered)?;
        key.mac(&link)
            .verify_slice(&sig)
            .map_err(|_| LinkError::Altered)?;
        if now >= link.expires {
            return Err(LinkError::Expired(link.expires));
        }
        Ok(link)
    }

    /// `admin` (a signed-in named admin) follows this link: allowed to approve the app,
    /// the one it is for, the deployment still waiting, and the link not used before;
    /// then its use is recorded, for good.
    pub(crate) async fn open(
        &self,
        store: &Store,
        config: &Config,
        admin: &str,
    ) -> Result<(), LinkError> {
        let id = self.deployment;
        let dep = store
            .deployment(id)
            .await?
            .ok_or(ActionError::UnknownDeployment(id))?;
        let app = crate::actions::app(config, &dep.app)?;
        let from = app
            .gates
            .approval
            .as_ref()
            .map(|a| a.from.clone())
            .unwrap_or_default();
        if !from.iter().any(|f| f == admin) {
            return Err(LinkError::NotYours(format!(
                "admin `{}` may not approve deployments of `{}`",
                clip(admin, 64),
                app.name
            )));
        }
        if let Some(a) = &self.approver
            && a != admin
        {
            return Err(LinkError::NotYours(format!(
                "this link is for admin `{}`; sign in as them, or open the deployment's page",
                clip(a, 64)
            )));
        }
        if dep.state != DeploymentState::AwaitingApproval {
            return Err(LinkError::NotWaiting {
                id,
                state: dep.state,
            });
        }
        let action: &str = self.action.into();
        if !store
            .use_approval_link(self.nonce, action, id, admin)
            .await?
        {
            return Err(LinkError::Used);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(expires: DateTime<Utc>) -> ApprovalLink {
        ApprovalLink {
            deployment: Uuid::new_v4(),
            action: LinkAction::Approve,
            approver: Some("ops".into()),
            // Links carry whole seconds.
            expires: DateTime::from_timestamp(expires.timestamp(), 0).unwrap(),
            nonce: Uuid::new_v4(),
        }
    }

    fn query(path: &str) -> LinkQuery {
        serde_urlencoded::from_str(path.split_once('?').unwrap().1).unwrap()
    }

    #[test]
    fn a_link_verifies_until_it_expires_and_not_after() {
        let key = LinkKey::derive(&[7; 32]);
        let now = Utc::now();
        let l = link(now + chrono::Duration::minutes(5));
        let q = query(&l.path(&key));
        assert_eq!(
            ApprovalLink::verify(&key, l.deployment, &q, now).unwrap(),
            l
        );
        let later = now + chrono::Duration::minutes(6);
        assert!(matches!(
            ApprovalLink::verify(&key, l.deployment, &q, later),
            Err(LinkError::Expired(_))
        ));
    }

    #[test]
    fn any_changed_field_or_another_key_makes_it_altered() {
        let key = LinkKey::derive(&[7; 32]);
        let now = Utc::now();
        let l = link(now + chrono::Duration::minutes(5));
        let path = l.path(&key);
        let altered = |q: LinkQuery, id: Uuid| {
            matches!(
                ApprovalLink::verify(&key, id, &q, now),
                Err(LinkError::Altered)
            )
        };
        assert!(altered(query(&path), Uuid::new_v4()), "another deployment");
        let mut q = query(&path);
        q.action = Some("reject".into());
        assert!(altered(q, l.deployment), "another action");
        let mut q = query(&path);
        q.approver = Some("dev".into());
        assert!(altered(q, l.deployment), "another approver");
        let mut q = query(&path);
        q.expires = q.expires.map(|e| e + 3600);
        assert!(altered(q, l.deployment), "a later expiry");
        let mut q = query(&path);
        q.approver = None;
        assert!(altered(q, l.deployment), "any approver");
        let other = LinkKey::derive(&[8; 32]);
        assert!(matches!(
            ApprovalLink::verify(&other, l.deployment, &query(&path), now),
            Err(LinkError::Altered)
        ));
    }
}
