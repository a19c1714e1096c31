//! `[policy]`: the admin's list of host paths each app may mount or use as a device,
//! checked against an app's files, binds and devices from the live config before every
//! engine change. Refusals name the mount by its container path, never the host path.

use std::path::Path;

use super::contained::{Contained, absolute};
use super::*;

/// `[policy]`: which host paths (and everything under them) each app may mount or use as a
/// device. Without an entry an app may use none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub host_paths: BTreeMap<String, Vec<PathBuf>>,
}

/// Why a host path is refused. Says which mount (by container path or index), never the
/// host path: the reason is journaled and shown on pages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Policy {
    /// Whether `path` (absolute, normalised) is one of the app's allowed paths or under one.
    pub(crate) fn allows(&self, app: &str, path: &Path) -> bool {
        self.host_paths
            .get(app)
            .is_some_and(|allowed| allowed.iter().any(|a| path.starts_with(a)))
    }

    /// Every host path of `app` checked against this policy, as the files are now: a file
    /// must be a regular file; symlinks are followed and the real path is what must be
    /// allowed, so a link cannot lead out of an allowed directory.
    pub(crate) fn check(&self, app: &str, c: &Contained) -> Result<(), Refused> {
        let real = |p: &Path| std::fs::canonicalize(p).ok();
        for f in &c.files {
            let Some(path) = real(&f.source) else {
                return Err(Refused(format!(
                    "file for {} does not exist or cannot be read",
                    f.target
                )));
            };
            if !self.allows(app, &path) || !self.allows(app, &f.source) {
                return Err(Refused(format!(
                    "file for {} is not allowed by the policy for app `{app}`",
                    f.target
                )));
            }
            if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                return Err(Refused(format!(
                    "file for {} is not a regular file",
                    f.target
                )));
            }
        }
        for b in &c.binds {
            let allowed = real(&b.source).is_some_and(|p| self.allows(app, &p))
                && self.allows(app, &b.source);
            if !allowed {
                return Err(Refused(format!(
                    "bind for {} is not allowed by the policy for app `{app}` (or its host path is missing)",
                    b.target
                )));
            }
        }
        for (i, d) in c.devices.iter().enumerate() {
            let allowed = real(d).is_some_and(|p| self.allows(app, &p)) && self.allows(app, d);
            if !allowed {
                return Err(Refused(format!(
                    "device #{} is not allowed by the policy for app `{app}` (or is missing)",
                    i + 1
                )));
            }
        }
        Ok(())
    }
}

/// The admin's policy. It is read from the live config when a run starts and again right
/// before every engine change, so a path revoked by a reload fails the next deployment
/// before anything is made.
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    /// Per app, the host paths (and everything under them, after following symlinks) it may
    /// mount as `files` or `binds` or use as `devices`: `billing = ["/etc/pier/billing",
    /// "/srv/billing"]`. Without an entry an app may use none.
    #[serde(default)]
    host_paths: BTreeMap<String, Vec<String>>,
}

impl RawPolicy {
    pub(super) fn resolve(self) -> Result<Policy, ConfigError> {
        let mut host_paths = BTreeMap::new();
        for (app, paths) in self.host_paths {
            let mut out = Vec::new();
            for p in paths {
                out.push(absolute(&format!("policy.host_paths.{app}"), &p)?);
            }
            host_paths.insert(app, out);
        }
        Ok(Policy { host_paths })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::contained::HostMount;

    #[test]
    fn the_policy_allows_paths_under_an_allowed_one_only_and_never_names_them() {
        let dir = tempfile_dir();
        let file = dir.join("app.yml");
        std::fs::write(&file, "a: 1").unwrap();
        let mut c = Contained {
            service: "web".into(),
            networks: vec![],
            volumes: vec![],
            secrets: BTreeMap::new(),
            files: vec![],
            binds: vec![],
            devices: vec![],
            cap_keep: vec![],
            read_only_root: false,
            tmpfs: vec![],
            user: None,
            port_env: None,
        };
        c.files.push(HostMount {
            source: file.clone(),
            target: "/app.yml".into(),
            read_only: true,
        });
        let mut p = Policy::default();
        let e = p.check("web", &c).unwrap_err().0;
        assert!(!e.contains(dir.to_str().unwrap()), "{e}");
        p.host_paths.insert(
            "web".into(),
            vec![std::fs::canonicalize(&dir).unwrap(), dir.clone()],
        );
        p.check("web", &c).unwrap();
        assert!(p.check("other", &c).is_err());
        // A directory is not a config file.
        c.files[0].source = dir.clone();
        assert!(
            p.check("web", &c)
                .unwrap_err()
                .0
                .contains("not a regular file")
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("pier-policy-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
