//! Which Postgres servers Pier may use, read from `server.database_url` (one URL, which may
//! name several hosts the way libpq does: `postgres://pier@db1:5432,db2:5432/pier`) or
//! `server.database_urls` (a list). sqlx 0.9 parses one host per URL, so the host list is
//! split here and every host becomes a URL of its own, parsed by sqlx as before.
//!
//! No error message repeats a URL: it may hold a password.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

/// What a server must be for Pier to use it (libpq's `target_session_attrs`). Pier writes,
/// so the values that select a standby are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wants {
    /// Whichever host answers first (libpq's default; one host needs no check).
    Any,
    /// A server whose transactions may write (`transaction_read_only` off).
    ReadWrite,
    /// A server that is not in recovery (not a standby).
    Primary,
}

impl Wants {
    fn parse(value: &str) -> Result<Self, TargetError> {
        match value {
            "any" => Ok(Wants::Any),
            "read-write" => Ok(Wants::ReadWrite),
            "primary" => Ok(Wants::Primary),
            "read-only" | "standby" | "prefer-standby" => Err(TargetError::ReadOnly(value.into())),
            _ => Err(TargetError::UnknownAttrs(value.chars().take(32).collect())),
        }
    }

    /// Whether the server behind `conn` is one Pier may use. One round trip; the answer
    /// of a server in recovery is always "no" for both checks.
    pub(crate) async fn accepts(self, conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
        if self == Wants::Any {
            return Ok(true);
        }
        let (in_recovery, read_only): (bool, String) =
            sqlx::query_as("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
                .fetch_one(&mut *conn)
                .await?;
        Ok(match self {
            Wants::Any => true,
            Wants::ReadWrite => !in_recovery && read_only == "off",
            Wants::Primary => !in_recovery,
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("no database URL is given")]
    None,
    #[error("database URL {0}: not a postgres:// or postgresql:// URL")]
    Scheme(usize),
    #[error("database URL {0}: an empty host in its host list")]
    EmptyHost(usize),
    #[error("database URL {which}: {reason}")]
    Invalid { which: usize, reason: String },
    #[error(
        "target_session_attrs={0}: Pier writes to its database, so it needs `read-write` (or `primary`, or `any`)"
    )]
    ReadOnly(String),
    #[error("target_session_attrs={0:?} is not one of any, read-write, primary")]
    UnknownAttrs(String),
    #[error("the database URLs disagree on target_session_attrs")]
    Disagree,
    #[error("at most {MAX_HOSTS} database hosts, not {0}")]
    TooMany(usize),
}

/// Hosts tried at most: each costs up to a connect deadline when it does not answer.
pub const MAX_HOSTS: usize = 8;

/// The servers, in the order given, and what each must be.
#[derive(Debug, Clone)]
pub struct Targets {
    pub hosts: Vec<PgConnectOptions>,
    pub wants: Wants,
}

impl Targets {
    /// One URL or several; each may name several hosts. With more than one host and no
    /// `target_session_attrs`, Pier asks for `read-write`: a standby is of no use to it.
    pub(crate) fn parse<'a>(urls: impl IntoIterator<Item = &'a str>) -> Result<Self, TargetError> {
        let mut hosts = Vec::new();
        let mut wants: Option<Wants> = None;
        for (i, url) in urls.into_iter().enumerate() {
            let which = i + 1;
            let split = split_hosts(url, which)?;
            if let Some(w) = split.wants {
                if wants.is_some_and(|before| before != w) {
                    return Err(TargetError::Disagree);
                }
                wants = Some(w);
            }
            for single in split.urls {
                let options =
                    PgConnectOptions::from_str(&single).map_err(|e| TargetError::Invalid {
                        which,
                        reason: describe(&e),
                    })?;
                hosts.push(options);
            }
        }
        match hosts.len() {
            0 => Err(TargetError::None),
            n if n > MAX_HOSTS => Err(TargetError::TooMany(n)),
            n => Ok(Targets {
                hosts,
                wants: wants.unwrap_or(if n > 1 { Wants::ReadWrite } else { Wants::Any }),
            }),
        }
    }

    /// `host:port` of each host, for logs (never a user or a password).
    pub(crate) fn label(options: &PgConnectOptions) -> String {
        match options.get_socket() {
            Some(dir) => format!("{}:{}", dir.display(), options.get_port()),
            None => format!("{}:{}", options.get_host(), options.get_port()),
        }
    }
}

/// sqlx's parse errors name what is wrong, not the URL; still, only their kind is kept.
fn describe(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Configuration(inner) => inner.to_string(),
        other => other.to_string(),
    }
    .chars()
    .take(120)
    .collect()
}

struct Split {
    urls: Vec<String>,
    wants: Option<Wants>,
}

/// `scheme://[userinfo@]host1[:port1],host2[:port2]/db?params` into one URL per host,
/// every other part the same, and `target_session_attrs` taken out (sqlx ignores it).
fn split_hosts(url: &str, which: usize) -> Result<Split, TargetError> {
    let (scheme, rest) = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|s| url.strip_prefix(s).map(|rest| (*s, rest)))
        .ok_or(TargetError::Scheme(which))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostlist) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut wants = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => wants = Some(Wants::parse(value)?),
            _ => kept.push(pair),
        }
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    // No host at all (`postgres:///pier`, a local socket): one target, as sqlx reads it.
    if hostlist.is_empty() {
        return Ok(Split {
            urls: vec![format!("{scheme}{userinfo}{path}{query}")],
            wants,
        });
    }
    let mut urls = Vec::new();
    for host in hostlist.split(',') {
        if host.is_empty() {
            return Err(TargetError::EmptyHost(which));
        }
        urls.push(format!("{scheme}{userinfo}{host}{path}{query}"));
    }
    Ok(Split { urls, wants })
}

/// Connects to one host, within `deadline`.
pub(crate) async fn connect_one(
    options: &PgConnectOptions,
    deadline: std::time::Duration,
) -> Result<PgConnection, sqlx::Error> {
    match tokio::time::timeout(deadline, PgConnection::connect_with(options)).await {
        Ok(res) => res,
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(t: &Targets) -> Vec<String> {
        t.hosts.iter().map(Targets::label).collect()
    }

    #[test]
    fn a_libpq_host_list_becomes_one_target_per_host_with_everything_else_shared() {
        let t = Targets::parse([
            "postgres://pier:s3cret@db1:5433,db2,10.0.0.3:6000/pier?target_session_attrs=read-write&sslmode=disable",
        ])
        .unwrap();
        assert_eq!(hosts(&t), ["db1:5433", "db2:5432", "10.0.0.3:6000"]);
        assert_eq!(t.wants, Wants::ReadWrite);
        for h in &t.hosts {
            assert_eq!(h.get_username(), "pier");
            assert_eq!(h.get_database(), Some("pier"));
            assert!(matches!(
                h.get_ssl_mode(),
                sqlx::postgres::PgSslMode::Disable
            ));
        }
    }

    #[test]
    fn several_hosts_ask_for_a_writable_server_unless_told_otherwise_and_one_host_asks_nothing() {
        let one = Targets::parse(["postgres://pier@db1/pier"]).unwrap();
        assert_eq!(one.wants, Wants::Any);
        let list =
            Targets::parse(["postgres://pier@db1/pier", "postgresql://pier@db2/pier"]).unwrap();
        assert_eq!(hosts(&list), ["db1:5432", "db2:5432"]);
        assert_eq!(list.wants, Wants::ReadWrite);
        let any =
            Targets::parse(["postgres://pier@db1,db2/pier?target_session_attrs=any"]).unwrap();
        assert_eq!(any.wants, Wants::Any);
        let primary = Targets::parse(["postgres://db1/p?target_session_attrs=primary"]).unwrap();
        assert_eq!(primary.wants, Wants::Primary);
    }

    #[test]
    fn bad_lists_are_refused_with_a_reason_that_never_repeats_the_password() {
        let cases: &[(&[&str], TargetError)] = &[
            (&[], TargetError::None),
            (&["mysql://u:hunter2@db/x"], TargetError::Scheme(1)),
            (
                &["postgres://u:hunter2@db1,,db2/x"],
                TargetError::EmptyHost(1),
            ),
            (
                &["postgres://u:hunter2@db1,db2/x?target_session_attrs=standby"],
                TargetError::ReadOnly("standby".into()),
            ),
            (
                &[
                    "postgres://db1/x?target_session_attrs=any",
                    "postgres://db2/x?target_session_attrs=read-write",
                ],
                TargetError::Disagree,
            ),
            (&["postgres://a,b,c,d,e,f,g,h,i/x"], TargetError::TooMany(9)),
        ];
        for (urls, want) in cases {
            let err = Targets::parse(urls.iter().copied()).unwrap_err();
            assert_eq!(&err, want, "{urls:?}");
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
        let bad_port = Targets::parse(["postgres://u:hunter2@db1:99999/x"]).unwrap_err();
        assert!(
            matches!(bad_port, TargetError::Invalid { which: 1, .. }),
            "{bad_port}"
        );
        assert!(!bad_port.to_string().contains("hunter2"), "{bad_port}");
    }

    #[test]
    fn a_url_without_a_host_is_one_local_target() {
        let t = Targets::parse(["postgres:///pier"]).unwrap();
        assert_eq!(t.hosts.len(), 1);
        assert_eq!(t.wants, Wants::Any);
    }
}
