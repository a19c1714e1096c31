//! The start-up checks a sender runs on its source's configuration, as small steps each
//! sender's `check` lists in order. Config resolves what is common to every source (the
//! secrets' values, the tolerance, the registry host) and hands the rest here, so a
//! source Pier could not authenticate never starts.

use base64::Engine as _;

use super::{ArtifactoryAccess, HmacKey, SourceMode};

/// Where a signing source's signature is when its kind does not fix it.
pub(super) const DEFAULT_SIGNATURE_HEADER: &str = "X-Hub-Signature-256";

/// What a `[[sources]]` entry says, its credentials resolved (empty ones dropped): the
/// input of [`super::Sender::check`].
#[derive(Debug, Clone, Copy)]
pub struct Spec<'a> {
    pub mode: Option<SourceMode>,
    pub tokens: &'a [&'a str],
    pub secrets: &'a [&'a str],
    pub signature_header: Option<&'a str>,
    pub access_method: Option<ArtifactoryAccess>,
}

/// A sender's configuration, checked, with its defaults filled in.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: SourceMode,
    pub keys: Vec<HmacKey>,
    pub signature_header: String,
    pub access_method: ArtifactoryAccess,
    pub registry: RegistryRule,
}

impl Settings {
    /// `mode` with `keys`, the default signature header and access method, and a
    /// `registry` that may be given.
    pub(crate) fn new(mode: SourceMode, keys: Vec<HmacKey>) -> Self {
        Settings {
            mode,
            keys,
            signature_header: DEFAULT_SIGNATURE_HEADER.to_owned(),
            access_method: ArtifactoryAccess::default(),
            registry: RegistryRule::Optional,
        }
    }

    pub(crate) fn registry(self, registry: RegistryRule) -> Self {
        Settings { registry, ..self }
    }
}

/// What a source's `registry` must be, where its sender's deliveries name no host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryRule {
    /// Deliveries name their host; `registry` only replaces it (an alias).
    Optional,
    /// The host every delivery means when `registry` is not given.
    Default(&'static str),
    /// Deliveries name no host: without `registry` the source is refused, for this reason.
    Required(CheckError),
}

/// Whether a kind takes a credential of one sort (tokens or HMAC secrets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// It cannot use one: giving one is a mistake that would look like protection.
    Refused,
    Optional,
    /// Its strongest mechanism, so never optional.
    Required,
}

/// Why a source's configuration is refused. Config prefixes `source `NAME`: ` (or the
/// field, see [`CheckError::field`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("mode {mode:?} is not a mode of kind {kind}")]
    NotAMode {
        mode: SourceMode,
        kind: &'static str,
    },
    #[error("a {0} source signs its deliveries; give `secrets`, not `tokens`")]
    SignsNotTokens(&'static str),
    #[error("a {0} source cannot sign; give `tokens`, not `secrets`")]
    CannotSign(&'static str),
    #[error(
        "a {0} source needs `token` or `hmac_secret`; Pier never accepts unauthenticated webhooks"
    )]
    NeedsTokenOrSecret(&'static str),
    #[error(
        "a {0} source needs `hmac_secret` or `secrets`; Pier never accepts unauthenticated webhooks"
    )]
    NeedsSecret(&'static str),
    #[error("a {0} source needs `token` or `tokens`; Pier never accepts unauthenticated webhooks")]
    NeedsToken(&'static str),
    #[error("a URL token must be at least 16 letters, digits, - or _")]
    UrlToken,
    #[error("not a `whsec_<base64>` secret")]
    NotWhsec,
    #[error("signature_header is fixed by kind {0}")]
    FixedSignatureHeader(&'static str),
    #[error("`access_method` is for kind artifactory, not {0}")]
    AccessMethodNotForKind(&'static str),
    #[error(
        "a {0} delivery names no registry host; set `registry` to the host (and port) your apps pull its images from"
    )]
    NoRegistryHost(&'static str),
    #[error(
        "with access_method = \"port\" the payload names no host and port; set `registry` to the host:port your apps pull this repository from"
    )]
    PortNeedsRegistry,
}

impl CheckError {
    /// The field the error is about, when it names one rather than the source.
    pub(crate) fn field(&self) -> Option<&'static str> {
        matches!(self, CheckError::NotWhsec).then_some("secrets")
    }
}

impl Spec<'_> {
    /// The mode: `default` when none is given, else one of `allowed`.
    pub(crate) fn mode(
        &self,
        kind: &'static str,
        default: SourceMode,
        allowed: &[SourceMode],
    ) -> Result<SourceMode, CheckError> {
        match self.mode {
            None => Ok(default),
            Some(m) if allowed.contains(&m) => Ok(m),
            Some(mode) => Err(CheckError::NotAMode { mode, kind }),
        }
    }

    /// The credentials `kind` is given match what it takes: nothing it cannot use,
    /// everything it requires.
    pub(crate) fn credentials(
        &self,
        kind: &'static str,
        tokens: Need,
        secrets: Need,
    ) -> Result<(), CheckError> {
        if tokens == Need::Refused && !self.tokens.is_empty() {
            return Err(CheckError::SignsNotTokens(kind));
        }
        if secrets == Need::Refused && !self.secrets.is_empty() {
            return Err(CheckError::CannotSign(kind));
        }
        if secrets == Need::Required && self.secrets.is_empty() {
            return Err(CheckError::NeedsSecret(kind));
        }
        if tokens == Need::Required && self.tokens.is_empty() {
            return Err(CheckError::NeedsToken(kind));
        }
        Ok(())
    }

    /// Tokens that travel as the URL's last segment: long, and nothing a URL would
    /// escape or split.
    pub(crate) fn url_tokens(&self) -> Result<(), CheckError> {
        let unfit = |t: &&str| {
            t.len() < 16
                || !t
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if self.tokens.iter().any(unfit) {
            return Err(CheckError::UrlToken);
        }
        Ok(())
    }

    /// The secrets as HMAC keys, byte for byte.
    pub(crate) fn raw_keys(&self) -> Vec<HmacKey> {
        self.secrets
            .iter()
            .map(|s| HmacKey::new(s.as_bytes()))
            .collect()
    }

    /// The secrets as Standard Webhooks keys: `whsec_` and the base64 of the key.
    pub(crate) fn standard_webhooks_keys(&self) -> Result<Vec<HmacKey>, CheckError> {
        self.secrets
            .iter()
            .map(|s| {
                let b64 = s.strip_prefix("whsec_").unwrap_or(s);
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .ok()
                    .filter(|k| !k.is_empty())
                    .map(HmacKey::new)
                    .ok_or(CheckError::NotWhsec)
            })
            .collect()
    }

    /// The signature header a kind lets the user choose: the one given, or `default`.
    pub(crate) fn signature_header_or(&self, default: &str) -> String {
        self.signature_header.unwrap_or(default).to_owned()
    }

    /// For a kind that fixes its signature header: none may be given.
    pub(crate) fn fixed_signature_header(&self, kind: &'static str) -> Result<(), CheckError> {
        match self.signature_header {
            Some(_) => Err(CheckError::FixedSignatureHeader(kind)),
            None => Ok(()),
        }
    }

    /// For every kind but artifactory: no `access_method`.
    pub(crate) fn no_access_method(&self, kind: &'static str) -> Result<(), CheckError> {
        match self.access_method {
            Some(_) => Err(CheckError::AccessMethodNotForKind(kind)),
            None => Ok(()),
        }
    }

    /// What most senders check after their credentials: a fixed signature header and no
    /// `access_method`.
    pub(crate) fn no_extras(&self, kind: &'static str) -> Result<(), CheckError> {
        self.fixed_signature_header(kind)?;
        self.no_access_method(kind)
    }
}
