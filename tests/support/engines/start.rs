//! Starting an extra engine's processes, each waited for until it is ready: dockerd
//! (answering on its socket and listening on its TLS port), the socat pairs that bring the
//! host's ports into the namespace, and sshd.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bollard::Docker;

use super::sshd::{SSH_PORT, SshFiles};
use super::{ExtraEngine, READY_TIMEOUT, TLS_PORT, netns, procs};

impl ExtraEngine {
    pub(super) async fn start_dockerd(&mut self, extra_args: &[String]) {
        let dir = self.dir().to_path_buf();
        let (ns_ip, alias_ip) = (self.address(), self.alias_address());
        let tls = dir.join("tls");
        std::fs::create_dir_all(&tls).expect("create the engine's tls dir");
        let server = self.ca.server(&[ns_ip.into()]);
        std::fs::write(tls.join("ca.pem"), self.ca.pem()).expect("write ca.pem");
        std::fs::write(tls.join("server.pem"), server.cert_pem).expect("write server.pem");
        std::fs::write(tls.join("server-key.pem"), server.key_pem).expect("write the key");
        // Not /etc/docker/daemon.json: that one names the host engine's data-root. A short
        // shutdown-timeout bounds how long a stop waits for containers that ignore SIGTERM.
        std::fs::write(
            dir.join("daemon.json"),
            r#"{"shutdown-timeout": 2, "log-level": "warn"}"#,
        )
        .expect("write daemon.json");
        let log = dir.join("dockerd.log");
        let (out, err) = crate::support::open_log(&log);
        let d = |p: &str| dir.join(p).display().to_string();
        let mut cmd = self.command("dockerd");
        cmd.args(["--config-file", &d("daemon.json")])
            .args(["--data-root", &d("data"), "--exec-root", &d("exec")])
            .args(["--pidfile", &d("docker.pid")])
            .args(["--host", &format!("unix://{}", d("docker.sock"))])
            .args(["--host", &format!("tcp://{ns_ip}:{TLS_PORT}")])
            .args(["--host", &format!("tcp://{alias_ip}:{TLS_PORT}")])
            .args(["--tlsverify", "--tlscacert", &d("tls/ca.pem")])
            .args([
                "--tlscert",
                &d("tls/server.pem"),
                "--tlskey",
                &d("tls/server-key.pem"),
            ])
            .args(["--storage-driver", "fuse-overlayfs"])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().expect("spawn dockerd in the namespace");
        netns::record_pid(&dir, child.id());
        self.dockerd = Some(child);
        self.wait_dockerd(&log).await;
    }

    /// Until the engine answers a ping on its socket and listens on its TLS port.
    async fn wait_dockerd(&mut self, log: &Path) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let sock = self.docker_sock();
        let tls = SocketAddrV4::new(self.address(), TLS_PORT);
        let mut pause = Duration::from_millis(50);
        loop {
            let child = self.dockerd.as_mut().expect("dockerd");
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "dockerd in {} exited ({status}); {}:\n{}",
                    self.netns(),
                    log.display(),
                    crate::support::tail(&crate::support::read_lossy(log), 30)
                );
            }
            let pid = child.id();
            if sock.exists() && procs::listening(pid, tls) && ping_socket(&sock).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "dockerd in {} not ready within {READY_TIMEOUT:?}; {}:\n{}",
                self.netns(),
                log.display(),
                crate::support::tail(&crate::support::read_lossy(log), 30)
            );
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }

    /// Makes `127.0.0.1:port` in the namespace reach `127.0.0.1:port` on the host: a
    /// socat inside forwards to the host's end of the veth, where another forwards to the
    /// host's loopback. Neither listens anywhere else.
    pub async fn forward_host_port(&mut self, port: u16) {
        let host_ip = self.host_address();
        let log = self.dir().join(format!("forward-{port}.log"));
        let mut outside = Command::new("socat");
        outside
            .arg(format!("TCP4-LISTEN:{port},bind={host_ip},reuseaddr,fork"))
            .arg(format!("TCP4:127.0.0.1:{port}"));
        self.spawn_forwarder(&mut outside, &log, SocketAddrV4::new(host_ip, port))
            .await;
        let mut inside = self.command("socat");
        inside
            .arg(format!("TCP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
            .arg(format!("TCP4:{host_ip}:{port}"));
        self.spawn_forwarder(
            &mut inside,
            &log,
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
        )
        .await;
    }

    async fn spawn_forwarder(&mut self, cmd: &mut Command, log: &Path, listen: SocketAddrV4) {
        let (out, err) = crate::support::open_log(log);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .expect("spawn socat");
        netns::record_pid(self.dir(), child.id());
        self.forwarders.push(child);
        let child = self.forwarders.last_mut().expect("just pushed");
        let pid = child.id();
        procs::wait_ready("socat", child, log, READY_TIMEOUT, || {
            procs::listening(pid, listen)
        })
        .await;
    }

    pub(super) async fn start_sshd(&mut self) {
        let listen = SocketAddrV4::new(self.address(), SSH_PORT);
        let files = SshFiles::create(self.dir(), listen, &self.docker_sock());
        let (out, err) = crate::support::open_log(&files.log());
        let child = self
            .command("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(files.config())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .expect("spawn sshd in the namespace");
        netns::record_pid(self.dir(), child.id());
        let log = files.log();
        self.ssh = Some(files);
        let child = self.sshd.insert(child);
        let pid = child.id();
        procs::wait_ready("sshd", child, &log, READY_TIMEOUT, || {
            procs::listening(pid, listen)
        })
        .await;
    }
}

async fn ping_socket(sock: &Path) -> bool {
    let Ok(docker) =
        Docker::connect_with_unix(&sock.to_string_lossy(), 5, bollard::API_DEFAULT_VERSION)
    else {
        return false;
    };
    tokio::time::timeout(Duration::from_secs(5), docker.ping())
        .await
        .is_ok_and(|r| r.is_ok())
}
