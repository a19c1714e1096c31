//! What an app's containers may touch and what they are given: the app's private network and
//! the shared ones it joins, its named volumes, its secrets, host files, binds and devices
//! (only where the admin's `[policy]` allows them), and its hardening. Checked whole at
//! load; host paths are checked again against the live policy before every engine change.

use std::path::{Component, Path};

use super::*;

/// Capabilities kept by default: what common images need to start as root and drop to
/// their own user (chown their files, switch user, bind a port below 1024). Everything
/// else (NET_RAW, MKNOD, SYS_CHROOT, SETFCAP, AUDIT_WRITE, ...) is dropped.
pub const DEFAULT_CAP_KEEP: [&str; 8] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
];

/// One named volume of an app, mounted at `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    /// The name in the config; the engine's volume is [`VolumeMount::engine_name`].
    pub name: String,
    pub target: String,
    pub read_only: bool,
}

impl VolumeMount {
    /// `pier-<app>-<name>`. Only a name: who owns it is what Postgres records.
    pub(crate) fn engine_name(&self, app: &str) -> String {
        format!("pier-{app}-{}", self.name)
    }
}

/// A host path mounted into the container: a read-only config file or a bind.
#[derive(Clone, PartialEq, Eq)]
pub struct HostMount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

impl fmt::Debug for HostMount {
    /// Host paths stay out of debug output (logs): the target says which mount it is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostMount(-> {}, ro={})", self.target, self.read_only)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Contained {
    /// The service's name: its alias on the app's network.
    pub service: String,
    /// Shared networks (created by the admin) that the app's containers join.
    pub networks: Vec<String>,
    pub volumes: Vec<VolumeMount>,
    /// Secrets by key: `env:`/`file:` values in memory only, `age:` references read at
    /// each deployment; each given as an env variable or a file (`secrets.rs`).
    pub secrets: BTreeMap<String, super::AppSecret>,
    /// Host files mounted read-only; each must be a regular file.
    pub files: Vec<HostMount>,
    pub binds: Vec<HostMount>,
    pub devices: Vec<PathBuf>,
    /// Capabilities kept; all others are dropped.
    pub cap_keep: Vec<String>,
    pub read_only_root: bool,
    /// In-memory mounts, each with its mode (default 1777); see `tmpfs.rs`.
    pub tmpfs: Vec<super::TmpfsMount>,
    pub user: Option<String>,
    /// The env variable that is given the container port.
    pub port_env: Option<String>,
}

impl Contained {
    /// The app's private network.
    pub(crate) fn network(app: &str) -> String {
        format!("pier-{app}")
    }

    /// Who owns the tmpfs mounts: the `user` when it is a numeric uid (see `tmpfs.rs`).
    pub(crate) fn tmpfs_owner(&self) -> Option<super::TmpfsOwner> {
        self.user.as_deref().and_then(super::TmpfsOwner::of_user)
    }

    /// Whether any host path reaches the container: engine errors are then redacted.
    pub(crate) fn has_host_paths(&self) -> bool {
        !(self.files.is_empty() && self.binds.is_empty() && self.devices.is_empty())
    }
}

/// A named volume the app owns: created by its first deployment, kept across deployments
/// and when the app leaves the config; `pier volumes rm NAME` deletes one.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVolume {
    /// The volume's name within the app; the engine's volume is `pier-<app>-<name>`,
    /// recorded in Postgres as the app's before it is made.
    name: String,
    /// Where it is mounted in the container.
    target: String,
    /// Mount it read-only.
    #[serde(default)]
    read_only: bool,
}

/// A host path mounted into the container: a file (`files`, read-only, a regular file when
/// the deployment starts) or a directory (`binds`). Allowed only by the admin's `[policy]`.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHostMount {
    /// The absolute host path (no `.` or `..`); it must be equal to or under a path
    /// `[policy.host_paths]` lists for the app.
    source: String,
    /// Where it is mounted in the container.
    target: String,
    /// Mount it read-only (`files` are always read-only).
    #[serde(default)]
    read_only: bool,
}

/// The app's fields this module reads: flattened into `[[apps]]` (see `app.rs`), so each
/// is written once, as the file names it. A service builds its own (`services.rs`).
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(default)]
pub(super) struct RawContained {
    /// The primary service's name: the container's alias on the app's private network
    /// `pier-<app>`, and the name further services reach it by.
    ///
    /// Default: the app's name.
    pub service: Option<String>,
    /// Shared networks (made by the admin beforehand; a `pier-…` name is refused) that a
    /// new container joins once it is journaled; a retired one leaves them.
    pub networks: Vec<String>,
    /// Named volumes the app owns, `[{ name, target, read_only }]`, see `[[apps.volumes]]`.
    pub volumes: Vec<RawVolume>,
    /// Secrets, `{ KEY = "env:NAME" | "file:PATH" }` (an environment variable) or
    /// `{ KEY = { from = "env:…" | "file:…" | "age:PATH#KEY", as = "env" | "file" } }`:
    /// references only (a plain value is refused). `env:`/`file:` are resolved at start-up
    /// and reload and held in memory, `age:` read at each deployment. `as = "file"` mounts
    /// the value at `/run/secrets/KEY` (mode 0400, owned by the app's numeric user), so it
    /// is in no `docker inspect`. The journal keeps their names and a keyed hash; masked in
    /// every log Pier shows. A key may not also be in `env`.
    pub secrets: BTreeMap<String, super::secrets::RawSecret>,
    /// Host files mounted read-only, `[{ source, target }]`; allowed by `[policy]` only.
    pub files: Vec<RawHostMount>,
    /// Host directories bound into the container, `[{ source, target, read_only }]`;
    /// allowed by `[policy]` only.
    pub binds: Vec<RawHostMount>,
    /// Host devices (`"/dev/…"`, the same path inside); allowed by `[policy]` only.
    pub devices: Vec<String>,
    /// Capabilities kept; every other is dropped (`cap_drop = ALL`). `ALL` and `SYS_ADMIN`
    /// are refused.
    ///
    /// Default: `CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID NET_BIND_SERVICE`.
    pub cap_keep: Option<Vec<String>>,
    /// A read-only root filesystem (give `tmpfs` mounts where the app writes).
    pub read_only: bool,
    /// Writable in-memory mounts (`rw,nosuid,nodev,size=64m`): a container path (`"/tmp"`,
    /// mode 1777) or `{ target = "/run/app", mode = "0700" }`. When `user` is a numeric uid
    /// (or, without `user`, the image's `USER` is a numeric non-root uid), that uid and gid
    /// own every tmpfs mount, so that the app can write them whatever mode the image's
    /// directory has; with a user given by name, give a numeric `user` if the image's
    /// `/tmp` is not 1777.
    pub tmpfs: Vec<super::tmpfs::RawTmpfs>,
    /// The user to run as: a name, uid or `uid:gid`.
    ///
    /// Default: the image's.
    pub user: Option<String>,
    /// Gives the app its container port in this environment variable (`"PORT"`).
    pub port_env: Option<String>,
}

fn invalid(app: &str, msg: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("app `{app}`: {msg}"))
}

/// An absolute path with no `..` or `.` parts: what the policy compares is what is mounted.
pub(super) fn absolute(what: &str, p: &str) -> Result<PathBuf, ConfigError> {
    let path = PathBuf::from(p);
    let plain = path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !path.is_absolute() || !plain {
        return Err(ConfigError::Invalid(format!(
            "{what}: host paths must be absolute, without . or .. parts"
        )));
    }
    Ok(path)
}

fn container_path(app: &str, what: &str, p: &str) -> Result<String, ConfigError> {
    let path = Path::new(p);
    let plain = path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !path.is_absolute() || !plain || p.contains(':') || p == "/" {
        return Err(invalid(
            app,
            format!("{what} `{p}` must be an absolute container path below /, without . .. or :"),
        ));
    }
    Ok(p.to_owned())
}

/// `publish` on every interface (`0.0.0.0:…`, `[::]:…`) puts the app in front of anyone
/// who reaches the host, past the TLS proxy the docs recommend: refused unless the app
/// says `publish_public = true`, so that it never happens by a copied example. The flag
/// without any `publish` would acknowledge nothing and is refused as a mistake.
pub(super) fn check_publish(
    app: &str,
    publish: Option<SocketAddr>,
    public: bool,
) -> Result<(), ConfigError> {
    match publish {
        Some(addr) if addr.ip().is_unspecified() && !public => Err(invalid(
            app,
            format!(
                "publish = \"{addr}\" listens on every interface of the host, so anyone who \
                 reaches the host reaches the app, past any proxy in front of it; publish on \
                 127.0.0.1:{port} (behind a proxy) or on one address of the host, or set \
                 publish_public = true if every interface is meant",
                port = addr.port()
            ),
        )),
        None if public => Err(invalid(
            app,
            "publish_public = true needs a `publish` address (a blue-green app has none)",
        )),
        _ => Ok(()),
    }
}

fn network_name(n: &str) -> bool {
    n.len() <= 64
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl RawContained {
    /// Checked in the order errors have always been reported: the service name, networks,
    /// mounts (volumes, files, binds, devices, tmpfs), secrets, capabilities, user, port_env.
    pub(super) fn resolve(
        self,
        app: &str,
        env: &BTreeMap<String, Secret>,
        base: &Path,
    ) -> Result<Contained, ConfigError> {
        let service = self.service.unwrap_or_else(|| app.to_owned());
        if !crate::domain::is_name(&service) {
            return Err(invalid(
                app,
                "service: use lower-case letters, digits, - and _",
            ));
        }
        check_networks(app, &self.networks)?;
        let mut targets = Targets {
            app,
            seen: Vec::new(),
        };
        let volumes = volumes(&mut targets, self.volumes)?;
        let files = host_mounts(
            &mut targets,
            ("files", "file target"),
            self.files,
            Some(true),
        )?;
        let binds = host_mounts(&mut targets, ("binds", "bind target"), self.binds, None)?;
        let devices = self
            .devices
            .iter()
            .map(|d| absolute(&format!("app `{app}`: devices"), d))
            .collect::<Result<Vec<_>, _>>()?;
        let tmpfs = tmpfs(&mut targets, self.tmpfs)?;
        let secrets = super::secrets::resolve(app, self.secrets, env, base)?;
        super::secrets::check_file_owner(app, &secrets, self.user.as_deref())?;
        super::secrets::check_files_target(app, &secrets, &targets.seen)?;
        let cap_keep = cap_keep(app, self.cap_keep)?;
        if let Some(u) = &self.user
            && (u.is_empty() || u.contains(char::is_whitespace))
        {
            return Err(invalid(app, "user: a name, uid or uid:gid"));
        }
        if let Some(p) = &self.port_env
            && (!super::secrets::env_name(p) || env.contains_key(p) || secrets.contains_key(p))
        {
            return Err(invalid(
                app,
                format!("port_env `{p}` must be an env name not set in env or secrets"),
            ));
        }
        Ok(Contained {
            service,
            networks: self.networks,
            volumes,
            secrets,
            files,
            binds,
            devices,
            cap_keep,
            read_only_root: self.read_only,
            tmpfs,
            user: self.user,
            port_env: self.port_env,
        })
    }
}

fn check_networks(app: &str, networks: &[String]) -> Result<(), ConfigError> {
    for n in networks {
        // `pier-*` are apps' private networks: joining one would share another app's.
        if !network_name(n) || n.starts_with("pier-") {
            return Err(invalid(
                app,
                format!("network `{n}`: a shared network's name, not `pier-…`"),
            ));
        }
    }
    Ok(())
}

/// The container paths mounted so far: two mounts at one path would leave the engine to
/// pick which one the app sees.
struct Targets<'a> {
    app: &'a str,
    seen: Vec<String>,
}

impl Targets<'_> {
    fn take(&mut self, t: &str, what: &str) -> Result<String, ConfigError> {
        let t = container_path(self.app, what, t)?;
        if self.seen.contains(&t) {
            return Err(invalid(self.app, format!("two mounts at {t}")));
        }
        self.seen.push(t.clone());
        Ok(t)
    }
}

fn volumes(targets: &mut Targets, raw: Vec<RawVolume>) -> Result<Vec<VolumeMount>, ConfigError> {
    let app = targets.app;
    let mut volumes: Vec<VolumeMount> = Vec::new();
    for v in raw {
        if !crate::domain::is_name(&v.name) {
            return Err(invalid(
                app,
                format!(
                    "volume `{}`: use lower-case letters, digits, - and _",
                    v.name
                ),
            ));
        }
        if volumes.iter().any(|o| o.name == v.name) {
            return Err(invalid(app, format!("volume `{}` is listed twice", v.name)));
        }
        volumes.push(VolumeMount {
            target: targets.take(&v.target, "volume target")?,
            name: v.name,
            read_only: v.read_only,
        });
    }
    Ok(volumes)
}

/// `files` (always read-only: `read_only = Some(true)`) or `binds` (as each entry says);
/// `(field, what)` name the list and its targets in errors.
fn host_mounts(
    targets: &mut Targets,
    (field, what): (&str, &str),
    raw: Vec<RawHostMount>,
    read_only: Option<bool>,
) -> Result<Vec<HostMount>, ConfigError> {
    raw.into_iter()
        .map(|m| {
            Ok(HostMount {
                source: absolute(&format!("app `{}`: {field}", targets.app), &m.source)?,
                target: targets.take(&m.target, what)?,
                read_only: read_only.unwrap_or(m.read_only),
            })
        })
        .collect()
}

fn tmpfs(
    targets: &mut Targets,
    raw: Vec<super::tmpfs::RawTmpfs>,
) -> Result<Vec<super::TmpfsMount>, ConfigError> {
    raw.into_iter()
        .map(|t| {
            let mode = t.mode().map_err(|e| invalid(targets.app, e))?;
            Ok(super::TmpfsMount {
                target: targets.take(&t.target, "tmpfs")?,
                mode,
            })
        })
        .collect()
}

/// The capabilities kept, upper-case without `CAP_`; `ALL` and `SYS_ADMIN` are refused
/// since either would undo the rest of the hardening.
fn cap_keep(app: &str, raw: Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let Some(list) = raw else {
        return Ok(DEFAULT_CAP_KEEP.iter().map(|c| (*c).to_owned()).collect());
    };
    let mut out = Vec::new();
    for c in list {
        let c = c.to_ascii_uppercase();
        let c = c.strip_prefix("CAP_").unwrap_or(&c).to_owned();
        if c.is_empty() || !c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
            return Err(invalid(app, format!("cap_keep: `{c}` is no capability")));
        }
        if c == "ALL" || c == "SYS_ADMIN" {
            return Err(invalid(
                app,
                format!("cap_keep: `{c}` would undo the hardening"),
            ));
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawContained {
        RawContained::default()
    }

    #[test]
    fn a_key_that_is_both_env_and_secret_is_refused() {
        // SAFETY: only this test reads this variable.
        unsafe { std::env::set_var("PIER_TEST_CONTAINED_SECRET", "v") };
        let mut r = raw();
        r.secrets.insert(
            "TOKEN".into(),
            super::super::secrets::RawSecret::Reference("env:PIER_TEST_CONTAINED_SECRET".into()),
        );
        let env = BTreeMap::from([("TOKEN".to_owned(), Secret::new("plain"))]);
        let e = r.resolve("web", &env, Path::new(".")).unwrap_err();
        assert!(
            e.to_string()
                .contains("both a plain env value and a secret"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_given_as_a_value_is_refused() {
        let mut r = raw();
        r.secrets.insert(
            "TOKEN".into(),
            super::super::secrets::RawSecret::Reference("hunter2".into()),
        );
        let e = r
            .resolve("web", &BTreeMap::new(), Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("env:, file: or age: reference"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }

    fn app_with(lines: &str) -> Result<super::super::Config, String> {
        let text = format!(
            "[server]\ndatabase_url = \"postgres://localhost/pier\"\n[[apps]]\nname = \"web\"\n\
             image = \"127.0.0.1:5000/demo/web\"\nport = 8080\n{lines}\n"
        );
        super::super::Config::parse(&text, Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn publish_on_every_interface_is_refused_unless_the_app_says_publish_public() {
        for addr in ["0.0.0.0:8081", "[::]:8081"] {
            let e = app_with(&format!("publish = \"{addr}\"")).unwrap_err();
            assert!(e.contains("app `web`"), "{e}");
            assert!(e.contains(&format!("publish = \"{addr}\"")), "{e}");
            assert!(e.contains("every interface"), "{e}");
            assert!(e.contains("publish_public = true"), "{e}");
            let c = app_with(&format!("publish = \"{addr}\"\npublish_public = true")).unwrap();
            assert!(c.apps[0].publish_public && c.apps[0].published_publicly());
        }
        let c = app_with("publish = \"127.0.0.1:8081\"").unwrap();
        assert!(!c.apps[0].published_publicly());
        // One address of the host is a deliberate choice, not every interface.
        let c = app_with("publish = \"192.0.2.10:8081\"").unwrap();
        assert!(!c.apps[0].published_publicly());
        let e = app_with("publish_public = true").unwrap_err();
        assert!(e.contains("publish_public = true needs a `publish`"), "{e}");
    }

    #[test]
    fn tmpfs_mounts_get_mode_1777_unless_they_name_one_and_a_numeric_user_owns_them() {
        let c = app_with(
            "tmpfs = [\"/tmp\", { target = \"/run/app\", mode = \"0700\" }]\nuser = \"10001:10002\"",
        )
        .unwrap();
        let t = &c.apps[0].contained;
        assert_eq!(t.tmpfs[0].target, "/tmp");
        assert_eq!(t.tmpfs[0].mode, super::super::DEFAULT_TMPFS_MODE);
        assert_eq!(
            t.tmpfs[0].intent(),
            "/tmp",
            "journaled as before modes existed"
        );
        assert_eq!(t.tmpfs[1].mode.bits(), 0o700);
        assert_eq!(t.tmpfs[1].intent(), "/run/app:mode=0700");
        assert_eq!(
            t.tmpfs_owner(),
            Some(super::super::TmpfsOwner {
                uid: 10001,
                gid: Some(10002)
            })
        );
        let named = app_with("tmpfs = [\"/tmp\"]\nuser = \"nobody\"").unwrap();
        assert_eq!(named.apps[0].contained.tmpfs_owner(), None);
        for (lines, want) in [
            (
                "tmpfs = [{ target = \"/run/app\", mode = \"999\" }]",
                "mode `999`",
            ),
            (
                "tmpfs = [{ target = \"/run/app\", mode = \"u+w\" }]",
                "octal mode",
            ),
            ("tmpfs = [{ path = \"/run/app\" }]", "unknown field `path`"),
            ("tmpfs = [{ mode = \"0700\" }]", "missing field `target`"),
            ("tmpfs = [\"tmp\"]", "tmpfs `tmp` must be an absolute"),
        ] {
            let e = app_with(lines).unwrap_err();
            assert!(e.contains(want), "{lines}: {e}");
        }
    }

    #[test]
    fn an_unknown_app_field_is_still_refused_by_name_beside_the_flattened_ones() {
        let e = app_with("netwroks = [\"shared\"]").unwrap_err();
        assert!(e.contains("unknown field `netwroks`"), "{e}");
        let c = app_with("networks = [\"shared\"]\nread_only = true").unwrap();
        assert_eq!(c.apps[0].contained.networks, ["shared"]);
        assert!(c.apps[0].contained.read_only_root);
    }

    #[test]
    fn another_apps_private_network_cannot_be_joined() {
        let mut r = raw();
        r.networks = vec!["pier-db".into()];
        assert!(r.resolve("web", &BTreeMap::new(), Path::new(".")).is_err());
    }
}
