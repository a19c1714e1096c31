//! `[[trust]]`: which keys may sign the images of which repositories. Every key
//! is read and parsed at load: one that does not parse stops Pier with its field named,
//! never at the first deployment. Each app's requirement is settled here too, from its own
//! `require_signature` or the entries that cover its image.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{AppConfig, ConfigError, invalid};
use crate::signature::{Policy, PublicKey, Rule};

/// Repositories per entry, and keys per entry: a policy, not a database.
const MAX_PATTERNS: usize = 64;
const MAX_KEYS: usize = 32;
/// A key file is a few hundred bytes; a larger one is not a public key.
const MAX_KEY_FILE: u64 = 64 << 10;
/// Longest wait for a signature that is not there yet.
const MAX_WAIT: Duration = Duration::from_secs(600);

fn default_true() -> bool {
    true
}
fn default_wait() -> Duration {
    Duration::from_secs(30)
}

/// Which keys sign which repositories' images. Every app whose image an entry covers must
/// then carry a cosign signature by one of its keys over the exact digest, checked before
/// anything is pulled.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrust {
    /// Named in messages and on the page (`trust ci`): lower-case letters, digits, `-`,
    /// `_`; unique.
    name: String,
    /// Globs over full repository names with their registry, as `docker pull` reads them
    /// (`docker.io/acme/*`, `127.0.0.1:5000/demo/web`): `*` within one path segment, `**`
    /// any number of segments, `?` one character.
    repositories: Vec<String>,
    /// Public keys, each `file:PATH`, `env:NAME` or the PEM inline: ECDSA P-256 (cosign's)
    /// or Ed25519. A key that does not parse stops Pier at start-up with its field named.
    #[schemars(with = "Vec<super::doc_types::SecretText>")]
    keys: Vec<String>,
    /// What the signed payload must carry, with exactly these values (`cosign sign -a
    /// pipeline=release`).
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    /// The apps this entry covers must be signed (an app's own `require_signature` wins).
    #[serde(default = "default_true")]
    require_signature: bool,
    /// How long the `signature` step waits when no signature exists yet at all (CI that
    /// pushes, then signs); at most `"10m"`. A wrong signature fails at once.
    #[serde(default = "default_wait", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
    wait: Duration,
}

/// One entry, checked whole.
#[derive(Debug, Clone)]
pub struct TrustEntry {
    pub name: String,
    pub repositories: Vec<String>,
    pub rule: Rule,
    pub require_signature: bool,
    pub wait: Duration,
}

impl TrustEntry {
    /// Whether this entry covers `image` (`registry/repository`): `*` within one path
    /// segment, `**` any number of segments, `?` one character.
    pub(crate) fn covers(&self, image: &str) -> bool {
        self.repositories.iter().any(|p| repository_match(p, image))
    }
}

pub(super) fn resolve(raw: Vec<RawTrust>, base: &Path) -> Result<Vec<TrustEntry>, ConfigError> {
    let mut out: Vec<TrustEntry> = Vec::new();
    for t in raw {
        if !crate::domain::is_name(&t.name) {
            return Err(invalid(format!(
                "trust name `{}`: use lower-case letters, digits, - and _",
                t.name
            )));
        }
        if out.iter().any(|o| o.name == t.name) {
            return Err(invalid(format!("trust `{}` is defined twice", t.name)));
        }
        let what = |field: &str| format!("trust `{}`: {field}", t.name);
        if t.repositories.is_empty() || t.repositories.len() > MAX_PATTERNS {
            return Err(invalid(format!(
                "{}: give 1 to {MAX_PATTERNS} repository globs",
                what("repositories")
            )));
        }
        for (i, p) in t.repositories.iter().enumerate() {
            check_pattern(p)
                .map_err(|e| invalid(format!("{}: {e}", what(&format!("repositories[{i}]")))))?;
        }
        if t.keys.is_empty() || t.keys.len() > MAX_KEYS {
            return Err(invalid(format!(
                "{}: give 1 to {MAX_KEYS} keys",
                what("keys")
            )));
        }
        let mut keys: Vec<PublicKey> = Vec::new();
        for (i, spec) in t.keys.iter().enumerate() {
            let field = what(&format!("keys[{i}]"));
            let key = read_key(&field, spec, base)?;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        if t.wait > MAX_WAIT {
            return Err(invalid(format!("{}: at most 10m", what("wait"))));
        }
        out.push(TrustEntry {
            rule: Rule {
                name: t.name.clone(),
                keys,
                annotations: t.annotations,
            },
            name: t.name,
            repositories: t.repositories,
            require_signature: t.require_signature,
            wait: t.wait,
        });
    }
    Ok(out)
}

/// A key given as `file:PATH` (relative to the config's folder), `env:NAME` or inline PEM.
fn read_key(field: &str, spec: &str, base: &Path) -> Result<PublicKey, ConfigError> {
    let text = if let Some(path) = spec.strip_prefix("file:") {
        let path = base.join(path);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len > MAX_KEY_FILE {
            return Err(invalid(format!(
                "{field}: {} is {len} bytes, not a public key",
                path.display()
            )));
        }
        std::fs::read_to_string(&path).map_err(|cause| ConfigError::SecretFile {
            what: field.to_owned(),
            path,
            cause,
        })?
    } else {
        super::Secret::resolve(field, spec, base)?
            .expose()
            .to_owned()
    };
    PublicKey::from_pem(&text).map_err(|e| invalid(format!("{field}: {e}")))
}

/// Why a repository glob of a `[[trust]]` entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum PatternError {
    #[error(
        "`{0}` must start with its registry host, written out (e.g. `docker.io/acme/*`, \
         `127.0.0.1:5000/demo/web`)"
    )]
    NoHost(String),
    #[error("`{0}` has characters no repository name has")]
    Characters(String),
}

/// A repository glob must name its registry (`docker.io/acme/*`, not `acme/*`): trust is
/// given per registry, and a short Docker Hub form would read as another registry's path.
fn check_pattern(p: &str) -> Result<(), PatternError> {
    let host = p.split('/').next().unwrap_or_default();
    let names_host = host.contains('.') || host.contains(':') || host == "localhost";
    if !names_host || !p.contains('/') || host.contains(['*', '?']) {
        return Err(PatternError::NoHost(p.to_owned()));
    }
    if !p.bytes().all(|b| {
        b.is_ascii_lowercase()
            || b.is_ascii_digit()
            || matches!(b, b'.' | b'_' | b'-' | b'/' | b':' | b'*' | b'?')
    }) {
        return Err(PatternError::Characters(p.to_owned()));
    }
    Ok(())
}

/// Segment by segment, so that `demo/*` covers `demo/web` but not `demo/web/db`; `**`
/// takes any number of segments (none included). Bounded: patterns and names are short,
/// and each `**` tries at most every remaining segment once per position.
fn repository_match(pattern: &str, name: &str) -> bool {
    fn segs(p: &[&str], n: &[&str]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((&"**", rest)) => (0..=n.len()).any(|i| segs(rest, &n[i..])),
            Some((first, rest)) => n
                .split_first()
                .is_some_and(|(h, t)| super::glob_match(first, h, false) && segs(rest, t)),
        }
    }
    let p: Vec<&str> = pattern.split('/').collect();
    let n: Vec<&str> = name.split('/').collect();
    segs(&p, &n)
}

/// What `app` must be signed by: `None` when it need not be. An app that must be signed but
/// that no entry covers, or whose further service runs another repository's image, is a
/// config error: Pier never runs an image it was told to check without checking it.
pub(super) fn for_app(
    app: &AppConfig,
    require: Option<bool>,
    trust: &[TrustEntry],
) -> Result<Option<Arc<Policy>>, ConfigError> {
    let image = app.image_name.to_string();
    let covering: Vec<&TrustEntry> = trust.iter().filter(|t| t.covers(&image)).collect();
    let required = require.unwrap_or_else(|| covering.iter().any(|t| t.require_signature));
    if !required {
        return Ok(None);
    }
    if covering.is_empty() {
        return Err(invalid(format!(
            "app `{}`: require_signature = true, but no [[trust]] entry covers {image}",
            app.name
        )));
    }
    if let Some(svc) = app.services.iter().find(|s| app.own_image(s)) {
        return Err(invalid(format!(
            "app `{}`: its images must be signed, but service `{}` runs {}, another \
             repository, whose signature Pier does not check yet; give it the app's image or \
             set require_signature = false on the app",
            app.name, svc.contained.service, svc.image
        )));
    }
    Ok(Some(Arc::new(Policy {
        rules: covering.iter().map(|t| t.rule.clone()).collect(),
        wait: covering.iter().map(|t| t.wait).max().unwrap_or_default(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_covers_one_segment_and_a_double_star_any_number() {
        let m = repository_match;
        assert!(m("127.0.0.1:5000/demo/*", "127.0.0.1:5000/demo/web"));
        assert!(!m("127.0.0.1:5000/demo/*", "127.0.0.1:5000/demo/web/db"));
        assert!(!m("127.0.0.1:5000/demo/*", "127.0.0.1:5001/demo/web"));
        assert!(m("ghcr.io/acme/**", "ghcr.io/acme/web/db"));
        assert!(m("ghcr.io/acme/**", "ghcr.io/acme"));
        assert!(!m("ghcr.io/acme/**", "ghcr.io/acmeco/web"));
        assert!(m("docker.io/library/nginx", "docker.io/library/nginx"));
        assert!(m("ghcr.io/**/web", "ghcr.io/a/b/web"));
        assert!(m("ghcr.io/acme/web-?", "ghcr.io/acme/web-1"));
    }

    const APP: &str = r#"
        [server]
        database_url = "postgres://localhost/pier"
        [[apps]]
        name = "web"
        image = "127.0.0.1:5000/demo/web"
        port = 8080
    "#;

    fn pem() -> String {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).unwrap();
        let k = p256::ecdsa::SigningKey::from_slice(&b).unwrap();
        p256::pkcs8::EncodePublicKey::to_public_key_pem(
            k.verifying_key(),
            p256::pkcs8::LineEnding::LF,
        )
        .unwrap()
    }

    fn load(text: &str, dir: &Path) -> Result<super::super::Config, String> {
        super::super::Config::parse(text, dir).map_err(|e| e.to_string())
    }

    fn with_trust(lines: &str) -> String {
        format!(
            "{APP}\n[[trust]]\nname = \"ci\"\nrepositories = [\"127.0.0.1:5000/demo/*\"]\n{lines}\n"
        )
    }

    #[test]
    fn a_covering_entry_makes_the_app_require_its_keys_and_an_app_may_say_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ci.pub"), pem()).unwrap();
        let trust = with_trust(&format!(
            "keys = [\"file:ci.pub\", '''{}''']\nannotations = {{ env = \"prod\" }}\nwait = \"5s\"",
            pem()
        ));
        let c = load(&trust, dir.path()).unwrap();
        let p = c.apps[0]
            .signature
            .as_ref()
            .expect("inherited from [[trust]] ci");
        assert_eq!(p.rules.len(), 1);
        assert_eq!(p.rules[0].keys.len(), 2);
        assert_eq!(p.rules[0].annotations["env"], "prod");
        assert_eq!(p.wait, Duration::from_secs(5));
        assert_eq!(p.keys().len(), 2);

        let opted_out = trust.replace("port = 8080", "port = 8080\nrequire_signature = false");
        assert!(
            load(&opted_out, dir.path()).unwrap().apps[0]
                .signature
                .is_none()
        );
        let not_required = trust.replace("wait =", "require_signature = false\nwait =");
        assert!(
            load(&not_required, dir.path()).unwrap().apps[0]
                .signature
                .is_none()
        );
        let uncovered = trust.replace("demo/*", "other/*");
        assert!(
            load(&uncovered, dir.path()).unwrap().apps[0]
                .signature
                .is_none()
        );
        let demanded = uncovered.replace("port = 8080", "port = 8080\nrequire_signature = true");
        let e = load(&demanded, dir.path()).unwrap_err();
        assert!(
            e.contains("no [[trust]] entry covers 127.0.0.1:5000/demo/web"),
            "{e}"
        );
    }

    #[test]
    fn a_key_that_does_not_load_stops_pier_with_its_field_named() {
        let dir = tempfile::tempdir().unwrap();
        let with_key = |key: &str| with_trust(&format!("keys = ['''{}''', {key}]", pem()));
        for (key, want) in [
            ("\"not a key\"", "trust `ci`: keys[1]: not a PEM public key"),
            ("\"file:missing.pub\"", "trust `ci`: keys[1]"),
            (
                "'''-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----'''",
                "trust `ci`: keys[1]: a private key",
            ),
        ] {
            let e = load(&with_key(key), dir.path()).unwrap_err();
            assert!(e.contains(want), "{key}: {e}");
        }
        let short = with_key("\"x\"").replace("\"127.0.0.1:5000/demo/*\"", "\"demo/*\"");
        let e = load(&short, dir.path()).unwrap_err();
        assert!(e.contains("trust `ci`: repositories[0]"), "{e}");
    }

    #[test]
    fn a_pattern_names_its_registry() {
        assert!(check_pattern("docker.io/acme/*").is_ok());
        assert!(check_pattern("localhost/web").is_ok());
        for bad in [
            "acme/*",
            "*/acme/web",
            "ghcr.io",
            "ghcr.io/Acme",
            "ghcr.io/a b",
        ] {
            assert!(check_pattern(bad).is_err(), "{bad}");
        }
    }
}
