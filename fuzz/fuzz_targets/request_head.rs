//! The byte path's request-head parser on arbitrary bytes: the first byte says whether
//! the peer is a trusted proxy and over TLS. It must never panic, and whatever it forwards
//! must be one unambiguous head: one request line, one `Host` at most, one
//! `X-Forwarded-For`, no forwarding header of the client's, no underscore name, and a
//! body length equal to the one the client announced.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pier::proxy::parsers::{ForwardingValues, ParsedHead, parse_request};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, raw)) = data.split_first() else {
        return;
    };
    let fwd = ForwardingValues {
        peer_ip: b"192.0.2.1",
        tls: flags & 1 == 1,
        trusted: flags & 2 == 2,
    };
    let mut out = Vec::new();
    let ParsedHead::Done(head) = parse_request(raw, &fwd, &mut out) else {
        return;
    };
    assert!(head.len <= raw.len());
    let mut lines = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut lines);
    let n = match req.parse(&out) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("the head for the app does not parse: {other:?} {out:?}"),
    };
    assert_eq!(n, out.len(), "one head, nothing after it");
    assert!(!out.windows(2).any(|w| w[1] == b'\n' && w[0] != b'\r'), "CRLF only");
    let count = |name: &str| req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(name)).count();
    assert!(count("host") <= 1);
    assert_eq!(count("x-forwarded-for"), 1);
    assert_eq!(count("x-forwarded-proto"), 1);
    assert_eq!(count("forwarded") + count("x-real-ip") + count("transfer-encoding"), 0);
    assert!(req.headers.iter().all(|h| !h.name.contains('_')));
    let lengths: Vec<&[u8]> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| h.value)
        .collect();
    match lengths.as_slice() {
        [] => assert_eq!(head.body, 0),
        [v] => assert_eq!(std::str::from_utf8(v).unwrap().parse::<u64>().unwrap(), head.body),
        more => panic!("{} lengths forwarded", more.len()),
    }
    if !fwd.trusted {
        let xff = req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"));
        assert_eq!(xff.unwrap().value, fwd.peer_ip);
    }
});
