//! `tmpfs = ["/tmp", { target = "/run/app", mode = "0700" }]`: writable in-memory mounts,
//! for apps with a read-only root (or that want `/tmp` off the disk).
//!
//! A tmpfs mount over a directory the image has takes that directory's mode (the runtime
//! copies it up and, on runc 1.1, sets the tmpfs root to the image directory's mode even
//! when `mode=` is given). So an image whose `/tmp` is root's 0755 leaves a non-root app
//! unable to write its own `/tmp`. Pier gives every tmpfs `mode=1777` (the sticky mode
//! `/tmp` has), or the mode the mount names, and, when the app's `user` is a numeric uid
//! (`"10001"` or `"10001:10001"`), or else the image's own `USER` is a numeric non-root
//! uid, makes that user the owner of the mount (`create` reads the image's): ownership is
//! what lets it write whatever mode the runtime ends up applying.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

/// What every tmpfs mount gets unless it names its own mode: writable by every user, files
/// deletable only by their owner, as `/tmp` is on a host.
pub const DEFAULT_TMPFS_MODE: TmpfsMode = TmpfsMode(0o1777);

/// Permission bits of a tmpfs mount's root, at most `0o7777`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmpfsMode(u32);

impl TmpfsMode {
    #[cfg(test)]
    pub(crate) fn bits(self) -> u32 {
        self.0
    }

    /// Four octal digits, as `chmod` and the mount option take it: `1777`, `0700`.
    fn parse(s: &str) -> Option<Self> {
        let ok = (3..=4).contains(&s.len()) && s.bytes().all(|b| (b'0'..=b'7').contains(&b));
        ok.then(|| u32::from_str_radix(s, 8).ok().map(TmpfsMode))
            .flatten()
    }
}

impl fmt::Display for TmpfsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

/// One tmpfs mount of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmpfsMount {
    pub target: String,
    pub mode: TmpfsMode,
}

impl TmpfsMount {
    /// How the `create` step's intent names it: the bare target for the default mode (so
    /// that intents journaled before modes existed read the same), else `target:mode=0700`.
    pub(crate) fn intent(&self) -> String {
        if self.mode == DEFAULT_TMPFS_MODE {
            self.target.clone()
        } else {
            format!("{}:mode={}", self.target, self.mode)
        }
    }
}

/// The owner a tmpfs mount gets: the app's `user` (else the image's `USER`) when it is
/// numeric. A user given by name is resolved inside the image, which Pier does not read:
/// its mounts keep root as owner and rely on the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmpfsOwner {
    pub uid: u32,
    pub gid: Option<u32>,
}

impl TmpfsOwner {
    pub(crate) fn of_user(user: &str) -> Option<Self> {
        let (uid, gid) = match user.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (user, None),
        };
        Some(TmpfsOwner {
            uid: uid.parse().ok()?,
            gid: gid.and_then(|g| g.parse().ok()),
        })
    }
}

/// A tmpfs entry's `mode` that is not an octal mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tmpfs `{target}`: mode `{mode}` is not an octal mode such as \"1777\" or \"0700\"")]
pub struct TmpfsModeError {
    target: String,
    mode: String,
}

/// A tmpfs entry as written: a container path, or a table with `target` and `mode`.
pub(super) struct RawTmpfs {
    pub target: String,
    pub mode: Option<String>,
}

impl RawTmpfs {
    /// The mount, its mode checked; the target is checked by the caller with the others.
    pub(super) fn mode(&self) -> Result<TmpfsMode, TmpfsModeError> {
        match &self.mode {
            None => Ok(DEFAULT_TMPFS_MODE),
            Some(m) => TmpfsMode::parse(m).ok_or_else(|| TmpfsModeError {
                target: self.target.clone(),
                mode: m.clone(),
            }),
        }
    }
}

impl<'de> Deserialize<'de> for RawTmpfs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTmpfs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a container path (\"/tmp\") or { target = \"/run/app\", mode = \"0700\" }",
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawTmpfs, E> {
                Ok(RawTmpfs {
                    target: s.to_owned(),
                    mode: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTmpfs, A::Error> {
                let (mut target, mut mode) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "target" => target = Some(map.next_value::<String>()?),
                        "mode" => mode = Some(map.next_value::<String>()?),
                        other => return Err(de::Error::unknown_field(other, &["target", "mode"])),
                    }
                }
                Ok(RawTmpfs {
                    target: target.ok_or_else(|| de::Error::missing_field("target"))?,
                    mode,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `"/tmp"` or `{ target = "/run/app", mode = "0700" }`, as its parser reads it.
impl schemars::JsonSchema for RawTmpfs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Tmpfs".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A tmpfs mount: a container path (mode 1777), or a table with its own octal `mode`.",
            "anyOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "properties": {
                        "target": { "type": "string", "description": "The container path." },
                        "mode": { "type": "string", "description": "Its octal mode, e.g. `\"0700\"`." }
                    },
                    "required": ["target"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_modes_are_four_octal_digits_and_the_owner_is_a_numeric_user() {
        assert_eq!(TmpfsMode::parse("1777"), Some(DEFAULT_TMPFS_MODE));
        assert_eq!(TmpfsMode::parse("700").map(TmpfsMode::bits), Some(0o700));
        assert_eq!(TmpfsMode::parse("0700").unwrap().to_string(), "0700");
        for bad in ["", "8", "0o700", "17777", "rwx", "-700"] {
            assert_eq!(TmpfsMode::parse(bad), None, "{bad}");
        }
        assert_eq!(
            TmpfsOwner::of_user("10001:10002"),
            Some(TmpfsOwner {
                uid: 10001,
                gid: Some(10002)
            })
        );
        assert_eq!(
            TmpfsOwner::of_user("10001"),
            Some(TmpfsOwner {
                uid: 10001,
                gid: None
            })
        );
        assert_eq!(
            TmpfsOwner::of_user("10001:staff").map(|o| o.gid),
            Some(None)
        );
        assert_eq!(TmpfsOwner::of_user("nobody"), None);
    }
}
