//! Test-only fault injection, at named points of the pipeline:
//! - `PIER_CRASH_AT=<step>:<before|after>` aborts the process there, as a power cut would;
//! - `PIER_PAUSE_AT=<step>:<before|after>` stops the pipeline there (logging
//!   `PIER_PAUSE_AT reached`) so that a test can kill the process from outside.
//!
//! `before` is right before the step's side effect: after its intent is committed, or after
//! a resumed step has found its recorded intent; `after` is right after its result is
//! committed. Unset, they cost one comparison.

use std::sync::OnceLock;

fn point(var: &'static str, cell: &'static OnceLock<Option<String>>) -> Option<&'static str> {
    cell.get_or_init(|| std::env::var(var).ok().filter(|s| !s.is_empty()))
        .as_deref()
}

pub(crate) fn crash_point(step: &str, when: &str) {
    static CRASH: OnceLock<Option<String>> = OnceLock::new();
    static PAUSE: OnceLock<Option<String>> = OnceLock::new();
    let here = |t: &str| t.split_once(':') == Some((step, when));
    if let Some(t) = point("PIER_CRASH_AT", &CRASH).filter(|t| here(t)) {
        eprintln!("PIER_CRASH_AT={t}: aborting");
        std::process::abort();
    }
    if let Some(t) = point("PIER_PAUSE_AT", &PAUSE).filter(|t| here(t)) {
        tracing::warn!("PIER_PAUSE_AT reached: {t}");
        // Blocks this worker thread for good: the process is meant to be killed here.
        loop {
            std::thread::park();
        }
    }
}
