//! Wiring a run: channels between chains, one task per chain subtask, and
//! the sources' splits with their restored cursors.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::chain::{ChainedOperator, OperatorChain};
use super::config::JobConfig;
use super::input_gate::InputGate;
use super::job::Job;
use super::message::Message;
use super::output::{Output, Route};
use super::progress::Progress;
use super::restore::Restored;
use super::task::{SourceTask, SplitState, Tail, TaskCore, run_input_task};
use crate::checkpoint::StateStore;
use crate::checkpoint::incremental::ChainLength;
use crate::checkpoint::restore::check_splits;
use crate::error::{Error, Result};
use crate::events::{InternalEvent, OperatorMeter, SourceStartsOver};
use crate::ids::Epoch;
use crate::operator::{Operator, TaskContext};
use crate::pipeline::Partitioning;
use crate::pipeline::graph::NodeBody;
use crate::sink::Sink;

pub(crate) fn context(job: &Job, node: usize, subtask: usize, epoch: Epoch) -> TaskContext {
    TaskContext {
        job: job.name.as_str().into(),
        uid: job.nodes[node].uid.as_str().into(),
        subtask,
        parallelism: job.parallelism[node],
        epoch,
    }
}

pub(crate) struct Wiring {
    pub(crate) controls: Vec<mpsc::UnboundedSender<super::task::Control>>,
    pub(crate) events: mpsc::UnboundedReceiver<super::task::Event>,
    pub(crate) tasks: JoinSet<Result<()>>,
    pub(crate) task_count: usize,
}

/// What wiring a run needs.
pub(crate) struct Setup<'a> {
    pub(crate) job: &'a Job,
    pub(crate) config: &'a JobConfig,
    pub(crate) store: &'a StateStore,
    pub(crate) restored: &'a Restored,
    pub(crate) progress: Arc<Progress>,
    pub(crate) sinks: &'a HashMap<String, Arc<dyn Sink>>,
    pub(crate) epoch: Epoch,
    /// The job's key groups (its manifest's, or the configured count).
    pub(crate) key_groups: u32,
}

/// Whether a stateful operator tracks its changes for incremental
/// checkpoints; one that says so without one row per key is refused.
fn tracks_changes(operator: &mut dyn Operator, uid: &str) -> Result<bool> {
    if operator.state_version().is_none() || !operator.track_changes() {
        return Ok(false);
    }
    if operator.state_keys().is_none() {
        return Err(Error::InvalidPipeline(format!(
            "operator '{uid}' (kind '{}') tracks its changes for incremental checkpoints \
             (Operator::track_changes) but does not name its state's key columns \
             (Operator::state_keys): a delta can only be applied by key; return the key \
             columns, or false from track_changes",
            operator.kind()
        )));
    }
    Ok(true)
}

/// Creates the channels between chains and spawns one task per chain subtask.
pub(crate) async fn wire(
    setup: &Setup<'_>,
    mut operators: HashMap<usize, Vec<Box<dyn Operator>>>,
) -> Result<Wiring> {
    let Setup {
        job,
        config,
        store,
        restored,
        sinks,
        epoch,
        key_groups,
        ..
    } = *setup;
    let progress = setup.progress.clone();
    // Per chain: the receivers of each subtask, and for each upstream chain the
    // senders it uses to reach them.
    let mut receivers: Vec<Vec<Vec<mpsc::Receiver<Message>>>> = job
        .chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
        .collect();
    // routes[upstream chain][upstream subtask] = routes out of it.
    let mut routes: Vec<Vec<Vec<Route>>> = job
        .chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
        .collect();
    for (down, chain) in job.chains.iter().enumerate() {
        for (up, partitioning) in &chain.inputs {
            for (up_subtask, up_routes) in routes[*up].iter_mut().enumerate() {
                let route = if *partitioning == Partitioning::Forward {
                    // Subtask i feeds subtask i only.
                    let (tx, rx) = mpsc::channel(config.channel_capacity);
                    receivers[down][up_subtask].push(rx);
                    Route::new(partitioning, vec![tx], 0, key_groups)?
                } else {
                    let mut senders = Vec::with_capacity(chain.parallelism);
                    for inbox in receivers[down].iter_mut() {
                        let (tx, rx) = mpsc::channel(config.channel_capacity);
                        inbox.push(rx);
                        senders.push(tx);
                    }
                    Route::new(partitioning, senders, up_subtask, key_groups)?
                };
                up_routes.push(route);
            }
        }
    }

    let (events_tx, events) = mpsc::unbounded_channel();
    let mut controls = Vec::new();
    let mut tasks = JoinSet::new();
    let mut task_count = 0;
    let mut rows_total = 0u64;
    for (c, chain) in job.chains.iter().enumerate() {
        let head = chain.nodes[0];
        let last = *chain.nodes.last().expect("chains are not empty");
        // Sources: assign splits round-robin, with their restored cursors.
        let splits = match &job.nodes[head].body {
            NodeBody::Source(source) => {
                Some(assign_splits(job, head, source.as_ref(), restored).await?)
            }
            _ => None,
        };
        if let Some(all) = &splits {
            let total: u64 = all
                .iter()
                .flatten()
                .filter_map(|s| s.split.estimated_rows)
                .sum();
            rows_total += total;
        }
        for subtask in (0..chain.parallelism).rev() {
            let mut chained = Vec::new();
            for node in &chain.nodes {
                if let Some(instances) = operators.get_mut(node) {
                    let uid: Arc<str> = job.nodes[*node].uid.as_str().into();
                    let mut operator = instances.pop().expect("one instance per subtask");
                    if let Some(state) = restored.operator_state.get(&(uid.to_string(), subtask)) {
                        operator
                            .restore(state.clone())
                            .map_err(|e| e.in_operator(&uid, subtask))?;
                    }
                    let incremental = match config.incremental() {
                        Some(policy) if tracks_changes(&mut *operator, &uid)? => {
                            Some((policy, ChainLength::default()))
                        }
                        _ => None,
                    };
                    let meter = OperatorMeter::new(&job.name, &uid, subtask);
                    chained.push(ChainedOperator {
                        uid,
                        operator,
                        meter,
                        incremental,
                    });
                }
            }
            let tail = match &job.nodes[last].body {
                NodeBody::Sink(_) => {
                    let uid = job.nodes[last].uid.clone();
                    let ctx = context(job, last, subtask, epoch);
                    let writer = match restored.operator_state.get(&(uid.clone(), subtask)) {
                        Some(state) => sinks[&uid].resume_writer(&ctx, state.clone()).await,
                        None => sinks[&uid].open_writer(&ctx).await,
                    }
                    .map_err(|e| e.in_operator(&uid, subtask))?;
                    Tail::Sink {
                        meter: OperatorMeter::new(&job.name, &uid, subtask),
                        uid: uid.as_str().into(),
                        writer,
                    }
                }
                _ => Tail::Channels(Output::new(std::mem::take(&mut routes[c][subtask]))),
            };
            let routing = match &tail {
                Tail::Channels(output) => output.key_routing(),
                Tail::Sink { .. } => None,
            };
            let core = TaskCore {
                chain: OperatorChain::new(chained, subtask, routing),
                tail,
                store: store.clone(),
                events: events_tx.clone(),
                progress: progress.clone(),
            };
            task_count += 1;
            // Every log line of the task carries where it came from.
            let span = tracing::info_span!(
                "task",
                job = %job.name,
                uid = %job.nodes[head].uid,
                subtask,
            );
            match (&job.nodes[head].body, &splits) {
                (NodeBody::Source(source), Some(all)) => {
                    let (control_tx, control_rx) = mpsc::unbounded_channel();
                    controls.push(control_tx);
                    let task = SourceTask {
                        context: context(job, head, subtask, epoch),
                        meter: OperatorMeter::new(&job.name, &job.nodes[head].uid, subtask),
                        uid: job.nodes[head].uid.as_str().into(),
                        throttles: job.nodes[head].throttles.clone(),
                        source: source.clone(),
                        splits: all[subtask].clone(),
                        control: control_rx,
                        core,
                    };
                    tasks.spawn(task.run().instrument(span));
                }
                _ => {
                    let gate = InputGate::new(std::mem::take(&mut receivers[c][subtask]));
                    tasks.spawn(run_input_task(core, gate).instrument(span));
                }
            }
        }
    }
    progress.set_total(rows_total);
    Ok(Wiring {
        controls,
        events,
        tasks,
        task_count,
    })
}

/// The splits of each source subtask (split j goes to subtask j % parallelism),
/// with cursors from the checkpoint. A checkpoint whose splits differ from the
/// source's is refused: its cursors would point into other data.
async fn assign_splits(
    job: &Job,
    node: usize,
    source: &dyn crate::source::Source,
    restored: &Restored,
) -> Result<Vec<Vec<SplitState>>> {
    let uid = &job.nodes[node].uid;
    let parallelism = job.parallelism[node];
    let empty = BTreeMap::new();
    let cursors = restored.cursors.get(uid).unwrap_or(&empty);
    let checkpointed: Vec<String> = cursors.keys().cloned().collect();
    let resumed = match restored.checkpoint.filter(|_| !cursors.is_empty()) {
        Some(_) => source
            .resume_splits(&checkpointed)
            .await
            .map_err(|e| e.in_operator(uid, 0))?,
        None => None,
    };
    let rebuilt = resumed.is_some();
    let splits = match resumed {
        Some(splits) => splits,
        None => source.splits().await.map_err(|e| e.in_operator(uid, 0))?,
    };
    if let Some(checkpoint) = restored
        .checkpoint
        .filter(|_| !cursors.is_empty() && !rebuilt)
    {
        let now: Vec<&str> = splits.iter().map(|s| s.id.as_str()).collect();
        let then: Vec<&str> = cursors.keys().map(String::as_str).collect();
        check_splits(uid, checkpoint, &then, &now)?;
    } else if restored.checkpoint.is_some() && cursors.is_empty() {
        SourceStartsOver {
            job: &job.name,
            uid,
        }
        .emit();
    }
    let mut assigned: Vec<Vec<SplitState>> = (0..parallelism).map(|_| Vec::new()).collect();
    for (j, split) in splits.into_iter().enumerate() {
        let (cursor, done) = cursors.get(&split.id).cloned().unwrap_or((None, false));
        assigned[j % parallelism].push(SplitState {
            split,
            cursor,
            done,
        });
    }
    Ok(assigned)
}
