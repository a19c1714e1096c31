//! The vocabulary every layer shares: what a digest, an app's name, a tag rule, a platform,
//! an image name and an engine's address are. Each is parsed once and checked where it is
//! made, so no layer re-validates a bare string, and no layer has to depend on another
//! just to name one of these (config once reached into the engine for `Endpoint`, the
//! engine into the registry for `Platform`, config into the store for the poller's name).
//!
//! Nothing here depends on any other module of Pier.

pub(crate) mod endpoint;
pub mod image;
mod names;
pub(crate) mod platform;
pub(crate) mod reference;
pub(crate) mod tags;

pub use endpoint::{Endpoint, EndpointError, EndpointOptions, SshEndpoint, TlsFiles};
pub use image::ImageName;
pub(crate) use names::is_name;
pub use names::{AppName, Digest, NameError, is_digest};
pub use platform::Platform;
pub use tags::{TagRule, tag_version};

/// The source name of the deliveries the reconcile poller records: no configured webhook
/// source may take it, so a poller delivery is never mistaken for a sender's.
pub(crate) const POLLER_SOURCE: &str = "poller";
