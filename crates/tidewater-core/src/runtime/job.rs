//! A built pipeline ([`Job`]): started, restarted after retryable errors,
//! and run once from restore to its ending.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::config::JobConfig;
use super::coordinator::{Coordinator, Ending, Trigger};
use super::describe::{describe, fingerprint, keyed_operator};
use super::handle::{JobControl, JobHandle, Outcome, Stop, Summary};
use super::progress::Progress;
use super::rescale::{Rescale, rescale, state_keys};
use super::restore::{RestoreResult, restore};
use super::wiring::{Setup, context, wire};
use crate::checkpoint::StateStore;
use crate::error::{Error, Result};
use crate::events::{
    InternalEvent, JobCompleted, JobFenced, JobRestarting, JobStarting, KeyGroupsKept,
    RetentionFailed,
};
use crate::ids::CheckpointId;
use crate::operator::Operator;
use crate::pipeline::graph::{ChainPlan, Node, NodeBody};
use crate::sink::Sink;

/// A pipeline ready to run: built by [`Pipeline::build`](crate::Pipeline::build).
pub struct Job {
    pub(crate) name: String,
    pub(crate) nodes: Vec<Node>,
    pub(crate) parallelism: Vec<usize>,
    pub(crate) chains: Vec<ChainPlan>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chains: Vec<Vec<&str>> = self
            .chains
            .iter()
            .map(|c| {
                c.nodes
                    .iter()
                    .map(|n| self.nodes[*n].uid.as_str())
                    .collect()
            })
            .collect();
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("chains", &chains)
            .field("parallelism", &self.parallelism)
            .finish()
    }
}

impl Job {
    pub(crate) fn new(name: String, default_parallelism: usize, nodes: Vec<Node>) -> Result<Self> {
        let shapes: Vec<_> = nodes.iter().map(Node::shape).collect();
        let plan = crate::pipeline::plan::plan(&shapes, default_parallelism);
        let mut nodes = nodes;
        for (id, (node, inputs)) in nodes.iter_mut().zip(plan.inputs).enumerate() {
            node.inputs = inputs;
            if plan.single_subtask_form[id]
                && let Some(body) = node.single_subtask_form.take()
            {
                node.body = NodeBody::Operator(body);
            }
        }
        let (parallelism, chains) = (plan.parallelism, plan.chains);
        Ok(Job {
            name,
            nodes,
            parallelism,
            chains,
        })
    }

    /// The job's name (its folder in the state store).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the job to its end on the current tokio runtime.
    pub async fn run(self, config: JobConfig) -> Result<Outcome> {
        self.start(config).join().await
    }

    /// Starts the job on the current tokio runtime.
    pub fn start(self, config: JobConfig) -> JobHandle {
        let progress = Arc::new(Progress::new(0));
        let (cancel, cancel_rx) = watch::channel(Stop::No);
        let join = tokio::spawn(run(self, config, progress.clone(), cancel_rx));
        JobHandle {
            control: JobControl {
                progress,
                cancel: Arc::new(cancel),
            },
            join,
        }
    }
}

/// Runs the job, restarting it from its last checkpoint after a retryable
/// error (a dropped connection, a storage hiccup) up to `max_restarts` times.
async fn run(
    job: Job,
    config: JobConfig,
    progress: Arc<Progress>,
    cancel: watch::Receiver<Stop>,
) -> Result<Outcome> {
    if let Some(why) = config.refused.first() {
        return Err(Error::InvalidConfig(why.clone()));
    }
    let mut restarts = 0;
    loop {
        match run_once(&job, &config, progress.clone(), cancel.clone()).await {
            Err(error) if error.is_retryable() && restarts < config.max_restarts => {
                restarts += 1;
                let backoff = config.restart_backoff * 2u32.pow(restarts - 1);
                JobRestarting {
                    job: &job.name,
                    error: &error,
                    restart: restarts,
                    of: config.max_restarts,
                    backoff,
                }
                .emit();
                tokio::time::sleep(backoff).await;
            }
            Err(error) => {
                if let Some((mine, newer)) = error.fenced_epochs() {
                    JobFenced {
                        job: &job.name,
                        mine: mine.0,
                        newer: newer.0,
                    }
                    .emit();
                }
                return Err(error);
            }
            Ok(outcome) => return Ok(outcome),
        }
    }
}

async fn run_once(
    job: &Job,
    config: &JobConfig,
    progress: Arc<Progress>,
    cancel: watch::Receiver<Stop>,
) -> Result<Outcome> {
    let store = StateStore::new(&config.state, &job.name);
    let epoch = match &config.lease {
        Some(lease) => {
            lease.check()?;
            store.claim_exact_epoch(lease.epoch()).await?
        }
        None => store.claim_epoch().await?,
    };
    // Empty folders cost every later listing, not correctness.
    if let Err(error) = store.sweep_empty_folders().await {
        RetentionFailed {
            job: &job.name,
            error: &error,
        }
        .emit();
    }
    JobStarting {
        job: &job.name,
        epoch: epoch.0,
        state: &config.state.display,
    }
    .emit();

    // One operator instance per subtask, created up front: a failing factory
    // fails the job before anything runs.
    let mut operators: HashMap<usize, Vec<Box<dyn Operator>>> = HashMap::new();
    for (id, node) in job.nodes.iter().enumerate() {
        if let NodeBody::Operator(factory) = &node.body {
            let mut instances = Vec::new();
            for subtask in 0..job.parallelism[id] {
                let ctx = context(job, id, subtask, epoch);
                instances.push(factory(&ctx).map_err(|e| e.in_operator(&node.uid, subtask))?);
            }
            operators.insert(id, instances);
        }
    }
    let records = describe(job, &operators);
    let sinks: HashMap<String, Arc<dyn Sink>> = job
        .nodes
        .iter()
        .filter_map(|n| match &n.body {
            NodeBody::Sink(sink) => Some((n.uid.clone(), sink.clone())),
            _ => None,
        })
        .collect();

    let keyed = keyed_operator(job, &records);
    let keys_by_node = state_keys(&operators);
    let keys_by_uid: HashMap<String, Vec<String>> = keys_by_node
        .iter()
        .map(|(id, keys)| (job.nodes[*id].uid.clone(), keys.clone()))
        .collect();
    let restored = restore(
        &store,
        &records,
        &sinks,
        config.restore,
        keyed,
        &keys_by_uid,
    );
    let mut restored = match restored.await? {
        RestoreResult::AlreadyComplete(checkpoint) => {
            JobCompleted::AlreadyComplete {
                job: &job.name,
                checkpoint: checkpoint.0,
            }
            .emit();
            return Ok(Outcome::AlreadyComplete { checkpoint });
        }
        RestoreResult::Run(restored) => restored,
    };
    let key_groups = crate::partition::key_groups_for_run(restored.key_groups, config.key_groups);
    if key_groups != config.key_groups {
        KeyGroupsKept {
            job: &job.name,
            kept: key_groups,
            configured: config.key_groups,
        }
        .emit();
    }
    // Before the sinks clean up: a sink that moves its writers' state may
    // need the staged work that state refers to.
    let plan = Rescale {
        job,
        state_keys: keys_by_node,
        epoch,
        key_groups,
    };
    rescale(plan, &mut restored).await?;
    for (uid, sink) in &sinks {
        sink.abort_uncommitted(&job.name, uid)
            .await
            .map_err(|e| e.in_operator(uid, 0))?;
    }
    progress.set_baseline(
        restored.rows_read,
        restored.checkpoint.map(|c| c.0),
        restored.fallbacks.len(),
    );

    let setup = Setup {
        job,
        config,
        store: &store,
        restored: &restored,
        progress: progress.clone(),
        sinks: &sinks,
        epoch,
        key_groups,
    };
    let wiring = wire(&setup, operators).await?;
    let coordinator = Coordinator {
        store,
        epoch,
        fingerprint: fingerprint(job, &records),
        operators: records,
        sinks,
        controls: wiring.controls,
        events: wiring.events,
        tasks: wiring.tasks,
        task_count: wiring.task_count,
        trigger: Trigger {
            interval: config.interval,
            every_rows: config.every_rows,
        },
        retain: config.retain,
        key_groups,
        next_id: restored.next_id,
        rows_before_run: restored.rows_read,
        progress: progress.clone(),
        cancel,
        lease: config.lease.clone(),
        last_completed: restored.checkpoint,
        committing: None,
        previous_blobs: None,
        references: Default::default(),
    };
    let ending = coordinator.run().await?;
    let summary = |last| Summary {
        restored_from: restored.checkpoint,
        last_checkpoint: last,
        epoch,
        rows_restored: restored.rows_read,
        progress: progress.snapshot(),
        checkpoints: progress.checkpoint_history(),
        fallbacks: restored.fallbacks.clone(),
    };
    Ok(match ending {
        Ending::Completed { last } => {
            JobCompleted::Complete {
                job: &job.name,
                checkpoint: last.0,
            }
            .emit();
            Outcome::Completed(summary(last))
        }
        Ending::Cancelled { savepoint } => {
            JobCompleted::Cancelled {
                job: &job.name,
                savepoint: savepoint.0,
            }
            .emit();
            Outcome::Cancelled {
                savepoint,
                summary: summary(savepoint),
            }
        }
        Ending::Discarded { last } => {
            JobCompleted::Discarded {
                job: &job.name,
                resumes_from: last.map(|c| c.0),
            }
            .emit();
            Outcome::Discarded {
                resumes_from: last,
                summary: summary(last.unwrap_or(CheckpointId(0))),
            }
        }
    })
}
