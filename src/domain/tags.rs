//! Which tags an app follows: one exact tag, a glob over tags, or a semver range. Parsed
//! once at load, so a typo in a pattern or a range fails start-up instead of deploying
//! nothing (or the wrong thing) later.

use std::fmt;

/// An app's tag rule. `tag = "main"` is [`TagRule::Exact`]; a `tag` with `*` or `?` (which
/// no registry allows in a tag) is a [`TagRule::Glob`]; `versions = ">=1.2, <2"` is a
/// [`TagRule::Semver`] range.
#[derive(Debug, Clone)]
pub enum TagRule {
    Exact(String),
    Glob(String),
    Semver(SemverRule),
}

#[derive(Debug, Clone)]
pub struct SemverRule {
    pub text: String,
    pub req: semver::VersionReq,
}

/// The longest tag the OCI distribution spec allows; a longer pattern matches nothing.
const MAX_TAG: usize = 128;

/// Why a configured `tag` or `versions` can never match a pushed tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagRuleError {
    #[error("tag `{0}` must be 1 to {MAX_TAG} characters")]
    Length(String),
    #[error(
        "tag pattern `{tag}`: `{bad}` can never appear in a tag; \
         a pattern has letters, digits, `_ . -`, `*` and `?`"
    )]
    PatternChar { tag: String, bad: char },
    #[error(
        "tag `{tag}`: `{bad}` can never appear in a tag \
         (for a version range, use `versions = \"{tag}\"`)"
    )]
    TagChar { tag: String, bad: char },
    #[error("versions `{text}` is not a semver range: {reason}")]
    Versions { text: String, reason: String },
}

impl TagRule {
    #[cfg(test)]
    pub(crate) fn exact(tag: impl Into<String>) -> Self {
        TagRule::Exact(tag.into())
    }

    /// `tag`: exact, or a glob when it holds `*` or `?`.
    pub(crate) fn from_tag(tag: &str) -> Result<Self, TagRuleError> {
        if tag.is_empty() || tag.len() > MAX_TAG {
            return Err(TagRuleError::Length(tag.to_owned()));
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        if tag.contains(['*', '?']) {
            if let Some(bad) = tag
                .chars()
                .find(|c| !allowed(*c) && !matches!(c, '*' | '?'))
            {
                return Err(TagRuleError::PatternChar {
                    tag: tag.to_owned(),
                    bad,
                });
            }
            return Ok(TagRule::Glob(tag.to_owned()));
        }
        if let Some(bad) = tag.chars().find(|c| !allowed(*c)) {
            return Err(TagRuleError::TagChar {
                tag: tag.to_owned(),
                bad,
            });
        }
        Ok(TagRule::Exact(tag.to_owned()))
    }

    /// `versions`: a semver requirement such as `>=1.2, <2`, `^1.4` or `~2.0`.
    pub fn from_versions(text: &str) -> Result<Self, TagRuleError> {
        let req = semver::VersionReq::parse(text).map_err(|e| TagRuleError::Versions {
            text: text.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(TagRule::Semver(SemverRule {
            text: text.to_owned(),
            req,
        }))
    }

    /// Whether a pushed tag is one this rule follows. `fold_case` compares ignoring ASCII
    /// case, for senders that lower-case the tags they report.
    pub(crate) fn matches(&self, tag: &str, fold_case: bool) -> bool {
        match self {
            TagRule::Exact(t) if fold_case => t.eq_ignore_ascii_case(tag),
            TagRule::Exact(t) => t == tag,
            // A push of a signature or attestation (`cosign sign` writes a tag of its own)
            // is not a version of the app: a glob such as `*` must not deploy it.
            TagRule::Glob(_) if is_artifact_tag(tag) => false,
            TagRule::Glob(p) => glob_match(p, tag, fold_case),
            TagRule::Semver(r) => tag_version(tag).is_some_and(|v| r.req.matches(&v)),
        }
    }

    /// Several tags can match one rule: a range deploys the highest version, never a
    /// lower one over a higher one (see [`TagRule::is_monotonic`]).
    pub(crate) fn is_monotonic(&self) -> bool {
        matches!(self, TagRule::Semver(_))
    }

    /// The one tag a manual redeploy or the poller resolves, when the rule names one.
    pub(crate) fn fixed(&self) -> Option<&str> {
        match self {
            TagRule::Exact(t) => Some(t),
            _ => None,
        }
    }

    /// Of the registry's tags, the one the rule deploys: the exact tag if present; for a
    /// range the highest matching version; for a glob the highest match by version when
    /// its tags are versions, else the greatest by string order (a deterministic choice;
    /// a glob over non-version tags is best served by webhooks, see the docs' tag rules).
    pub(crate) fn choose<'a>(&self, tags: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        let matching = tags.into_iter().filter(|t| self.matches(t, false));
        match self {
            TagRule::Exact(_) => matching.into_iter().next(),
            TagRule::Glob(_) | TagRule::Semver(_) => {
                matching.max_by(|a, b| match (tag_version(a), tag_version(b)) {
                    (Some(va), Some(vb)) => va.cmp(&vb).then_with(|| a.cmp(b)),
                    (Some(_), None) => std::cmp::Ordering::Greater,
                    (None, Some(_)) => std::cmp::Ordering::Less,
                    (None, None) => a.cmp(b),
                })
            }
        }
    }

    /// What the page and API show as the rule: `main`, `glob v1.*`, `semver >=1.2, <2`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            TagRule::Exact(_) => "tag",
            TagRule::Glob(_) => "glob",
            TagRule::Semver(_) => "semver",
        }
    }

    pub(crate) fn text(&self) -> &str {
        match self {
            TagRule::Exact(t) | TagRule::Glob(t) => t,
            TagRule::Semver(r) => &r.text,
        }
    }
}

impl fmt::Display for TagRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind(), self.text())
    }
}

/// The version a tag names: `1.2.3` or `v1.2.3`, pre-release and build parts allowed.
/// `1.2`, `latest` or `v1` are not versions (semver needs all three numbers), so a range
/// never matches them: a moving tag must not be mistaken for a release.
/// The tags cosign and the OCI referrers fallback write beside an image, named after the
/// digest they are about: `sha256-<64 hex>`, alone or with `.sig`, `.att` or `.sbom`.
pub(crate) fn is_artifact_tag(tag: &str) -> bool {
    let Some(rest) = tag.strip_prefix("sha256-") else {
        return false;
    };
    let (hex, suffix) = rest.split_at(rest.len().min(64));
    hex.len() == 64
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && matches!(suffix, "" | ".sig" | ".att" | ".sbom")
}

pub fn tag_version(tag: &str) -> Option<semver::Version> {
    let t = tag.strip_prefix(['v', 'V']).unwrap_or(tag);
    semver::Version::parse(t).ok()
}

/// `*` matches any run of characters (none included), `?` exactly one; everything else
/// matches itself. Iterative with one backtrack point, so a hostile pattern such as
/// `*a*a*a*a*b` costs O(pattern × tag), never exponential time.
pub fn glob_match(pattern: &str, text: &str, fold_case: bool) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let eq = |a: u8, b: u8| {
        if fold_case {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it currently stands for the end of.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == b'?' || (p[pi] != b'*' && eq(p[pi], t[ti]))) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            // Let the last `*` swallow one more character and retry from there.
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_matches_stars_and_question_marks_and_nothing_else() {
        assert!(glob_match("v1.*", "v1.2.3", false));
        assert!(glob_match("v1.*", "v1.", false));
        assert!(!glob_match("v1.*", "v10.0", false));
        assert!(!glob_match("v1.*", "v2.1", false));
        assert!(glob_match("*-rc?", "2.0-rc1", false));
        assert!(!glob_match("*-rc?", "2.0-rc10", false));
        assert!(glob_match("*", "", false));
        assert!(glob_match("a*b*c", "aXXbYYc", false));
        assert!(!glob_match("a*b*c", "aXXbYY", false));
        assert!(glob_match("main", "main", false));
        assert!(!glob_match("main", "mainx", false));
        assert!(glob_match("V1.*", "v1.0", true));
        assert!(!glob_match("V1.*", "v1.0", false));
    }

    #[test]
    fn a_hostile_glob_finishes_quickly() {
        let tag = "a".repeat(128);
        let started = std::time::Instant::now();
        assert!(!glob_match("*a*a*a*a*a*a*a*a*a*b", &tag, false));
        assert!(started.elapsed() < std::time::Duration::from_millis(100));
    }

    #[test]
    fn a_tag_with_a_star_is_a_glob_and_a_range_needs_versions() {
        assert!(matches!(TagRule::from_tag("main"), Ok(TagRule::Exact(_))));
        assert!(matches!(TagRule::from_tag("v1.*"), Ok(TagRule::Glob(_))));
        let err = TagRule::from_tag(">=1.2").unwrap_err();
        assert!(err.to_string().contains("versions ="), "{err}");
        assert!(TagRule::from_tag("v1/*").is_err());
        assert!(TagRule::from_tag("").is_err());
        assert!(TagRule::from_versions("not a range").is_err());
        assert!(TagRule::from_versions(">=1.2, <2").is_ok());
    }

    #[test]
    fn a_range_matches_release_tags_with_or_without_v_and_never_moving_tags() {
        let r = TagRule::from_versions(">=1.2, <2").unwrap();
        assert!(r.matches("1.2.0", false));
        assert!(r.matches("v1.9.4", false));
        assert!(!r.matches("1.1.9", false));
        assert!(!r.matches("2.0.0", false));
        assert!(!r.matches("1.5", false), "not a full version");
        assert!(!r.matches("latest", false));
        assert!(
            !r.matches("1.3.0-rc.1", false),
            "pre-releases only when the range names one"
        );
    }

    #[test]
    fn the_highest_matching_version_is_chosen_not_the_last_listed() {
        let r = TagRule::from_versions(">=1.2, <2").unwrap();
        let tags = ["1.2.0", "v1.10.0", "1.9.0", "2.0.0", "latest", "1.3.0"];
        assert_eq!(r.choose(tags), Some("v1.10.0"));
        assert_eq!(r.choose(["0.9.0", "2.1.0"]), None);
        let g = TagRule::from_tag("v1.*").unwrap();
        assert_eq!(
            g.choose(["v1.2.0", "v1.10.0", "v2.0.0", "v1.x"]),
            Some("v1.10.0")
        );
        let e = TagRule::exact("main");
        assert_eq!(e.choose(["dev", "main"]), Some("main"));
        assert_eq!(e.choose(["dev"]), None);
    }

    #[test]
    fn a_glob_never_deploys_a_signature_or_referrers_tag() {
        let hex = "a".repeat(64);
        let any = TagRule::from_tag("*").unwrap();
        for tag in [
            format!("sha256-{hex}.sig"),
            format!("sha256-{hex}"),
            format!("sha256-{hex}.att"),
        ] {
            assert!(is_artifact_tag(&tag), "{tag}");
            assert!(!any.matches(&tag, false), "{tag}");
        }
        assert!(any.matches("sha256-notadigest", false));
        assert!(
            TagRule::from_tag(&format!("sha256-{hex}.sig"))
                .unwrap()
                .matches(&format!("sha256-{hex}.sig"), false)
        );
    }
}
