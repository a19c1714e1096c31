//! `pier import`: a verified archive loaded into the engine (`docker load`). Loading adds an
//! image and nothing else; what is sent is the tar Pier made from the archive's verified
//! entries ([`crate::archive::LoadBody`]), never the file as it happens to be now.

use bollard::query_parameters::ImportImageOptionsBuilder;
use futures_util::StreamExt;

use super::deadline::Call;
use super::{Engine, EngineError, Result};
use crate::archive::{LoadBody, VerifiedArchive};

impl Engine {
    /// Streams the verified archive to the engine; returns what the engine says it loaded
    /// (`Loaded image ID: sha256:…`). The whole load gets `budget`, as a pull does.
    pub(crate) async fn load_archive(
        &self,
        archive: &VerifiedArchive,
        budget: std::time::Duration,
    ) -> Result<Vec<String>> {
        let body = LoadBody::open(archive)
            .await
            .map_err(|e| EngineError::Refused {
                action: "open the archive".into(),
                message: e.kind().to_string(),
            })?;
        let options = ImportImageOptionsBuilder::default().quiet(true).build();
        self.call(Call::Transfer(budget), "load the archive", async |d| {
            let mut stream = d.import_image_stream(options, body.into_stream(), None);
            let mut loaded = Vec::new();
            while let Some(item) = stream.next().await {
                let info = item?;
                if let Some(s) = info.stream.as_deref().or(info.status.as_deref()) {
                    for line in s.lines() {
                        if let Some(what) = line.trim().strip_prefix("Loaded image") {
                            let what = what.trim_start_matches(" ID").trim_start_matches(':');
                            loaded.push(what.trim().to_owned());
                        }
                    }
                }
            }
            Ok(loaded)
        })
        .await
    }
}
