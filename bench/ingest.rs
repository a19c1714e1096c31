//! Ingest, pickup, idle cost and memory, each beside its floor measured in the same run.
//!
//! `cargo bench --bench ingest` (needs what `scripts/test` sets up, plus `pgbench` and,
//! for the third column, Debian's `webhook`). Environment: `BENCH_SECS` (default 5) per
//! measurement, `BENCH_IDLE_SECS` (default 30) for the idle window; to repeat a few rows
//! only, `BENCH_ROWS` (a comma list of `no app`, `one app`, `many apps`), `BENCH_CONC`
//! (a comma list of concurrencies) and `BENCH_ROUNDS` (times to run each row, default 1),
//! and `BENCH_REST=0` to skip duplicates, pickup and forged deliveries. The ingest table's
//! requests are sent by `wrk` (Debian's) with signatures made beforehand, as the issue
//! measured; `BENCH_CLIENT=reqwest` (or no `wrk`) sends them from this process instead. Its
//! last column is Pier's CPU time per delivery (user plus system, from `/proc`). Prints
//! markdown tables; asserts nothing about time. Under `cargo test` it does nothing.
//!
//! Ingest: authentic, unique, HMAC-signed deliveries to Pier's generic source, at
//! concurrency 1, 16 and 64, for a repository no app follows, for one app (every push
//! queues a deployment and supersedes the previous one) and round-robin over many apps.
//! Floor: `pgbench` running the same inserts (a delivery row; plus a deployment row in the
//! same transaction) at the same concurrency on a database of the same schema. Also
//! adnanh/webhook verifying the same signature and running `/bin/true`: it answers before
//! its command runs, so it is shown twice, answered per second, and done per second (its
//! answers over the time until the last of their commands had run). Runs alternate Pier,
//! floor, webhook so machine load hits all three alike.
//!
//! Before and after in one run: `BENCH_BASELINE=/path/to/pier` (a build of an earlier
//! commit, e.g. from `git worktree add`) starts a second Pier of that binary on a database
//! of its own, and every ingest row runs it too, beside this build's: the table then
//! shows `baseline /s` and `pier/baseline`. With `BENCH_ROUNDS` above 1 the two take turns
//! going first (a baseline figure marked `(first)` ran before this build's).
//!
//! Memory (`ingest_memory.rs`): idle RSS with 0, 1 and 20 apps (`BENCH_MEM_APPS`), each a
//! Pier of its own read `BENCH_MEM_SETTLE` seconds (default 5) after start, beside the
//! baseline's; and every ingest row's peak RSS (the high-water mark, reset before the
//! row), this build's and the baseline's. `BENCH_MEMORY=0` skips the idle table.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::*;

const MANY_APPS: usize = 16;

fn secs(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// A unique 64-hex-digit digest from a counter and a per-run nonce.
fn digest(n: u64, nonce: u64) -> String {
    format!("sha256:{nonce:032x}{n:032x}")
}

fn body(repo: &str, n: u64, nonce: u64) -> Vec<u8> {
    format!(
        r#"{{"repository":"{repo}","tag":"main","digest":"{}","id":"b-{nonce:x}-{n}"}}"#,
        digest(n, nonce)
    )
    .into_bytes()
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    other: AtomicU64,
}

/// Sends requests from `conc` tasks for `dur`; `make(n)` gives the n-th (url, body,
/// signature). Returns (answered as expected per second, other answers).
async fn drive(
    conc: usize,
    dur: Duration,
    expect: &'static [u16],
    make: Arc<dyn Fn(u64) -> (String, Vec<u8>, String) + Send + Sync>,
) -> (f64, u64) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(conc)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    // A JoinSet aborts its tasks when dropped: a driver that is itself aborted (the pickup
    // measurement's background load) stops sending instead of running on unseen.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..conc {
        let (client, tally, next, make) =
            (client.clone(), tally.clone(), next.clone(), make.clone());
        tasks.spawn(async move {
            while start.elapsed() < dur {
                let (url, body, sig) = make(next.fetch_add(1, Ordering::Relaxed));
                let r = client
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("X-Pier-Signature", sig)
                    .body(body)
                    .send()
                    .await;
                match r {
                    Ok(resp) if expect.contains(&resp.status().as_u16()) => {
                        let _ = resp.bytes().await;
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(resp) => {
                        if tally.other.fetch_add(1, Ordering::Relaxed) == 0 {
                            let s = resp.status();
                            eprintln!(
                                "  unexpected {s}: {}",
                                resp.text().await.unwrap_or_default()
                            );
                        }
                    }
                    Err(e) => {
                        if tally.other.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("  request failed: {e}");
                        }
                    }
                }
            }
        });
    }
    while let Some(t) = tasks.join_next().await {
        t.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    (
        tally.ok.load(Ordering::Relaxed) as f64 / elapsed,
        tally.other.load(Ordering::Relaxed),
    )
}

/// `pgbench` running `script` at `conc` clients for `dur`: transactions per second.
fn pgbench(url: &str, script: &str, conc: usize, dur: Duration) -> f64 {
    let path = std::env::temp_dir().join(format!("pier-bench-{}.sql", uuid::Uuid::new_v4()));
    std::fs::write(&path, script).unwrap();
    let out = Command::new("pgbench")
        .args([
            "-n",
            "-c",
            &conc.to_string(),
            "-j",
            &conc.min(2).to_string(),
        ])
        .args(["-T", &dur.as_secs().to_string(), "-f"])
        .arg(&path)
        .arg(url)
        .output()
        .expect("run pgbench (Debian: postgresql-client / postgresql-contrib)");
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find(|l| l.starts_with("tps ="))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|t| t.parse().ok());
    // A shared server may refuse 64 more clients (max_connections): report, do not abort.
    tps.unwrap_or_else(|| {
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "  pgbench failed: {}",
            err.lines().last().unwrap_or_default()
        );
        f64::NAN
    })
}

/// The same inserts as Pier's: a delivery row (with its dedupe key and body hash).
const FLOOR_DELIVERY: &str = "\\set n random(1, 9000000000000000000)
INSERT INTO deliveries (id, source, event_key, verdict, reason, events, body_sha256)
VALUES (gen_random_uuid(), 'gen', 'floor-' || :n, 'ignored',
        'no app follows 127.0.0.1:5000/demo/nobody',
        '[{\"event\":{\"repository\":\"demo/nobody\",\"tag\":\"main\"},\"apps\":[]}]'::jsonb,
        sha256(('floor-' || :n)::bytea));
";

/// A delivery and the deployment it queues, in one transaction (each for its own app name:
/// the floor has no per-app rule to keep).
const FLOOR_QUEUED: &str = "\\set n random(1, 9000000000000000000)
BEGIN;
WITH delivery AS (
  INSERT INTO deliveries (id, source, event_key, verdict, reason, events, body_sha256)
  VALUES (gen_random_uuid(), 'gen', 'floor-' || :n, 'queued', 'deploys web',
          '[{\"event\":{\"repository\":\"demo/web\",\"tag\":\"main\"},\"apps\":[\"web\"]}]'::jsonb,
          sha256(('floor-' || :n)::bytea))
  RETURNING id)
INSERT INTO deployments (id, app, trigger, delivery_id, image, requested_tag, claimed_digest)
SELECT gen_random_uuid(), 'floor-' || :n, 'webhook', delivery.id, '127.0.0.1:5000/demo/web',
       'main', 'sha256:' || encode(sha256(('d' || :n)::bytea), 'hex')
FROM delivery;
END;
";

/// adnanh/webhook with one hook checking the same HMAC header; `None` if not installed.
fn start_webhook(secret: &str) -> Option<(std::process::Child, String)> {
    Command::new("webhook").arg("-version").output().ok()?;
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("pier-bench-webhook-{port}"));
    std::fs::create_dir_all(&dir).ok()?;
    let hooks = dir.join("hooks.json");
    std::fs::write(
        &hooks,
        serde_json::json!([{
            "id": "gen",
            "execute-command": "/bin/true",
            "trigger-rule": {"match": {
                "type": "payload-hmac-sha256",
                "secret": secret,
                "parameter": {"source": "header", "name": "X-Pier-Signature"}
            }}
        }])
        .to_string(),
    )
    .ok()?;
    let child = Command::new("webhook")
        .args(["-ip", "127.0.0.1", "-port", &port.to_string(), "-hooks"])
        .arg(&hooks)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let url = format!("http://127.0.0.1:{port}/hooks/gen");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((child, url));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn proc_status(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Waits (at most a minute) until a process has stopped using CPU: adnanh/webhook answers
/// before its command has run, so a fast client leaves it a backlog of `/bin/true` to spawn,
/// which would otherwise run on into the next measurement of Pier. Returns how long it
/// went on using CPU after the call (within a sample, 100 ms): the rest of the work it had
/// answered for.
async fn settle(pid: u32) -> Duration {
    const SAMPLE: Duration = Duration::from_millis(100);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let (mut last, mut moved, mut still) = (cpu_ticks(pid), Duration::ZERO, 0);
    // Three quiet samples in a row: a tick is 10 ms, and a spawn can fall between samples.
    while still < 3 && Instant::now() < deadline {
        tokio::time::sleep(SAMPLE).await;
        let now = cpu_ticks(pid);
        if now == last {
            still += 1;
        } else {
            (last, moved, still) = (now, start.elapsed(), 0);
        }
    }
    if still < 3 {
        eprintln!("  webhook still busy after a minute");
    }
    moved
}

/// Statements Postgres counted for a database (committed plus rolled-back transactions).
async fn db_transactions(pool: &sqlx::PgPool, db: &str) -> i64 {
    // Statistics are flushed every second or so: wait for them to settle.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query_scalar::<_, i64>(
        "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname = $1",
    )
    .bind(db)
    .fetch_one(pool)
    .await
    .unwrap_or(0)
}

fn row(cells: &[String]) {
    println!("| {} |", cells.join(" | "));
}

#[path = "ingest_memory.rs"]
mod memory;
#[path = "ingest_pickup.rs"]
mod pickup;
#[path = "ingest_wrk.rs"]
mod wrk;

/// Requests signed ahead per second of a `wrk` run: above any rate seen here.
const WRK_RATE_CAP: u64 = 40_000;

/// The ingest table's client: `wrk` when installed (see `ingest_wrk.rs`), else `drive`.
async fn drive_table(
    conc: usize,
    dur: Duration,
    expect: &'static [u16],
    make: Arc<dyn Fn(u64) -> (String, Vec<u8>, String) + Send + Sync>,
) -> (f64, u64) {
    if std::env::var("BENCH_CLIENT").map_or(true, |c| c != "reqwest") {
        let m = make.clone();
        let sent = tokio::task::spawn_blocking(move || {
            wrk::drive_wrk(conc, dur, expect[0], &*m, WRK_RATE_CAP)
        })
        .await
        .unwrap();
        if let Some(r) = sent {
            return r;
        }
    }
    drive(conc, dur, expect, make).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dur = secs("BENCH_SECS", 5);
    let builder = || {
        let mut builder = TestEnv::builder().workers(2);
        for i in 0..MANY_APPS {
            builder = builder.add_app(AppSpec::new(&format!("many{i}")));
        }
        builder
    };
    let env = builder().start().await;
    let baseline = match std::env::var("BENCH_BASELINE") {
        Ok(program) => Some(builder().program(program).start().await),
        Err(_) => None,
    };
    let pid = env.pier().pid().expect("pier pid");
    let floor_db = TestDb::create().await;
    floor_db.migrate().await;
    let hook = env.hook_url("gen");
    let secret = env.generic_secret.clone();
    let nonce = uuid::Uuid::new_v4().as_u64_pair().0;
    let webhook = start_webhook(&secret);

    // Idle: CPU and transactions of a Pier with apps configured and nothing to do.
    let idle = secs("BENCH_IDLE_SECS", 30);
    let stats = env.db.pool.clone();
    // Let start-up settle (its statistics reach pg_stat_database a second or so late).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (t0, x0) = (cpu_ticks(pid), db_transactions(&stats, &env.db.name).await);
    tokio::time::sleep(idle).await;
    let (t1, x1) = (cpu_ticks(pid), db_transactions(&stats, &env.db.name).await);
    let idle_rss = proc_status(pid, "VmRSS:");
    println!(
        "\nidle {}s with {} apps: CPU {} ms, {} database transactions, RSS {} KiB\n",
        idle.as_secs(),
        MANY_APPS + 1,
        (t1 - t0) * 10,
        // The second read of pg_stat_database is itself one transaction on that database.
        x1 - x0 - 1,
        idle_rss
    );
    if std::env::var("BENCH_MEMORY").map_or(true, |v| v != "0") {
        memory::idle_by_apps(std::env::var("BENCH_BASELINE").ok().as_deref()).await;
    }

    let (one, _, nobody) = repos(&env);
    let signed =
        |repo: String, salt: u64| -> Arc<dyn Fn(u64) -> (String, Vec<u8>, String) + Send + Sync> {
            let (hook, secret) = (hook.clone(), secret.clone());
            Arc::new(move |n| {
                let b = body(&repo, n, nonce ^ salt);
                let sig = sign_hmac_sha256(&secret, &b);
                (hook.clone(), b, sig)
            })
        };

    println!(
        "\n| deliveries | concurrency | pier /s | floor /s | pier/floor | webhook /s answered (done) | pier/webhook answered (done) | pier CPU µs each | baseline /s | pier/baseline | pier peak RSS MiB | baseline peak RSS MiB |"
    );
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut salt = 1u64;
    // The highest of the rows' peaks: each row resets the high-water mark before it runs.
    let mut run_peak = 0u64;
    let list = |var: &str, all: &str| -> Vec<String> {
        std::env::var(var)
            .unwrap_or_else(|_| all.into())
            .split(',')
            .map(|s| s.trim().to_owned())
            .collect()
    };
    let rows = list("BENCH_ROWS", "no app,one app,many apps");
    let concs: Vec<usize> = list("BENCH_CONC", "1,16,64")
        .iter()
        .map(|c| c.parse().expect("BENCH_CONC: numbers"))
        .collect();
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let runs = concs.iter().flat_map(|&conc| {
        [
            ("no app", FLOOR_DELIVERY),
            ("one app", FLOOR_QUEUED),
            ("many apps", FLOOR_QUEUED),
        ]
        .into_iter()
        .filter(|(what, _)| rows.iter().any(|r| r == what))
        .flat_map(move |row| (0..rounds).map(move |round| (conc, row, round)))
    });
    for (conc, (what, floor_sql), round) in runs {
        {
            salt += 1;
            let expect: &'static [u16] = if what == "no app" { &[200] } else { &[202] };
            // Every other round the baseline goes first, so neither build always runs on
            // the machine (page cache, WAL, autovacuum) the other one just left.
            let baseline_first = round % 2 == 1;
            // Each build's peak RSS over its own part of the row (a starred figure is its
            // peak since start: the high-water mark could not be reset).
            let run_baseline = async |b: &TestEnv| {
                let bpid = b.pier().pid().expect("baseline pid");
                let reset = memory::reset_peak(bpid);
                let make = row_deliveries(b, what, nonce ^ salt);
                let r = drive_table(conc, dur, expect, make).await.0;
                (r, memory::peak_cell(memory::peak_kib(bpid), reset))
            };
            let early = match (&baseline, baseline_first) {
                (Some(b), true) => Some(run_baseline(b).await),
                _ => None,
            };
            let ticks = cpu_ticks(pid);
            let reset = memory::reset_peak(pid);
            let make = row_deliveries(&env, what, nonce ^ salt);
            let (pier, bad) = drive_table(conc, dur, expect, make).await;
            let peak_kib = memory::peak_kib(pid);
            run_peak = run_peak.max(peak_kib);
            let peak = memory::peak_cell(peak_kib, reset);
            // Clock ticks are 10 ms: over a run of thousands of deliveries, within a few %.
            let cpu_us = (cpu_ticks(pid) - ticks) as f64 * 10_000.0 / (pier * dur.as_secs_f64());
            let (base, ratio_base, base_peak) = match (&baseline, early) {
                (Some(_), Some((r, p))) => {
                    (format!("{r:.0} (first)"), format!("{:.3}x", pier / r), p)
                }
                (Some(b), None) => {
                    let (r, p) = run_baseline(b).await;
                    (format!("{r:.0}"), format!("{:.3}x", pier / r), p)
                }
                (None, _) => (String::new(), String::new(), String::new()),
            };
            let floor = pgbench(&floor_db.url, floor_sql, conc, dur);
            let (hooked, ratio_hooked) = match (&webhook, what) {
                (Some((_, url)), "no app") => {
                    let (url, secret) = (url.clone(), secret.clone());
                    let s = salt;
                    let make = Arc::new(move |n: u64| {
                        let b = body("demo/nobody", n, nonce ^ s);
                        let sig = sign_hmac_sha256(&secret, &b);
                        (url.clone(), b, sig)
                    });
                    let (w, _) = drive_table(conc, dur, &[200], make).await;
                    let tail = match &webhook {
                        Some((child, _)) => settle(child.id()).await,
                        None => Duration::ZERO,
                    };
                    // Answered, and done: its answers over the time until the last of
                    // their commands had run (Pier answers only once a delivery is stored).
                    let done = w * dur.as_secs_f64() / (dur + tail).as_secs_f64();
                    (
                        format!("{w:.0} ({done:.0} done)"),
                        format!("{:.2}x ({:.2}x)", pier / w, pier / done),
                    )
                }
                _ => ("".into(), "".into()),
            };
            row(&[
                what.into(),
                conc.to_string(),
                format!(
                    "{pier:.0}{}",
                    if bad > 0 {
                        format!(" ({bad} other)")
                    } else {
                        String::new()
                    }
                ),
                format!("{floor:.0}"),
                format!("{:.2}x", pier / floor),
                hooked,
                ratio_hooked,
                format!("{cpu_us:.0}"),
                base,
                ratio_base,
                peak,
                base_peak,
            ]);
        }
    }

    if std::env::var("BENCH_REST").is_ok_and(|v| v == "0") {
        if let Some((mut child, _)) = webhook {
            let _ = child.kill();
        }
        let mut floor_db = floor_db;
        floor_db.cleanup().await;
        env.cleanup().await;
        if let Some(b) = baseline {
            b.cleanup().await;
        }
        return;
    }
    // Duplicates (retries of deliveries already stored) and forged signatures.
    let seen = 1000u64;
    let dup = signed(nobody.clone(), 0xd0d0);
    let cycle: Arc<dyn Fn(u64) -> (String, Vec<u8>, String) + Send + Sync> =
        Arc::new(move |n| dup(n % seen));
    // The first pass stores them; what follows is all repeats.
    drive(16, Duration::from_secs(2), &[200], cycle.clone()).await;
    let forged = {
        let (hook, nobody) = (hook.clone(), nobody.clone());
        Arc::new(move |n: u64| {
            let b = body(&nobody, n, nonce);
            (hook.clone(), b, format!("sha256={}", "ab".repeat(32)))
        }) as Arc<dyn Fn(u64) -> (String, Vec<u8>, String) + Send + Sync>
    };
    let log_len = || {
        std::fs::metadata(env.pier().log_path())
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let (mut forged_total, mut log_growth) = (0f64, 0u64);
    println!(
        "\n| other deliveries | concurrency | pier /s | stored /s (one app, same run) | ratio |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut stored_at = Vec::new();
    for conc in [16usize, 64] {
        let (stored, _) = drive(conc, dur, &[202], signed(one.clone(), 0x5707 + conc as u64)).await;
        let (d, bad) = drive(conc, dur, &[200], cycle.clone()).await;
        row(&[
            "duplicate".into(),
            conc.to_string(),
            format!(
                "{d:.0}{}",
                if bad > 0 {
                    format!(" ({bad} other)")
                } else {
                    String::new()
                }
            ),
            format!("{stored:.0}"),
            format!("{:.2}x", d / stored),
        ]);
        stored_at.push((conc, stored));
    }
    let peak = run_peak.max(memory::peak_kib(pid));
    println!(
        "\npier RSS: idle {idle_rss} KiB, peak {peak} KiB over the ingest rows and duplicates"
    );
    // Pickup before the forged runs: those brake this address for a minute.
    pickup::run(&env, &hook, &secret, &nobody, nonce).await;
    println!(
        "\n| forged deliveries | concurrency | pier /s | stored /s (one app, earlier) | ratio |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (conc, stored) in stored_at {
        // 401, then 429 once the address has failed 20 times in a minute: neither touches
        // the database.
        let before = log_len();
        let (r, bad) = drive(conc, dur, &[401, 429], forged.clone()).await;
        log_growth += log_len().saturating_sub(before);
        forged_total += r * dur.as_secs_f64();
        row(&[
            "forged signature (401/429)".into(),
            conc.to_string(),
            format!(
                "{r:.0}{}",
                if bad > 0 {
                    format!(" ({bad} other)")
                } else {
                    String::new()
                }
            ),
            format!("{stored:.0}"),
            format!("{:.2}x", r / stored),
        ]);
    }
    println!("\npier log grew {log_growth} bytes over {forged_total:.0} forged deliveries",);
    if let Some((mut child, _)) = webhook {
        let _ = child.kill();
    }
    let mut floor_db = floor_db;
    floor_db.cleanup().await;
    env.cleanup().await;
    if let Some(b) = baseline {
        b.cleanup().await;
    }
}

/// The ingest table's repositories of `env`: its first app's, its other apps', and one no
/// app follows.
fn repos(env: &TestEnv) -> (String, Vec<String>, String) {
    let host = env.registry_host();
    let apps: Vec<String> = env.apps.iter().map(|a| a.repo.clone()).collect();
    let one = format!("{host}/{}", apps[0]);
    let many: Vec<String> = apps[1..].iter().map(|r| format!("{host}/{r}")).collect();
    (one, many, format!("{host}/demo/nobody"))
}

/// The signed deliveries of one ingest row (`what`) to `env`'s generic source.
fn row_deliveries(
    env: &TestEnv,
    what: &str,
    salt: u64,
) -> Arc<dyn Fn(u64) -> (String, Vec<u8>, String) + Send + Sync> {
    let (one, many, nobody) = repos(env);
    let repos = match what {
        "no app" => vec![nobody],
        "one app" => vec![one],
        _ => many,
    };
    let (hook, secret) = (env.hook_url("gen"), env.generic_secret.clone());
    Arc::new(move |n: u64| {
        let b = body(&repos[n as usize % repos.len()], n, salt);
        let sig = sign_hmac_sha256(&secret, &b);
        (hook.clone(), b, sig)
    })
}
