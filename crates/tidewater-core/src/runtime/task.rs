//! The two kinds of task: a source subtask (reads splits) and an input subtask
//! (reads channels through an input gate). Both push batches through their
//! operator chain into a tail: the next channels, or a sink writer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::chain::{OperatorChain, OperatorState};
use super::input_gate::{GateEvent, InputGate};
use super::message::Message;
use super::output::Output;
use super::progress::Progress;
use crate::checkpoint::{BlobRecord, StateStore};
use crate::error::{Error, Result};
use crate::events::OperatorMeter;
use crate::ids::CheckpointId;
use crate::operator::{Outgoing, TaskContext};
use crate::sink::{CommitHandle, SinkWriter};
use crate::source::{Cursor, Source, Split, SplitReader};
use crate::state;
use crate::throttle::Throttle;

/// What the coordinator tells a source subtask.
#[derive(Debug)]
pub(crate) enum Control {
    /// Take checkpoint n now; with `pause`, stop reading afterwards (a savepoint).
    Trigger {
        checkpoint: CheckpointId,
        pause: bool,
    },
    /// All sources are exhausted: end the output; the final checkpoint is n.
    Finish(CheckpointId),
}

/// What tasks tell the coordinator.
#[derive(Debug)]
pub(crate) enum Event {
    /// A task finished its part of checkpoint n (state uploaded, sink pre-committed).
    Ack(Ack),
    /// A source subtask read all its splits.
    SourceExhausted,
}

#[derive(Debug)]
pub(crate) struct Ack {
    pub checkpoint: CheckpointId,
    pub result: Result<AckData>,
}

#[derive(Debug)]
pub(crate) struct AckData {
    pub blobs: Vec<BlobRecord>,
    /// Operator subtasks whose incremental chain in the previous
    /// checkpoint goes on in this one (`blobs` holds their deltas, if any).
    pub carried: Vec<(String, usize)>,
    pub commits: Vec<CommitHandle>,
    /// Rows this source subtask emitted in this run before the barrier.
    pub rows_read: u64,
    /// When and how long this task took its part.
    pub timing: TaskTiming,
}

/// One task's part of a checkpoint, timed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskTiming {
    /// When the task had the barrier and began its snapshot.
    pub began: Instant,
    /// Its operators' snapshots and its sink's pre-commit.
    pub snapshot: Duration,
    /// Encoding and uploading its state.
    pub upload: Duration,
}

/// Where a chain's output goes.
pub(crate) enum Tail {
    Channels(Output),
    Sink {
        uid: Arc<str>,
        writer: Box<dyn SinkWriter>,
        meter: OperatorMeter,
    },
}

/// What every task has: its chain, its tail, and the way to report checkpoints.
pub(crate) struct TaskCore {
    pub chain: OperatorChain,
    pub tail: Tail,
    pub store: StateStore,
    pub events: UnboundedSender<Event>,
    pub progress: Arc<Progress>,
}

impl TaskCore {
    async fn emit(&mut self, batches: Vec<Outgoing>) -> Result<()> {
        for (batch, routed_to) in batches {
            match &mut self.tail {
                Tail::Channels(output) => output.send(batch, routed_to).await?,
                Tail::Sink { uid, writer, meter } => {
                    let rows = batch.num_rows() as u64;
                    meter.batch_in(batch.num_rows());
                    writer
                        .write(batch)
                        .await
                        .map_err(|e| e.in_operator(uid, self.chain.subtask))?;
                    self.progress.add_written(rows);
                }
            }
        }
        Ok(())
    }

    /// Sends on, piece by piece, what the chain's operators hand on
    /// before a barrier or, `ending`, the end of input.
    async fn hand_on(&mut self, ending: bool) -> Result<()> {
        while let Some(handed_on) = self.chain.before_barrier(ending)? {
            self.emit(handed_on).await?;
        }
        Ok(())
    }

    async fn process(&mut self, batch: RecordBatch) -> Result<()> {
        let out = self.chain.process(batch)?;
        self.emit(out).await
    }

    /// Pre-commits the sink writer (if this chain ends in one); returns its
    /// commit handles and the state it carries across the checkpoint.
    async fn pre_commit(
        &mut self,
        checkpoint: CheckpointId,
    ) -> Result<(Vec<CommitHandle>, Option<(Arc<str>, RecordBatch)>)> {
        let Tail::Sink { uid, writer, .. } = &mut self.tail else {
            return Ok((Vec::new(), None));
        };
        let subtask = self.chain.subtask;
        let payload = writer
            .pre_commit(checkpoint)
            .await
            .map_err(|e| e.in_operator(uid, subtask))?;
        let state = writer
            .snapshot()
            .await
            .map_err(|e| e.in_operator(uid, subtask))?
            .map(|state| (uid.clone(), state));
        let handles = payload
            .map(|payload| CommitHandle {
                uid: uid.to_string(),
                subtask,
                checkpoint,
                payload,
            })
            .into_iter()
            .collect();
        Ok((handles, state))
    }

    /// Snapshots the chain (plus `extra` state, a source's cursors), passes the
    /// barrier on, and uploads the state off the task before acking.
    async fn checkpoint(
        &mut self,
        checkpoint: CheckpointId,
        extra: Option<(Arc<str>, RecordBatch)>,
        rows_read: u64,
    ) -> Result<()> {
        let began = Instant::now();
        self.hand_on(false).await?;
        let snapshot = self.chain.snapshot()?;
        let mut states = snapshot.states;
        let subtask = self.chain.subtask;
        let carried = snapshot
            .carried
            .iter()
            .map(|uid| (uid.to_string(), subtask))
            .collect();
        let (commits, sink_state) = self.pre_commit(checkpoint).await?;
        let whole = |(uid, batch)| OperatorState {
            uid,
            batch,
            delta: false,
        };
        states.extend(extra.into_iter().chain(sink_state).map(whole));
        let snapshot = began.elapsed();
        if let Tail::Channels(output) = &mut self.tail {
            output.broadcast(Message::Barrier(checkpoint)).await?;
        }
        let store = self.store.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let uploading = Instant::now();
            let result = upload(&store, checkpoint, subtask, states)
                .await
                .map(|blobs| AckData {
                    blobs,
                    carried,
                    commits,
                    rows_read,
                    timing: TaskTiming {
                        began,
                        snapshot,
                        upload: uploading.elapsed(),
                    },
                });
            // A closed channel means the job already ended; nobody needs the ack.
            let _ = events.send(Event::Ack(Ack { checkpoint, result }));
        });
        Ok(())
    }

    /// Ends the task: flushes the chain, passes the end on, pre-commits the final data.
    async fn finish(&mut self, checkpoint: CheckpointId, rows_read: u64) -> Result<()> {
        let began = Instant::now();
        // In pieces the channels backpressure, not all at once in `finish`.
        self.hand_on(true).await?;
        let out = self.chain.finish()?;
        self.emit(out).await?;
        if let Tail::Sink { uid, writer, .. } = &mut self.tail {
            writer
                .finish()
                .await
                .map_err(|e| e.in_operator(uid, self.chain.subtask))?;
        }
        // After finish a writer carries nothing: the final checkpoint has no state.
        let (commits, _) = self.pre_commit(checkpoint).await?;
        if let Tail::Channels(output) = &mut self.tail {
            output.broadcast(Message::End(checkpoint)).await?;
        }
        let data = AckData {
            commits,
            blobs: Vec::new(),
            carried: Vec::new(),
            rows_read,
            timing: TaskTiming {
                began,
                snapshot: began.elapsed(),
                upload: Duration::ZERO,
            },
        };
        let _ = self.events.send(Event::Ack(Ack {
            checkpoint,
            result: Ok(data),
        }));
        Ok(())
    }
}

async fn upload(
    store: &StateStore,
    checkpoint: CheckpointId,
    subtask: usize,
    states: Vec<OperatorState>,
) -> Result<Vec<BlobRecord>> {
    let mut blobs = Vec::with_capacity(states.len());
    for OperatorState { uid, batch, delta } in states {
        let blob = store
            .put_state(checkpoint, &uid, subtask, batch)
            .await
            .map_err(|e| e.in_operator(&uid, subtask))?;
        blobs.push(BlobRecord { delta, ..blob });
    }
    Ok(blobs)
}

/// A task that reads channels.
pub(crate) async fn run_input_task(mut core: TaskCore, mut gate: InputGate) -> Result<()> {
    loop {
        match gate.next().await? {
            GateEvent::Batch(batch) => core.process(batch).await?,
            GateEvent::Barrier(id) => core.checkpoint(id, None, 0).await?,
            GateEvent::End(id) => return core.finish(id, 0).await,
        }
    }
}

/// A split with where it stands.
#[derive(Debug, Clone)]
pub(crate) struct SplitState {
    pub split: Split,
    pub cursor: Option<Cursor>,
    pub done: bool,
}

/// The schema of a source's checkpointed state: one row per split.
pub(crate) fn source_state_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("split", DataType::Utf8, false),
        Field::new("cursor", DataType::Utf8, true),
        Field::new("done", DataType::Boolean, false),
    ]))
}

fn source_state(splits: &[SplitState]) -> Result<RecordBatch> {
    let ids: StringArray = splits.iter().map(|s| Some(s.split.id.as_str())).collect();
    let cursors: StringArray = splits
        .iter()
        .map(|s| s.cursor.as_ref().map(|c| c.to_string()))
        .collect();
    let done: BooleanArray = splits.iter().map(|s| Some(s.done)).collect();
    let columns: Vec<ArrayRef> = vec![Arc::new(ids), Arc::new(cursors), Arc::new(done)];
    Ok(RecordBatch::try_new(source_state_schema(), columns)?)
}

/// Reads the cursors out of a source state batch into `cursors` (split id → (cursor, done)).
pub(crate) fn read_source_state(
    state: &RecordBatch,
    cursors: &mut BTreeMap<String, (Option<Cursor>, bool)>,
) -> Result<()> {
    let ids = state::column::<StringArray>(state, "split")?;
    let values = state::column::<StringArray>(state, "cursor")?;
    let done = state::column::<BooleanArray>(state, "done")?;
    for i in 0..state.num_rows() {
        let cursor = if values.is_valid(i) {
            Some(serde_json::from_str(values.value(i)).map_err(|e| {
                Error::Corrupt(format!(
                    "cursor of split '{}' is not JSON: {e}",
                    ids.value(i)
                ))
            })?)
        } else {
            None
        };
        cursors.insert(ids.value(i).to_string(), (cursor, done.value(i)));
    }
    Ok(())
}

use arrow::array::Array;

/// A source subtask: reads its splits in order, answering the coordinator between batches.
pub(crate) struct SourceTask {
    pub uid: Arc<str>,
    /// Which subtask of which job this is, for sources that name their connections.
    pub context: TaskContext,
    pub meter: OperatorMeter,
    pub source: Arc<dyn Source>,
    pub throttles: Vec<Arc<dyn Throttle>>,
    pub splits: Vec<SplitState>,
    pub control: UnboundedReceiver<Control>,
    pub core: TaskCore,
}

/// How long a source reads before it lets other tasks (the coordinator, the
/// progress reporter) have its worker thread: the most a barrier waits for it.
const YIELD_EVERY: Duration = Duration::from_millis(1);

/// What a source does after a message from the coordinator.
enum Next {
    Read,
    Pause,
    Stop,
}

async fn admit_all(throttles: &[Arc<dyn Throttle>], rows: u64) -> Result<()> {
    for throttle in throttles {
        throttle.admit(rows).await?;
    }
    Ok(())
}

impl SourceTask {
    pub async fn run(mut self) -> Result<()> {
        let subtask = self.core.chain.subtask;
        let uid = self.uid.clone();
        self.run_inner()
            .await
            .map_err(|e| e.in_operator(&uid, subtask))
    }

    async fn on_control(&mut self, control: Control, rows_read: u64) -> Result<Next> {
        match control {
            Control::Trigger { checkpoint, pause } => {
                let state = source_state(&self.splits)?;
                self.core
                    .checkpoint(checkpoint, Some((self.uid.clone(), state)), rows_read)
                    .await?;
                Ok(if pause { Next::Pause } else { Next::Read })
            }
            Control::Finish(checkpoint) => {
                self.core.finish(checkpoint, rows_read).await?;
                Ok(Next::Stop)
            }
        }
    }

    async fn run_inner(&mut self) -> Result<()> {
        let mut reader: Option<(usize, Box<dyn SplitReader>)> = None;
        let mut rows_read = 0u64;
        let mut last_rows = 0u64;
        let mut exhausted = false;
        let mut paused = false;
        let mut last_yield = Instant::now();
        loop {
            // Between two batches: answer the coordinator first. When there is
            // nothing to read, wait for it.
            let control = if exhausted || paused {
                match self.control.recv().await {
                    Some(control) => Some(control),
                    None => return Ok(()),
                }
            } else {
                self.control.try_recv().ok()
            };
            if let Some(control) = control {
                match self.on_control(control, rows_read).await? {
                    Next::Read => continue,
                    Next::Pause => {
                        paused = true;
                        continue;
                    }
                    Next::Stop => return Ok(()),
                }
            }

            if !self.throttles.is_empty() {
                // A throttled source still answers checkpoints and cancels.
                let why = self.throttles.iter().find_map(|t| t.why_waiting());
                let held = self.core.progress.throttle_wait(why);
                let waited = {
                    let throttles = &self.throttles;
                    let control = &mut self.control;
                    tokio::select! {
                        admitted = admit_all(throttles, last_rows) => { admitted?; None }
                        message = control.recv() => Some(message),
                    }
                };
                drop(held);
                match waited {
                    None => {}
                    Some(None) => return Ok(()),
                    Some(Some(control)) => {
                        match self.on_control(control, rows_read).await? {
                            Next::Read => {}
                            Next::Pause => paused = true,
                            Next::Stop => return Ok(()),
                        }
                        continue;
                    }
                }
            }

            if reader.is_none() {
                match self.splits.iter().position(|s| !s.done) {
                    Some(index) => {
                        let state = &self.splits[index];
                        let opened = self
                            .source
                            .open_for(&self.context, &state.split, state.cursor.as_ref())
                            .await?;
                        reader = Some((index, opened));
                    }
                    None => {
                        exhausted = true;
                        let _ = self.core.events.send(Event::SourceExhausted);
                        continue;
                    }
                }
            }
            let (index, split_reader) = reader.as_mut().expect("opened above");
            let index = *index;
            match split_reader.next_batch().await? {
                Some(batch) => {
                    let rows = batch.num_rows() as u64;
                    self.splits[index].cursor = Some(split_reader.cursor());
                    if rows_read == 0 {
                        self.core.progress.mark_first_batch();
                    }
                    rows_read += rows;
                    last_rows = rows;
                    self.core.progress.add_read(rows);
                    self.meter.rows_out(batch.num_rows());
                    self.core.process(batch).await?;
                    // A chain that ends in a sink may never await a channel, and
                    // would then starve the coordinator of the worker threads.
                    // Not after every batch: each yield wakes a parked worker
                    // (an eventfd write and an epoll round trip), 7% of a
                    // cache-resident aggregate's CPU when batches take 0.3 ms.
                    if last_yield.elapsed() >= YIELD_EVERY {
                        tokio::task::yield_now().await;
                        last_yield = Instant::now();
                    }
                }
                None => {
                    self.splits[index].cursor = Some(split_reader.cursor());
                    self.splits[index].done = true;
                    reader = None;
                }
            }
        }
    }
}
