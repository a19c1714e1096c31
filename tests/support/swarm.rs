//! Issue 24: a two-node Docker Swarm for the tests, neither node the host's own engine. A
//! manager and a worker, each an [`ExtraEngine`] (a real dockerd in its own network
//! namespace) that reaches the test registry at `127.0.0.1:PORT` as the host does.
//!
//! The two namespaces are joined by a veth pair of their own (`10.198.0.1` manager,
//! `10.198.0.2` worker): the swarm's traffic (the worker's dispatcher link to the
//! manager's 2377) never crosses the host, whose `FORWARD` policy is Docker's `DROP`, so no
//! host firewall rule is added and nothing on the host needs undoing. The pair lives only
//! in the two namespaces and goes with them.
//!
//! Invariant: the host's engine is never asked to init, join or leave anything; every
//! swarm command names one of the two namespaced engines (`docker -H unix://…`). Cleanup
//! (also from `Drop`, so a panicking test runs it) leaves the swarm on the worker, then on
//! the manager, then stops both engines and deletes their namespaces.

use std::process::Command;
use std::time::Duration;

use bollard::Docker;

use super::{ExtraEngine, wait_until};

/// The manager's address on the pair that joins the two namespaces.
pub const MANAGER_ADDR: &str = "10.198.0.1";
/// The worker's address on that pair.
pub const WORKER_ADDR: &str = "10.198.0.2";
/// How long the swarm may take to form (init, join, both nodes Ready) on a loaded machine.
const FORM_TIMEOUT: Duration = Duration::from_secs(120);

/// A manager and a worker in a swarm of their own; see the module docs.
pub struct Swarm {
    pub manager: ExtraEngine,
    pub worker: ExtraEngine,
    left: bool,
}

impl Swarm {
    /// Both engines (each forwarding `registry_port`), joined, both nodes Ready.
    pub async fn start(registry_port: u16) -> Swarm {
        let (manager, worker) = tokio::join!(
            ExtraEngine::builder().forward(registry_port).start(),
            ExtraEngine::builder().forward(registry_port).start(),
        );
        // Constructed before any swarm command, so a panic from here on leaves the swarm.
        let swarm = Swarm {
            manager,
            worker,
            left: false,
        };
        swarm.link_namespaces();
        swarm.init_and_join();
        swarm.wait_both_ready().await;
        swarm
    }

    /// The veth pair between the two namespaces, one end and one address in each.
    fn link_namespaces(&self) {
        let tag = super::random_hex(6);
        let (m_if, w_if) = (format!("sm{tag}"), format!("sw{tag}"));
        let (m_ns, w_ns) = (self.manager.netns(), self.worker.netns());
        ip(&[
            "link", "add", &m_if, "netns", m_ns, "type", "veth", "peer", "name", &w_if, "netns",
            w_ns,
        ]);
        ip(&[
            "-n",
            m_ns,
            "addr",
            "add",
            &format!("{MANAGER_ADDR}/30"),
            "dev",
            &m_if,
        ]);
        ip(&[
            "-n",
            w_ns,
            "addr",
            "add",
            &format!("{WORKER_ADDR}/30"),
            "dev",
            &w_if,
        ]);
        ip(&["-n", m_ns, "link", "set", &m_if, "up"]);
        ip(&["-n", w_ns, "link", "set", &w_if, "up"]);
    }

    /// `swarm init` on the manager, `swarm join` with its worker token on the worker.
    fn init_and_join(&self) {
        must(
            &self.manager,
            &["swarm", "init", "--advertise-addr", MANAGER_ADDR],
        );
        let token = must(&self.manager, &["swarm", "join-token", "-q", "worker"]);
        must(
            &self.worker,
            &[
                "swarm",
                "join",
                "--advertise-addr",
                WORKER_ADDR,
                "--token",
                token.trim(),
                &format!("{MANAGER_ADDR}:2377"),
            ],
        );
    }

    /// Until `docker node ls` on the manager lists two nodes, both Ready.
    async fn wait_both_ready(&self) {
        wait_until("both swarm nodes are Ready", FORM_TIMEOUT, || async {
            let (ok, out) = self
                .manager
                .docker(&["node", "ls", "--format", "{{.Status}}"]);
            let statuses: Vec<&str> = out.lines().map(str::trim).collect();
            (ok && statuses.len() == 2 && statuses.iter().all(|s| *s == "Ready")).then_some(())
        })
        .await
    }

    /// A bollard client of the manager: the services API.
    pub async fn manager_client(&self) -> Docker {
        self.manager.client().await
    }

    /// The node ids, manager first.
    pub fn node_ids(&self) -> (String, String) {
        let id = |e: &ExtraEngine| {
            must(e, &["info", "--format", "{{.Swarm.NodeID}}"])
                .trim()
                .to_owned()
        };
        (id(&self.manager), id(&self.worker))
    }

    /// Leaves the swarm on both nodes, then stops both engines and deletes their
    /// namespaces. Idempotent; `Drop` calls it.
    pub fn cleanup(&mut self) {
        if !self.left {
            self.left = true;
            // The worker first: a manager that left first would strand it in a swarm
            // without a leader (harmless here, since its engine stops, but noisy).
            for engine in [&self.worker, &self.manager] {
                let (ok, out) = engine.docker(&["swarm", "leave", "--force"]);
                if !ok && !out.contains("not part of a swarm") {
                    eprintln!("test harness: swarm leave on {}: {out}", engine.netns());
                }
            }
        }
        self.worker.cleanup();
        self.manager.cleanup();
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// `docker <args>` on `engine`, which must succeed: its output.
fn must(engine: &ExtraEngine, args: &[&str]) -> String {
    let (ok, out) = engine.docker(args);
    assert!(ok, "docker {args:?} on {}: {out}", engine.netns());
    out
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run ip {args:?}: {e}"));
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
