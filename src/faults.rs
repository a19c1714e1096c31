//! Test-only fault injection: `PIER_CRASH_AT=<step>:<before|after>` aborts the process at
//! that point, as a power cut would, so that tests can prove every step resumes correctly.
//! `before` is right after the step's intent is committed and before its side effect;
//! `after` is right after its result is committed.

use std::sync::OnceLock;

fn target() -> Option<&'static str> {
    static TARGET: OnceLock<Option<String>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            std::env::var("PIER_CRASH_AT")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .as_deref()
}

pub fn crash_point(step: &str, when: &str) {
    if let Some(t) = target()
        && t.split_once(':') == Some((step, when))
    {
        eprintln!("PIER_CRASH_AT={t}: aborting");
        std::process::abort();
    }
}
