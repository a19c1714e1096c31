//! `pier check`, as `nginx -t`: the config loaded and checked as `pier serve` would, every
//! secret reference (`env:NAME`, `file:PATH`, and `age:PATH#KEY` decrypted) resolved, and
//! every problem named by its
//! field, without printing any secret's value. Nothing is connected to: no database, no
//! engine, no registry.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use anyhow::bail;
use toml::Value;

use crate::config::{Config, ConfigError, Secret};

/// Stand-ins for secrets that cannot be resolved, so that the rest of the file is still
/// checked: values of the right shape for the fields that check theirs.
const STAND_IN: &str = "pier-check-stand-in-for-an-unresolved-secret";
const STAND_IN_DATABASE: &str = "postgres://pier-check@127.0.0.1/pier";
const STAND_IN_URL: &str = "https://pier-check.invalid/";
const STAND_IN_WEBHOOK_KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const STAND_IN_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$Zs9t6yUZhvUpYlKJhlFaO0dlBHhGsjnPvkQb3S3yJuY";
const STAND_IN_KEY: &str = include_str!("../../examples/keys/ci-cosign.pub");

pub(super) fn run(path: &Path) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(cause) => {
            let e = ConfigError::Read {
                path: path.to_owned(),
                cause,
            };
            bail!("{e}: give the config to check with --config FILE or PIER_CONFIG");
        }
    };
    let mut tree: toml::Table = match toml::from_str(&text) {
        Ok(t) => t,
        Err(e) => bail!("parse {}: {}", path.display(), e.message()),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut secrets = Secrets {
        base,
        found: 0,
        problems: Vec::new(),
        stand_ins: StandIns::default(),
    };
    secrets.table(&mut tree, "");
    let unresolved = secrets.problems.len();
    let mut problems = secrets.problems;
    let checked = if unresolved == 0 {
        text.clone()
    } else {
        toml::to_string(&tree)?
    };
    // A parse error (an unknown key, a wrong type) comes before any secret is resolved:
    // read from the file as written, its line numbers are the file's.
    let parsed = match Config::parse(&checked, base) {
        Err(ConfigError::Parse { .. }) if unresolved > 0 => Config::parse(&text, base),
        other => other,
    };
    match parsed {
        Ok(c) if problems.is_empty() => {
            let age = age_problems(&c);
            if age.is_empty() {
                if let Some(w) = c.secrets_dir_warning() {
                    eprintln!("pier check: warning: {w}");
                }
                println!("{}", summary(path, &c, secrets.found));
                return Ok(());
            }
            problems.extend(age);
        }
        Ok(_) => {}
        Err(e) => {
            let e = match e {
                ConfigError::Parse { message, .. } => format!("{}: {message}", path.display()),
                other => other.to_string(),
            };
            problems.push(match unresolved {
                0 => e,
                n => format!("{e} (checked with stand-ins for the {n} secret(s) above)"),
            });
        }
    }
    eprintln!("pier check: {}:", path.display());
    for p in &problems {
        eprintln!("  {p}");
    }
    bail!("{}: {} problem(s)", path.display(), problems.len())
}

/// Every `age:` secret read and decrypted as a deployment would (a deployment reads them
/// again: the files may change in between); each one that cannot be, named by its app
/// and key, never its value.
fn age_problems(c: &Config) -> Vec<String> {
    let identity = c.server.age_identity.as_ref();
    let mut problems = Vec::new();
    for app in &c.apps {
        for a in std::iter::once(app).chain(&app.services) {
            for (key, s) in &a.contained.secrets {
                if let crate::config::SecretFrom::Age(r) = &s.from
                    && let Err(e) = r.read(identity)
                {
                    problems.push(format!("apps.{}.secrets.{key}: {e}", app.name));
                }
            }
        }
    }
    problems
}

/// Every string written `env:NAME` or `file:PATH`, wherever it is: resolved as the loader
/// resolves it; one that cannot be is a problem, named by its field, and replaced in the
/// tree by a reference to a stand-in.
struct Secrets<'a> {
    base: &'a Path,
    found: usize,
    problems: Vec<String>,
    stand_ins: StandIns,
}

/// Files holding the stand-ins, in a folder of this process's own (mode 0700), deleted
/// when the check is done: a stand-in stays a `file:` reference, which the fields that
/// must be references (a contained app's `secrets`) accept.
#[derive(Default)]
struct StandIns {
    dir: Option<PathBuf>,
    written: usize,
}

impl StandIns {
    fn reference(&mut self, value: &str) -> std::io::Result<String> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let d = std::env::temp_dir().join(format!(
                    "pier-check-{}-{}",
                    std::process::id(),
                    uuid::Uuid::new_v4().simple()
                ));
                std::fs::DirBuilder::new().mode(0o700).create(&d)?;
                self.dir = Some(d.clone());
                d
            }
        };
        self.written += 1;
        let file = dir.join(self.written.to_string());
        std::fs::write(&file, value)?;
        Ok(format!("file:{}", file.display()))
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Secrets<'_> {
    fn table(&mut self, table: &mut toml::Table, at: &str) {
        for (key, value) in table.iter_mut() {
            let field = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            self.value(value, &field);
        }
    }

    fn value(&mut self, value: &mut Value, field: &str) {
        match value {
            Value::String(spec) if spec.starts_with("env:") || spec.starts_with("file:") => {
                self.found += 1;
                if let Err(e) = Secret::resolve(field, spec, self.base) {
                    self.problems.push(e.to_string());
                    let value = stand_in(field);
                    *spec = self
                        .stand_ins
                        .reference(value)
                        .unwrap_or_else(|_| value.to_owned());
                }
            }
            Value::Table(t) => self.table(t, field),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    // `apps[web]` for a table that has a name (or a host), else `keys[0]`.
                    let name = ["name", "host"]
                        .iter()
                        .find_map(|k| item.get(k).and_then(Value::as_str));
                    let at = match name {
                        Some(n) => format!("{field}[{n}]"),
                        None => format!("{field}[{i}]"),
                    };
                    self.value(item, &at);
                }
            }
            _ => {}
        }
    }
}

fn stand_in(field: &str) -> &'static str {
    if field.starts_with("server.database_url") {
        STAND_IN_DATABASE
    } else if field.starts_with("notifications[")
        && (field.ends_with("url") || field.ends_with(".homeserver"))
    {
        STAND_IN_URL
    } else if field.ends_with(".secret") || field.contains(".secrets[") {
        // A Standard Webhooks key is also a long enough HMAC key for the other senders.
        STAND_IN_WEBHOOK_KEY
    } else if field.ends_with("password_hash") {
        STAND_IN_HASH
    } else if field.starts_with("trust[") && field.contains(".keys[") {
        STAND_IN_KEY
    } else {
        STAND_IN
    }
}

/// `pier.toml: valid; 2 apps (web, api), 1 source (local), 1 target (local), 3 secrets
/// resolved`.
fn summary(path: &Path, c: &Config, secrets: usize) -> String {
    fn list<'a>(what: &str, names: impl Iterator<Item = &'a str>) -> String {
        let names: Vec<&str> = names.collect();
        format!("{} {what} ({})", names.len(), names.join(", "))
    }
    format!(
        "{}: valid; {}, {}, {}, {secrets} secret reference(s) resolved",
        path.display(),
        list("app(s)", c.apps.iter().map(|a| a.name.as_str())),
        list("source(s)", c.sources.iter().map(|s| s.name.as_str())),
        list("target(s)", c.targets.iter().map(|t| t.name.as_str())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_is_found_and_named_by_its_field() {
        let mut tree: toml::Table = toml::from_str(
            r#"
            [server]
            database_urls = ["env:PIER_CHECK_TEST_UNSET_A", "postgres://x/y"]
            [[admins]]
            name = "release"
            token = "file:/nonexistent/pier-check/release.token"
            [[trust]]
            keys = ["inline", "env:PIER_CHECK_TEST_UNSET_B"]
            "#,
        )
        .unwrap();
        let mut s = Secrets {
            base: Path::new("."),
            found: 0,
            problems: Vec::new(),
            stand_ins: StandIns::default(),
        };
        s.table(&mut tree, "");
        assert_eq!(s.found, 3);
        let all = s.problems.join("\n");
        for field in [
            "server.database_urls[0]",
            "admins[release].token",
            "trust[0].keys[1]",
        ] {
            assert!(all.contains(field), "{field}: {all}");
        }
        let stand_in = tree["server"]["database_urls"][0].as_str().unwrap();
        let file = stand_in.strip_prefix("file:").unwrap();
        assert_eq!(std::fs::read_to_string(file).unwrap(), STAND_IN_DATABASE);
        drop(s);
        assert!(
            !Path::new(file).exists(),
            "stand-ins are deleted after the check"
        );
    }
}
