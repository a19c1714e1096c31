//! Pier: deploys exactly the image digest a registry push names, onto your own Docker
//! host, with a journal of every step.

pub mod actions;
pub mod archive;
/// What runs beside the workers: sweeps, reconciliation, notifications, promotions, the poller.
pub mod background;
pub mod backoff;
pub mod cli;
pub mod config;
/// The vocabulary every layer shares (digests, app names, tag rules, platforms, engine
/// addresses); it depends on nothing else in Pier.
pub mod domain;
pub mod engine;
pub mod error;
pub mod faults;
pub mod gates;
pub mod intake;
pub mod log_budget;
pub mod pipeline;
/// The HTTP health probe the pipeline and a remote target's `pier proxy` share.
pub mod probe;
pub mod proxy;
pub mod registry;
/// Start-up helpers `serve` and `proxy` share: logging, the TLS provider, metrics, signals.
pub mod runtime;
pub mod senders;
pub mod serve;
pub mod signature;
pub mod store;
pub mod target;
pub mod web;
pub mod worker;
