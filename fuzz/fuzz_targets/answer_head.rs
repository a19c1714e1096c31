//! The byte path's answer-head parser on arbitrary bytes (the first byte: whether the
//! request was a HEAD). It must never panic, and an answer it passes on must be one
//! unambiguous head: it parses, ends where the app's did, has one length at most and
//! no hop-by-hop header but the app's framing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pier::proxy::parsers::{Framing, ParsedHead, parse_answer};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, raw)) = data.split_first() else {
        return;
    };
    let mut out = Vec::new();
    let Ok(ParsedHead::Done(a)) = parse_answer(raw, flags & 1 == 1, &mut out) else {
        return;
    };
    assert!(a.len <= raw.len());
    out.extend_from_slice(b"\r\n");
    let mut lines = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut lines);
    let n = match resp.parse(&out) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("the head for the client does not parse: {other:?} {out:?}"),
    };
    assert_eq!(n, out.len());
    assert_eq!(resp.code, Some(a.status));
    let count = |name: &str| resp.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(name)).count();
    assert!(count("content-length") <= 1);
    assert_eq!(count("connection") + count("keep-alive"), 0);
    if let Framing::Length(n) = a.framing
        && count("content-length") == 1
        && flags & 1 == 0
        && !matches!(a.status, 100..=199 | 204 | 304)
    {
        let v = resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-length")).unwrap();
        assert_eq!(std::str::from_utf8(v.value).unwrap().parse::<u64>().unwrap(), n);
    }
});
