//! The NOTIFY channels Postgres triggers announce changes on (see the migrations named
//! beside each). One list, in the store that owns the triggers, so that a listener and the
//! trigger it waits on can never name different channels: a typo there would not fail, it
//! would make a worker, a page or a proxy wait for a wake-up that never comes.

/// A channel that a trigger of Pier's schema notifies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Every queue change of `deployments`, with the app as payload (0001).
    Queue,
    /// A journal step or deployment state changed, with the deployment's id (0010, 0014).
    Live,
    /// A row of `proxy_routes` changed, with the app as payload (0008).
    Routes,
    /// A notification was queued for delivery, with the endpoint (0012).
    Outbox,
    /// A health probe was asked of a remote target's proxy, with the target (0023).
    Probes,
    /// A probe request changed state, with its id: the health step waiting on it (0023).
    ProbeResults,
    /// A `pier proxy` reported what it serves, with its target (0023).
    ProxyReports,
}

impl Channel {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Channel::Queue => "pier_queue",
            Channel::Live => "pier_live",
            Channel::Routes => "pier_routes",
            Channel::Outbox => "pier_outbox",
            Channel::Probes => "pier_probes",
            Channel::ProbeResults => "pier_probe_results",
            Channel::ProxyReports => "pier_proxy_reports",
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
