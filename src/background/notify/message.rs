//! What one notification says, before any channel formats it: a title, a line of
//! summary, facts, the page it links to, and for an approval request the signed approve
//! and reject links. Every channel builds its own request from this, so each reads the
//! same facts in its own shape.

use strum::{Display, EnumString, IntoStaticStr};

use crate::store::{DigestApp, DueNotification};

/// What a notification is about, from the outbox's `event` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, IntoStaticStr)]
pub(crate) enum Event {
    #[strum(serialize = "deployment.succeeded")]
    Succeeded,
    #[strum(serialize = "deployment.failed")]
    Failed,
    #[strum(serialize = "deployment.rolled_back")]
    RolledBack,
    #[strum(serialize = "deployment.awaiting_approval")]
    AwaitingApproval,
    #[strum(serialize = "container.oom_killed")]
    OomKilled,
    #[strum(serialize = "container.restart_loop")]
    RestartLoop,
    #[strum(serialize = "digest")]
    Digest,
}

/// How loud a message is: chat colours, ntfy priorities and tags follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tone {
    Good,
    Bad,
    Asks,
    Quiet,
}

/// The signed links of an approval request, whole URLs on Pier's site.
#[derive(Debug, Clone)]
pub(crate) struct Links {
    pub approve: String,
    pub reject: String,
}

#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub event: Event,
    pub tone: Tone,
    pub title: String,
    pub summary: String,
    /// Short name and value pairs (digest, tag, error, what it waits for).
    pub facts: Vec<(String, String)>,
    /// The deployment's page, or Pier's front page for a digest.
    pub url: String,
    pub links: Option<Links>,
}

/// Longest error text a message carries: chat services cap fields at about 1,000.
const MAX_ERROR: usize = 300;

fn field<'a>(n: &'a DueNotification, k: &str) -> &'a str {
    n.payload.get(k).and_then(|v| v.as_str()).unwrap_or("")
}

impl Message {
    /// The message of a deployment's notification; `page` is its page's URL.
    pub(crate) fn of(
        n: &DueNotification,
        event: Event,
        page: String,
        links: Option<Links>,
    ) -> Self {
        if event == Event::Digest {
            return Self::digest(n, page);
        }
        let (tone, verb) = match event {
            Event::Succeeded => (Tone::Good, "succeeded"),
            Event::Failed => (Tone::Bad, "failed"),
            Event::RolledBack => (Tone::Bad, "was rolled back"),
            Event::OomKilled => (Tone::Bad, "lost a container to the memory limit"),
            Event::RestartLoop => (Tone::Bad, "has a container that restarts again and again"),
            Event::AwaitingApproval | Event::Digest => (Tone::Asks, "waits for approval"),
        };
        let id = field(n, "id");
        let short: String = id.chars().take(8).collect();
        let mut facts = Vec::new();
        for (name, key) in [
            ("Digest", "digest"),
            ("Tag", "tag"),
            ("Trigger", "trigger"),
            ("Container", "container"),
        ] {
            if !field(n, key).is_empty() {
                facts.push((name.to_owned(), field(n, key).to_owned()));
            }
        }
        if !field(n, "error").is_empty() {
            let e: String = field(n, "error").chars().take(MAX_ERROR).collect();
            facts.push(("Error".to_owned(), e));
        }
        if !field(n, "waiting_for").is_empty() {
            facts.push(("Waits for".to_owned(), field(n, "waiting_for").to_owned()));
        }
        if !field(n, "waiting_until").is_empty() {
            facts.push(("Until".to_owned(), field(n, "waiting_until").to_owned()));
        }
        Message {
            event,
            tone,
            title: format!("{}: deployment {verb}", n.app),
            summary: format!("Pier: {} deployment {short} {verb}", n.app),
            facts,
            url: page,
            links,
        }
    }

    /// A digest: one fact per app.
    fn digest(n: &DueNotification, front: String) -> Self {
        let every = field(n, "every");
        let (from, to) = (field(n, "from"), field(n, "to"));
        let apps: Vec<DigestApp> = n
            .payload
            .get("apps")
            .cloned()
            .and_then(|a| serde_json::from_value(a).ok())
            .unwrap_or_default();
        let facts = apps
            .iter()
            .map(|a| {
                let mut line = format!(
                    "{} succeeded, {} failed, {} rolled back, {} cancelled",
                    a.succeeded, a.failed, a.rolled_back, a.cancelled
                );
                match &a.serving {
                    Some(d) => line.push_str(&format!("; serves {d}")),
                    None => line.push_str("; nothing deployed yet"),
                }
                if a.pending_approvals > 0 {
                    line.push_str(&format!("; {} wait(s) for approval", a.pending_approvals));
                }
                (a.app.clone(), line)
            })
            .collect();
        Message {
            event: Event::Digest,
            tone: Tone::Quiet,
            title: format!("Pier {every} digest"),
            summary: format!("Pier {every} digest, {from} to {to}"),
            facts,
            url: front,
            links: None,
        }
    }

    /// The whole message as plain text: summary, facts, links.
    pub(crate) fn text(&self) -> String {
        let mut t = self.summary.clone();
        for (k, v) in &self.facts {
            t.push_str(&format!("\n{k}: {v}"));
        }
        if let Some(l) = &self.links {
            t.push_str(&format!("\nApprove: {}\nReject: {}", l.approve, l.reject));
        }
        t.push_str(&format!("\n{}", self.url));
        t
    }

    /// The same as HTML (Telegram, Matrix): every value escaped.
    pub(crate) fn html(&self) -> String {
        let mut h = format!("<b>{}</b>", escape(&self.summary));
        for (k, v) in &self.facts {
            h.push_str(&format!("\n{}: {}", escape(k), escape(v)));
        }
        if let Some(l) = &self.links {
            h.push_str(&format!(
                "\n<a href=\"{}\">Approve</a> · <a href=\"{}\">Reject</a>",
                escape(&l.approve),
                escape(&l.reject)
            ));
        }
        h.push_str(&format!(
            "\n<a href=\"{}\">Open in Pier</a>",
            escape(&self.url)
        ));
        h
    }
}

/// `&`, `<`, `>` and `"` as entities: what HTML text and attribute values need.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
