//! The timeline's sentences for a swarm deployment's steps (issue 24), read from their
//! intents by shape: `update` and `converge` are a swarm's alone; a swarm's `verify` and
//! `rollback` record other fields than a container's.

use serde::Deserialize;
use serde_json::Value;

use crate::store::Step;

#[derive(Deserialize)]
struct UpdateWords {
    service: String,
    image: String,
    previous: Option<PreviousWords>,
}

#[derive(Deserialize)]
struct PreviousWords {
    image: String,
}

#[derive(Deserialize)]
struct ConvergeWords {
    service: String,
    timeout_secs: u64,
}

#[derive(Deserialize)]
struct VerifyWords {
    digest: String,
    member: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RollbackWords {
    To {
        service: String,
        to_deployment: String,
    },
    Remove {
        remove: String,
    },
}

pub(super) fn sentence(step: Step, i: &Value) -> Option<String> {
    match step {
        Step::Update => {
            let u: UpdateWords = serde_json::from_value(i.clone()).ok()?;
            Some(match u.previous {
                Some(p) => format!(
                    "Update service {} from {} to {}",
                    u.service, p.image, u.image
                ),
                None => format!("Create service {} running {}", u.service, u.image),
            })
        }
        Step::Converge => {
            let c: ConvergeWords = serde_json::from_value(i.clone()).ok()?;
            Some(format!(
                "Wait until every task of service {} runs the new spec and passes its health check (at most {} s)",
                c.service, c.timeout_secs
            ))
        }
        Step::Verify => {
            let v: VerifyWords = serde_json::from_value(i.clone()).ok()?;
            Some(match v.digest == v.member {
                true => format!("Read {} again from the registry, by digest", v.digest),
                false => format!(
                    "Read the index {} again from the registry: it must list {}; its platforms go in the spec",
                    v.digest, v.member
                ),
            })
        }
        Step::Rollback => match serde_json::from_value(i.clone()).ok()? {
            RollbackWords::To {
                service,
                to_deployment,
            } => Some(format!(
                "Roll service {service} back to the previous spec (deployment {to_deployment}) and wait until every replica runs it"
            )),
            RollbackWords::Remove { remove } => Some(format!(
                "Remove service {remove}, which this deployment created"
            )),
        },
        _ => None,
    }
}
