//! `pier import`: an OCI or docker-save archive loaded into the engine (`docker load`).
//! Loading adds an image and nothing else; what it holds is checked before anything is made.

use std::path::Path;

use bollard::query_parameters::ImportImageOptionsBuilder;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use super::{Engine, EngineError, Result, err};

/// Read per chunk while streaming the archive to the engine: its size is not held in memory.
const CHUNK: usize = 1 << 20;

impl Engine {
    /// Streams the archive at `path` to the engine; returns what the engine says it loaded
    /// (`Loaded image ID: sha256:…`, `Loaded image: name:tag`).
    pub async fn load_archive(&self, path: &Path) -> Result<Vec<String>> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| EngineError::Refused {
                action: "open the archive".into(),
                message: e.kind().to_string(),
            })?;
        let body = futures_util::stream::unfold(file, |mut f| async move {
            let mut buf = vec![0u8; CHUNK];
            match f.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok::<Bytes, std::io::Error>(Bytes::from(buf)), f))
                }
                Err(e) => Some((Err(e), f)),
            }
        });
        let options = ImportImageOptionsBuilder::default().quiet(true).build();
        let mut stream = self.docker.import_image_stream(options, body, None);
        let mut loaded = Vec::new();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| err("load the archive", e))?;
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
    }
}
