//! What Postgres accepts: `text` and `jsonb` strings cannot hold NUL. Free text Pier stores
//! (errors, outcomes, log excerpts, payload fields) goes through here, so an odd byte from
//! an app, an engine or a sender can never fail the write that records it.

use std::borrow::Cow;

use serde_json::Value;

/// NUL becomes U+FFFD; any other text is returned as it is, without a copy.
pub(crate) fn pg_text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{fffd}"))
    } else {
        Cow::Borrowed(s)
    }
}

pub(crate) fn pg_opt(s: Option<&str>) -> Option<Cow<'_, str>> {
    s.map(pg_text)
}

/// Every string (and key) of a JSON value made storable as `jsonb`.
pub(crate) fn pg_json(v: &Value) -> Cow<'_, Value> {
    if !has_nul(v) {
        return Cow::Borrowed(v);
    }
    Cow::Owned(clean(v))
}

fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

fn clean(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(pg_text(s).into_owned()),
        Value::Array(a) => Value::Array(a.iter().map(clean).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (pg_text(k).into_owned(), clean(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_replaced_everywhere_postgres_would_refuse_it() {
        assert_eq!(pg_text("a\0b"), "a\u{fffd}b");
        assert!(matches!(pg_text("plain"), Cow::Borrowed(_)));
        let v = serde_json::json!({"k\u{0}": ["x\u{0}", 1, {"y": "z\u{0}"}]});
        let cleaned = pg_json(&v).into_owned();
        assert!(!has_nul(&cleaned), "{cleaned}");
        assert_eq!(cleaned["k\u{fffd}"][2]["y"], "z\u{fffd}");
    }
}
