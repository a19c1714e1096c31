//! An image reference (`[registry/]path[:tag][@digest]`) read by the distribution grammar
//! into oci-client's own [`Reference`], the one parser every image name in Pier goes through.
//!
//! oci-client's `Reference::try_from` matches the grammar below with the `regex` crate,
//! whose `\w` is Unicode: its tag, `[\w][\w.-]{0,127}`, is 128 copies of a class of over
//! 100,000 code points, each a UTF-8 automaton. Building that regex took 20 MiB of heap and
//! kept 7 MiB of it for the life of the process, from the first app's image read at config
//! load: `pier serve`'s idle RSS went from 19 MiB with no app to 30 MiB with one.
//! Distribution's grammar is Go's regexp syntax, where `\w` is `[0-9A-Za-z_]`, and so it is
//! in regex-lite: the same pattern there accepts what `docker pull` accepts (and refuses the
//! non-ASCII tags oci-client lets through), compiles to a few KiB, and runs no more code at
//! start than a small engine's. The steps after the match (Docker Hub's `docker.io` and
//! `library/`, the name's length, the digest's) are oci-client's own, and
//! `the_same_references_as_oci_client` checks both parsers against each other.

use std::sync::OnceLock;

use oci_client::{ParseError, Reference};
use regex_lite::Regex;

/// oci-client's pattern, verbatim (oci-spec's `REFERENCE_REGEXP`): the whole name, then the
/// tag and the digest, each captured.
const GRAMMAR: &str = r"^((?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))+)?(?::[0-9]+)?/)?[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?(?:(?:/[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?)+)?)(?::([\w][\w.-]{0,127}))?(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}))?$";

/// The longest repository path the grammar allows.
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// Built once per process, on first use, and shared: every parse after the first costs
/// only the match.
fn grammar() -> &'static Regex {
    static GRAMMAR_RE: OnceLock<Regex> = OnceLock::new();
    GRAMMAR_RE.get_or_init(|| Regex::new(GRAMMAR).expect("the distribution grammar compiles"))
}

/// Parses `text` as `docker pull` does: `nginx` is `docker.io/library/nginx:latest`, a
/// first part is a registry only with a `.` or a `:` or as `localhost`.
pub(crate) fn parse(text: &str) -> Result<Reference, ParseError> {
    if text.is_empty() {
        return Err(ParseError::NameEmpty);
    }
    let parts = grammar()
        .captures(text)
        .ok_or(ParseError::ReferenceInvalidFormat)?;
    let (registry, repository) = split_domain(&parts[1]);
    if repository.len() > NAME_TOTAL_LENGTH_MAX {
        return Err(ParseError::NameTooLong);
    }
    let tag = parts.get(2).map(|m| m.as_str().to_owned());
    let digest = parts.get(3).map(|m| m.as_str().to_owned());
    if let Some(d) = &digest {
        check_digest(d)?;
    }
    Ok(match (tag, digest) {
        (Some(tag), Some(digest)) => {
            Reference::with_tag_and_digest(registry, repository, tag, digest)
        }
        (None, Some(digest)) => Reference::with_digest(registry, repository, digest),
        (tag, None) => Reference::with_tag(
            registry,
            repository,
            tag.unwrap_or_else(|| "latest".to_owned()),
        ),
    })
}

/// A digest's hex is as long as its algorithm's output, for the algorithms there are.
fn check_digest(digest: &str) -> Result<(), ParseError> {
    let (algorithm, hex) = digest
        .split_once(':')
        .ok_or(ParseError::DigestInvalidFormat)?;
    let len = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err(ParseError::DigestUnsupported),
    };
    if hex.len() != len {
        return Err(ParseError::DigestInvalidLength);
    }
    Ok(())
}

/// Registry and repository of a matched name, as Docker normalises them.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut remainder) = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_owned(), rest.to_owned())
        }
        _ => ("docker.io".to_owned(), name.to_owned()),
    };
    if domain == "index.docker.io" {
        domain = "docker.io".to_owned();
    }
    if domain == "docker.io" && !remainder.contains('/') {
        remainder = format!("library/{remainder}");
    }
    (domain, remainder)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D256: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// Every shape the grammar has, and what it refuses.
    const SHAPES: &[&str] = &[
        "nginx",
        "nginx:1.27",
        "nginx:latest",
        "library/nginx",
        "docker.io/nginx",
        "docker.io/library/nginx:1.27-alpine",
        "index.docker.io/acme/web",
        "index.docker.io/nginx",
        "acme/web",
        "acme/web:v1",
        "Acme/web",
        "acme/Web",
        "ACME.io/web",
        "acme//web",
        "acme/web/",
        "/acme/web",
        "-acme/web",
        "acme/-web",
        "acme/web-",
        "acme/we--b",
        "acme/we__b",
        "acme/we___b",
        "acme/we.b",
        "acme/we..b",
        "acme/we_b.c-d",
        "foo_bar/web",
        "localhost/web",
        "localhost:5000/demo/web",
        "localhost:5000",
        "localhost:5000:v1",
        "127.0.0.1:5000/demo/web:main",
        "[::1]:5000/demo/web",
        "ghcr.io/acme/web",
        "registry.example.com/a/b/c",
        "registry-1.example.com:443/a",
        "-registry.example.com/a",
        "registry.example.com:/a",
        "acme.io/web",
        "a b/c",
        "acme/web:",
        "acme/web:.v1",
        "acme/web:-v1",
        "acme/web:_v1",
        "acme/web:V1.2_3-rc",
        "acme/web@",
        "acme/web@sha256:abc",
        "acme/web@md5:0123456789abcdef0123456789abcdef",
        "acme/web@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
        "acme/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef00",
        "acme/web@sha256+b64:0123456789abcdef0123456789abcdef",
        "acme/web@Sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "nginx:1.27@",
        ":v1",
        "@sha256:0",
        "",
    ];

    /// Digests of each algorithm and names and tags at and past their length limits.
    fn made_shapes() -> Vec<String> {
        let too_long_path = format!("acme/{}", "a".repeat(260));
        vec![
            format!("acme/web@{D256}"),
            format!("acme/web:v1@{D256}"),
            format!("nginx@{D256}"),
            format!("127.0.0.1:5000/demo/web@{D256}"),
            format!("acme/web@sha384:{}", "ab".repeat(48)),
            format!("acme/web@sha512:{}", "ab".repeat(64)),
            format!("acme/web:v{}", "1".repeat(127)),
            format!("acme/web:v{}", "1".repeat(128)),
            format!("acme/{}", "a".repeat(250)),
            format!("{too_long_path}:v1"),
            too_long_path,
        ]
    }

    /// oci-client's parser is the reference here (a test may pay for its regex).
    #[test]
    fn the_same_references_as_oci_client() {
        let made = made_shapes();
        for case in SHAPES
            .iter()
            .copied()
            .chain(made.iter().map(String::as_str))
        {
            assert_eq!(parse(case), Reference::try_from(case), "{case:?}");
        }
    }

    #[test]
    fn a_tag_is_ascii_as_docker_reads_it() {
        // Go's `\w` is ASCII: `docker pull acme/web:vé` is an invalid reference format.
        // The one place the two parsers differ: oci-client's `\w` is Unicode.
        for tag in ["vé", "版本", "v1٣"] {
            let text = format!("acme/web:{tag}");
            assert_eq!(
                parse(&text),
                Err(ParseError::ReferenceInvalidFormat),
                "{text}"
            );
            assert!(Reference::try_from(text.as_str()).is_ok(), "{text}");
        }
    }

    #[test]
    fn a_reference_gets_its_parts_and_docker_hub_its_defaults() {
        let r = parse("nginx").unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag(), r.digest()),
            ("docker.io", "library/nginx", Some("latest"), None)
        );
        let r = parse(&format!("localhost:5000/demo/web:v1@{D256}")).unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag(), r.digest()),
            ("localhost:5000", "demo/web", Some("v1"), Some(D256))
        );
    }
}
