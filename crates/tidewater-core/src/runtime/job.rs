//! A built pipeline ([`Job`]): how it is configured, started, watched and cancelled.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::chain::{ChainedOperator, OperatorChain};
use super::coordinator::{Coordinator, Ending, Trigger};
use super::input_gate::InputGate;
use super::message::Message;
use super::output::{Output, Route};
use super::progress::{CheckpointStats, Progress, ProgressSnapshot};
use super::restore::{RestoreResult, Restored, restore};
use super::task::{SourceTask, SplitState, Tail, TaskCore, run_input_task};
use crate::checkpoint::StateStore;
use crate::checkpoint::manifest::OperatorRecord;
use crate::checkpoint::manifest::Role;
use crate::checkpoint::restore::{RestoreOptions, check_splits};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, Epoch};
use crate::operator::{Operator, TaskContext};
use crate::pipeline::Partitioning;
use crate::pipeline::graph::{ChainPlan, Node, NodeBody, plan_chains};
use crate::sink::Sink;
use crate::store_url::{StoreLocation, open_location};

/// How a job runs: where its state lives and when it checkpoints.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tidewater_core::JobConfig;
///
/// let config = JobConfig::new("memory://")
///     .unwrap()
///     .checkpoint_interval(Some(Duration::from_secs(10)))
///     .retain(3);
/// assert_eq!(config.interval(), Some(Duration::from_secs(10)));
/// ```
#[derive(Debug, Clone)]
pub struct JobConfig {
    state: StoreLocation,
    interval: Option<Duration>,
    every_rows: Option<u64>,
    retain: usize,
    channel_capacity: usize,
    restore: RestoreOptions,
    max_restarts: u32,
    restart_backoff: Duration,
}

impl JobConfig {
    /// State under `location`: a local folder, `file://` or `memory://` URL.
    /// Defaults: a checkpoint every 10 s, the last 3 kept.
    pub fn new(location: &str) -> Result<Self> {
        Ok(Self::with_location(open_location(location)?))
    }

    /// State in an already opened store.
    pub fn with_location(state: StoreLocation) -> Self {
        JobConfig {
            state,
            interval: Some(Duration::from_secs(10)),
            every_rows: None,
            retain: 3,
            channel_capacity: 4,
            restore: RestoreOptions::default(),
            max_restarts: 3,
            restart_backoff: Duration::from_secs(1),
        }
    }

    /// Time between checkpoints; `None` turns periodic checkpoints off (a
    /// final checkpoint and savepoints are still taken).
    pub fn checkpoint_interval(mut self, interval: Option<Duration>) -> Self {
        self.interval = interval;
        self
    }

    /// Also checkpoint after this many rows read since the last trigger.
    pub fn checkpoint_every_rows(mut self, rows: Option<u64>) -> Self {
        self.every_rows = rows.filter(|r| *r > 0);
        self
    }

    /// How many completed checkpoints to keep (at least 1; default 3).
    pub fn retain(mut self, checkpoints: usize) -> Self {
        self.retain = checkpoints.max(1);
        self
    }

    /// Batches buffered per channel (default 4): the backpressure window.
    pub fn channel_capacity(mut self, batches: usize) -> Self {
        self.channel_capacity = batches.max(1);
        self
    }

    /// How often the job restarts itself from its last checkpoint after a
    /// retryable error (default 3; 0 fails at once). Waits `backoff`, doubling
    /// each time (default 1 s).
    pub fn restarts(mut self, max: u32, backoff: Duration) -> Self {
        self.max_restarts = max;
        self.restart_backoff = backoff;
        self
    }

    /// Which pipeline changes a restore accepts.
    pub fn restore_options(mut self, options: RestoreOptions) -> Self {
        self.restore = options;
        self
    }

    /// The periodic interval.
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// Where state lives.
    pub fn state_location(&self) -> &StoreLocation {
        &self.state
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// All input was processed and the final checkpoint committed.
    Completed(Summary),
    /// The state shows the job completed in an earlier run; nothing was done.
    AlreadyComplete {
        /// The final checkpoint.
        checkpoint: CheckpointId,
    },
    /// Cancelled at a savepoint; running the job again resumes from it.
    Cancelled {
        /// The savepoint.
        savepoint: CheckpointId,
        /// What this run did.
        summary: Summary,
    },
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The checkpoint this run resumed from.
    pub restored_from: Option<CheckpointId>,
    /// The last checkpoint of this run.
    pub last_checkpoint: CheckpointId,
    /// The worker's epoch.
    pub epoch: Epoch,
    /// Rows the sources had read at the restored checkpoint (0 without one).
    pub rows_restored: u64,
    /// Counters at the end.
    pub progress: ProgressSnapshot,
    /// Every checkpoint of this run, oldest first.
    pub checkpoints: Vec<CheckpointStats>,
}

/// A pipeline ready to run: built by [`Pipeline::build`](crate::Pipeline::build).
pub struct Job {
    name: String,
    nodes: Vec<Node>,
    parallelism: Vec<usize>,
    chains: Vec<ChainPlan>,
}

/// A running job.
pub struct JobHandle {
    control: JobControl,
    join: tokio::task::JoinHandle<Result<Outcome>>,
}

/// Watches and cancels a running job; cheap to clone and keep while
/// [`JobHandle::join`] is awaited.
#[derive(Debug, Clone)]
pub struct JobControl {
    progress: Arc<Progress>,
    cancel: Arc<watch::Sender<bool>>,
}

impl JobControl {
    /// Live counters.
    pub fn progress(&self) -> ProgressSnapshot {
        self.progress.snapshot()
    }

    /// Asks the job to take a savepoint and stop. Returns at once;
    /// [`JobHandle::join`] returns [`Outcome::Cancelled`] once the savepoint is complete.
    pub fn cancel(&self) {
        let _ = self.cancel.send(true);
    }
}

impl JobHandle {
    /// A control for watching and cancelling the job.
    pub fn control(&self) -> JobControl {
        self.control.clone()
    }

    /// Live counters.
    pub fn progress(&self) -> ProgressSnapshot {
        self.control.progress()
    }

    /// Asks the job to take a savepoint and stop (see [`JobControl::cancel`]).
    pub fn cancel(&self) {
        self.control.cancel()
    }

    /// Waits for the job to end.
    pub async fn join(self) -> Result<Outcome> {
        self.join
            .await
            .map_err(|e| Error::Internal(format!("the job task panicked: {e}")))?
    }
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
        // In insertion order: a node that follows another's parallelism comes after it.
        let mut parallelism: Vec<usize> = Vec::with_capacity(nodes.len());
        for node in &nodes {
            let inherited = node.parallelism_of.map(|of| parallelism[of]);
            parallelism.push(
                node.parallelism
                    .or(inherited)
                    .unwrap_or(default_parallelism),
            );
        }
        // A forward edge between unequal parallelism becomes round-robin.
        let mut nodes = nodes;
        for id in 0..nodes.len() {
            for e in 0..nodes[id].inputs.len() {
                let from = nodes[id].inputs[e].from;
                if nodes[id].inputs[e].partitioning == Partitioning::Forward
                    && parallelism[from] != parallelism[id]
                {
                    nodes[id].inputs[e].partitioning = Partitioning::Rebalance;
                }
            }
        }
        // One subtask feeding one subtask: the shuffle is chained away, and
        // a pre-aggregation there would only aggregate twice in one task.
        for id in 0..nodes.len() {
            let alone = parallelism[id] == 1
                && nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.inputs.iter().any(|e| e.from == id))
                    .all(|(consumer, _)| parallelism[consumer] == 1);
            if alone && let Some(body) = nodes[id].single_subtask_body.take() {
                nodes[id].body = NodeBody::Operator(body);
            }
        }
        let chains = plan_chains(&nodes, &parallelism);
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
        let (cancel, cancel_rx) = watch::channel(false);
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

/// The records the manifest keeps per operator.
fn describe(job: &Job, operators: &HashMap<usize, Vec<Box<dyn Operator>>>) -> Vec<OperatorRecord> {
    job.nodes
        .iter()
        .enumerate()
        .map(|(id, node)| {
            let (role, kind, state_version) = match &node.body {
                NodeBody::Source(source) => (Role::Source, source.kind().to_string(), Some(1)),
                NodeBody::Sink(sink) => (Role::Sink, sink.kind().to_string(), sink.state_version()),
                NodeBody::Operator(_) => {
                    let first = &operators[&id][0];
                    (
                        Role::Operator,
                        first.kind().to_string(),
                        first.state_version(),
                    )
                }
            };
            OperatorRecord {
                uid: node.uid.clone(),
                role,
                kind,
                state_version,
                parallelism: job.parallelism[id],
            }
        })
        .collect()
}

/// An operator whose state depends on where the partitioner sends each key:
/// a stateful one reading a hash-partitioned input over several subtasks.
fn keyed_operator<'a>(job: &Job, records: &'a [OperatorRecord]) -> Option<&'a str> {
    job.nodes
        .iter()
        .zip(records)
        .enumerate()
        .find(|(id, (node, record))| {
            record.state_version.is_some()
                && job.parallelism[*id] > 1
                && node
                    .inputs
                    .iter()
                    .any(|e| matches!(e.partitioning, Partitioning::Hash(_)))
        })
        .map(|(_, (_, record))| record.uid.as_str())
}

/// A stable hash of the pipeline's shape (operators and edges) over a
/// canonical encoding: strings as a little-endian u64 length and their
/// bytes, numbers as little-endian u64s, hashed with XXH3-64. Unlike a hash
/// of `Debug` output it changes only when the pipeline does.
fn fingerprint(job: &Job, records: &[OperatorRecord]) -> String {
    fn text(bytes: &mut Vec<u8>, s: &str) {
        bytes.extend_from_slice(&(s.len() as u64).to_le_bytes());
        bytes.extend_from_slice(s.as_bytes());
    }
    fn number(bytes: &mut Vec<u8>, n: u64) {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    let mut bytes = Vec::new();
    number(&mut bytes, records.len() as u64);
    for record in records {
        text(&mut bytes, &record.uid);
        number(&mut bytes, record.role as u64);
        text(&mut bytes, &record.kind);
        number(
            &mut bytes,
            record.state_version.map_or(0, |v| u64::from(v) + 1),
        );
        number(&mut bytes, record.parallelism as u64);
    }
    for node in &job.nodes {
        for edge in &node.inputs {
            text(&mut bytes, &job.nodes[edge.from].uid);
            text(&mut bytes, &node.uid);
            match &edge.partitioning {
                Partitioning::Forward => number(&mut bytes, 0),
                Partitioning::Rebalance => number(&mut bytes, 1),
                Partitioning::Hash(columns) => {
                    number(&mut bytes, 2);
                    number(&mut bytes, columns.len() as u64);
                    for column in columns {
                        text(&mut bytes, column);
                    }
                }
            }
        }
    }
    format!("{:016x}", twox_hash::XxHash3_64::oneshot(&bytes))
}

/// Runs the job, restarting it from its last checkpoint after a retryable
/// error (a dropped connection, a storage hiccup) up to `max_restarts` times.
async fn run(
    job: Job,
    config: JobConfig,
    progress: Arc<Progress>,
    cancel: watch::Receiver<bool>,
) -> Result<Outcome> {
    let mut restarts = 0;
    loop {
        match run_once(&job, &config, progress.clone(), cancel.clone()).await {
            Err(error) if error.is_retryable() && restarts < config.max_restarts => {
                restarts += 1;
                let backoff = config.restart_backoff * 2u32.pow(restarts - 1);
                warn!(
                    error = %error,
                    restart = restarts,
                    of = config.max_restarts,
                    backoff_ms = backoff.as_millis() as u64,
                    "job failed with a retryable error; restarting from the last checkpoint"
                );
                tokio::time::sleep(backoff).await;
            }
            result => return result,
        }
    }
}

async fn run_once(
    job: &Job,
    config: &JobConfig,
    progress: Arc<Progress>,
    cancel: watch::Receiver<bool>,
) -> Result<Outcome> {
    let store = StateStore::new(&config.state, &job.name);
    let epoch = store.claim_epoch().await?;
    info!(job = %job.name, epoch = epoch.0, state = %config.state.display, "job starting");

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
    let restored = match restore(&store, &records, &sinks, config.restore, keyed).await? {
        RestoreResult::AlreadyComplete(checkpoint) => {
            info!(
                checkpoint = checkpoint.0,
                "the job already completed; nothing to do"
            );
            return Ok(Outcome::AlreadyComplete { checkpoint });
        }
        RestoreResult::Run(restored) => restored,
    };
    for (uid, sink) in &sinks {
        sink.abort_uncommitted(&job.name, uid)
            .await
            .map_err(|e| e.in_operator(uid, 0))?;
    }
    progress.set_baseline(restored.rows_read, restored.checkpoint.map_or(0, |c| c.0));

    let setup = Setup {
        job,
        config,
        store: &store,
        restored: &restored,
        progress: progress.clone(),
        sinks: &sinks,
        epoch,
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
        next_id: restored.next_id,
        rows_before_run: restored.rows_read,
        progress: progress.clone(),
        cancel,
    };
    let ending = coordinator.run().await?;
    let summary = |last| Summary {
        restored_from: restored.checkpoint,
        last_checkpoint: last,
        epoch,
        rows_restored: restored.rows_read,
        progress: progress.snapshot(),
        checkpoints: progress.checkpoint_history(),
    };
    Ok(match ending {
        Ending::Completed { last } => {
            info!(checkpoint = last.0, "job complete");
            Outcome::Completed(summary(last))
        }
        Ending::Cancelled { savepoint } => {
            info!(savepoint = savepoint.0, "job cancelled at a savepoint");
            Outcome::Cancelled {
                savepoint,
                summary: summary(savepoint),
            }
        }
    })
}

fn context(job: &Job, node: usize, subtask: usize, epoch: Epoch) -> TaskContext {
    TaskContext {
        job: job.name.as_str().into(),
        uid: job.nodes[node].uid.as_str().into(),
        subtask,
        parallelism: job.parallelism[node],
        epoch,
    }
}

struct Wiring {
    controls: Vec<mpsc::UnboundedSender<super::task::Control>>,
    events: mpsc::UnboundedReceiver<super::task::Event>,
    tasks: JoinSet<Result<()>>,
    task_count: usize,
}

/// What wiring a run needs.
struct Setup<'a> {
    job: &'a Job,
    config: &'a JobConfig,
    store: &'a StateStore,
    restored: &'a Restored,
    progress: Arc<Progress>,
    sinks: &'a HashMap<String, Arc<dyn Sink>>,
    epoch: Epoch,
}

/// Creates the channels between chains and spawns one task per chain subtask.
async fn wire(
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
                    Route::new(partitioning, vec![tx], 0)
                } else {
                    let mut senders = Vec::with_capacity(chain.parallelism);
                    for inbox in receivers[down].iter_mut() {
                        let (tx, rx) = mpsc::channel(config.channel_capacity);
                        inbox.push(rx);
                        senders.push(tx);
                    }
                    Route::new(partitioning, senders, up_subtask)
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
                    chained.push(ChainedOperator { uid, operator });
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
                        uid: uid.as_str().into(),
                        writer,
                    }
                }
                _ => Tail::Channels(Output::new(std::mem::take(&mut routes[c][subtask]))),
            };
            let core = TaskCore {
                chain: OperatorChain {
                    operators: chained,
                    subtask,
                },
                tail,
                store: store.clone(),
                events: events_tx.clone(),
                progress: progress.clone(),
            };
            task_count += 1;
            match (&job.nodes[head].body, &splits) {
                (NodeBody::Source(source), Some(all)) => {
                    let (control_tx, control_rx) = mpsc::unbounded_channel();
                    controls.push(control_tx);
                    let task = SourceTask {
                        uid: job.nodes[head].uid.as_str().into(),
                        throttles: job.nodes[head].throttles.clone(),
                        source: source.clone(),
                        splits: all[subtask].clone(),
                        control: control_rx,
                        core,
                    };
                    tasks.spawn(task.run());
                }
                _ => {
                    let gate = InputGate::new(std::mem::take(&mut receivers[c][subtask]));
                    tasks.spawn(run_input_task(core, gate));
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
        warn!(source = %uid, "source has no cursors in the checkpoint: reading from the start");
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
