//! What every layer shows of an error: the journal, the pages, the log and the engine's
//! own error classes all read it from here, so that no layer depends on another just to
//! print a cause (the engine once reached into the pipeline for this).

/// An error and every cause under it, once each: what the journal, the page and the log
/// show, so that the cause is never lost to an early `to_string()`.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}
