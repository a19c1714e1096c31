//! Webhook sources: what is common to every `[[sources]]` entry (its name, its secrets'
//! values, the timestamp tolerance, the registry host its images live on). What a kind
//! needs beyond that is its sender's to check (`crate::senders`), here at start-up, so
//! that intake never meets a source it cannot authenticate.

pub use crate::senders::{ArtifactoryAccess, HmacKey, SourceKind, SourceMode};
use crate::senders::{CheckError, RegistryRule, Sender, Settings, SourceView, Spec, verify};

use super::*;

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub name: String,
    pub kind: SourceKind,
    pub mode: SourceMode,
    /// Static tokens (a header or the URL path); any one of them is accepted, so a token
    /// can be rotated without a moment where the sender is refused.
    pub tokens: Vec<Secret>,
    /// HMAC keys; any one of them verifies, for the same reason.
    pub keys: Vec<HmacKey>,
    /// Where a `generic` or `distribution` source's HMAC signature is.
    pub signature_header: String,
    /// How far a signed timestamp may be from now (Standard Webhooks).
    pub tolerance: Duration,
    /// The registry host of every image this source reports: supplies the host where the
    /// sender names none (Docker Hub, Nexus, Zot) and replaces the one it names (an alias).
    pub registry: Option<String>,
    /// `artifactory` only: how its events name an image.
    pub access_method: ArtifactoryAccess,
}

impl SourceConfig {
    /// This source's sender: its authentication and its parser.
    pub(crate) fn sender(&self) -> &'static dyn Sender {
        self.kind.sender()
    }

    /// The source as its sender checks and reads a delivery.
    pub(crate) fn view(&self) -> SourceView<'_> {
        SourceView {
            mode: self.mode,
            tokens: self.tokens.iter().map(Secret::expose).collect(),
            keys: &self.keys,
            signature_header: &self.signature_header,
            tolerance: self.tolerance,
            access_method: self.access_method,
        }
    }
}

/// A token is compared by its text; the senders' layer cannot name `Secret` itself.
impl verify::Token for Secret {
    fn text(&self) -> &str {
        self.expose()
    }
}

fn default_tolerance() -> Duration {
    Duration::from_secs(300)
}

/// A webhook sender: one URL, `POST /hooks/{name}`, with its kind and credentials. Pier
/// authenticates every delivery over its raw bytes, in constant time, before it reads
/// anything else, and accepts no unauthenticated webhook. Tokens and secrets are at least
/// 32 bytes (24 for Standard Webhooks keys).
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    /// The URL's segment, `POST /hooks/{name}`: lower-case letters, digits, `-`, `_`;
    /// unique. `poller` is reserved.
    name: String,
    /// Which sender it is, and so how its deliveries are checked and read; each has its
    /// page under Point a registry at Pier.
    kind: SourceKind,
    /// A static token, compared in constant time: `Authorization: Bearer <token>`
    /// (distribution, generic, gitea, forgejo: an optional extra check; harbor, zot, acr:
    /// required), `X-JFrog-Event-Auth` (artifactory's token mode), or the URL's last
    /// segment (dockerhub, quay: required, 16 or more letters, digits, `-`, `_`). A
    /// `distribution` source needs `token` or `hmac_secret`.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    token: Option<String>,
    /// More accepted tokens, added to `token`; any one is accepted, so a token rotates
    /// without refusing the sender in between.
    #[serde(default)]
    #[schemars(with = "Vec<super::doc_types::SecretText>")]
    tokens: Vec<String>,
    /// The HMAC key. Required for `generic`, `github`, `gitea`, `forgejo`, `nexus`, and
    /// `artifactory` in signing mode; for Standard Webhooks a `whsec_<base64>` key.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    hmac_secret: Option<String>,
    /// More HMAC keys, added to `hmac_secret`; any one verifies (rotation).
    #[serde(default)]
    #[schemars(with = "Vec<super::doc_types::SecretText>")]
    secrets: Vec<String>,
    /// The header holding the HMAC signature; only `distribution` and `generic` take it,
    /// the others use their sender's own header.
    ///
    /// Default: `"X-Hub-Signature-256"` (distribution), `"X-Pier-Signature"` (generic).
    signature_header: Option<String>,
    /// `generic`: `"hmac"` or `"standard-webhooks"`; `artifactory`: `"token"` or
    /// `"signing"`; no other kind takes one.
    ///
    /// Default: `"hmac"` (generic), `"token"` (artifactory).
    mode: Option<SourceMode>,
    /// Standard Webhooks: how far `webhook-timestamp` may be from now, `1s` to `1h`;
    /// outside it, 401.
    #[serde(default = "default_tolerance", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    tolerance: Duration,
    /// The registry host (and port) of every image the source reports: fills it in where
    /// the sender names none (required for `nexus` and `zot`) and replaces the one it names
    /// (an alias). It must be the host of some app's `image` (checked at start-up).
    ///
    /// Default: none (`"docker.io"` for dockerhub).
    registry: Option<String>,
    /// `artifactory` only: the Docker access method of the Artifactory repository, which
    /// decides where its images are pulled from.
    ///
    /// Default: `"repository-path"`.
    access_method: Option<ArtifactoryAccess>,
}

/// `host`, `host:port`, lower-case letters, digits, `.` and `-`.
fn valid_host(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (host, None),
    };
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

/// The values of a single field and its rotation list (`token` and `tokens`), read
/// from where they point; an empty one is dropped, so `""` never authenticates.
fn resolve_secrets<'a>(
    source: &str,
    base: &Path,
    fields: impl Iterator<Item = (&'static str, &'a String)>,
) -> Result<Vec<Secret>, ConfigError> {
    let mut values = Vec::new();
    for (field, spec) in fields {
        let value = Secret::resolve(&format!("sources.{source}.{field}"), spec, base)?;
        if !value.expose().is_empty() {
            values.push(value);
        }
    }
    Ok(values)
}

/// A sender's refusal, said as config says everything: which source (or field).
fn refused(source: &str, e: CheckError) -> ConfigError {
    match e.field() {
        Some(field) => invalid(format!("sources.{source}.{field}: {e}")),
        None => invalid(format!("source `{source}`: {e}")),
    }
}

fn check_signature_header(source: &str, header: &str) -> Result<(), ConfigError> {
    if axum::http::HeaderName::try_from(header).is_err() {
        return Err(invalid(format!(
            "source `{source}`: `{header}` is not a header name"
        )));
    }
    Ok(())
}

fn check_tolerance(source: &str, tolerance: Duration) -> Result<(), ConfigError> {
    if tolerance < Duration::from_secs(1) || tolerance > Duration::from_secs(3600) {
        return Err(invalid(format!(
            "source `{source}`: tolerance must be between 1s and 1h"
        )));
    }
    Ok(())
}

/// The registry host of the source's images: the one given, which must be the host of
/// some app's image (else no event could ever match), or what the sender's rule says.
fn resolve_registry(
    source: &str,
    given: Option<String>,
    rule: RegistryRule,
    app_hosts: &[&str],
) -> Result<Option<String>, ConfigError> {
    let Some(host) = given else {
        return match rule {
            RegistryRule::Optional => Ok(None),
            RegistryRule::Default(host) => Ok(Some(host.to_owned())),
            RegistryRule::Required(why) => Err(refused(source, why)),
        };
    };
    if !valid_host(&host) {
        return Err(invalid(format!(
            "source `{source}`: registry `{host}` is not a host or host:port"
        )));
    }
    if !app_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        return Err(invalid(format!(
            "source `{source}`: registry `{host}` is the registry of no app; \
             it must match the host part of an app's `image`"
        )));
    }
    Ok(Some(host))
}

impl RawSource {
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn resolve(
        self,
        base: &Path,
        app_hosts: &[&str],
    ) -> Result<SourceConfig, ConfigError> {
        let name = self.name.as_str();
        let tokens = self.token.iter().map(|t| ("token", t));
        let tokens = tokens.chain(self.tokens.iter().map(|t| ("tokens", t)));
        let tokens = resolve_secrets(name, base, tokens)?;
        let secrets = self.hmac_secret.iter().map(|s| ("hmac_secret", s));
        let secrets = secrets.chain(self.secrets.iter().map(|s| ("secrets", s)));
        let secrets = resolve_secrets(name, base, secrets)?;
        let settings = self.sender_settings(&tokens, &secrets)?;
        check_signature_header(name, &settings.signature_header)?;
        check_tolerance(name, self.tolerance)?;
        let registry = resolve_registry(name, self.registry, settings.registry, app_hosts)?;
        Ok(SourceConfig {
            name: self.name,
            kind: self.kind,
            mode: settings.mode,
            tokens,
            keys: settings.keys,
            signature_header: settings.signature_header,
            tolerance: self.tolerance,
            registry,
            access_method: settings.access_method,
        })
    }

    /// What the source's sender makes of its kind-specific settings.
    fn sender_settings(
        &self,
        tokens: &[Secret],
        secrets: &[Secret],
    ) -> Result<Settings, ConfigError> {
        let tokens: Vec<&str> = tokens.iter().map(Secret::expose).collect();
        let secrets: Vec<&str> = secrets.iter().map(Secret::expose).collect();
        let spec = Spec {
            mode: self.mode,
            tokens: &tokens,
            secrets: &secrets,
            signature_header: self.signature_header.as_deref(),
            access_method: self.access_method,
        };
        self.kind
            .sender()
            .check(&spec)
            .map_err(|e| refused(&self.name, e))
    }
}

/// The kinds come from the one list of senders, as the file's parser reads them.
impl schemars::JsonSchema for SourceKind {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SourceKind".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
        schemars::json_schema!({
            "type": "string",
            "enum": names,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(source: &str) -> Result<Config, ConfigError> {
        let text = format!(
            r#"
            [server]
            database_url = "postgres://localhost/pier"
            allow_short_secrets = true
            [[sources]]
            name = "s"
            {source}
            [[apps]]
            name = "web"
            image = "nexus.example.com:8443/demo/web"
            port = 8080
        "#
        );
        Config::parse(&text, Path::new("."))
    }

    fn err(source: &str) -> String {
        load(source).unwrap_err().to_string()
    }

    #[test]
    fn every_kind_needs_its_strongest_credential() {
        assert!(err(r#"kind = "github""#).contains("needs `hmac_secret`"));
        assert!(
            err(r#"kind = "github"
            secrets = ["k"]
            token = "abc""#)
            .contains("signs its deliveries")
        );
        assert!(err(r#"kind = "harbor""#).contains("needs `token`"));
        assert!(
            err(r#"kind = "quay"
            hmac_secret = "abc""#)
            .contains("cannot sign")
        );
        assert!(
            err(r#"kind = "artifactory"
            mode = "signing""#)
            .contains("needs `hmac_secret`")
        );
        assert!(
            err(r#"kind = "github"
            mode = "token"
            secrets = ["a"]"#)
            .contains("not a mode")
        );
        assert!(
            load(
                r#"kind = "artifactory"
            mode = "signing"
            secrets = ["a"]"#
            )
            .is_ok()
        );
    }

    #[test]
    fn a_url_token_must_be_long_and_url_safe() {
        assert!(
            err(r#"kind = "dockerhub"
            token = "short""#)
            .contains("at least 16")
        );
        assert!(
            err(r#"kind = "dockerhub"
            token = "has/a/slash/in/it/so/no""#)
            .contains("at least 16")
        );
        let c = load(
            r#"kind = "dockerhub"
            tokens = ["0123456789abcdef0123", "fedcba9876543210fedc"]
            registry = "nexus.example.com:8443""#,
        )
        .unwrap();
        assert_eq!(c.sources[0].tokens.len(), 2);
    }

    #[test]
    fn rotation_lists_and_single_fields_add_up() {
        let c = load(
            r#"kind = "github"
            hmac_secret = "old"
            secrets = ["new", ""]"#,
        )
        .unwrap();
        let keys: Vec<&[u8]> = c.sources[0].keys.iter().map(|k| k.expose()).collect();
        assert_eq!(keys, [b"old".as_slice(), b"new".as_slice()]);
        assert!(!format!("{:?}", c.sources[0]).contains("old"));
    }

    #[test]
    fn a_sender_without_a_host_needs_a_registry_that_some_app_uses() {
        assert!(
            err(r#"kind = "nexus"
            secrets = ["k"]"#)
            .contains("set `registry`")
        );
        assert!(
            err(r#"kind = "nexus"
            secrets = ["k"]
            registry = "nexus.example.com:9999""#)
            .contains("registry of no app")
        );
        assert!(
            err(r#"kind = "nexus"
            secrets = ["k"]
            registry = "https://nexus.example.com""#)
            .contains("not a host")
        );
        let c = load(
            r#"kind = "nexus"
            secrets = ["k"]
            registry = "nexus.example.com:8443""#,
        )
        .unwrap();
        assert_eq!(
            c.sources[0].registry.as_deref(),
            Some("nexus.example.com:8443")
        );
        let hub = load(
            r#"kind = "dockerhub"
            token = "0123456789abcdef0123""#,
        )
        .unwrap();
        assert_eq!(hub.sources[0].registry.as_deref(), Some("docker.io"));
    }

    #[test]
    fn standard_webhooks_secrets_are_whsec_base64() {
        let c = load(
            r#"kind = "generic"
            mode = "standard-webhooks"
            secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]"#,
        )
        .unwrap();
        assert_eq!(c.sources[0].keys[0].expose().len(), 24);
        assert_eq!(c.sources[0].tolerance, Duration::from_secs(300));
        assert!(
            err(r#"kind = "generic"
            mode = "standard-webhooks"
            secrets = ["whsec_not base64!"]"#)
            .contains("whsec_")
        );
    }
}
