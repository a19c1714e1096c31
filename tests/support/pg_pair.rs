//! A primary and its streaming standby: two real Postgres clusters of Debian's binaries
//! (`initdb`, then `pg_basebackup -R` into a second data directory), each on its own
//! loopback port, in one temporary directory, run as the `postgres` user. The standby is
//! synchronous (`synchronous_standby_names` on the primary), so a commit the primary
//! acknowledged is on the standby too. Both are stopped, and the directory removed, on drop.
//!
//! Every test makes its own pair, with its own ports and directory, so tests can run side
//! by side; none touches the shared 15/main cluster.

use super::*;

/// The standby's name as the primary sees it (its `application_name`).
const STANDBY_NAME: &str = "pier_standby";

fn pg_bin(tool: &str) -> PathBuf {
    let version = std::env::var("PIER_PG_VERSION").unwrap_or_else(|_| "15".into());
    PathBuf::from(format!("/usr/lib/postgresql/{version}/bin/{tool}"))
}

/// Runs `tool args...` as the `postgres` user (peer and trust auth on the pair's socket),
/// from `/`; panics with its output if it fails.
fn as_postgres(tool: &str, args: &[&str]) -> String {
    let program = pg_bin(tool);
    let mut cmd = if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&program);
        c
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", "-u", "postgres", "--"]).arg(&program);
        c
    };
    let out = cmd
        .args(args)
        .current_dir("/")
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// One of the two servers.
pub struct PgNode {
    pub port: u16,
    data: PathBuf,
    log: PathBuf,
}

impl PgNode {
    /// `postgres://pier:pier@127.0.0.1:<port>/<db>`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://pier:pier@127.0.0.1:{}/{db}", self.port)
    }

    pub fn log(&self) -> String {
        read_lossy(&self.log)
    }

    /// The postmaster's pid, from its `postmaster.pid` (None once it is gone).
    fn postmaster_pid(&self) -> Option<u32> {
        let pidfile = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let pid: u32 = pidfile.lines().next()?.trim().parse().ok()?;
        (!is_zombie(pid)).then_some(pid)
    }

    fn start(&self, socket_dir: &Path, extra: &[(&str, &str)]) {
        let mut opts = format!(
            "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
             -c fsync=off -c max_connections=100 -c wal_level=replica -c max_wal_senders=4",
            self.port,
            socket_dir.display()
        );
        for (k, v) in extra {
            opts.push_str(&format!(" -c {k}={v}"));
        }
        as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-l",
                &self.log.to_string_lossy(),
                "-w",
                "-t",
                "60",
                "-o",
                &opts,
                "start",
            ],
        );
    }

    /// `pg_ctl stop -m immediate`, and SIGKILL if that did not end it.
    fn stop_now(&self) {
        let Some(pid) = self.postmaster_pid() else {
            return;
        };
        let data = self.data.to_string_lossy().into_owned();
        let stopped = std::panic::catch_unwind(|| {
            as_postgres(
                "pg_ctl",
                &["-D", &data, "-m", "immediate", "-w", "-t", "20", "stop"],
            )
        });
        if stopped.is_err() && std::path::Path::new(&format!("/proc/{pid}")).exists() {
            kill_pid(pid);
        }
    }
}

fn kill_pid(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// The children of `pid` (its backends, walsender, checkpointer...).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

pub struct PgPair {
    pub primary: PgNode,
    pub standby: PgNode,
    /// Processes of a postmaster killed with SIGKILL: they exit by themselves once they
    /// notice, and whatever is left is killed on drop.
    orphans: Vec<u32>,
    dir: TempDir,
}

impl PgPair {
    /// initdb, the `pier` role (password `pier`, superuser), a base backup, the standby
    /// streaming, then synchronous replication switched on; returns once the primary sees
    /// its standby as `sync`.
    pub async fn start() -> PgPair {
        let dir = tempfile::Builder::new()
            .prefix("pier-pg-pair-")
            .tempdir()
            .expect("tempdir");
        let (ok, out) = chown_postgres(dir.path());
        assert!(ok, "chown {} to postgres: {out}", dir.path().display());
        let node = |name: &str| PgNode {
            port: free_port(),
            data: dir.path().join(name),
            log: dir.path().join(format!("{name}.log")),
        };
        let pair = PgPair {
            primary: node("primary"),
            standby: node("standby"),
            orphans: Vec::new(),
            dir,
        };
        let sock = pair.dir.path().to_path_buf();
        as_postgres(
            "initdb",
            &[
                "-D",
                &pair.primary.data.to_string_lossy(),
                "-U",
                "postgres",
                "--auth=trust",
                "--locale=C",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        pair.primary.start(&sock, &[]);
        pair.psql(
            &pair.primary,
            "CREATE ROLE pier LOGIN SUPERUSER PASSWORD 'pier'",
        );
        as_postgres(
            "pg_basebackup",
            &[
                "-h",
                &sock.to_string_lossy(),
                "-p",
                &pair.primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &pair.standby.data.to_string_lossy(),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        );
        // The standby's own connection string, last in the file so that it wins: it names
        // the standby for `synchronous_standby_names`.
        let conninfo = format!(
            "\nprimary_conninfo = 'host={} port={} user=postgres application_name={STANDBY_NAME}'\n",
            sock.display(),
            pair.primary.port
        );
        let auto = pair.standby.data.join("postgresql.auto.conf");
        let mut f = OpenOptions::new()
            .append(true)
            .open(&auto)
            .unwrap_or_else(|e| panic!("open {}: {e}", auto.display()));
        f.write_all(conninfo.as_bytes()).expect("write conninfo");
        pair.standby.start(&sock, &[]);
        // Only now: with no standby connected, every commit would wait.
        pair.psql(
            &pair.primary,
            &format!("ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"),
        );
        pair.psql(&pair.primary, "SELECT pg_reload_conf()");
        let primary = pair.primary.url("postgres");
        wait_until(
            "the primary sees its standby as synchronous",
            Duration::from_secs(60),
            || {
                let primary = primary.clone();
                async move {
                    let mut conn = sqlx::PgConnection::connect(&primary).await.ok()?;
                    let state: Option<String> = sqlx::query_scalar(
                        "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
                    )
                    .bind(STANDBY_NAME)
                    .fetch_optional(&mut conn)
                    .await
                    .ok()?;
                    let _ = conn.close().await;
                    (state.as_deref() == Some("sync")).then_some(())
                }
            },
        )
        .await;
        pair
    }

    fn psql(&self, node: &PgNode, sql: &str) {
        as_postgres(
            "psql",
            &[
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                &self.dir.path().to_string_lossy(),
                "-p",
                &node.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                sql,
            ],
        );
    }

    /// The URL Pier is given: both hosts, libpq style, the writable one wanted.
    pub fn pier_url(&self, db: &str) -> String {
        format!(
            "postgres://pier:pier@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// SIGKILL of the primary's postmaster, as a machine dying would look to Postgres: no
    /// shutdown checkpoint, no goodbye to the standby. Returns once it is gone.
    pub async fn kill_primary(&mut self) {
        let pid = self
            .primary
            .postmaster_pid()
            .expect("the primary's postmaster runs");
        self.orphans.extend(children_of(pid));
        kill_pid(pid);
        let port = self.primary.port;
        wait_until(
            "the primary's postmaster is gone",
            Duration::from_secs(20),
            || async move {
                // Gone as far as clients can tell once its port refuses.
                let refused = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_err();
                refused.then_some(())
            },
        )
        .await;
    }

    /// `pg_ctl promote` of the standby; returns once it accepts writes, with the moment
    /// the promotion was asked for.
    pub async fn promote_standby(&self) -> Instant {
        let asked = Instant::now();
        as_postgres(
            "pg_ctl",
            &["-D", &self.standby.data.to_string_lossy(), "-w", "promote"],
        );
        let url = self.standby.url("postgres");
        wait_until(
            "the promoted standby accepts writes",
            Duration::from_secs(60),
            || {
                let url = url.clone();
                async move {
                    let mut conn = sqlx::PgConnection::connect(&url).await.ok()?;
                    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                        .fetch_one(&mut conn)
                        .await
                        .ok()?;
                    let _ = conn.close().await;
                    (!in_recovery).then_some(())
                }
            },
        )
        .await;
        asked
    }
}

impl PgPair {
    /// Stops the synchronous standby: the primary still answers reads, and every commit
    /// that writes waits for a standby that is not there.
    pub fn stop_standby(&self) {
        self.standby.stop_now();
    }

    /// Starts the stopped standby again; commits go through once it streams.
    pub fn start_standby(&self) {
        self.standby.start(self.dir.path(), &[]);
    }

    /// The killed primary started again on its own data directory (crash recovery), with
    /// synchronous replication off: the baseline of a plain restart. Waits until the killed
    /// postmaster's processes are gone (they hold its shared memory) and it accepts writes.
    pub async fn restart_primary(&self) -> Instant {
        let orphans = self.orphans.clone();
        wait_until(
            "the killed primary's processes exit",
            Duration::from_secs(30),
            || {
                let alive = orphans.iter().any(|p| {
                    std::path::Path::new(&format!("/proc/{p}/status")).exists() && !is_zombie(*p)
                });
                async move { (!alive).then_some(()) }
            },
        )
        .await;
        // Nobody may have reaped the killed postmaster: as a zombie it still "runs" for
        // Postgres' lock-file check. With every process of it gone, its lock file is stale.
        if self.primary.postmaster_pid().is_none() {
            let _ = std::fs::remove_file(self.primary.data.join("postmaster.pid"));
            // And its socket's lock file, which names the dead pid too.
            let socket = format!(".s.PGSQL.{}", self.primary.port);
            let _ = std::fs::remove_file(self.dir.path().join(format!("{socket}.lock")));
            let _ = std::fs::remove_file(self.dir.path().join(socket));
        }
        let asked = Instant::now();
        self.primary
            .start(self.dir.path(), &[("synchronous_standby_names", "''")]);
        asked
    }
}

/// Gone, or a zombie nobody reaped yet (then its pid still answers `kill -0`).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(true)
}

fn chown_postgres(path: &Path) -> (bool, String) {
    let out = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(path)
        .output();
    match out {
        Ok(o) => (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) => (false, e.to_string()),
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (name, node) in [("primary", &self.primary), ("standby", &self.standby)] {
                eprintln!(
                    "test harness: postgres {name} log tail:\n{}",
                    tail(&node.log(), 30)
                );
            }
        }
        self.standby.stop_now();
        self.primary.stop_now();
        for pid in self.orphans.drain(..) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("postgres") {
                kill_pid(pid);
            }
        }
    }
}
