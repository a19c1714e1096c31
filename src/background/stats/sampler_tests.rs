//! The sampler's schedule and its events, on a paused clock, with a source that counts
//! what it is asked (the engine calls are `engine/stats.rs`'s, tested on the real engine).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::engine::{OomKill, Runs, Usage};

/// What a round answers for the one engine, `local`: samples and OOM kills.
type Answer = (Vec<(Who, super::super::Sample, Runs)>, Vec<OomKill>);

#[derive(Clone, Default)]
struct Counting {
    rounds: Arc<AtomicUsize>,
    recorded: Arc<Mutex<Vec<NewContainerEvent>>>,
    answer: Arc<Mutex<Option<Answer>>>,
}

impl Counting {
    fn rounds(&self) -> usize {
        self.rounds.load(Ordering::SeqCst)
    }
}

impl Source for Counting {
    async fn round(&self, _span: &Span) -> Vec<TargetRound> {
        self.rounds.fetch_add(1, Ordering::SeqCst);
        let (seen, ooms) = self.answer.lock().unwrap().clone().unwrap_or_default();
        vec![TargetRound {
            target: "local".into(),
            listed: Ok(Listed {
                ids: seen
                    .iter()
                    .map(|(w, _, _)| w.container_id.clone())
                    .collect(),
                seen,
                ooms: Some(ooms),
                errors: vec![],
            }),
        }]
    }

    async fn record(&self, event: &NewContainerEvent) -> bool {
        self.recorded.lock().unwrap().push(event.clone());
        true
    }
}

const INTERVAL: Duration = Duration::from_secs(10);

fn start(source: &Counting) -> (Stats, CancellationToken, tokio::task::JoinHandle<()>) {
    let stats = Stats::new(INTERVAL);
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(stats.clone(), source.clone(), stop.clone()));
    (stats, stop, task)
}

#[tokio::test(start_paused = true)]
async fn an_idle_sampler_asks_the_engines_nothing() {
    let source = Counting::default();
    let (stats, stop, task) = start(&source);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(source.rounds(), 0, "nobody asked, so no engine was asked");

    // A page view: a round at once, then one per interval while the demand lasts.
    stats.want();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(source.rounds(), 1);
    tokio::time::sleep(INTERVAL * DEMAND_INTERVALS).await;
    let during = source.rounds();
    assert_eq!(during, DEMAND_INTERVALS as usize, "one round per interval");

    // Nobody looks again: not one more call, however long.
    tokio::time::sleep(Duration::from_secs(6 * 3600)).await;
    assert_eq!(source.rounds(), during);

    // A deployment that succeeded is watched for a while without a viewer.
    stats.watch_for(WATCH_AFTER_DEPLOY);
    tokio::time::sleep(WATCH_AFTER_DEPLOY + INTERVAL).await;
    let watched = source.rounds() - during;
    assert_eq!(watched as u32, WATCH_AFTER_DEPLOY.as_secs() as u32 / 10);
    stop.cancel();
    task.await.unwrap();
}

fn of_deployment(id: &str, deployment: Uuid) -> Who {
    Who {
        target: "local".into(),
        app: "web".into(),
        service: "web".into(),
        container_id: id.into(),
        container_name: format!("web-{id}"),
        deployment: Some(deployment.to_string()),
    }
}

#[tokio::test(start_paused = true)]
async fn an_oom_kill_and_a_restart_loop_are_each_recorded_once_for_their_deployment() {
    let source = Counting::default();
    let deployment = Uuid::new_v4();
    let looping = of_deployment("c1", deployment);
    let sample = super::super::Sample {
        at: Utc::now(),
        usage: Usage::default(),
        restarts: RESTART_LOOP,
    };
    let runs = Runs {
        restarts: RESTART_LOOP,
        oom_killed: false,
    };
    let oom = OomKill {
        container_id: "c2".into(),
        at: Utc::now(),
        labels: HashMap::from([
            ("pier.app".to_owned(), "web".to_owned()),
            ("pier.deployment".to_owned(), deployment.to_string()),
            ("name".to_owned(), "web-c2".to_owned()),
        ]),
    };
    // A container no deployment made (started by hand with Pier's labels) says nothing.
    let by_hand = Who {
        deployment: None,
        ..of_deployment("c3", deployment)
    };
    *source.answer.lock().unwrap() = Some((
        vec![(looping, sample, runs), (by_hand, sample, runs)],
        vec![oom],
    ));
    let (stats, stop, task) = start(&source);
    stats.want();
    tokio::time::sleep(INTERVAL * 3).await;
    assert!(source.rounds() >= 3);
    let recorded = source.recorded.lock().unwrap().clone();
    let kinds: Vec<(ContainerEventKind, &str)> = recorded
        .iter()
        .map(|e| (e.kind, e.container_name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (ContainerEventKind::OomKilled, "web-c2"),
            (ContainerEventKind::RestartLoop, "web-c1")
        ]
    );
    assert!(recorded.iter().all(|e| e.deployment_id == deployment));
    assert_eq!(recorded[1].restarts, Some(RESTART_LOOP));
    stop.cancel();
    task.await.unwrap();
}
