//! An `sshd` in an extra engine's namespace, as an operator would set up a host for
//! `docker -H ssh://`: its own host key, one authorized client key, and the remote
//! `docker system dial-stdio` reaching that namespace's dockerd (`SetEnv DOCKER_HOST`).
//! Everything lives in the engine's directory; nothing under /etc/ssh is read or written.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::procs::run;

pub const SSH_PORT: u16 = 2222;

/// The files of one sshd and its client.
pub struct SshFiles {
    pub dir: PathBuf,
}

impl SshFiles {
    /// Makes the host key, a client key and the sshd config under `dir/ssh`.
    pub fn create(dir: &Path, listen: SocketAddrV4, docker_sock: &Path) -> SshFiles {
        let files = SshFiles {
            dir: dir.join("ssh"),
        };
        std::fs::create_dir_all(&files.dir).expect("create the ssh dir");
        keygen(&files.host_key());
        keygen(&files.identity());
        std::fs::copy(
            files.identity().with_extension("pub"),
            files.authorized_keys(),
        )
        .expect("authorize the client key");
        // sshd refuses to start without its privilege separation directory.
        std::fs::create_dir_all("/run/sshd").expect("create /run/sshd");
        let config = format!(
            "ListenAddress {listen}\n\
             HostKey {host_key}\n\
             PidFile {pid}\n\
             AuthorizedKeysFile {authorized}\n\
             PermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             UsePAM no\n\
             StrictModes no\n\
             SetEnv DOCKER_HOST=unix://{sock}\n\
             X11Forwarding no\n\
             AllowTcpForwarding no\n\
             AllowAgentForwarding no\n\
             PermitTunnel no\n\
             MaxStartups 100:30:200\n\
             LogLevel VERBOSE\n",
            host_key = files.host_key().display(),
            pid = files.dir.join("sshd.pid").display(),
            authorized = files.authorized_keys().display(),
            sock = docker_sock.display(),
        );
        std::fs::write(files.config(), config).expect("write sshd_config");
        let host_pub = std::fs::read_to_string(files.host_key().with_extension("pub"))
            .expect("read the host public key");
        let key: Vec<&str> = host_pub.split_whitespace().take(2).collect();
        std::fs::write(
            files.known_hosts(),
            format!("[{}]:{} {}\n", listen.ip(), listen.port(), key.join(" ")),
        )
        .expect("write known_hosts");
        files
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("sshd_config")
    }

    pub fn host_key(&self) -> PathBuf {
        self.dir.join("host_ed25519")
    }

    /// The client's private key (`identity` of the target).
    pub fn identity(&self) -> PathBuf {
        self.dir.join("client_ed25519")
    }

    pub fn authorized_keys(&self) -> PathBuf {
        self.dir.join("authorized_keys")
    }

    /// `[address]:port ssh-ed25519 …`: the engine's host key, and only it.
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.join("known_hosts")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("sshd.log")
    }
}

/// A new ed25519 key pair at `path` and `path.pub`, without a passphrase.
pub fn keygen(path: &Path) {
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "pier-test", "-f"])
        .arg(path));
}
