//! Networks and volumes: made by Pier only after it has recorded why (the journal, the
//! volume's owner in Postgres), labelled so that a reader can tell whose they are, and never
//! taken over on the strength of a name alone.

use std::collections::HashMap;

use bollard::models::{
    EndpointSettings, Ipam, IpamConfig, NetworkConnectRequest, NetworkCreateRequest,
    VolumeCreateRequest,
};
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveVolumeOptionsBuilder,
};

use super::deadline::Call;
use super::{Engine, LABEL_APP, LABEL_MANAGED, Result, err, not_found_is_none, status_of};

/// Labels Pier puts on what it makes for an app's volume, beside managed and app.
pub const LABEL_INCARNATION: &str = "pier.incarnation";
pub const LABEL_SERVICE: &str = "pier.service";

/// A network or volume as found on the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    pub name: String,
    pub labels: HashMap<String, String>,
}

impl Labelled {
    /// Made by Pier for `app`, by its labels.
    pub(crate) fn is_apps(&self, app: &str) -> bool {
        self.labels.get(LABEL_MANAGED).map(String::as_str) == Some("true")
            && self.labels.get(LABEL_APP).map(String::as_str) == Some(app)
    }

    /// A volume's provenance: made by Pier for `app` in that incarnation, as its ownership
    /// record says. Only a volume that carries the record's labels is the record's: a
    /// hand-made one of the same name is never mounted or deleted on the record's strength.
    pub(crate) fn carries(&self, app: &str, incarnation: uuid::Uuid) -> bool {
        self.is_apps(app) && self.labels.get(LABEL_INCARNATION) == Some(&incarnation.to_string())
    }
}

/// A network that carries `pier.managed=true`, as the engine lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedNetwork {
    pub id: String,
    pub name: String,
    pub labels: HashMap<String, String>,
}

impl ManagedNetwork {
    /// The app its `pier.app` label names.
    pub(crate) fn app(&self) -> Option<&str> {
        self.labels.get(LABEL_APP).map(String::as_str)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkRemoved {
    Removed,
    AlreadyGone,
    /// Something is attached to it: nothing was removed.
    InUse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeRemoved {
    Removed,
    AlreadyGone,
    /// A container still uses it: nothing was removed.
    InUse,
}

impl Engine {
    pub(crate) async fn network(&self, name: &str) -> Result<Option<Labelled>> {
        let action = format!("inspect network {name}");
        let found = self
            .call(Call::Read, &action, async |d| {
                not_found_is_none(d.inspect_network(name, None).await)
            })
            .await?;
        Ok(found.map(|n| Labelled {
            name: n.name.unwrap_or_default(),
            labels: n.labels.unwrap_or_default(),
        }))
    }

    /// A bridge network; 409 (made meanwhile, by a replay) is not an error. With
    /// `app_subnets`, the network gets the first `/27` of the pool, from a place that
    /// depends on its name, that no other network on the engine overlaps (the engine
    /// refuses an overlapping one with 403); without it, the engine picks from its default
    /// pools, which run out after about 30 networks.
    pub(crate) async fn create_network(
        &self,
        name: &str,
        labels: HashMap<String, String>,
    ) -> Result<()> {
        let what = format!("create network {name}");
        let Some(pool) = self.app_subnets else {
            return match self.try_create_network(&what, name, &labels, None).await? {
                Ok(()) => Ok(()),
                // Not transient: retrying cannot free an address pool.
                Err(e) if e.to_string().contains("non-overlapping IPv4 address pool") => {
                    Err(super::EngineError::Refused {
                        action: what,
                        message: format!(
                            "{e}; the engine's default address pools are used up: set \
                             [server] app_subnets (e.g. \"10.213.0.0/16\") so that Pier gives \
                             each app a /27 of its own"
                        ),
                    })
                }
                Err(e) => Err(err(what, e)),
            };
        };
        let first = pool.first_for(name);
        // Bounded: a pool whose subnets are all taken fails after this many tries.
        let tries = pool.len().min(256);
        let mut last = None;
        for i in 0..tries {
            let subnet = Some(pool.subnet(first + i));
            match self
                .try_create_network(&what, name, &labels, subnet)
                .await?
            {
                // 403: the subnet overlaps a network the engine has; try the next one.
                Err(e) if status_of(&e) == Some(403) => last = Some(e),
                Ok(()) => return Ok(()),
                Err(e) => return Err(err(what, e)),
            }
        }
        Err(err(what, last.expect("at least one try")))
    }

    /// One create; 409 (made meanwhile, by a replay) is success.
    async fn try_create_network(
        &self,
        action: &str,
        name: &str,
        labels: &HashMap<String, String>,
        subnet: Option<(String, String)>,
    ) -> Result<std::result::Result<(), bollard::errors::Error>> {
        let req = NetworkCreateRequest {
            name: name.to_owned(),
            driver: Some("bridge".into()),
            labels: Some(labels.clone()),
            ipam: subnet.map(|(subnet, gateway)| Ipam {
                config: Some(vec![IpamConfig {
                    subnet: Some(subnet),
                    gateway: Some(gateway),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.attempt(Call::Change, action, async |d| {
            match d.create_network(req).await {
                Ok(_) => Ok(()),
                Err(e) if status_of(&e) == Some(409) => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Joins `container` to `network` under `aliases`; joining twice is not an error.
    pub(crate) async fn join_network(
        &self,
        network: &str,
        container: &str,
        aliases: &[String],
    ) -> Result<()> {
        let req = NetworkConnectRequest {
            container: container.to_owned(),
            endpoint_config: Some(EndpointSettings {
                aliases: Some(aliases.to_vec()),
                ..Default::default()
            }),
        };
        let action = format!("connect a container to network {network}");
        self.call(Call::Change, &action, async |d| {
            match d.connect_network(network, req).await {
                Err(e) if already_connected(&e) => Ok(()),
                other => other,
            }
        })
        .await
    }

    /// Every network labelled `pier.managed=true`, whoever's app it names.
    pub(crate) async fn managed_networks(&self) -> Result<Vec<ManagedNetwork>> {
        let filters = HashMap::from([("label", vec![format!("{LABEL_MANAGED}=true")])]);
        let options = ListNetworksOptionsBuilder::default()
            .filters(&filters)
            .build();
        let list = self
            .call(Call::Read, "list networks", async |d| {
                d.list_networks(Some(options)).await
            })
            .await?;
        Ok(list
            .into_iter()
            .filter_map(|n| {
                Some(ManagedNetwork {
                    id: n.id?,
                    name: n.name.unwrap_or_default(),
                    labels: n.labels.unwrap_or_default(),
                })
            })
            .collect())
    }

    /// The containers, in any state and whoever made them, whose settings name the network.
    /// A stopped container is not among the network's endpoints, and the engine removes a
    /// network with only stopped containers on it: that container would then never start
    /// again. So "nothing attached" is asked of the containers, not of the network.
    pub(crate) async fn network_users(&self, network_id: &str) -> Result<Vec<String>> {
        let filters = HashMap::from([("network", vec![network_id.to_owned()])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let action = format!("list the containers on network {network_id}");
        let list = self
            .call(Call::Read, &action, async |d| {
                d.list_containers(Some(options)).await
            })
            .await?;
        Ok(list.into_iter().filter_map(|c| c.id).collect())
    }

    /// Removes a network by id (never by name: a network made meanwhile under the same name
    /// is another one). The engine refuses while an endpoint is active (403).
    pub(crate) async fn remove_network(&self, network_id: &str) -> Result<NetworkRemoved> {
        let action = format!("remove network {network_id}");
        self.call(Call::Change, &action, async |d| {
            match d.remove_network(network_id).await {
                Ok(()) => Ok(NetworkRemoved::Removed),
                Err(e) if status_of(&e) == Some(404) => Ok(NetworkRemoved::AlreadyGone),
                Err(e) if matches!(status_of(&e), Some(403 | 409)) => Ok(NetworkRemoved::InUse),
                Err(e) => Err(e),
            }
        })
        .await
    }

    pub(crate) async fn volume(&self, name: &str) -> Result<Option<Labelled>> {
        let action = format!("inspect volume {name}");
        let found = self
            .call(Call::Read, &action, async |d| {
                not_found_is_none(d.inspect_volume(name).await)
            })
            .await?;
        Ok(found.map(|v| Labelled {
            name: v.name,
            labels: v.labels,
        }))
    }

    /// Creating an existing volume returns it unchanged: callers check its labels first.
    pub(crate) async fn create_volume(
        &self,
        name: &str,
        labels: HashMap<String, String>,
    ) -> Result<()> {
        let req = VolumeCreateRequest {
            name: Some(name.to_owned()),
            driver: Some("local".into()),
            labels: Some(labels),
            ..Default::default()
        };
        let action = format!("create volume {name}");
        self.call(Call::Change, &action, async |d| d.create_volume(req).await)
            .await
            .map(drop)
    }

    pub(crate) async fn remove_volume(&self, name: &str) -> Result<VolumeRemoved> {
        let options = RemoveVolumeOptionsBuilder::default().force(false).build();
        let action = format!("remove volume {name}");
        self.call(Call::Change, &action, async |d| {
            match d.remove_volume(name, Some(options)).await {
                Ok(()) => Ok(VolumeRemoved::Removed),
                Err(e) if status_of(&e) == Some(404) => Ok(VolumeRemoved::AlreadyGone),
                Err(e) if status_of(&e) == Some(409) => Ok(VolumeRemoved::InUse),
                Err(e) => Err(e),
            }
        })
        .await
    }
}

fn already_connected(e: &bollard::errors::Error) -> bool {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => {
            *status_code == 403 && message.contains("already exists")
                || message.contains("already attached")
                || message.contains("already exists in network")
        }
        _ => false,
    }
}
