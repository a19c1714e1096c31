//! Checked names: a value of these types was validated where it was made, so code that
//! takes one never has to ask again whether a string is a digest or an app's name, and a
//! tag or a container id can never be passed where a digest is meant.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("`{0}` is not a digest: expected sha256: and 64 hex digits")]
    Digest(String),
    #[error("`{0}`: use 1 to 48 lower-case letters, digits, - and _")]
    Name(String),
}

/// `sha256:` and 64 hex digits: the only digest form Pier pulls, verifies and pins.
pub fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A manifest's content address, as the registry answered it for a tag: what is pulled by,
/// verified against, labelled on every container and recorded in the journal.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type,
)]
#[serde(try_from = "String", into = "String")]
#[sqlx(transparent)]
pub struct Digest(String);

impl Digest {
    pub(crate) fn parse(d: &str) -> Result<Self, NameError> {
        if is_digest(d) {
            Ok(Self(d.to_owned()))
        } else {
            Err(NameError::Digest(d.to_owned()))
        }
    }

    /// The 64 hex digits without `sha256:`.
    #[cfg(test)]
    pub(crate) fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }
}

/// A name an operator gives an app, a target, a service, a volume or a trust policy in the
/// config: lower-case letters, digits, `-` and `_`, 1 to 48 bytes, so it is safe in a
/// container name, a label, a URL path segment and a log line without quoting.
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// An app's configured name (see [`is_name`]).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type,
)]
#[serde(try_from = "String", into = "String")]
#[sqlx(transparent)]
pub struct AppName(String);

impl AppName {
    pub(crate) fn parse(name: &str) -> Result<Self, NameError> {
        if is_name(name) {
            Ok(Self(name.to_owned()))
        } else {
            Err(NameError::Name(name.to_owned()))
        }
    }
}

macro_rules! string_like {
    ($t:ident) => {
        impl $t {
            pub(crate) fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl Deref for $t {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }
        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.0
            }
        }
        impl TryFrom<String> for $t {
            type Error = NameError;
            fn try_from(s: String) -> Result<Self, NameError> {
                Self::parse(&s)
            }
        }
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
        impl PartialEq<String> for $t {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
        impl PartialEq<$t> for String {
            fn eq(&self, other: &$t) -> bool {
                *self == other.0
            }
        }
        impl PartialEq<$t> for str {
            fn eq(&self, other: &$t) -> bool {
                self == other.0
            }
        }
        impl std::borrow::Borrow<str> for $t {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}
string_like!(Digest);
string_like!(AppName);

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_digest_is_sha256_and_64_hex_digits_only() {
        assert_eq!(Digest::parse(D).unwrap().hex().len(), 64);
        for bad in [
            "",
            "sha256:",
            "sha512:00",
            &D[..70],
            "latest",
            &format!("{D}0"),
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
        let json: Result<Digest, _> = serde_json::from_str("\"sha256:zz\"");
        assert!(json.is_err(), "deserializing checks too");
    }

    #[test]
    fn an_app_name_is_lower_case_letters_digits_dash_and_underscore() {
        assert!(AppName::parse("web-1_a").is_ok());
        for bad in ["", "Web", "a b", "a/b", &"a".repeat(49)] {
            assert!(AppName::parse(bad).is_err(), "{bad}");
        }
    }
}
