//! An app's image as `docker pull` reads it: `acme/web` is Docker Hub's
//! `docker.io/acme/web`, `nginx` is `docker.io/library/nginx`, and a first component is a
//! registry host only if it has a `.` or a `:` or is `localhost`. Parsed once, at config
//! load, into oci-client's `Reference` by the distribution grammar (`reference.rs`), so no
//! code path splits a name by hand and talks to `https://acme/` for a Docker Hub user's
//! image.

use std::fmt;

use super::reference::parse as parse_reference;

/// A repository without tag or digest, with its registry made explicit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageName {
    /// The registry as images name it: `docker.io`, `ghcr.io`, `127.0.0.1:5000`.
    registry: String,
    /// The path inside it: `library/nginx`, `acme/web`.
    repository: String,
}

/// Why a configured image is no repository Pier can follow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageNameError {
    #[error("`{0}` must be a repository without tag or digest; put the tag in `tag`")]
    TagOrDigest(String),
    #[error(
        "`{name}` is not an image reference ({reason}); write it as `docker pull` takes it, \
         e.g. `nginx`, `acme/web` or `ghcr.io/acme/web`"
    )]
    Grammar { name: String, reason: String },
}

impl ImageName {
    /// Parses `name`; a tag or digest in it is refused (Pier follows a tag named apart
    /// and deploys the digest it resolves), as is anything the grammar refuses.
    pub fn parse(name: &str) -> Result<Self, ImageNameError> {
        let last = name.rsplit('/').next().unwrap_or(name);
        if name.contains('@') || last.contains(':') {
            return Err(ImageNameError::TagOrDigest(name.to_owned()));
        }
        let r = parse_reference(name).map_err(|e| ImageNameError::Grammar {
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
        })
    }

    pub(crate) fn registry(&self) -> &str {
        &self.registry
    }

    pub(crate) fn repository(&self) -> &str {
        &self.repository
    }

    /// Whether `reference` (an engine's repo digest such as `acme/web@sha256:…` or
    /// `docker.io/acme/web@sha256:…`) names this repository at exactly `digest`. Both
    /// sides are normalised by the same grammar: the engine shows Docker Hub images in
    /// their short form, and a string comparison would call the right image a mismatch.
    pub(crate) fn is_repo_digest(&self, reference: &str, digest: &str) -> bool {
        parse_reference(reference).is_ok_and(|r| {
            r.registry() == self.registry
                && r.repository() == self.repository
                && r.digest() == Some(digest)
        })
    }

    /// Whether `reference` (a signature's `docker-reference`: a repository, perhaps with a
    /// tag or digest) names this repository, in any of its written forms. The tag is not
    /// compared: what was signed is the digest, checked apart.
    pub(crate) fn is_same_repository(&self, reference: &str) -> bool {
        parse_reference(reference)
            .is_ok_and(|r| r.registry() == self.registry && r.repository() == self.repository)
    }
}

/// The full form, `docker.io/library/nginx`.
impl fmt::Display for ImageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(name: &str) -> (String, String) {
        let n = ImageName::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        (n.registry().to_owned(), n.repository().to_owned())
    }

    #[test]
    fn names_are_read_as_docker_pull_reads_them() {
        // The distribution grammar's own normalisation examples.
        let cases = [
            ("nginx", "docker.io", "library/nginx"),
            ("acme/web", "docker.io", "acme/web"),
            ("docker.io/acme/web", "docker.io", "acme/web"),
            ("index.docker.io/acme/web", "docker.io", "acme/web"),
            ("docker.io/nginx", "docker.io", "library/nginx"),
            ("library/nginx", "docker.io", "library/nginx"),
            ("localhost/web", "localhost", "web"),
            ("localhost:5000/demo/web", "localhost:5000", "demo/web"),
            ("127.0.0.1:5000/demo/web", "127.0.0.1:5000", "demo/web"),
            ("ghcr.io/acme/web", "ghcr.io", "acme/web"),
            (
                "registry.example.com/a/b/c",
                "registry.example.com",
                "a/b/c",
            ),
            ("acme.io/web", "acme.io", "web"),
            ("foo_bar/web", "docker.io", "foo_bar/web"),
        ];
        for (name, registry, repository) in cases {
            assert_eq!(
                parts(name),
                (registry.to_owned(), repository.to_owned()),
                "{name}"
            );
        }
    }

    #[test]
    fn what_the_grammar_refuses_is_a_clear_error() {
        for bad in [
            "Acme/Web",
            "acme//web",
            "acme/web/",
            "",
            "-acme/web",
            "acme/-web",
            "acme/web:v1",
            "nginx:latest",
            "acme/web@sha256:0123456789012345678901234567890123456789012345678901234567890123",
            "localhost:5000",
            "a b/c",
        ] {
            let err = ImageName::parse(bad).expect_err(bad);
            assert!(
                err.to_string().contains(&format!("`{bad}`")),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn repo_digests_match_in_their_short_and_full_forms() {
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let other = "sha256:1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let hub = ImageName::parse("nginx").unwrap();
        assert!(hub.is_repo_digest(&format!("nginx@{d}"), d));
        assert!(hub.is_repo_digest(&format!("docker.io/library/nginx@{d}"), d));
        assert!(!hub.is_repo_digest(&format!("nginx@{other}"), d));
        assert!(!hub.is_repo_digest(&format!("acme/nginx@{d}"), d));
        let local = ImageName::parse("127.0.0.1:5000/demo/web").unwrap();
        assert!(local.is_repo_digest(&format!("127.0.0.1:5000/demo/web@{d}"), d));
        assert!(!local.is_repo_digest(&format!("127.0.0.1:5001/demo/web@{d}"), d));
        assert!(!local.is_repo_digest("garbage", d));
        assert_eq!(hub.to_string(), "docker.io/library/nginx");
    }

    #[test]
    fn a_signed_reference_names_the_repository_in_any_written_form() {
        let hub = ImageName::parse("nginx").unwrap();
        for same in [
            "nginx",
            "index.docker.io/library/nginx",
            "docker.io/library/nginx:1.27",
        ] {
            assert!(hub.is_same_repository(same), "{same}");
        }
        assert!(!hub.is_same_repository("acme/nginx"));
        let local = ImageName::parse("127.0.0.1:5000/demo/web").unwrap();
        assert!(local.is_same_repository("127.0.0.1:5000/demo/web"));
        assert!(!local.is_same_repository("127.0.0.1:5000/demo/web2"));
        assert!(!local.is_same_repository("127.0.0.1:5001/demo/web"));
        assert!(!local.is_same_repository("not a reference"));
    }
}
