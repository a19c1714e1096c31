//! Resident memory: a Pier's RSS once started and idle with 0, 1 and 20 apps (each a Pier of
//! its own, on a database and registry of its own), and its peak during one ingest row
//! (the kernel's high-water mark, reset before the row). With `BENCH_BASELINE` the
//! baseline's figures stand beside this build's, measured the same way at the same time.

use std::time::Duration;

use super::support::*;

/// `VmRSS` of a process, KiB.
pub(super) fn rss_kib(pid: u32) -> u64 {
    super::proc_status(pid, "VmRSS:")
}

/// `VmHWM` of a process (its peak RSS since start or since [`reset_peak`]), KiB.
pub(super) fn peak_kib(pid: u32) -> u64 {
    super::proc_status(pid, "VmHWM:")
}

/// Resets a process's high-water mark to its current RSS (`5` to `/proc/PID/clear_refs`),
/// so that the next [`peak_kib`] is the peak of what ran in between, not of start-up.
/// False if the kernel refused (another user's process): the peak is then since start.
pub(super) fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

pub(super) fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// A peak in MiB, starred when it could not be reset before the row (a peak since start).
pub(super) fn peak_cell(kib: u64, reset: bool) -> String {
    format!("{}{}", mib(kib), if reset { "" } else { "*" })
}

fn env_with(apps: usize, program: Option<&str>) -> TestEnvBuilder {
    let mut builder = TestEnv::builder().workers(2).no_apps();
    for i in 0..apps {
        builder = builder.add_app(AppSpec::new(&format!("mem{i}")));
    }
    match program {
        Some(p) => builder.program(p),
        None => builder,
    }
}

/// Idle RSS with each count of apps in `BENCH_MEM_APPS` (default `0,1,20`), read
/// `BENCH_MEM_SETTLE` seconds (default 5) after Pier answered its first request: start-up
/// done (config, migrations, reconciliation, every background task started), nothing to do.
/// This build and the baseline run side by side, each idle, so neither's figure depends
/// on what the other left behind.
pub(super) async fn idle_by_apps(baseline: Option<&str>) {
    let counts: Vec<usize> = std::env::var("BENCH_MEM_APPS")
        .unwrap_or_else(|_| "0,1,20".into())
        .split(',')
        .map(|c| c.trim().parse().expect("BENCH_MEM_APPS: numbers"))
        .collect();
    let settle = Duration::from_secs(
        std::env::var("BENCH_MEM_SETTLE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5),
    );
    println!(
        "\nidle RSS {}s after start, each Pier on a database of its own:\n",
        settle.as_secs()
    );
    println!("| apps | pier idle RSS MiB | baseline idle RSS MiB | pier/baseline |");
    println!("| ---: | ---: | ---: | ---: |");
    for n in counts {
        let ours = env_with(n, None).start().await;
        let theirs = match baseline {
            Some(b) => Some(env_with(n, Some(b)).start().await),
            None => None,
        };
        tokio::time::sleep(settle).await;
        let pier = rss_kib(ours.pier().pid().expect("pier pid"));
        let base = theirs
            .as_ref()
            .map(|b| rss_kib(b.pier().pid().expect("baseline pid")));
        let (base_cell, ratio) = match base {
            Some(b) => (mib(b), format!("{:.2}x", pier as f64 / b as f64)),
            None => (String::new(), String::new()),
        };
        println!("| {n} | {} | {base_cell} | {ratio} |", mib(pier));
        ours.cleanup().await;
        if let Some(b) = theirs {
            b.cleanup().await;
        }
    }
}
