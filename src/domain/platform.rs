use std::fmt;

use serde::{Deserialize, Serialize};

/// An OCI platform as an index names it and as the Docker engine reports its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// From the engine's `version` answer (`linux`, `amd64` / `x86_64`, …).
    pub fn from_engine(os: &str, arch: &str) -> Self {
        let (architecture, variant) = match arch {
            "x86_64" | "amd64" => ("amd64", None),
            "aarch64" | "arm64" => ("arm64", Some("v8")),
            "armv7l" | "arm" => ("arm", Some("v7")),
            "armv6l" => ("arm", Some("v6")),
            other => (other, None),
        };
        Platform {
            os: os.to_owned(),
            architecture: architecture.to_owned(),
            variant: variant.map(str::to_owned),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// Picks the index entry for `want`: os and architecture must match; a matching variant
/// wins over an entry that names none. Entries without a platform (attestations) never match.
pub(crate) fn choose<'a>(
    entries: impl Iterator<Item = (&'a str, Option<&'a Platform>)>,
    want: &Platform,
) -> Option<&'a str> {
    let mut fallback = None;
    for (digest, p) in entries {
        let Some(p) = p else { continue };
        if p.os != want.os || p.architecture != want.architecture {
            continue;
        }
        match (&p.variant, &want.variant) {
            (Some(a), Some(b)) if a == b => return Some(digest),
            (None, _) | (_, None) => {
                fallback.get_or_insert(digest);
            }
            _ => {}
        }
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(os: &str, arch: &str, variant: Option<&str>) -> Platform {
        Platform {
            os: os.into(),
            architecture: arch.into(),
            variant: variant.map(Into::into),
        }
    }

    #[test]
    fn picks_the_engines_platform_and_skips_attestations() {
        let arm = p("linux", "arm64", Some("v8"));
        let amd = p("linux", "amd64", None);
        let unknown = p("unknown", "unknown", None);
        let entries = [
            ("sha256:arm", Some(&arm)),
            ("sha256:att", Some(&unknown)),
            ("sha256:none", None),
            ("sha256:amd", Some(&amd)),
        ];
        let want = Platform::from_engine("linux", "x86_64");
        assert_eq!(choose(entries.into_iter(), &want), Some("sha256:amd"));
        let want = Platform::from_engine("linux", "aarch64");
        assert_eq!(choose(entries.into_iter(), &want), Some("sha256:arm"));
        let want = Platform::from_engine("linux", "s390x");
        assert_eq!(choose(entries.into_iter(), &want), None);
    }

    #[test]
    fn an_exact_variant_beats_an_unspecified_one() {
        let v6 = p("linux", "arm", Some("v6"));
        let any = p("linux", "arm", None);
        let v7 = p("linux", "arm", Some("v7"));
        let entries = [("a", Some(&any)), ("b", Some(&v6)), ("c", Some(&v7))];
        let want = Platform::from_engine("linux", "armv7l");
        assert_eq!(choose(entries.into_iter(), &want), Some("c"));
    }
}
