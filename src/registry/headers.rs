//! The two headers a registry steers Pier with: `WWW-Authenticate` (how to authenticate)
//! and `Retry-After` (how long to back off). Both come from a peer Pier does not trust:
//! the parsers never panic, never loop without consuming input, and clamp what they return.

use std::time::{Duration, SystemTime};

/// Longest back-off a registry can ask for. A larger `Retry-After` (or an absurd date)
/// would overflow the deadline arithmetic; the step's retry budget is far shorter anyway,
/// so a clamped wish still ends the step at once with the registry's answer.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// One challenge of a `WWW-Authenticate` header (RFC 9110 §11.6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// Lower-cased: `bearer`, `basic`.
    pub scheme: String,
    /// Names lower-cased, values unquoted.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }
    fn token(&mut self) -> &str {
        let start = self.i;
        while self.peek().is_some_and(is_tchar) {
            self.i += 1;
        }
        // tchars are ASCII, so this slice is valid UTF-8.
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or_default()
    }
    /// After the opening quote; an unterminated string runs to the end.
    fn quoted(&mut self) -> String {
        let mut out = Vec::new();
        while let Some(b) = self.peek() {
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    if let Some(n) = self.peek() {
                        out.push(n);
                        self.i += 1;
                    }
                }
                _ => out.push(b),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Every challenge in one `WWW-Authenticate` value, e.g.
/// `Bearer realm="https://auth.example/token",service="registry",scope="repository:a/b:pull"`.
/// Several challenges may share a value, separated by commas. Garbage is skipped, not fatal.
pub(crate) fn parse_challenges(value: &str) -> Vec<Challenge> {
    let mut c = Cursor {
        s: value.as_bytes(),
        i: 0,
    };
    let mut out = Vec::new();
    while c.i < c.s.len() {
        while matches!(c.peek(), Some(b' ' | b'\t' | b',')) {
            c.i += 1;
        }
        let scheme = c.token().to_ascii_lowercase();
        if scheme.is_empty() {
            // Not a token: skip one byte so that every turn consumes input.
            c.i += 1;
            continue;
        }
        let mut challenge = Challenge {
            scheme,
            params: Vec::new(),
        };
        loop {
            c.skip_spaces();
            let save = c.i;
            let name = c.token().to_ascii_lowercase();
            c.skip_spaces();
            if name.is_empty() || c.peek() != Some(b'=') {
                // The next challenge's scheme (or a token68, which registries do not use).
                c.i = save;
                break;
            }
            c.i += 1;
            c.skip_spaces();
            let value = if c.peek() == Some(b'"') {
                c.i += 1;
                c.quoted()
            } else {
                c.token().to_owned()
            };
            challenge.params.push((name, value));
            c.skip_spaces();
            if c.peek() == Some(b',') {
                c.i += 1;
            } else {
                break;
            }
        }
        out.push(challenge);
    }
    out
}

/// `Retry-After` as a delay from `now`: delay-seconds or an HTTP date (RFC 9110 §10.2.3).
/// A date in the past is no delay; anything else unreadable is `None` (back off as usual).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is still "a very long time".
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(c: &Challenge) -> Vec<(&str, &str)> {
        c.params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn a_bearer_challenge_gives_realm_service_and_scope() {
        let cs = parse_challenges(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#,
        );
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].scheme, "bearer");
        assert_eq!(cs[0].param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(cs[0].param("service"), Some("registry.docker.io"));
        assert_eq!(cs[0].param("scope"), Some("repository:library/nginx:pull"));
    }

    #[test]
    fn several_challenges_spaces_escapes_and_case_are_understood() {
        let cs = parse_challenges(
            r#"Basic realm="Registry \"Realm\"" , BEARER Realm = "https://a/t" ,Service=reg, error="insufficient_scope""#,
        );
        assert_eq!(cs.len(), 2, "{cs:?}");
        assert_eq!(cs[0].scheme, "basic");
        assert_eq!(params(&cs[0]), [("realm", r#"Registry "Realm""#)]);
        assert_eq!(cs[1].scheme, "bearer");
        assert_eq!(
            params(&cs[1]),
            [
                ("realm", "https://a/t"),
                ("service", "reg"),
                ("error", "insufficient_scope")
            ]
        );
    }

    #[test]
    fn garbage_never_panics_and_ends() {
        for v in [
            "",
            ",,,",
            "Bearer",
            "Bearer realm",
            "Bearer realm=",
            "Bearer realm=\"unterminated",
            "Bearer realm=\"a\\",
            "\u{1F600} realm=x",
            "=== \"\" ,=,",
            "Basic dXNlcjpwYXNz==",
        ] {
            let _ = parse_challenges(v);
        }
        assert_eq!(
            parse_challenges("Bearer realm=\"unterminated")[0].param("realm"),
            Some("unterminated")
        );
        assert_eq!(parse_challenges("Bearer").len(), 1);
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(parse_retry_after("3600000", now), Some(MAX_RETRY_AFTER));
        for bad in ["", "-1", "1.5", "soon", "Sun, 06 Nov 1994"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }
}
