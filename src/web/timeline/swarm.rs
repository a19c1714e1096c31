//! The timeline's sentences for a swarm deployment's steps, read from their intents as the
//! pipeline's own record types (`pipeline/records/swarm.rs`): `update` and `converge` are a
//! swarm's alone; a swarm's `verify` and `rollback` record other fields than a container's,
//! so a container's record does not read as one of these.

use serde_json::Value;

use crate::pipeline::records::{ConvergeIntent, ManifestIntent, ServiceRollbackIntent, UpdatePlan};
use crate::store::Step;

fn read<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    serde_json::from_value(v.clone()).ok()
}

pub(super) fn sentence(step: Step, i: &Value) -> Option<String> {
    match step {
        Step::Update => {
            let u: UpdatePlan = read(i)?;
            Some(match u.previous {
                Some(p) => format!(
                    "Update service {} from {} to {}",
                    u.service, p.image, u.image
                ),
                None => format!("Create service {} running {}", u.service, u.image),
            })
        }
        Step::Converge => {
            let c: ConvergeIntent = read(i)?;
            Some(format!(
                "Wait until every task of service {} runs the new spec and passes its health check (at most {} s)",
                c.service, c.timeout_secs
            ))
        }
        Step::Verify => {
            let v: ManifestIntent = read(i)?;
            Some(match v.digest == v.member {
                true => format!("Read {} again from the registry, by digest", v.digest),
                false => format!(
                    "Read the index {} again from the registry: it must list {}; its platforms go in the spec",
                    v.digest, v.member
                ),
            })
        }
        Step::Rollback => match read(i)? {
            ServiceRollbackIntent::To {
                service,
                to_deployment,
            } => Some(format!(
                "Roll service {service} back to the previous spec (deployment {to_deployment}) and wait until every replica runs it"
            )),
            ServiceRollbackIntent::Remove { remove } => Some(format!(
                "Remove service {remove}, which this deployment created"
            )),
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::records::SpecBefore;

    fn words(step: Step, record: impl serde::Serialize) -> Option<String> {
        sentence(step, &serde_json::to_value(record).unwrap())
    }

    #[test]
    fn each_swarm_step_is_said_from_the_record_the_pipeline_wrote() {
        let plan = UpdatePlan {
            service: "web".into(),
            image: "r/web:v2@sha256:bb".into(),
            spec_hmac: "h".into(),
            previous: Some(SpecBefore {
                deployment: Some("d-0".into()),
                image: "r/web:v1@sha256:aa".into(),
                version: 7,
                force_update: 0,
            }),
        };
        assert_eq!(
            words(Step::Update, &plan).as_deref(),
            Some("Update service web from r/web:v1@sha256:aa to r/web:v2@sha256:bb")
        );
        let created = UpdatePlan {
            previous: None,
            ..plan
        };
        assert_eq!(
            words(Step::Update, &created).as_deref(),
            Some("Create service web running r/web:v2@sha256:bb")
        );
        let converge = ConvergeIntent {
            service: "web".into(),
            deployment: "d-1".into(),
            timeout_secs: 60,
        };
        assert!(
            words(Step::Converge, &converge)
                .unwrap()
                .ends_with("(at most 60 s)")
        );
        let by_digest = ManifestIntent {
            digest: "sha256:aa".into(),
            member: "sha256:aa".into(),
        };
        assert_eq!(
            words(Step::Verify, &by_digest).as_deref(),
            Some("Read sha256:aa again from the registry, by digest")
        );
        let back = ServiceRollbackIntent::To {
            service: "web".into(),
            to_deployment: "d-0".into(),
        };
        assert!(
            words(Step::Rollback, &back)
                .unwrap()
                .contains("(deployment d-0)")
        );
        let remove = ServiceRollbackIntent::Remove {
            remove: "web".into(),
        };
        assert_eq!(
            words(Step::Rollback, &remove).as_deref(),
            Some("Remove service web, which this deployment created")
        );
    }

    #[test]
    fn a_containers_verify_is_not_read_as_a_swarms() {
        let container = serde_json::json!({ "reference": "r@sha256:aa" });
        assert_eq!(sentence(Step::Verify, &container), None);
    }
}
