//! What every page's template and every form handler share: the helpers templates call
//! as methods on their page ([`Fmt`]), and reading one field of a form body.

use super::format::{took, when};
use super::views::AppView;
use crate::store::Deployment;

/// Template helpers, reachable from every template as methods on the page.
pub(super) trait Fmt {
    /// A time, relative (kept current by the page's script) and absolute: HTML made only
    /// of digits and Pier's own words, safe to insert unescaped.
    fn time(&self, t: &chrono::DateTime<chrono::Utc>) -> String {
        super::format::time_html(t)
    }
    /// A digest shortened, the full value on hover and behind a copy button (escaped).
    fn digest(&self, d: &str) -> String {
        super::format::digest_html(d)
    }
    fn opt_time(&self, t: &Option<chrono::DateTime<chrono::Utc>>) -> String {
        t.as_ref()
            .map(super::format::time_html)
            .unwrap_or_else(|| "—".into())
    }
    /// Whether `digest` is what the app serves now.
    fn serving(&self, app: &AppView, digest: &str) -> bool {
        app.generation.as_ref().is_some_and(|g| g.digest == digest)
    }
    fn opt_digest(&self, d: &Option<String>) -> String {
        d.as_deref()
            .map(super::format::digest_html)
            .unwrap_or_else(|| "—".into())
    }
    fn at(&self, t: &chrono::DateTime<chrono::Utc>) -> String {
        when(t)
    }
    fn took(&self, d: &Deployment) -> String {
        took(d.started_at.as_ref(), d.finished_at.as_ref())
    }
    /// What started a deployment, with a link to its delivery (HTML; the link is a UUID).
    fn trigger(&self, d: &Deployment) -> String {
        super::format::trigger_html(d)
    }
}

/// One field of a form body, whatever else it holds (or fails to hold).
pub(super) fn form_field(body: &[u8], name: &str) -> Option<String> {
    body.split(|b| *b == b'&')
        .filter_map(|pair| {
            let mut it = pair.splitn(2, |b| *b == b'=');
            let key = it.next()?;
            (key == name.as_bytes()).then(|| it.next().unwrap_or_default())
        })
        .next()
        .and_then(|v| {
            serde_urlencoded::from_bytes::<Vec<(String, String)>>(&[b"v=", v].concat())
                .ok()?
                .pop()
                .map(|(_, v)| v)
        })
}

#[cfg(test)]
mod tests {
    use super::form_field;

    #[test]
    fn one_form_field_is_read_whatever_the_rest_of_the_form_holds() {
        assert_eq!(
            form_field(b"admin_token=a%20b&x=%zz", "admin_token").as_deref(),
            Some("a b")
        );
        assert_eq!(
            form_field(b"%zz&admin_token=t", "admin_token").as_deref(),
            Some("t")
        );
        assert_eq!(form_field(b"other=1", "admin_token"), None);
    }
}
