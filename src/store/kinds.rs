//! Every enumerated value the database stores, each mapped to its text in exactly one
//! place. Decoding a value the code does not know is an error that names it: a row written
//! by a newer Pier, or by hand, is never silently read as something else.

use sqlx::Postgres;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};

/// A stored text that names no variant of the enum it is read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}` in the database")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: String,
}

/// Declares an enum stored as `text`: `as_str`, `FromStr` (strict), `Display`, serde as
/// the same text, and sqlx encode/decode through those two functions only.
macro_rules! db_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::store::kinds::UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::store::kinds::UnknownValue {
                        kind: $what,
                        value: other.chars().take(64).collect(),
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl sqlx::Type<sqlx::Postgres> for $name {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                $crate::store::kinds::text_type()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                $crate::store::kinds::text_compatible(ty)
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $name {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                Ok($crate::store::kinds::decode_text(value)?.parse::<$name>()?)
            }
        }

        impl sqlx::Encode<'_, sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                $crate::store::kinds::encode_text(self.as_str(), buf)
            }
        }
    };
}

pub fn text_type() -> PgTypeInfo {
    <&str as sqlx::Type<Postgres>>::type_info()
}

pub fn text_compatible(ty: &PgTypeInfo) -> bool {
    <&str as sqlx::Type<Postgres>>::compatible(ty)
}

pub fn decode_text(value: PgValueRef<'_>) -> Result<&str, BoxDynError> {
    <&str as sqlx::Decode<Postgres>>::decode(value)
}

pub fn encode_text(s: &str, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
    <&str as sqlx::Encode<Postgres>>::encode_by_ref(&s, buf)
}

db_enum! {
    /// `deployments.state`. `queued` and `running` are the queue; the rest are final.
    pub enum DeploymentState ("deployment state") {
        Queued = "queued",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Superseded = "superseded",
        Cancelled = "cancelled",
        /// Switched to the new generation, then back: it failed its soak.
        RolledBack = "rolled_back",
        /// Issue 26: held until enough named admins approve it (or it is rejected or expires).
        AwaitingApproval = "awaiting_approval",
        /// Issue 26: held until the app's next deploy window opens or its freeze ends.
        AwaitingWindow = "awaiting_window",
    }
}

impl DeploymentState {
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            Self::Queued | Self::Running | Self::AwaitingApproval | Self::AwaitingWindow
        )
    }

    /// Held by a gate (issue 26): a row in Postgres, no task sleeps for it.
    pub fn is_waiting(self) -> bool {
        matches!(self, Self::AwaitingApproval | Self::AwaitingWindow)
    }
}

db_enum! {
    /// `deployments.trigger`: what asked for the deployment.
    pub enum Trigger ("deployment trigger") {
        Webhook = "webhook",
        Manual = "manual",
        Rollback = "rollback",
        Reconcile = "reconcile",
        /// Issue 26: a digest another app (staging) proved, promoted to this one.
        Promotion = "promotion",
    }
}

impl Trigger {
    /// An operator named what to deploy: it runs even when that digest already serves.
    pub fn is_operator(self) -> bool {
        matches!(self, Self::Manual | Self::Rollback)
    }
}

db_enum! {
    /// `deployment_steps.step`: the pipeline's steps, in the order they run.
    pub enum Step ("pipeline step") {
        Resolve = "resolve",
        /// Issue 25: the resolved digest carries a trusted key's cosign signature.
        Signature = "signature",
        /// Issue 23: a rollout across engines first asks every engine whether it answers,
        /// so that one that is down fails the deployment before any engine changed.
        Reach = "reach",
        Pull = "pull",
        Verify = "verify",
        /// The app's private network exists (issue 10).
        Network = "network",
        /// The app's named volumes are owned (recorded) and exist.
        Volumes = "volumes",
        Create = "create",
        /// The journaled candidate joins the app's shared networks.
        Connect = "connect",
        StopOld = "stop_old",
        Start = "start",
        Health = "health",
        Switch = "switch",
        /// Blue-green: wait until the proxy serves the new route.
        Applied = "applied",
        /// Blue-green: in-flight requests finish on the old generation.
        Drain = "drain",
        /// Blue-green: the new generation is watched before the old one is retired.
        Soak = "soak",
        /// Blue-green: traffic switched back to the previous generation.
        Revert = "revert",
        Retire = "retire",
        Rollback = "rollback",
        /// Issue 24: the swarm service's spec names the deployment's digest (created or
        /// updated once; a replay proves from the spec and its tasks that it happened).
        Update = "update",
        /// Issue 24: Swarm's rollout of that spec, watched to a verdict.
        Converge = "converge",
    }
}

impl Step {
    /// Steps of the whole deployment, which no engine runs: journaled once, with the empty
    /// target, however many engines the rollout crosses. One resolved digest for all, and
    /// one signature check of it (issue 25).
    pub fn is_shared(self) -> bool {
        matches!(self, Self::Resolve | Self::Signature)
    }

    /// The steps before which a stop request is honoured: everything up to the switch.
    /// Until then a failure leaves the previous generation serving (the candidate is
    /// removed, a stopped old generation started again); from the switch on, the
    /// deployment finishes or rolls back on its own.
    pub fn stoppable(self) -> bool {
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

db_enum! {
    /// `deployment_steps.state`: the intent is committed as `started` before the side
    /// effect; the result moves it to `succeeded` or `failed`.
    pub enum StepState ("step state") {
        Started = "started",
        Succeeded = "succeeded",
        Failed = "failed",
    }
}

db_enum! {
    /// `deliveries.verdict`: what an authentic delivery led to.
    pub enum Verdict ("delivery verdict") {
        Queued = "queued",
        Ignored = "ignored",
        /// Every app it matched is pinned by an operator: recorded, not deployed.
        Pinned = "pinned",
    }
}

db_enum! {
    /// `reconcile_actions.action`: what reconciliation changed on the engine or the queue.
    pub enum ReconcileKind ("reconcile action") {
        RemovedOrphan = "removed_orphan",
        RequeuedMissing = "requeued_missing",
        /// A proxy route pointed at a container that is gone.
        RemovedRoute = "removed_route",
        /// The private network of an app that left the config, with nothing attached.
        RemovedNetwork = "removed_network",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T>(all: &[T])
    where
        T: Copy + std::fmt::Debug + PartialEq + std::str::FromStr + std::fmt::Display,
        <T as std::str::FromStr>::Err: std::fmt::Debug,
    {
        for v in all {
            assert_eq!(v.to_string().parse::<T>().unwrap(), *v);
            let json = serde_json::to_string(&v.to_string()).unwrap();
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
