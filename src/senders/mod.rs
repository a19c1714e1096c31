//! Senders: the registries that tell Pier "an image was pushed", one file each. A
//! sender's file holds all there is to know about it: the `kind` a `[[sources]]` entry
//! names it by, what its configuration must say (checked at start-up, so intake never
//! meets a source it cannot authenticate), how its deliveries prove themselves, and how
//! its payload reads as [`PushEvent`]s. [`Sender`] is that contract, and the `senders!`
//! list below is the only place that knows them all.
//!
//! This layer sits below `config` and `intake`, and uses neither (only `domain`): config
//! asks a sender to check a source's settings, intake asks it to authenticate and read a
//! delivery, and no folder cycle can pass through here.
//!
//! # Adding a sender
//!
//! 1. Write `src/senders/NAME.rs`: a unit struct (`pub struct Name;`) and its
//!    `impl Sender`, with `name()` the `kind` users write. Only `name`, `check`,
//!    `check_head` and `parse` are required; the defaults say "no signature, JSON only,
//!    the raw body is what is signed, a repeated body is a repeated event".
//! 2. Add `mod NAME;` and one line `Variant => NAME::Name,` to the `senders!` list below.
//!
//! Nothing else in the code changes: `SourceKind` gains the variant, `kind = "NAME"`
//! parses, and the config checks, the intake route and every per-kind question go
//! through the list (no `match` on `SourceKind` exists outside it). Tell users in a
//! page of its own under `docs/src/registries/` and a row of that folder's table of
//! senders (`index.md`), and add the kind to the fuzzer's `KINDS`
//! (`fuzz/fuzz_targets/payload.rs`) to fuzz its parser. The tests below hold every
//! sender to the rule that a source without credentials is refused.

mod check;
mod event;
mod request;
pub mod verify;

mod acr;
mod artifactory;
mod distribution;
mod dockerhub;
pub mod generic;
mod gitea;
mod github;
mod harbor;
mod nexus;
mod quay;
mod zot;

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use axum::http::HeaderMap;
use serde::Deserialize;

pub use crate::domain::is_digest;
pub use check::{CheckError, Need, RegistryRule, Settings, Spec};
pub use event::malformed;
pub use event::{Malformed, Parsed, PushEvent, host_of_url, split_host};
pub use request::{FORM, Incoming, form_payload};
pub use verify::Rejected;

/// Everything Pier knows about one sender. Implemented by a unit value in the sender's
/// own file; reached through [`SourceKind::sender`].
pub(crate) trait Sender: Sync {
    /// The `kind` a `[[sources]]` entry names this sender by.
    fn name(&self) -> &'static str;

    /// Checks what a source of this kind is configured with and fills in its defaults.
    /// Each sender requires its strongest mechanism, never offers it as an option.
    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError>;

    /// The headers, besides `Authorization`, that carry a credential: each may appear
    /// at most once, or a proxy and Pier could disagree on which copy counts.
    fn credential_headers<'a>(&self, _source: &SourceView<'a>) -> Vec<&'a str> {
        Vec::new()
    }

    /// The credentials the request head carries (a header token, or the URL's token),
    /// checked before a byte of the body is read.
    fn check_head(
        &self,
        source: &SourceView<'_>,
        headers: &HeaderMap,
        path_token: Option<&str>,
    ) -> Result<(), Rejected>;

    /// The bytes the sender signed: the raw body unless it signs something else.
    fn signed_bytes<'a>(&self, req: Incoming<'a>) -> Result<Cow<'a, [u8]>, Rejected> {
        Ok(Cow::Borrowed(req.body))
    }

    /// The signature over `signed` (see [`Sender::signed_bytes`]); `now` is unix
    /// seconds. Senders that cannot sign have only their head's token.
    fn check_signature(
        &self,
        _source: &SourceView<'_>,
        _req: Incoming<'_>,
        _signed: &[u8],
        _now: i64,
    ) -> Result<(), Rejected> {
        Ok(())
    }

    /// The media types a delivery may have (without parameters).
    fn media_types(&self) -> &'static [&'static str] {
        &["application/json"]
    }

    /// Reads an authentic delivery. `json` is the JSON text (a form's `payload`).
    fn parse(
        &self,
        source: &SourceView<'_>,
        headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed>;

    /// Senders that cannot set a header: the secret is the URL's last segment.
    fn token_in_path(&self) -> bool {
        false
    }

    /// Senders that lower-case the tag they report, so an app's tag is matched ignoring
    /// case.
    fn folds_tag_case(&self) -> bool {
        false
    }

    /// Whether two authentic deliveries with the same body are the same event. True where
    /// the body carries an event id or a timestamp, or names the digest (then a repeat
    /// can only ask for what already runs). A sender that repeats one body for every push
    /// (of a tag, of a digest) says false: a rollback by re-push needs it, and a repeated
    /// body is then deduplicated downstream, by (app, digest) and by the no-op for what
    /// already runs.
    fn body_is_unique(&self) -> bool {
        true
    }
}

/// Generates [`SourceKind`] from THE list of senders: one variant per line, each tied to
/// the value that implements [`Sender`] for it. The order is the order `kind` names are
/// listed in when one is unknown.
macro_rules! senders {
    ($($variant:ident => $sender:path,)*) => {
        /// The `kind` of a `[[sources]]` entry: which sender it is.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum SourceKind {
            $($variant,)*
        }

        impl SourceKind {
            /// Every kind, in the list's order.
            pub(crate) const ALL: &'static [SourceKind] = &[$(SourceKind::$variant,)*];

            /// The sender of this kind: its checks, its authentication and its parser.
            pub(crate) fn sender(self) -> &'static dyn Sender {
                match self {
                    $(SourceKind::$variant => &$sender,)*
                }
            }
        }
    };
}

senders! {
    Distribution => distribution::Distribution,
    Generic => generic::Generic,
    Github => github::GitHub,
    Gitea => gitea::GITEA,
    Forgejo => gitea::FORGEJO,
    Harbor => harbor::Harbor,
    Zot => zot::Zot,
    Dockerhub => dockerhub::DockerHub,
    Quay => quay::Quay,
    Artifactory => artifactory::Artifactory,
    Nexus => nexus::Nexus,
    Acr => acr::Acr,
}

impl SourceKind {
    pub(crate) fn as_str(self) -> &'static str {
        self.sender().name()
    }

    /// The kind whose sender is named `name`.
    pub(crate) fn from_name(name: &str) -> Option<SourceKind> {
        SourceKind::ALL.iter().copied().find(|k| k.as_str() == name)
    }

    pub(crate) fn token_in_path(self) -> bool {
        self.sender().token_in_path()
    }

    pub(crate) fn folds_tag_case(self) -> bool {
        self.sender().folds_tag_case()
    }

    pub(crate) fn body_is_unique(self) -> bool {
        self.sender().body_is_unique()
    }
}

/// The senders' names, for the error that lists them.
static NAMES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| SourceKind::ALL.iter().map(|k| k.as_str()).collect());

impl<'de> Deserialize<'de> for SourceKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        SourceKind::from_name(&name)
            .ok_or_else(|| serde::de::Error::unknown_variant(&name, NAMES.as_slice()))
    }
}

/// How a `generic` or `artifactory` source authenticates; other kinds have one way only.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceMode {
    /// HMAC-SHA256 of the body in `signature_header` (generic).
    Hmac,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature` (generic).
    StandardWebhooks,
    /// The shared secret verbatim in a header (artifactory's default).
    Token,
    /// Hex HMAC-SHA256 of the body in `X-JFrog-Event-Auth` (artifactory).
    Signing,
}

/// How Artifactory names a Docker image (its "Docker access method"), which decides the
/// registry host and repository an event is matched by. The payload names the Artifactory
/// repository (`repo_key`) and the image inside it (`image_name`) apart.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArtifactoryAccess {
    /// `<host>/<repo_key>/<image_name>` (JFrog Cloud's default): the repository is
    /// `repo_key/image_name` on the host of `jpd_origin`.
    #[default]
    RepositoryPath,
    /// `<repo_key>.<host>/<image_name>`: the repository is `image_name` on the subdomain.
    Subdomain,
    /// `<host>:<port>/<image_name>`, one port per Artifactory repository: the repository is
    /// `image_name` on the source's `registry` (required), which names host and port.
    Port,
}

/// An HMAC key's bytes. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct HmacKey(Vec<u8>);

impl HmacKey {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }
    pub(crate) fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HmacKey(***)")
    }
}

/// A configured source as its sender sees it when a delivery arrives: what it checks
/// the delivery against, and the settings its parser reads.
#[derive(Debug)]
pub struct SourceView<'a> {
    pub mode: SourceMode,
    /// Static tokens; any one of them is accepted (rotation without a gap).
    pub tokens: Vec<&'a str>,
    /// HMAC keys; any one of them verifies.
    pub keys: &'a [HmacKey],
    pub signature_header: &'a str,
    /// How far a signed timestamp may be from now (Standard Webhooks).
    pub tolerance: Duration,
    pub access_method: ArtifactoryAccess,
}

impl SourceView<'_> {
    /// A source with no credentials: for reading a payload alone (the fuzzer, tests).
    pub(crate) fn unauthenticated(mode: SourceMode, access_method: ArtifactoryAccess) -> Self {
        SourceView {
            mode,
            tokens: Vec::new(),
            keys: &[],
            signature_header: check::DEFAULT_SIGNATURE_HEADER,
            tolerance: Duration::from_secs(300),
            access_method,
        }
    }
}

/// What the request head must show before the body is read: no credential header twice,
/// then the sender's own head check.
pub fn check_head(
    kind: SourceKind,
    source: &SourceView<'_>,
    headers: &HeaderMap,
    path_token: Option<&str>,
) -> Result<(), Rejected> {
    let sender = kind.sender();
    let mut names = vec!["authorization"];
    names.extend(sender.credential_headers(source));
    if names
        .into_iter()
        .any(|name| headers.get_all(name).iter().count() > 1)
    {
        return Err(Rejected::Ambiguous);
    }
    sender.check_head(source, headers, path_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_name_and_parses_back_from_it() {
        let mut names: Vec<&str> = SourceKind::ALL.iter().map(|k| k.as_str()).collect();
        for k in SourceKind::ALL {
            assert_eq!(SourceKind::from_name(k.as_str()), Some(*k));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SourceKind::ALL.len());
    }

    #[test]
    fn an_unknown_kind_is_refused_with_the_list_of_kinds() {
        #[derive(Debug, Deserialize)]
        struct Entry {
            kind: SourceKind,
        }
        let e = toml::from_str::<Entry>(r#"kind = "gitlab""#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `gitlab`"), "{e}");
        assert!(
            e.contains("expected one of `distribution`, `generic`"),
            "{e}"
        );
        let ok: Entry = toml::from_str(r#"kind = "forgejo""#).unwrap();
        assert_eq!(ok.kind, SourceKind::Forgejo);
    }

    /// Pier never accepts unauthenticated webhooks: a new sender that forgot to require
    /// its credential fails here.
    #[test]
    fn every_sender_refuses_a_source_without_credentials() {
        let spec = Spec {
            mode: None,
            tokens: &[],
            secrets: &[],
            signature_header: None,
            access_method: None,
        };
        for k in SourceKind::ALL {
            assert!(k.sender().check(&spec).is_err(), "{k:?}");
        }
    }
}
