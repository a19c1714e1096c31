//! Test-side helpers over the real Docker engine.

use super::*;

// ---------------------------------------------------------------------------------------------
// Docker engine
// ---------------------------------------------------------------------------------------------

/// Connects to the engine from `DOCKER_HOST` or the platform default, negotiating the API
/// version (the engine here speaks 1.41, older than bollard's default).
pub async fn docker() -> Docker {
    Docker::connect_with_defaults()
        .expect("connect to the Docker engine")
        .negotiate_version()
        .await
        .expect("negotiate the Docker API version")
}

/// Test-side helpers over the real engine.
#[derive(Clone)]
pub struct Engine {
    pub docker: Docker,
}

impl Engine {
    pub async fn connect() -> Engine {
        Engine {
            docker: docker().await,
        }
    }

    /// Every container (running or not) labelled `pier.app=<app>`.
    pub async fn containers_of_app(&self, app: &str) -> Vec<ContainerSummary> {
        let filters = std::collections::HashMap::from([(
            "label".to_owned(),
            vec![format!("pier.app={app}")],
        )]);
        self.docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .unwrap_or_else(|e| panic!("list containers of {app}: {e}"))
    }

    /// The running containers labelled `pier.app=<app>`.
    pub async fn running_containers_of_app(&self, app: &str) -> Vec<ContainerSummary> {
        self.containers_of_app(app)
            .await
            .into_iter()
            .filter(|c| c.state.as_ref().is_some_and(|s| s.to_string() == "running"))
            .collect()
    }

    /// Force-removes (with anonymous volumes) every container labelled `pier.app=<app>`.
    /// Returns how many were removed.
    pub async fn remove_app_containers(&self, app: &str) -> usize {
        remove_app_containers_with(&self.docker, app).await
    }

    /// Pulls `reference` (`host/repo:tag` or `host/repo@sha256:...`), panicking on failure.
    pub async fn pull(&self, reference: &str) {
        let mut stream = self.docker.create_image(
            Some(CreateImageOptions {
                from_image: Some(reference.to_owned()),
                ..Default::default()
            }),
            None,
            None,
        );
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                panic!("pull {reference}: {e}");
            }
        }
    }

    /// Creates and starts a container of `image` labelled `pier.managed=true` and
    /// `pier.app=<app>`, container port 8080 published on `publish`. Returns its id.
    pub async fn run_labelled(&self, app: &str, image: &str, publish: SocketAddr) -> String {
        let id = self
            .create_labelled(app, &[("pier.test", "true")], image, publish)
            .await;
        self.docker
            .start_container(&id, None)
            .await
            .unwrap_or_else(|e| panic!("start container {id}: {e}"));
        id
    }

    /// Creates (does not start) a container as Pier's `create` step would for deployment
    /// `deployment` of `app`: Pier's labels, the publish port, `image` (`repo@digest`).
    pub async fn create_labelled_for(
        &self,
        app: &str,
        deployment: &str,
        digest: &str,
        image: &str,
        publish: SocketAddr,
    ) -> String {
        let labels = [("pier.deployment", deployment), ("pier.digest", digest)];
        self.create_labelled(app, &labels, image, publish).await
    }

    /// Creates a container of `app` (`pier.managed`, `pier.app` and `extra` labels) with
    /// container port 8080 published on `publish`.
    async fn create_labelled(
        &self,
        app: &str,
        extra: &[(&str, &str)],
        image: &str,
        publish: SocketAddr,
    ) -> String {
        let bindings = std::collections::HashMap::from([(
            "8080/tcp".to_owned(),
            Some(vec![PortBinding {
                host_ip: Some(publish.ip().to_string()),
                host_port: Some(publish.port().to_string()),
            }]),
        )]);
        let mut labels = std::collections::HashMap::from([
            ("pier.managed".to_owned(), "true".to_owned()),
            ("pier.app".to_owned(), app.to_owned()),
        ]);
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self.docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(format!("{app}-made-by-test-{}", random_hex(6))),
                    ..Default::default()
                }),
                ContainerCreateBody {
                    image: Some(image.to_owned()),
                    labels: Some(labels),
                    exposed_ports: Some(vec!["8080/tcp".to_owned()]),
                    host_config: Some(HostConfig {
                        port_bindings: Some(bindings),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create container of {image}: {e}"))
            .id
    }

    /// Removes an image by reference or id (force); ignores "no such image".
    pub async fn remove_image(&self, reference: &str) {
        let _ = self
            .docker
            .remove_image(
                reference,
                Some(RemoveImageOptions {
                    force: true,
                    ..Default::default()
                }),
                None,
            )
            .await;
    }

    /// The repo digests (`host/repo@sha256:...`) the engine records for a local image.
    pub async fn repo_digests(&self, image: &str) -> Vec<String> {
        self.docker
            .inspect_image(image)
            .await
            .ok()
            .and_then(|i| i.repo_digests)
            .unwrap_or_default()
    }
}

async fn remove_app_containers_with(docker: &Docker, app: &str) -> usize {
    let filters =
        std::collections::HashMap::from([("label".to_owned(), vec![format!("pier.app={app}")])]);
    let list = match docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("test harness: list containers of {app}: {e}");
            return 0;
        }
    };
    let mut removed = 0;
    for c in list {
        let Some(id) = c.id else { continue };
        match docker
            .remove_container(
                &id,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(()) => removed += 1,
            Err(e) => {
                let msg = e.to_string();
                if !msg.contains("No such container") && !msg.contains("is already in progress") {
                    eprintln!("test harness: remove container {id} of {app}: {e}");
                }
            }
        }
    }
    removed
}

/// Force-removes every container labelled `pier.app=<app>` on `cleanup().await` or `Drop`.
pub struct AppGuard {
    pub app: String,
    done: bool,
}

impl AppGuard {
    pub fn new(app: &str) -> AppGuard {
        AppGuard {
            app: app.to_owned(),
            done: false,
        }
    }

    pub async fn cleanup(&mut self) {
        if !self.done {
            let docker = docker().await;
            remove_app_containers_with(&docker, &self.app).await;
            remove_app_resources(&self.app);
            self.done = true;
        }
    }
}

impl Drop for AppGuard {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            let app = self.app.clone();
            block_on_side_thread(async move {
                match Docker::connect_with_defaults() {
                    Ok(d) => {
                        let d = d.negotiate_version().await.unwrap_or_else(|_| {
                            Docker::connect_with_defaults().expect("docker client")
                        });
                        remove_app_containers_with(&d, &app).await;
                        remove_app_resources(&app);
                    }
                    Err(e) => eprintln!("test harness: cannot clean up app {app}: {e}"),
                }
            });
        }
    }
}

/// The app's private network and the volumes labelled for it (after its containers).
fn remove_app_resources(app: &str) {
    let _ = docker_cli(&["network", "rm", &format!("pier-{app}")]);
    let (_, out) = docker_cli(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=pier.app={app}"),
    ]);
    for v in out.lines().filter(|l| !l.is_empty()) {
        let _ = docker_cli(&["volume", "rm", v]);
    }
}

/// The ids of every container labelled `pier.app=<app>`, in any state (`docker ps -aq`).
pub fn containers_of(app: &str) -> Vec<String> {
    let (ok, out) = docker_cli(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label=pier.app={app}"),
    ]);
    assert!(ok, "{out}");
    out.lines().map(str::to_owned).collect()
}

/// `docker <args>` to completion: (success, stdout and stderr).
/// What `format` prints for each container the engine created since `since` (unix seconds)
/// with the label `label` (`key=value`): read from the engine's own event log, so a
/// container created and removed again still counts.
pub fn container_creates(label: &str, since: i64, format: &str) -> Vec<String> {
    let until = chrono::Utc::now().timestamp() + 1;
    let (ok, out) = docker_cli(&[
        "events",
        "--since",
        &since.to_string(),
        "--until",
        &until.to_string(),
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--filter",
        &format!("label={label}"),
        "--format",
        format,
    ]);
    assert!(ok, "docker events: {out}");
    out.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

pub fn docker_cli(args: &[&str]) -> (bool, String) {
    match std::process::Command::new("docker").args(args).output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, format!("run docker: {e}")),
    }
}
