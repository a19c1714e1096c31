//! Webhook sources: what sends, how it proves itself, and how to fill in what it omits.
//! Every rule a source's credentials must satisfy is checked here, at start-up, so that
//! intake never meets a source it cannot authenticate.

use base64::Engine as _;

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Distribution,
    Generic,
    Github,
    Gitea,
    Forgejo,
    Harbor,
    Zot,
    Dockerhub,
    Quay,
    Artifactory,
    Nexus,
    Acr,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Distribution => "distribution",
            SourceKind::Generic => "generic",
            SourceKind::Github => "github",
            SourceKind::Gitea => "gitea",
            SourceKind::Forgejo => "forgejo",
            SourceKind::Harbor => "harbor",
            SourceKind::Zot => "zot",
            SourceKind::Dockerhub => "dockerhub",
            SourceKind::Quay => "quay",
            SourceKind::Artifactory => "artifactory",
            SourceKind::Nexus => "nexus",
            SourceKind::Acr => "acr",
        }
    }

    /// Senders that cannot set a header: the secret is the URL's last segment.
    pub fn token_in_path(self) -> bool {
        matches!(self, SourceKind::Dockerhub | SourceKind::Quay)
    }

    /// Senders that lower-case the tag they report (Gitea and its fork store the PUT
    /// reference lower-cased), so an app's tag is matched ignoring case.
    pub fn folds_tag_case(self) -> bool {
        matches!(self, SourceKind::Gitea | SourceKind::Forgejo)
    }

    /// Whether two authentic deliveries with the same body are the same event. True where
    /// the body carries an event id or a timestamp, or names the digest (then a repeat
    /// can only ask for what already runs). Quay repeats one body for every push of a tag,
    /// Zot and Artifactory one body for every push of the same digest, which a rollback by
    /// re-push needs: for them a repeated body is deduplicated downstream, by (app, digest)
    /// and by the no-op for what already runs.
    pub fn body_is_unique(self) -> bool {
        !matches!(
            self,
            SourceKind::Quay | SourceKind::Zot | SourceKind::Artifactory
        )
    }
}

/// How a `generic` or `artifactory` source authenticates; other kinds have one way only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
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
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HmacKey(***)")
    }
}

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

fn default_tolerance() -> Duration {
    Duration::from_secs(300)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    name: String,
    kind: SourceKind,
    token: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
    hmac_secret: Option<String>,
    #[serde(default)]
    secrets: Vec<String>,
    signature_header: Option<String>,
    mode: Option<SourceMode>,
    #[serde(default = "default_tolerance", with = "humantime_serde")]
    tolerance: Duration,
    registry: Option<String>,
    access_method: Option<ArtifactoryAccess>,
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
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

/// A Standard Webhooks secret: `whsec_` and the base64 of the key.
fn standard_webhooks_key(what: &str, secret: &str) -> Result<HmacKey, ConfigError> {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .ok()
        .filter(|k| !k.is_empty())
        .map(HmacKey)
        .ok_or_else(|| invalid(format!("{what}: not a `whsec_<base64>` secret")))
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
        let name = self.name;
        let kind = self.kind;
        let what = |field: &str| format!("sources.{name}.{field}");
        let mut tokens = Vec::new();
        for (field, spec) in self
            .token
            .iter()
            .map(|t| ("token", t))
            .chain(self.tokens.iter().map(|t| ("tokens", t)))
        {
            let t = Secret::resolve(&what(field), spec, base)?;
            if !t.expose().is_empty() {
                tokens.push(t);
            }
        }
        let mut secrets = Vec::new();
        for (field, spec) in self
            .hmac_secret
            .iter()
            .map(|t| ("hmac_secret", t))
            .chain(self.secrets.iter().map(|t| ("secrets", t)))
        {
            let s = Secret::resolve(&what(field), spec, base)?;
            if !s.expose().is_empty() {
                secrets.push(s);
            }
        }

        let mode = match (kind, self.mode) {
            (SourceKind::Generic, None) => SourceMode::Hmac,
            (SourceKind::Generic, Some(m @ (SourceMode::Hmac | SourceMode::StandardWebhooks))) => m,
            (SourceKind::Artifactory, None) => SourceMode::Token,
            (SourceKind::Artifactory, Some(m @ (SourceMode::Token | SourceMode::Signing))) => m,
            (SourceKind::Distribution | SourceKind::Github | SourceKind::Gitea, None)
            | (SourceKind::Forgejo | SourceKind::Nexus, None) => SourceMode::Hmac,
            (_, None) => SourceMode::Token,
            (k, Some(m)) => {
                return Err(invalid(format!(
                    "source `{name}`: mode {m:?} is not a mode of kind {}",
                    k.as_str()
                )));
            }
        };

        // What each kind needs: its strongest mechanism is required, never optional.
        let needs_secret = matches!(
            (kind, mode),
            (SourceKind::Generic, _)
                | (
                    SourceKind::Github | SourceKind::Gitea | SourceKind::Forgejo,
                    _
                )
                | (SourceKind::Nexus, _)
                | (SourceKind::Artifactory, SourceMode::Signing)
        );
        let needs_token = matches!(
            (kind, mode),
            (SourceKind::Harbor | SourceKind::Zot | SourceKind::Acr, _)
                | (SourceKind::Dockerhub | SourceKind::Quay, _)
                | (SourceKind::Artifactory, SourceMode::Token)
        );
        let takes_token = needs_token
            || matches!(
                kind,
                SourceKind::Distribution
                    | SourceKind::Generic
                    | SourceKind::Gitea
                    | SourceKind::Forgejo
            );
        let takes_secret = needs_secret || kind == SourceKind::Distribution;
        if !takes_token && !tokens.is_empty() {
            return Err(invalid(format!(
                "source `{name}`: a {} source signs its deliveries; give `secrets`, not `tokens`",
                kind.as_str()
            )));
        }
        if !takes_secret && !secrets.is_empty() {
            return Err(invalid(format!(
                "source `{name}`: a {} source cannot sign; give `tokens`, not `secrets`",
                kind.as_str()
            )));
        }
        if kind == SourceKind::Distribution && tokens.is_empty() && secrets.is_empty() {
            return Err(invalid(format!(
                "source `{name}`: a distribution source needs `token` or `hmac_secret`; \
                 Pier never accepts unauthenticated webhooks"
            )));
        }
        if needs_secret && secrets.is_empty() {
            return Err(invalid(format!(
                "source `{name}`: a {} source needs `hmac_secret` or `secrets`; \
                 Pier never accepts unauthenticated webhooks",
                kind.as_str()
            )));
        }
        if needs_token && tokens.is_empty() {
            return Err(invalid(format!(
                "source `{name}`: a {} source needs `token` or `tokens`; \
                 Pier never accepts unauthenticated webhooks",
                kind.as_str()
            )));
        }
        if kind.token_in_path()
            && let Some(t) = tokens.iter().find(|t| {
                t.expose().len() < 16
                    || !t
                        .expose()
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
        {
            let _ = t;
            return Err(invalid(format!(
                "source `{name}`: a URL token must be at least 16 letters, digits, - or _"
            )));
        }
        let keys = if mode == SourceMode::StandardWebhooks {
            secrets
                .iter()
                .map(|s| standard_webhooks_key(&what("secrets"), s.expose()))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            secrets
                .iter()
                .map(|s| HmacKey(s.expose().as_bytes().to_vec()))
                .collect()
        };

        if self.signature_header.is_some()
            && !(matches!(kind, SourceKind::Distribution)
                || (kind == SourceKind::Generic && mode == SourceMode::Hmac))
        {
            return Err(invalid(format!(
                "source `{name}`: signature_header is fixed by kind {}",
                kind.as_str()
            )));
        }
        let signature_header = self.signature_header.unwrap_or_else(|| {
            match kind {
                SourceKind::Generic => "X-Pier-Signature",
                _ => "X-Hub-Signature-256",
            }
            .to_owned()
        });
        if axum::http::HeaderName::try_from(signature_header.as_str()).is_err() {
            return Err(invalid(format!(
                "source `{name}`: `{signature_header}` is not a header name"
            )));
        }
        if self.tolerance < Duration::from_secs(1) || self.tolerance > Duration::from_secs(3600) {
            return Err(invalid(format!(
                "source `{name}`: tolerance must be between 1s and 1h"
            )));
        }

        let access_method = match (kind, self.access_method) {
            (SourceKind::Artifactory, m) => m.unwrap_or_default(),
            (_, None) => ArtifactoryAccess::default(),
            (k, Some(_)) => {
                return Err(invalid(format!(
                    "source `{name}`: `access_method` is for kind artifactory, not {}",
                    k.as_str()
                )));
            }
        };
        if kind == SourceKind::Artifactory
            && access_method == ArtifactoryAccess::Port
            && self.registry.is_none()
        {
            return Err(invalid(format!(
                "source `{name}`: with access_method = \"port\" the payload names no host and \
                 port; set `registry` to the host:port your apps pull this repository from"
            )));
        }
        let registry = match (self.registry, kind) {
            (Some(host), _) => {
                if !valid_host(&host) {
                    return Err(invalid(format!(
                        "source `{name}`: registry `{host}` is not a host or host:port"
                    )));
                }
                if !app_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
                    return Err(invalid(format!(
                        "source `{name}`: registry `{host}` is the registry of no app; \
                         it must match the host part of an app's `image`"
                    )));
                }
                Some(host)
            }
            (None, SourceKind::Dockerhub) => Some("docker.io".to_owned()),
            (None, SourceKind::Nexus | SourceKind::Zot) => {
                return Err(invalid(format!(
                    "source `{name}`: a {} delivery names no registry host; set `registry` \
                     to the host (and port) your apps pull its images from",
                    kind.as_str()
                )));
            }
            (None, _) => None,
        };

        Ok(SourceConfig {
            name,
            kind,
            mode,
            tokens,
            keys,
            signature_header,
            tolerance: self.tolerance,
            registry,
            access_method,
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
