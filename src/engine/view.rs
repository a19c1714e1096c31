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

    pub async fn ping(&self) -> Result<()> {
        self.0.ping().await
    }

    /// Pier's containers (by label), optionally of one app or one deployment.
    pub async fn managed_containers(
        &self,
        app: Option<&str>,
        deployment: Option<&str>,
    ) -> Result<Vec<ContainerFacts>> {
        self.0.managed_containers(app, deployment).await
    }
}
