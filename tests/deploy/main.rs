//! What a deployment does on the host's engine: exactly the pushed digest, its health,
//! blue-green, signatures, hostile registries, the journal that survives every crash,
//! operator actions and the command line that asks for them, approvals and windows,
//! promotion, notifications (every channel, approval links, digests), reloads, and a
//! backup of the database restored into a new Pier.

#[path = "../support/mod.rs"]
mod support;

mod approval_links;
mod approvals;
mod approvals_restart;
mod backup;
mod blue_green;
mod blue_green_crash;
mod channels;
mod cli;
mod crash_safety;
mod digests;
mod hostile_registry;
mod in_process;
mod logs;
mod mail;
mod notifications;
mod operator_actions;
mod ports;
mod promotion;
mod pushes;
mod recovery;
mod reload;
mod signatures;
mod stats;
