//! Every call to an engine has a deadline that fits what it asks, whatever carries it.
//!
//! An engine stopped mid-flight (SIGSTOP, a wedged dockerd) still accepts connections and
//! never answers. Connect timeouts do not help there: a pooled connection is reused without
//! connecting again, and the API negotiation of the first call rides on it too. So the
//! deadline wraps the whole call (negotiation, request, and the streamed body of a pull or
//! a log tail), and a retry loop of calls outlives its budget by at most one deadline.

use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as DockerError;

use super::{Engine, EngineError, Result, err};

/// `_ping`, `version`, agreeing on the API version: answered in milliseconds by an engine
/// that is up, so a few seconds tell a hung engine from a busy one.
pub(crate) const PROBE: Duration = Duration::from_secs(5);
/// Inspecting and listing (containers, images, networks, volumes, services, tasks,
/// nodes, secrets) and a bounded log tail.
const READ: Duration = Duration::from_secs(30);
/// Creating, starting, removing, connecting, updating: the engine does work first (a
/// start sets up networking and mounts), so this is generous for a loaded host.
const CHANGE: Duration = Duration::from_secs(60);

/// What a call asks of the engine; its deadline follows from that.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    Probe,
    Read,
    Change,
    /// Stopping a container: its grace period, the engine's kill, then [`CHANGE`].
    Stop(Duration),
    /// A pull or an archive load as a whole: the budget its caller gives it.
    Transfer(Duration),
}

impl Call {
    pub(crate) fn deadline(self) -> Duration {
        match self {
            Call::Probe => PROBE,
            Call::Read => READ,
            Call::Change => CHANGE,
            Call::Stop(grace) => grace.saturating_add(CHANGE),
            Call::Transfer(budget) => budget,
        }
    }
}

impl Engine {
    /// Runs `f` on the negotiated client within `call`'s deadline. The engine's own
    /// answer comes back as it is, for the caller to read (404 as "not found", 409 as
    /// "done already"); only the deadline's expiry is decided here.
    pub(super) async fn attempt<T>(
        &self,
        call: Call,
        action: &str,
        f: impl AsyncFnOnce(&Docker) -> std::result::Result<T, DockerError>,
    ) -> Result<std::result::Result<T, DockerError>> {
        self.timed(call, action, async {
            let docker = self.api().await?;
            Ok(f(docker).await)
        })
        .await
    }

    /// `work` within `call`'s deadline; past it, [`EngineError::TimedOut`] naming this
    /// engine, the call and the deadline.
    pub(super) async fn timed<T>(
        &self,
        call: Call,
        action: &str,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let after = call.deadline();
        match tokio::time::timeout(after, work).await {
            Ok(answer) => answer,
            Err(_) => Err(EngineError::TimedOut {
                engine: self.name.to_string(),
                action: action.to_owned(),
                after,
            }),
        }
    }

    /// [`Engine::attempt`], with every error the engine answers classified as usual.
    pub(super) async fn call<T>(
        &self,
        call: Call,
        action: &str,
        f: impl AsyncFnOnce(&Docker) -> std::result::Result<T, DockerError>,
    ) -> Result<T> {
        self.attempt(call, action, f)
            .await?
            .map_err(|e| err(action, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_call_has_a_deadline_that_fits_it() {
        assert!(Call::Probe.deadline() < Call::Read.deadline());
        assert!(Call::Read.deadline() <= Call::Change.deadline());
        let grace = Duration::from_secs(40);
        assert_eq!(Call::Stop(grace).deadline(), grace + CHANGE);
        let budget = Duration::from_secs(900);
        assert_eq!(Call::Transfer(budget).deadline(), budget);
        assert_eq!(Call::Stop(Duration::MAX).deadline(), Duration::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_ends_at_its_deadline_naming_engine_call_and_deadline() {
        let engine = Engine::for_endpoint(&crate::domain::Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 9,
            tls: None,
        })
        .unwrap()
        .named("edge-2");
        let started = tokio::time::Instant::now();
        let r: Result<()> = engine
            .timed(Call::Probe, "version", std::future::pending())
            .await;
        assert_eq!(started.elapsed(), PROBE);
        let e = r.unwrap_err();
        assert!(e.is_transient());
        assert_eq!(
            e.to_string(),
            "engine edge-2 gave no answer to version within 5s"
        );
    }
}
