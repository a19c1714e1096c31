//! Where apps run besides the host's engine: remote engines over TLS and SSH, rollouts
//! across several engines (also blue-green, and killed at every step), their pages, and
//! two-node swarms. Every extra engine is a real dockerd in a network namespace of its own
//! (`support::engines`, `support::swarm`), each claiming a free slot, so tests side by side
//! never share one.

#[path = "../support/mod.rs"]
mod support;

mod engines;
mod logs;
mod pages;
mod remote_proxy;
mod rollout;
mod rollout_blue_green;
mod rollout_blue_green_crash;
mod rollout_crash;
mod rollout_remote_health;
mod swarm;
mod swarm_crash;
mod swarm_harness;
