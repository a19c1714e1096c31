//! Swarm secrets for a swarm app's `secrets`: mounted into each task as a file
//! under `/run/secrets/`, never put in the service's env, so `docker inspect` of a task or
//! the service shows a secret's name, not its value.
//!
//! A secret's name carries a keyed hash of its content (`pier-web-token-3f9a…`): Swarm
//! secrets cannot change, so a new value is a new secret and the spec that names it
//! rotates every task onto it; an existing name already holds exactly that value.

use std::collections::HashMap;

use base64::Engine as _;
use bollard::models::SecretSpec;
use bollard::query_parameters::ListSecretsOptionsBuilder;

use super::{Engine, Result, err, status_of};
use crate::engine::deadline::Call;
use crate::engine::{LABEL_APP, LABEL_MANAGED};

impl Engine {
    /// Creates the secret `name` of `app` holding `data`, unless it exists; its id (a
    /// service's spec must name a secret by id as well as by name).
    pub(crate) async fn ensure_secret(&self, app: &str, name: &str, data: &[u8]) -> Result<String> {
        let action = format!("create secret {name}");
        let spec = SecretSpec {
            name: Some(name.to_owned()),
            labels: Some(HashMap::from([
                (LABEL_MANAGED.to_owned(), "true".to_owned()),
                (LABEL_APP.to_owned(), app.to_owned()),
            ])),
            data: Some(base64::engine::general_purpose::STANDARD.encode(data)),
            ..Default::default()
        };
        match self
            .attempt(Call::Change, &action, async |docker| {
                docker.create_secret(spec).await
            })
            .await?
        {
            Ok(created) => Ok(created.id),
            // Created by an earlier run: the name is the content's, so it is the same.
            Err(e) if status_of(&e) == Some(409) => self.secret_id(name).await,
            Err(e) => Err(err(action, e)),
        }
    }

    async fn secret_id(&self, name: &str) -> Result<String> {
        let action = format!("find secret {name}");
        let filters = HashMap::from([("name", vec![name])]);
        let options = ListSecretsOptionsBuilder::new().filters(&filters).build();
        let found = self
            .attempt(Call::Read, &action, async |docker| {
                docker.list_secrets(Some(options)).await
            })
            .await?
            .map_err(|e| err(action.clone(), e))?;
        // The name filter matches prefixes: take the exact one.
        found
            .into_iter()
            .find(|s| s.spec.as_ref().and_then(|s| s.name.as_deref()) == Some(name))
            .and_then(|s| s.id)
            .ok_or_else(|| super::EngineError::Refused {
                action,
                message: "it exists, yet is not listed".into(),
            })
    }

    /// The names of the secrets Pier made for `app`.
    pub(crate) async fn app_secrets(&self, app: &str) -> Result<Vec<String>> {
        let action = format!("list secrets of {app}");
        let label = format!("{LABEL_APP}={app}");
        let filters = HashMap::from([("label", vec![label.as_str()])]);
        let options = ListSecretsOptionsBuilder::new().filters(&filters).build();
        let all = self
            .attempt(Call::Read, &action, async |docker| {
                docker.list_secrets(Some(options)).await
            })
            .await?
            .map_err(|e| err(action, e))?;
        Ok(all
            .into_iter()
            .filter_map(|s| s.spec.and_then(|s| s.name))
            .collect())
    }

    /// Removes the secret `name`; `false` if there was none. One still mounted by a task
    /// is refused by Swarm.
    pub(crate) async fn remove_secret(&self, name: &str) -> Result<bool> {
        let action = format!("remove secret {name}");
        match self
            .attempt(Call::Change, &action, async |docker| {
                docker.delete_secret(name).await
            })
            .await?
        {
            Ok(()) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(err(action, e)),
        }
    }
}
