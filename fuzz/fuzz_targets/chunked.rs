//! The chunked-body reader on arbitrary bytes, fed in pieces whose size the first byte
//! picks: it must never panic, find the same end (or the same refusal) however the bytes
//! are split, and never claim more bytes than it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pier::proxy::parsers::Framing;

/// Where the body ended (bytes used) or `None` if it did not; `Err` when refused.
fn feed(body: &[u8], step: usize) -> Result<Option<usize>, ()> {
    let mut f = Framing::chunked();
    let mut used = 0;
    for piece in body.chunks(step.max(1)) {
        let p = f.take(piece).map_err(|_| ())?;
        assert!(p.used <= piece.len());
        used += p.used;
        if p.done {
            assert!(f.is_done());
            return Ok(Some(used));
        }
        assert_eq!(p.used, piece.len(), "a body not done takes every byte it is given");
    }
    Ok(None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, body)) = data.split_first() else {
        return;
    };
    let whole = feed(body, body.len());
    let split = feed(body, step as usize);
    match (whole, split) {
        (Ok(Some(a)), Ok(Some(b))) => assert_eq!(a, b),
        (Ok(None), Ok(None)) | (Err(()), Err(())) => {}
        // Split reading may stop at the end before the bytes a whole read refuses.
        (a, b) => panic!("whole {a:?} split {b:?}"),
    }
});
