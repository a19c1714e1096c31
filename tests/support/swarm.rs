//! A two-node Docker Swarm for the tests, neither node the host's own engine. A
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

use super::{ExtraEngine, TestEnv, free_port, wait_until};

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

/// What a swarm deployment may take on a loaded machine (each node pulls, health checks
/// run, Swarm monitors each task).
pub const SWARM_DEPLOY: Duration = Duration::from_secs(240);

/// The health check every swarm test app runs inside its tasks: busybox's wget of
/// `/health` (the test images have no shell and no `wget` on a PATH).
pub const HEALTH_CMD: &str = "health_cmd = [\"/bin/busybox\", \"wget\", \"-q\", \"-O\", \"/dev/null\", \"http://127.0.0.1:8080/health\"], health_start = \"1s\"";

/// A two-node swarm and a Pier whose one app runs there as a service (target `swarm`,
/// the manager's engine). Fields drop in order: Pier before the swarm's engines.
pub struct SwarmEnv {
    pub env: TestEnv,
    pub swarm: Swarm,
    seen: std::sync::Mutex<Vec<String>>,
}

impl SwarmEnv {
    /// `swarm_fields`: the inside of the app's `swarm = { … }` table besides the health
    /// check (e.g. `replicas = 3, update = { monitor = "2s" }`).
    pub async fn start(swarm_fields: &str) -> SwarmEnv {
        Self::start_with(swarm_fields, "", &[]).await
    }

    /// Like [`SwarmEnv::start`], with more lines of the app's table and environment
    /// variables for `pier serve`.
    pub async fn start_with(
        swarm_fields: &str,
        app_lines: &str,
        pier_env: &[(&str, &str)],
    ) -> SwarmEnv {
        let registry_port = free_port();
        let swarm = Swarm::start(registry_port).await;
        let target = format!(
            "[[targets]]\nname = \"swarm\"\nkind = \"swarm\"\nhost = \"{}\"\n",
            swarm.manager.docker_host()
        );
        let table = format!("swarm = {{ {swarm_fields}, {HEALTH_CMD} }}\n{app_lines}");
        let mut builder = TestEnv::builder();
        for (k, v) in pier_env {
            builder = builder.pier_env(k, v);
        }
        let env = builder
            .registry_port(registry_port)
            .lease("3s")
            .no_health()
            .sources_toml(&target)
            .app(|a| {
                a.no_publish = true;
                a.extra_toml = format!("targets = [\"swarm\"]\n{table}");
            })
            .start()
            .await;
        SwarmEnv {
            env,
            swarm,
            seen: Default::default(),
        }
    }

    /// Pier's own adapter of the manager, for reading the service as Pier does.
    pub async fn engine(&self) -> pier::engine::Engine {
        pier::engine::Engine::connect(Some(&self.swarm.manager.docker_host()))
            .await
            .expect("an engine client of the manager")
    }

    /// See [`TestEnv::next_final_deployment`].
    pub async fn final_deployment(&self) -> serde_json::Value {
        self.env
            .next_final_deployment(&self.seen, SWARM_DEPLOY)
            .await
    }

    /// The service as Swarm keeps it.
    pub async fn service(&self) -> pier::engine::ServiceFacts {
        self.engine()
            .await
            .service(self.env.app())
            .await
            .expect("inspect the service")
            .expect("the service exists")
    }

    /// Waits until the service's tasks meant to run are `replicas`, all running; then
    /// checks each with the engine of its node: its container's image carries exactly
    /// `repo@digest`. The tasks, with the nodes they run on.
    pub async fn assert_tasks_run(&self, digest: &str, replicas: usize) -> Vec<TaskOn> {
        let engine = self.engine().await;
        let app = self.env.app().to_owned();
        let tasks = wait_until("every replica running", SWARM_DEPLOY, || async {
            let tasks = engine.service_tasks(&app).await.ok()?;
            let meant: Vec<_> = tasks
                .into_iter()
                .filter(|t| t.desired == pier::engine::TaskState::Running)
                .collect();
            (meant.len() == replicas && meant.iter().all(|t| t.is_up())).then_some(meant)
        })
        .await;
        let (manager_id, worker_id) = self.swarm.node_ids();
        let wanted = format!("{}@{digest}", self.env.image());
        let mut out = Vec::new();
        for t in tasks {
            let node = match &t.node_id {
                n if *n == manager_id => &self.swarm.manager,
                n if *n == worker_id => &self.swarm.worker,
                n => panic!("task {} on an unknown node {n}", t.id),
            };
            let image = must(
                node,
                &["inspect", "--format", "{{.Image}}", &t.container_id],
            );
            let digests = must(
                node,
                &[
                    "image",
                    "inspect",
                    "--format",
                    "{{json .RepoDigests}}",
                    image.trim(),
                ],
            );
            assert!(
                digests.contains(&wanted),
                "task {} on {} runs {image} whose digests {digests} lack {wanted}",
                t.id,
                node.netns()
            );
            out.push(TaskOn {
                node: if t.node_id == manager_id {
                    "manager"
                } else {
                    "worker"
                },
                task: t,
            });
        }
        out
    }

    pub async fn cleanup(self) {
        let _ = self.engine().await.remove_service(self.env.app()).await;
        let SwarmEnv { env, mut swarm, .. } = self;
        env.cleanup().await;
        swarm.cleanup();
    }
}

/// A task and the node (`manager` or `worker`) it runs on.
pub struct TaskOn {
    pub node: &'static str,
    pub task: pier::engine::TaskFacts,
}
