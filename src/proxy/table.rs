//! The proxy's routing table: the config says where each app listens and for which hosts;
//! the database says which generation serves it. Rebuilt whole on every change and swapped
//! in at once, so a request sees one consistent table.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::store::Route;

#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub app: String,
    pub listen: SocketAddr,
    pub hosts: Vec<String>,
    /// The serving generation, as `127.0.0.1:port`; `None` before the first deploy.
    pub upstream: Option<String>,
    /// The previous generation during a soak: requests that cannot reach `upstream` at
    /// all are retried here.
    pub standby: Option<String>,
    pub version: i64,
    #[serde(skip)]
    pub timeout: Duration,
    #[serde(skip)]
    pub max_body: u64,
    /// The in-flight counters of `upstream` and `standby`, looked up once per table, not
    /// once per request.
    #[serde(skip)]
    pub counters: (Option<Arc<Counter>>, Option<Arc<Counter>>),
    /// The app's `proxy.max_upstream_connections`, shared by every table built: a permit
    /// per open connection to any of its generations.
    #[serde(skip)]
    pub conns: Arc<Semaphore>,
}

/// One place a request may go: the serving generation, or after it the standby.
pub(crate) struct Attempt<'a> {
    pub target: &'a str,
    counter: Option<&'a Arc<Counter>>,
    /// No other place is left to try after this one.
    pub is_last: bool,
}

impl Attempt<'_> {
    /// Counts the request in flight to this target until the guard is dropped.
    pub(crate) fn start(&self, counters: &Counters) -> InFlight {
        match self.counter {
            Some(c) => c.start(),
            None => counters.start(self.target),
        }
    }
}

impl Entry {
    /// Where a request goes, in order: the serving generation, then the standby (the
    /// previous generation during a soak) for a request that cannot have reached it.
    pub(crate) fn attempts(&self) -> impl Iterator<Item = Attempt<'_>> {
        let standby = self.standby.as_deref().zip(self.counters.1.as_ref());
        let first = self.upstream.as_deref().map(|target| Attempt {
            target,
            counter: self.counters.0.as_ref(),
            is_last: standby.is_none(),
        });
        first.into_iter().chain(standby.map(|(target, c)| Attempt {
            target,
            counter: Some(c),
            is_last: true,
        }))
    }
}

#[derive(Debug, Default)]
pub struct Table {
    by_listen: HashMap<SocketAddr, Vec<Arc<Entry>>>,
}

impl Table {
    /// Every blue-green app of the config, served by the route the database (or the last
    /// known state) gives it.
    pub(crate) fn build(
        config: &Config,
        routes: &[Route],
        counters: &Counters,
        limits: &Limits,
    ) -> Table {
        let mut by_listen: HashMap<SocketAddr, Vec<Arc<Entry>>> = HashMap::new();
        for app in &config.apps {
            let Some(r) = &app.route else { continue };
            let db = routes.iter().find(|x| x.app == app.name);
            let upstream = db.map(|d| d.upstream.clone());
            let standby = db.and_then(|d| d.standby.clone());
            let counters = (
                upstream.as_deref().map(|u| counters.counter(u)),
                standby.as_deref().map(|u| counters.counter(u)),
            );
            by_listen.entry(r.listen).or_default().push(Arc::new(Entry {
                app: app.name.to_string(),
                listen: r.listen,
                hosts: r.hosts.clone(),
                upstream,
                standby,
                version: db.map_or(0, |d| d.version),
                timeout: r.timeout,
                max_body: r.max_body,
                counters,
                conns: limits.of(&app.name, config.proxy.max_upstream_connections),
            }));
        }
        Table { by_listen }
    }

    /// The entry for a request that arrived on `listen` for `host` (lower-cased, without
    /// port, in any case): an exact host match first, else the address's catch-all app.
    pub(crate) fn find(&self, listen: SocketAddr, host: Option<&str>) -> Option<&Arc<Entry>> {
        let entries = self.by_listen.get(&listen)?;
        host.and_then(|h| {
            entries
                .iter()
                .find(|e| e.hosts.iter().any(|x| x.eq_ignore_ascii_case(h)))
        })
        .or_else(|| entries.iter().find(|e| e.hosts.is_empty()))
    }

    pub(crate) fn listens(&self) -> Vec<SocketAddr> {
        let mut l: Vec<SocketAddr> = self.by_listen.keys().copied().collect();
        l.sort();
        l
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.by_listen.values().flatten().map(|e| e.as_ref())
    }
}

/// The connection limit of each app, made on first use and kept for the process's life
/// (apps come from the config, which the proxy reads once).
#[derive(Debug, Default)]
pub(crate) struct Limits {
    map: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Limits {
    fn of(&self, app: &str, max: usize) -> Arc<Semaphore> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(app.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(max)))
            .clone()
    }
}

/// Requests in flight and served, per upstream address: what the pipeline's drain step
/// waits on.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    map: Mutex<HashMap<String, Arc<Counter>>>,
}

#[derive(Debug, Default, Serialize)]
pub struct Counter {
    pub in_flight: AtomicU64,
    pub served: AtomicU64,
}

/// Held while a request to an upstream is in flight, through the end of the answer's body.
pub(crate) struct InFlight(Arc<Counter>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.served.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counter {
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }
}

impl Counters {
    /// The counter of `upstream`, made on first use.
    pub(crate) fn counter(&self, upstream: &str) -> Arc<Counter> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(upstream.to_owned()).or_default().clone()
    }

    pub(crate) fn start(&self, upstream: &str) -> InFlight {
        self.counter(upstream).start()
    }

    pub(crate) fn snapshot(&self) -> HashMap<String, (u64, u64)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .map(|(k, c)| {
                (
                    k.clone(),
                    (
                        c.in_flight.load(Ordering::SeqCst),
                        c.served.load(Ordering::SeqCst),
                    ),
                )
            })
            .collect()
    }

    /// Forgets upstreams that no route names any more and that have nothing in flight, so
    /// the map does not grow with every deploy.
    pub(crate) fn prune(&self, keep: &[&str]) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|k, c| keep.contains(&k.as_str()) || c.in_flight.load(Ordering::SeqCst) > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(app: &str, hosts: &[&str]) -> Arc<Entry> {
        Arc::new(Entry {
            app: app.into(),
            listen: "127.0.0.1:80".parse().unwrap(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            upstream: None,
            standby: None,
            version: 0,
            timeout: Duration::from_secs(1),
            max_body: 1,
            counters: (None, None),
            conns: Arc::new(Semaphore::new(1)),
        })
    }

    #[test]
    fn a_host_goes_to_its_app_and_anything_else_to_the_catch_all() {
        let listen: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let t = Table {
            by_listen: HashMap::from([(
                listen,
                vec![
                    entry("a", &["a.example"]),
                    entry("any", &[]),
                    entry("b", &["b.example"]),
                ],
            )]),
        };
        assert_eq!(t.find(listen, Some("b.example")).unwrap().app, "b");
        assert_eq!(t.find(listen, Some("a.example")).unwrap().app, "a");
        assert_eq!(t.find(listen, Some("other")).unwrap().app, "any");
        assert_eq!(t.find(listen, None).unwrap().app, "any");
        assert!(t.find("127.0.0.1:81".parse().unwrap(), None).is_none());
    }

    #[test]
    fn in_flight_counts_go_down_when_the_answer_is_done() {
        let c = Counters::default();
        let a = c.start("u");
        let b = c.start("u");
        assert_eq!(c.snapshot()["u"], (2, 0));
        drop(a);
        assert_eq!(c.snapshot()["u"], (1, 1));
        drop(b);
        c.prune(&[]);
        assert!(c.snapshot().is_empty());
    }
}
