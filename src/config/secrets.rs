//! An app's `secrets`: each key is a reference to a value (never the value itself) and says
//! how the container gets it: as an environment variable (the string form,
//! `KEY = "env:NAME"`) or as a file (`KEY = { from = "...", as = "file" }`, mounted at
//! `/run/secrets/KEY`, see `pipeline/secret_files.rs`).
//!
//! Invariants: `env:` and `file:` references are read at start-up and reload; `age:`
//! references are only checked here (their syntax, and that an identity is configured)
//! and read at each deployment, so a rotated file reaches the next container without a
//! reload. No error here or in `age.rs` ever quotes a value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, Secret};

/// Where the container finds a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SecretAs {
    /// An environment variable named by the key: visible in `docker inspect`.
    #[default]
    Env,
    /// A file `/run/secrets/KEY` (mode 0400, owned by the app's user): in no `inspect`.
    File,
}

/// An `age:PATH#KEY` reference: `PATH` is an age-encrypted file of `KEY=VALUE` lines.
#[derive(Clone, PartialEq, Eq)]
pub struct AgeRef {
    /// Resolved against the config file's folder.
    pub path: PathBuf,
    pub key: String,
}

impl std::fmt::Debug for AgeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "age:{}#{}", self.path.display(), self.key)
    }
}

/// Where a secret's value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum SecretFrom {
    /// `env:` or `file:`, read at start-up and reload.
    Loaded(Secret),
    /// `age:`, read and decrypted at each deployment (`age.rs`).
    Age(AgeRef),
}

/// One secret of an app: where its value comes from and where the container finds it.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSecret {
    pub from: SecretFrom,
    pub delivery: SecretAs,
}

impl AppSecret {
    /// The value read at load, for `env:`/`file:` references; `None` for `age:`.
    pub(crate) fn loaded(&self) -> Option<&Secret> {
        match &self.from {
            SecretFrom::Loaded(s) => Some(s),
            SecretFrom::Age(_) => None,
        }
    }
}

impl super::AppConfig {
    /// Every `age:` secret of this app and its services that can be read now: what its
    /// logs are masked with, beside the values read at load ([`super::AppConfig::secret_values`]).
    pub(crate) fn age_values(&self, identity: Option<&Secret>) -> Vec<Secret> {
        std::iter::once(self)
            .chain(&self.services)
            .flat_map(|a| a.contained.secrets.values())
            .filter_map(|s| match &s.from {
                SecretFrom::Age(r) => r.read(identity).ok(),
                SecretFrom::Loaded(_) => None,
            })
            .collect()
    }
}

/// A secret as written: `"env:NAME"` (given as an env variable) or a table.
pub(super) enum RawSecret {
    /// `"env:NAME"` or `"file:PATH"`, given to the container as an env variable.
    Reference(String),
    /// `{ from = "env:…" | "file:…" | "age:PATH#KEY", as = "env" | "file" }`.
    Table(RawSecretTable),
}

/// A secret with its delivery: `as = "file"` mounts it at `/run/secrets/KEY`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecretTable {
    /// `"env:NAME"`, `"file:PATH"` (read at start-up and reload) or `"age:PATH#KEY"` (the
    /// value of `KEY` in the age-encrypted file of `KEY=VALUE` lines at `PATH`, decrypted
    /// with `[server] age_identity` at each deployment).
    from: String,
    /// `"env"`: an environment variable; `"file"`: the file `/run/secrets/KEY`, mode 0400,
    /// owned by the app's numeric `user` (or the image's), on the engine host's tmpfs.
    ///
    /// Default: `"env"`.
    #[serde(default, rename = "as")]
    delivery: SecretAs,
}

/// By hand rather than `untagged`, so that a mistake in the table is named (an unknown
/// field, a bad `as`) instead of "did not match any variant".
impl<'de> Deserialize<'de> for RawSecret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawSecret;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "\"env:NAME\", \"file:PATH\" or { from = \"…\", as = \"env\" | \"file\" }",
                )
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<RawSecret, E> {
                Ok(RawSecret::Reference(s.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RawSecret, A::Error> {
                let table =
                    RawSecretTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawSecret::Table(table))
            }
        }
        d.deserialize_any(V)
    }
}

/// `"env:NAME"` or `{ from, as }`, as its parser reads it.
impl schemars::JsonSchema for RawSecret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AppSecret".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A secret: a reference given as an env variable, or a table saying where from and how the container gets it.",
            "anyOf": [
                {
                    "type": "string",
                    "description": "`\"env:NAME\"` or `\"file:PATH\"`, given as the env variable KEY.",
                    "examples": ["env:BILLING_DB_PASSWORD"]
                },
                {
                    "type": "object",
                    "description": "`{ from = \"env:NAME\" | \"file:PATH\" | \"age:PATH#KEY\", as = \"env\" | \"file\" }`: `from` is read at start-up and reload (`env:`, `file:`) or at each deployment (`age:`: KEY's value in the age-encrypted file of KEY=VALUE lines at PATH, decrypted with `[server] age_identity`); `as` is `\"env\"` (default, an env variable) or `\"file\"` (the file `/run/secrets/KEY`, mode 0400, owned by the app's user).",
                    "required": ["from"]
                }
            ]
        })
    }
}

/// An environment variable's name: what a secret's key and `port_env` must be.
pub(super) fn env_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn invalid(app: &str, msg: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("app `{app}`: {msg}"))
}

/// `age:PATH#KEY`; the path is relative to the config's folder.
fn age_ref(app: &str, key: &str, spec: &str, base: &Path) -> Result<AgeRef, ConfigError> {
    let rest = spec.strip_prefix("age:").unwrap_or(spec);
    match rest.rsplit_once('#') {
        Some((path, k)) if !path.is_empty() && env_name(k) => Ok(AgeRef {
            path: base.join(path),
            key: k.to_owned(),
        }),
        _ => Err(invalid(
            app,
            format!("secret `{key}`: an age reference is `age:PATH#KEY` (KEY an env name)"),
        )),
    }
}

/// Secrets are references only, never values in the file, and never a key `env` has too.
pub(super) fn resolve(
    app: &str,
    raw: BTreeMap<String, RawSecret>,
    env: &BTreeMap<String, Secret>,
    base: &Path,
) -> Result<BTreeMap<String, AppSecret>, ConfigError> {
    let mut secrets = BTreeMap::new();
    for (k, entry) in raw {
        if !env_name(&k) {
            return Err(invalid(app, format!("secret `{k}` is not an env name")));
        }
        let (spec, delivery) = match entry {
            RawSecret::Reference(s) => (s, SecretAs::Env),
            RawSecret::Table(t) => (t.from, t.delivery),
        };
        // A key in both would let a plain value silently stand for the secret (or the
        // reverse): which one the app gets must never depend on merge order. A file
        // secret's key is refused too: the same name in env and in a file is two values.
        if env.contains_key(&k) {
            let what = match delivery {
                SecretAs::Env => "both a plain env value and a secret",
                SecretAs::File => "both a plain env value and a secret file",
            };
            return Err(invalid(app, format!("`{k}` is {what}; keep one")));
        }
        let from = if spec.starts_with("age:") {
            SecretFrom::Age(age_ref(app, &k, &spec, base)?)
        } else if spec.starts_with("env:") || spec.starts_with("file:") {
            let what = format!("apps.{app}.secrets.{k}");
            SecretFrom::Loaded(Secret::resolve(&what, &spec, base)?)
        } else {
            return Err(invalid(
                app,
                format!("secret `{k}` must be an env:, file: or age: reference, never a value"),
            ));
        };
        secrets.insert(k, AppSecret { from, delivery });
    }
    Ok(secrets)
}

/// Secret files are owned by the app's user, resolved as a number: a `user` given by name
/// would need the image's `/etc/passwd`, which Pier does not read.
pub(super) fn check_file_owner(
    app: &str,
    secrets: &BTreeMap<String, AppSecret>,
    user: Option<&str>,
) -> Result<(), ConfigError> {
    let files = secrets.values().any(|s| s.delivery == SecretAs::File);
    if files
        && let Some(u) = user
        && super::TmpfsOwner::of_user(u).is_none()
    {
        return Err(invalid(
            app,
            format!(
                "user `{u}`: secrets as files are owned by the app's user, which must then be \
                 numeric (`uid` or `uid:gid`)"
            ),
        ));
    }
    Ok(())
}

/// Secret files are bound at `/run/secrets`: another mount there would hide them, or
/// they it.
pub(super) fn check_files_target(
    app: &str,
    secrets: &BTreeMap<String, AppSecret>,
    mounts: &[String],
) -> Result<(), ConfigError> {
    let files = secrets.values().any(|s| s.delivery == SecretAs::File);
    if files && mounts.iter().any(|m| m == "/run/secrets") {
        return Err(invalid(
            app,
            "a mount at /run/secrets would hide the secret files (`as = \"file\"`) Pier \
             binds there",
        ));
    }
    Ok(())
}

/// The file system type `path` would be on here, read from `mountinfo` (the longest mount
/// point that is a prefix of it): `None` when that cannot be read. Only meaningful where
/// Pier shares the engine's host and mount namespace, so it is a warning, never a refusal.
pub(crate) fn fs_type_of(path: &Path, mountinfo: &str) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fs)) = (fields.get(4), fields.get(sep + 1)) else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if path.starts_with(&point) && best.as_ref().is_none_or(|(n, _)| point.len() >= *n) {
            best = Some((point.len(), (*fs).to_owned()));
        }
    }
    best.map(|(_, fs)| fs)
}

impl super::Config {
    /// A warning when an app has secret files and `secrets_dir` is, on this host, not on a
    /// tmpfs: the engine would write the values to disk there.
    pub(crate) fn secrets_dir_warning(&self) -> Option<String> {
        let files = self
            .apps
            .iter()
            .flat_map(|a| std::iter::once(a).chain(&a.services))
            .flat_map(|a| a.contained.secrets.values())
            .any(|s| s.delivery == SecretAs::File);
        let dir = &self.server.secrets_dir;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let fs = fs_type_of(dir, &mountinfo)?;
        (files && fs != "tmpfs").then(|| {
            format!(
                "server.secrets_dir {} is on {fs} here, not a tmpfs: secret files (as = \"file\") \
                 would be written to disk; point it at a tmpfs (such as a folder of /dev/shm \
                 or of a /run that is one)",
                dir.display()
            )
        })
    }
}

/// `age:` secrets need the identity that decrypts them; a Swarm target takes only
/// `env:`/`file:` secrets (its secrets are Swarm's, written when the service is updated,
/// and an `age:` file read per deployment is not wired there).
pub(super) fn check_age(apps: &[super::AppConfig], identity: bool) -> Result<(), ConfigError> {
    for app in apps {
        let all = std::iter::once(app).chain(&app.services);
        let age = all
            .flat_map(|a| a.contained.secrets.iter())
            .find(|(_, s)| matches!(s.from, SecretFrom::Age(_)));
        let Some((key, _)) = age else { continue };
        if !identity {
            return Err(invalid(
                &app.name,
                format!("secret `{key}` is an age: reference but [server] has no age_identity"),
            ));
        }
        if app.swarm.is_some() {
            return Err(invalid(
                &app.name,
                format!(
                    "secret `{key}`: a Swarm target takes env: and file: secrets only, \
                     not age:"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &str) -> Result<super::super::Config, String> {
        use age::secrecy::ExposeSecret;
        let id = age::x25519::Identity::generate();
        // SAFETY: only these tests read this variable; each sets a valid identity.
        unsafe { std::env::set_var("PIER_TEST_SECRETS_AGE_ID", id.to_string().expose_secret()) };
        let text = format!(
            "[server]\ndatabase_url = \"postgres://localhost/pier\"\n\
             age_identity = \"env:PIER_TEST_SECRETS_AGE_ID\"\n[[apps]]\n\
             name = \"web\"\nimage = \"127.0.0.1:5000/demo/web\"\nport = 8080\n{lines}\n"
        );
        super::super::Config::parse(&text, Path::new("/etc/pier")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_key_that_is_both_a_plain_env_value_and_a_secret_file_is_refused_by_name() {
        let e = parse(
            "env = { DB_PASSWORD = \"plain\" }\n\
             secrets = { DB_PASSWORD = { from = \"age:s.age#DB_PASSWORD\", as = \"file\" } }",
        )
        .unwrap_err();
        assert!(e.contains("app `web`"), "{e}");
        assert!(
            e.contains("`DB_PASSWORD` is both a plain env value and a secret file"),
            "{e}"
        );
    }

    #[test]
    fn an_age_reference_needs_a_path_and_a_key() {
        for bad in ["age:s.age", "age:#K", "age:s.age#not-a-name"] {
            let e = parse(&format!("secrets = {{ K = {{ from = \"{bad}\" }} }}")).unwrap_err();
            assert!(e.contains("age:PATH#KEY"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_unknown_field_or_delivery_of_a_secret_is_refused() {
        let e = parse("secrets = { K = { from = \"env:HOME\", as = \"volume\" } }").unwrap_err();
        assert!(e.contains("unknown variant `volume`"), "{e}");
        let e = parse("secrets = { K = { from = \"env:HOME\", mode = \"0400\" } }").unwrap_err();
        assert!(e.contains("unknown field `mode`"), "{e}");
    }

    #[test]
    fn the_string_form_is_an_env_secret_and_an_age_secret_is_not_read_at_load() {
        // SAFETY: only this test reads this variable.
        unsafe { std::env::set_var("PIER_TEST_SECRETS_FORM", "v") };
        let c = parse(
            "secrets = { A = \"env:PIER_TEST_SECRETS_FORM\", \
             B = { from = \"age:keys/web.age#B\", as = \"file\" } }",
        )
        .unwrap();
        let s = &c.apps[0].contained.secrets;
        assert_eq!(s["A"].delivery, SecretAs::Env);
        assert_eq!(s["A"].loaded().map(Secret::expose), Some("v"));
        assert_eq!(s["B"].delivery, SecretAs::File);
        assert_eq!(
            s["B"].from,
            SecretFrom::Age(AgeRef {
                path: PathBuf::from("/etc/pier/keys/web.age"),
                key: "B".into()
            })
        );
    }

    #[test]
    fn the_file_system_of_a_path_is_its_longest_mount_points() {
        let info = "22 1 0:21 / / rw - overlay overlay rw\n\
                    30 22 0:25 / /run rw,nosuid - tmpfs tmpfs rw\n\
                    31 30 0:26 / /run/user/1000 rw - tmpfs tmpfs rw\n\
                    32 22 0:27 / /srv/my\\040data rw - ext4 /dev/sda2 rw\n";
        let fs = |p: &str| fs_type_of(Path::new(p), info);
        assert_eq!(fs("/run/pier-secrets").as_deref(), Some("tmpfs"));
        assert_eq!(fs("/var/lib/pier").as_deref(), Some("overlay"));
        assert_eq!(fs("/srv/my data/s").as_deref(), Some("ext4"));
        // A path component, not a string prefix: /running is on /.
        assert_eq!(fs("/running").as_deref(), Some("overlay"));
    }

    #[test]
    fn a_swarm_app_takes_file_secrets_as_swarm_secrets_and_refuses_age_ones() {
        let swarm = "targets = [\"swarm\"]\n";
        let text = |secret: &str| {
            format!(
                "[server]\ndatabase_url = \"postgres://localhost/pier\"\n\
                 age_identity = \"env:PIER_TEST_SECRETS_AGE_ID\"\n\
                 [[targets]]\nname = \"swarm\"\nkind = \"swarm\"\n\
                 host = \"unix:///var/run/docker.sock\"\n[[apps]]\nname = \"web\"\n\
                 image = \"127.0.0.1:5000/demo/web\"\nport = 8080\n{swarm}\
                 secrets = {{ K = {{ from = \"{secret}\", as = \"file\" }} }}\n"
            )
        };
        // The identity variable, as `parse` sets it.
        parse("").unwrap();
        let base = Path::new("/etc/pier");
        let c = super::super::Config::parse(&text("env:HOME"), base).unwrap();
        assert!(c.apps[0].swarm.is_some());
        let e = super::super::Config::parse(&text("age:s.age#K"), base)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a Swarm target takes env: and file: secrets only"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_file_needs_a_numeric_user_and_no_other_mount_at_run_secrets() {
        let e =
            parse("user = \"nobody\"\nsecrets = { K = { from = \"env:HOME\", as = \"file\" } }")
                .unwrap_err();
        assert!(e.contains("must then be numeric"), "{e}");
        parse("user = \"10001\"\nsecrets = { K = { from = \"env:HOME\", as = \"file\" } }")
            .unwrap();
        let e = parse(
            "tmpfs = [\"/run/secrets\"]\nsecrets = { K = { from = \"env:HOME\", as = \"file\" } }",
        )
        .unwrap_err();
        assert!(e.contains("a mount at /run/secrets would hide"), "{e}");
    }
}
