//! The engine as the status pages and the API may see it: read-only. `web/` and `intake/`
//! hold an [`EngineView`], never an [`Engine`], so nothing there can create, start, stop or
//! remove anything; only the pipeline and reconciliation change the engine.

use super::{ContainerFacts, Engine, Result};

#[derive(Clone, Debug)]
pub struct EngineView(Engine);

impl EngineView {
    pub fn new(engine: Engine) -> Self {
        Self(engine)
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        self.0.ping().await
    }

    /// Pier's containers (by label), optionally of one app or one deployment.
    pub(crate) async fn managed_containers(
        &self,
        app: Option<&str>,
        deployment: Option<&str>,
    ) -> Result<Vec<ContainerFacts>> {
        self.0.managed_containers(app, deployment).await
    }

    /// A container's or a Swarm service's log (see `logs.rs`).
    pub(crate) async fn logs(
        &self,
        source: &super::LogSource,
        q: &super::LogQuery,
    ) -> Result<impl futures_util::Stream<Item = Result<Vec<super::LogLine>>> + Send + use<>> {
        self.0.logs(source, q).await
    }

    /// Whether a swarm manager has the service `name` (one inspect).
    pub(crate) async fn has_service(&self, name: &str) -> Result<bool> {
        Ok(self.0.service(name).await?.is_some())
    }

    /// The service `name` of a swarm manager, its tasks and the swarm's nodes; `None`
    /// when there is no such service.
    pub(crate) async fn service(
        &self,
        name: &str,
    ) -> Result<
        Option<(
            super::ServiceFacts,
            Vec<super::TaskFacts>,
            Vec<super::NodeFacts>,
        )>,
    > {
        let Some(facts) = self.0.service(name).await? else {
            return Ok(None);
        };
        let tasks = self.0.service_tasks(name).await?;
        let nodes = self.0.nodes().await?;
        Ok(Some((facts, tasks, nodes)))
    }
}
