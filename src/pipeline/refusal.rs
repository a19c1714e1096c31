//! Every reason a step refuses to go on that no retry can change: what the engine holds
//! is not what was pinned, the candidate is not healthy, something on the engine or in the
//! config is not Pier's to touch. One list, so that a reader sees every refusal Pier makes
//! in one place, and so that code that must tell them apart (the soak counting a remote
//! check's failure, a service naming itself) matches a variant instead of reading prose.
//!
//! A refusal is never transient (`StepError::is_transient`): retrying an integrity or
//! ownership check would only repeat it. The text is journaled and shown on the pages as
//! the deployment's reason, so it names the thing refused and what to do about it.

use std::time::Duration;

use crate::archive::ArchiveError;
use crate::config::Refused;
use crate::domain::NameError;
use crate::engine::LABEL_MANAGED;
use crate::probe::NotHealthy;
use crate::signature::Rejected;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    // What the engine holds is not the digest the webhook pinned.
    #[error("{reference} is not in the engine after the pull")]
    NotPulled { reference: String },
    #[error(
        "digest mismatch: the engine's image {image} has repo digests [{}], not {reference}",
        .repo_digests.join(", ")
    )]
    RepoDigests {
        image: String,
        repo_digests: Vec<String>,
        reference: String,
    },
    #[error("digest mismatch: the archive holds [{}], not image {digest}", .holds.join(", "))]
    ArchiveHolds { holds: Vec<String>, digest: String },
    #[error("digest mismatch: image {id} is not {digest}")]
    ImageId { id: String, digest: String },
    #[error("platform mismatch: image is {image}, engine runs {engine}")]
    Platform { image: String, engine: String },
    #[error("platform mismatch: the archive's image is {found}, expected {expected}")]
    ArchivePlatform { found: String, expected: String },
    #[error(
        "the image carries labels reserved for Pier ({}): an image cannot claim to be one of \
         Pier's containers",
        .labels.join(", ")
    )]
    ReservedLabels { labels: Vec<&'static str> },
    #[error(
        "the engine runs {engine}, but the rollout resolves one digest for {rollout}; an app's \
         targets must share one platform"
    )]
    PlatformSplit { engine: String, rollout: String },

    // Secrets read at deployment (`secret_files.rs`): never a value, only where and why.
    #[error("secret `{key}`: {source}")]
    SecretUnreadable {
        key: String,
        source: crate::config::AgeError,
    },
    #[error(
        "secrets as files are owned by the app's user, and the image's user `{user}` is a \
         name: set the app's `user` to a numeric uid (or uid:gid)"
    )]
    SecretFileOwner { user: String },

    // `pier import`: an archive stands in for the registry.
    #[error("an import names the image id it expects")]
    ImportWithoutImageId,
    #[error("the archive is missing or not a regular file")]
    ArchiveMissing,
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    NotADigest(#[from] NameError),
    #[error("pier import loads an archive into one engine; a swarm's nodes pull from the registry")]
    ImportOnSwarm,
    #[error("pier import loads an archive into one engine; this app runs on several")]
    ImportOnSeveral,

    // The candidate does not become healthy, or the previous generation cannot serve again.
    #[error("candidate container disappeared")]
    CandidateGone,
    #[error("container disappeared")]
    ContainerGone,
    #[error(
        "container exited (status {status}, exit code {}) before becoming healthy",
        exit_code_text(*.exit_code)
    )]
    ExitedBeforeHealthy {
        status: String,
        exit_code: Option<i64>,
    },
    #[error(
        "container exited (status {status}, exit code {}) within its {settle_ms} ms settle window",
        exit_code_text(*.exit_code)
    )]
    ExitedWhileSettling {
        status: String,
        exit_code: Option<i64>,
        settle_ms: u128,
    },
    #[error("image HEALTHCHECK reports unhealthy")]
    HealthcheckUnhealthy,
    #[error("{}", NotHealthy::<()>::timeout_reason(*.timeout, .last))]
    NotHealthyWithin { timeout: Duration, last: String },
    #[error("failed its soak: {why} ({in_a_row} checks in a row)")]
    SoakFailed { why: String, in_a_row: u32 },
    #[error("the engine bound no loopback host port for container port {port}")]
    NoHostPort { port: String },
    #[error("bad upstream `{upstream}` in the journal")]
    BadUpstream { upstream: String },
    #[error("the previous generation has no port")]
    PreviousWithoutPort,
    #[error("the previous generation's container {id} does not run again")]
    PreviousNotRunning { id: String },

    // Health and routes on an engine whose host's `pier proxy` probes and serves.
    #[error("health probe URL `{url}` has no address and path")]
    ProbeUrl { url: String },
    #[error("the probe request is gone")]
    ProbeRequestGone,
    #[error("{detail} (probed by {by})")]
    ProbeFailed { detail: String, by: String },
    #[error("{by} took the probe but wrote no outcome within {secs}s")]
    ProbeNoOutcome { by: String, secs: u64 },
    #[error(
        "no pier proxy for target {target} took the probe within {secs}s: run `pier proxy \
         --target {target}` on that host"
    )]
    ProbeNotTaken { target: String, secs: u64 },
    #[error("proxy admin {url}: {cause}")]
    ProxyAdmin { url: String, cause: String },
    #[error("the proxy did not apply route version {version} within {secs}s: {last}")]
    RouteNotApplied {
        version: i64,
        secs: u64,
        last: String,
    },
    #[error(
        "the pier proxy of target {target} did not apply route version {version} within \
         {secs}s: {last}"
    )]
    RemoteRouteNotApplied {
        target: String,
        version: i64,
        secs: u64,
        last: String,
    },

    // The config or the engine changed under the deployment, or holds what is not Pier's.
    #[error("conflict: queued for {queued} but the app now follows {follows}")]
    ImageChanged { queued: String, follows: String },
    #[error("app `{app}` is no longer in the configuration")]
    AppRemoved { app: String },
    #[error("refused by policy: {0}")]
    Policy(Refused),
    #[error("network {name} exists but Pier did not make it for this app; remove or rename it")]
    NetworkNotOurs { name: String },
    #[error("network {name} is not labelled for this app after creating it")]
    NetworkUnlabelled { name: String },
    #[error("shared network {name} does not exist; create it first")]
    SharedNetworkMissing { name: String },
    #[error("volume {name} is owned by app `{owner}`; an app never mounts another's")]
    VolumeOwnedByOther { name: String, owner: String },
    #[error(
        "volume {name} exists on the engine but was not made by Pier for this app (its labels \
         do not carry an ownership record of the app); it is not mounted: remove or rename it"
    )]
    VolumeNotOurs { name: String },
    #[error(
        "volume {name} belongs to an earlier incarnation of this app (one that left the \
         config); it is not mounted: `pier volumes adopt {name}` hands it to this one"
    )]
    VolumeOfEndedIncarnation { name: String },

    // Swarm services.
    #[error("app `{app}` has no swarm settings for target {target}")]
    NoSwarmSettings { app: String, target: String },
    #[error(
        "conflict: the journal recorded another service spec than the config gives now \
         (config changed since the update began)"
    )]
    ServiceSpecChanged,
    #[error("service {name} was removed during the deployment")]
    ServiceRemoved { name: String },
    #[error(
        "service {name} exists and Pier did not create it (no {LABEL_MANAGED} label): Pier \
         does not take over a service; remove or rename it"
    )]
    ServiceNotOurs { name: String },
    #[error("service {name} kept changing under the update ({tries} tries)")]
    ServiceKeptChanging { name: String, tries: usize },
    #[error("service {name} kept changing under the rollback")]
    ServiceKeptChangingInRollback { name: String },
    #[error("service {name} is gone: nothing to roll back")]
    ServiceGone { name: String },

    // Signatures (an app whose images must be signed).
    #[error(
        "an imported archive carries no signature Pier can verify, and this app's images must \
         be signed: push the image to a registry and sign it there"
    )]
    UnsignedArchive,
    #[error("the index {index} does not list {digest}, the manifest chosen from it")]
    IndexOmits { index: String, digest: String },
    #[error("{0}")]
    Unsigned(Rejected),
}

fn exit_code_text(code: Option<i64>) -> String {
    code.map_or_else(|| "unknown".to_owned(), |c| c.to_string())
}

/// The labels only Pier sets that an image claims (sorted): an image carrying one could
/// pass for one of Pier's own containers, so neither a pull nor an import accepts it.
pub(super) fn reserved_labels_claimed(
    labels: &std::collections::HashMap<String, String>,
) -> Vec<&'static str> {
    let mut claimed: Vec<&'static str> = crate::engine::RESERVED_LABELS
        .into_iter()
        .filter(|k| labels.contains_key(*k))
        .collect();
    claimed.sort_unstable();
    claimed
}
