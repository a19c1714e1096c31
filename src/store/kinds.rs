//! Every enumerated value the database stores, each mapped to its text in exactly one
//! place: strum derives the text (`snake_case` of the variant) and the strict parse, serde
//! the same text. Decoding a value the code does not know is an error that names it: a row
//! written by a newer Pier, or by hand, is never silently read as something else.

use sqlx::Postgres;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

/// A stored text that names no variant of the enum it is read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}` in the database")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: String,
}

impl UnknownValue {
    fn new(kind: &'static str, value: &str) -> Self {
        Self {
            kind,
            value: value.chars().take(64).collect(),
        }
    }
}

/// Stores an enum that strum names as Postgres `text`, and gives it `as_str` and `ALL`.
/// By hand rather than `#[derive(sqlx::Type)]`: the derive declares the column's type by
/// name, which costs every new connection a lookup of that name before its first bind
/// (tests/idle.rs and tests/group_commit.rs count the statements a connection sends).
macro_rules! stored_as_text {
    ($($name:ident),+ $(,)?) => {$(
        impl $name {
            #[cfg(test)]
            pub(crate) const ALL: &'static [$name] = <$name as strum::VariantArray>::VARIANTS;

            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        impl sqlx::Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <&str as sqlx::Type<Postgres>>::type_info()
            }
            fn compatible(ty: &PgTypeInfo) -> bool {
                <&str as sqlx::Type<Postgres>>::compatible(ty)
            }
        }

        impl<'r> sqlx::Decode<'r, Postgres> for $name {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                Ok(<&str as sqlx::Decode<Postgres>>::decode(value)?.parse::<$name>()?)
            }
        }

        impl sqlx::Encode<'_, Postgres> for $name {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as sqlx::Encode<Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }
    )+};
}

stored_as_text!(
    DeploymentState,
    Trigger,
    Step,
    StepState,
    Verdict,
    ReconcileKind,
    ContainerEventKind
);

/// `deployments.state`. `queued` and `running` are the queue; the rest are final.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = UnknownValue, parse_err_fn = unknown_deployment_state)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Superseded,
    Cancelled,
    /// Switched to the new generation, then back: it failed its soak.
    RolledBack,
    /// Held until enough named admins approve it (or it is rejected or expires).
    AwaitingApproval,
    /// Held until the app's next deploy window opens or its freeze ends.
    AwaitingWindow,
}

fn unknown_deployment_state(value: &str) -> UnknownValue {
    UnknownValue::new("deployment state", value)
}

impl DeploymentState {
    pub(crate) fn is_final(self) -> bool {
        !matches!(
            self,
            Self::Queued | Self::Running | Self::AwaitingApproval | Self::AwaitingWindow
        )
    }

    /// Held by a gate: a row in Postgres, no task sleeps for it.
    pub(crate) fn is_waiting(self) -> bool {
        matches!(self, Self::AwaitingApproval | Self::AwaitingWindow)
    }
}

/// `deployments.trigger`: what asked for the deployment.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = UnknownValue, parse_err_fn = unknown_trigger)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Webhook,
    Manual,
    Rollback,
    Reconcile,
    /// A digest another app (staging) proved, promoted to this one.
    Promotion,
}

fn unknown_trigger(value: &str) -> UnknownValue {
    UnknownValue::new("deployment trigger", value)
}

impl Trigger {
    /// An operator named what to deploy: it runs even when that digest already serves.
    pub(crate) fn is_operator(self) -> bool {
        matches!(self, Self::Manual | Self::Rollback)
    }
}

/// `deployment_steps.step`: the pipeline's steps, in the order they run.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = UnknownValue, parse_err_fn = unknown_step)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Resolve,
    /// The resolved digest carries a trusted key's cosign signature.
    Signature,
    /// A rollout across engines first asks every engine whether it answers,
    /// so that one that is down fails the deployment before any engine changed.
    Reach,
    Pull,
    Verify,
    /// The app's private network exists.
    Network,
    /// The app's named volumes are owned (recorded) and exist.
    Volumes,
    Create,
    /// The journaled candidate joins the app's shared networks.
    Connect,
    StopOld,
    Start,
    Health,
    Switch,
    /// Blue-green: wait until the proxy serves the new route.
    Applied,
    /// Blue-green: in-flight requests finish on the old generation.
    Drain,
    /// Blue-green: the new generation is watched before the old one is retired.
    Soak,
    /// Blue-green: traffic switched back to the previous generation.
    Revert,
    Retire,
    Rollback,
    /// The swarm service's spec names the deployment's digest (created or
    /// updated once; a replay proves from the spec and its tasks that it happened).
    Update,
    /// Swarm's rollout of that spec, watched to a verdict.
    Converge,
}

fn unknown_step(value: &str) -> UnknownValue {
    UnknownValue::new("pipeline step", value)
}

impl Step {
    /// Steps of the whole deployment, which no engine runs: journaled once, with the empty
    /// target, however many engines the rollout crosses. One resolved digest for all, and
    /// one signature check of it.
    pub(crate) fn is_shared(self) -> bool {
        matches!(self, Self::Resolve | Self::Signature)
    }

    /// The steps before which a stop request is honoured: everything up to the switch.
    /// Until then a failure leaves the previous generation serving (the candidate is
    /// removed, a stopped old generation started again); from the switch on, the
    /// deployment finishes or rolls back on its own.
    pub(crate) fn stoppable(self) -> bool {
        matches!(
            self,
            Self::Resolve
                | Self::Signature
                | Self::Reach
                | Self::Pull
                | Self::Verify
                | Self::Create
                | Self::StopOld
                | Self::Start
                | Self::Health
                | Self::Switch
                | Self::Update
        )
    }
}

/// `deployment_steps.state`: the intent is committed as `started` before the side
/// effect; the result moves it to `succeeded` or `failed`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = UnknownValue, parse_err_fn = unknown_step_state)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Started,
    Succeeded,
    Failed,
}

fn unknown_step_state(value: &str) -> UnknownValue {
    UnknownValue::new("step state", value)
}

/// `deliveries.verdict`: what an authentic delivery led to.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = UnknownValue, parse_err_fn = unknown_verdict)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Queued,
    Ignored,
    /// Every app it matched is pinned by an operator: recorded, not deployed.
    Pinned,
}

fn unknown_verdict(value: &str) -> UnknownValue {
    UnknownValue::new("delivery verdict", value)
}

/// `reconcile_actions.action`: what reconciliation changed on the engine or the queue.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = UnknownValue, parse_err_fn = unknown_reconcile_kind)]
#[serde(rename_all = "snake_case")]
pub enum ReconcileKind {
    RemovedOrphan,
    RequeuedMissing,
    /// A proxy route pointed at a container that is gone.
    RemovedRoute,
    /// The private network of an app that left the config, with nothing attached.
    RemovedNetwork,
    /// The incarnation of an app that left the config, with no container left.
    EndedIncarnation,
}

fn unknown_reconcile_kind(value: &str) -> UnknownValue {
    UnknownValue::new("reconcile action", value)
}

/// `deployment_events.kind`: what a deployment's container did after it started.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = UnknownValue, parse_err_fn = unknown_container_event)]
#[serde(rename_all = "snake_case")]
pub enum ContainerEventKind {
    /// The kernel killed it for using more memory than its limit.
    OomKilled,
    /// The engine restarted it `sampler::RESTART_LOOP` times or more.
    RestartLoop,
}

fn unknown_container_event(value: &str) -> UnknownValue {
    UnknownValue::new("container event", value)
}

impl ContainerEventKind {
    /// The notification event it is announced as (`[[notifications]] events`).
    pub fn event_name(self) -> &'static str {
        match self {
            Self::OomKilled => "container.oom_killed",
            Self::RestartLoop => "container.restart_loop",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T>(all: &[T])
    where
        T: Copy
            + std::fmt::Debug
            + PartialEq
            + std::str::FromStr
            + std::fmt::Display
            + serde::Serialize,
        <T as std::str::FromStr>::Err: std::fmt::Debug,
    {
        for v in all {
            assert_eq!(v.to_string().parse::<T>().unwrap(), *v);
            // serde's name and strum's are one text: a page's JSON and the column agree.
            let json = serde_json::to_string(v).unwrap();
            assert_eq!(json, format!("\"{v}\""));
        }
    }

    #[test]
    fn every_stored_value_round_trips_through_its_text() {
        round_trips(DeploymentState::ALL);
        round_trips(Trigger::ALL);
        round_trips(Step::ALL);
        round_trips(StepState::ALL);
        round_trips(Verdict::ALL);
        round_trips(ReconcileKind::ALL);
        round_trips(ContainerEventKind::ALL);
    }

    #[test]
    fn an_unknown_value_is_an_error_that_names_it() {
        let e = "paused".parse::<DeploymentState>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown deployment state `paused` in the database"
        );
        assert!("Queued".parse::<DeploymentState>().is_err(), "case matters");
        assert!("".parse::<Step>().is_err());
        assert!("deploy".parse::<Trigger>().is_err());
        assert!(serde_json::from_str::<StepState>("\"done\"").is_err());
        assert_eq!(
            serde_json::from_str::<Step>("\"stop_old\"").unwrap(),
            Step::StopOld
        );
    }
}
