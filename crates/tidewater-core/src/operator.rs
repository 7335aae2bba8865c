//! The [`Operator`] trait: a transform over record batches that may keep checkpointed state.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::partition::KeyRouting;

/// Where an operator instance runs: its uid and which subtask of how many.
#[derive(Debug, Clone)]
pub struct TaskContext {
    /// The job's name.
    pub job: Arc<str>,
    /// The operator's stable uid.
    pub uid: Arc<str>,
    /// This subtask's index, `0..parallelism`.
    pub subtask: usize,
    /// How many subtasks the operator has.
    pub parallelism: usize,
    /// The fencing epoch of this run: sinks that commit in an external
    /// system record it there and refuse to commit under an older one.
    pub epoch: crate::ids::Epoch,
}

/// Collects the batches an operator emits for one call.
#[derive(Debug, Default)]
pub struct Collector {
    batches: Vec<Outgoing>,
    /// How the task's edge routes rows, when the operator is the task's
    /// last and its output crosses one hash-partitioned edge.
    routing: Option<Arc<KeyRouting>>,
    /// Handing on before the end of input, not before a barrier.
    ending: bool,
}

/// An emitted batch, and the downstream subtask its operator routed it to
/// (`None`: the edge routes it).
pub(crate) type Outgoing = (RecordBatch, Option<usize>);

impl Collector {
    /// A collector for the last operator of a task whose output crosses
    /// the hash edge `routing` (or any other edges, when `None`).
    pub(crate) fn routed_by(routing: Option<Arc<KeyRouting>>) -> Self {
        Collector {
            batches: Vec::new(),
            routing,
            ending: false,
        }
    }

    /// Marks a hand-on before the end of input (`ending`) rather than
    /// before a barrier.
    pub(crate) fn set_ending(&mut self, ending: bool) {
        self.ending = ending;
    }

    /// In [`Operator::before_barrier`]: whether this hand-on is the last,
    /// before the end of input rather than a checkpoint barrier, and
    /// [`finish`](Operator::finish) comes next. Work that pays off only
    /// across later checkpoints (reordering state, say) can be skipped then.
    pub fn is_ending(&self) -> bool {
        self.ending
    }

    /// Emits a batch downstream. Empty batches are dropped.
    pub fn emit(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.batches.push((batch, None));
        }
    }

    /// How the edge after this operator routes rows by key, when the
    /// operator may route batches itself ([`emit_to`](Self::emit_to)).
    pub(crate) fn routing(&self) -> Option<&KeyRouting> {
        self.routing.as_deref()
    }

    /// Emits a batch every row of which the edge's [`routing`](Self::routing)
    /// sends to downstream subtask `subtask`: the edge sends it there whole.
    pub(crate) fn emit_to(&mut self, batch: RecordBatch, subtask: usize) {
        if batch.num_rows() > 0 {
            self.batches.push((batch, Some(subtask)));
        }
    }

    /// The batches emitted, without their routes.
    #[cfg(test)]
    pub(crate) fn take(&mut self) -> Vec<RecordBatch> {
        self.batches.drain(..).map(|(batch, _)| batch).collect()
    }

    /// The batches emitted, each with its route.
    pub(crate) fn take_routed(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.batches)
    }
}

/// A transform over record batches, run as one instance per subtask.
///
/// The runtime calls [`process`](Operator::process) for each batch, and at a
/// checkpoint barrier (after all inputs aligned) [`snapshot`](Operator::snapshot);
/// on restore it calls [`restore`](Operator::restore) with what `snapshot`
/// returned, before any batch. Barrier alignment, storage and restore
/// selection are the runtime's job: an operator only turns its state into a
/// `RecordBatch` and back.
///
/// # Examples
///
/// A stateful operator that numbers rows across restarts:
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use arrow::datatypes::{DataType, Field, Schema};
/// use tidewater_core::{Collector, Operator, Result};
///
/// #[derive(Default)]
/// struct RowCounter { seen: i64 }
///
/// impl Operator for RowCounter {
///     fn kind(&self) -> &str { "row-counter" }
///     fn state_version(&self) -> Option<u32> { Some(1) }
///     fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
///         self.seen += batch.num_rows() as i64;
///         out.emit(batch);
///         Ok(())
///     }
///     fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
///         let schema = Arc::new(Schema::new(vec![Field::new("seen", DataType::Int64, false)]));
///         let seen = Arc::new(Int64Array::from(vec![self.seen]));
///         Ok(Some(RecordBatch::try_new(schema, vec![seen])?))
///     }
///     fn restore(&mut self, state: RecordBatch) -> Result<()> {
///         let seen = tidewater_core::state::column::<Int64Array>(&state, "seen")?;
///         self.seen = seen.value(0);
///         Ok(())
///     }
/// }
/// ```
pub trait Operator: Send + 'static {
    /// A short name for what this operator is, recorded in every checkpoint so
    /// that a restore into a different operator is refused.
    fn kind(&self) -> &str;

    /// The version of the state schema [`snapshot`](Operator::snapshot) writes,
    /// or `None` when the operator keeps no state. Bump it when the state's
    /// layout changes: restoring a different version is refused.
    fn state_version(&self) -> Option<u32> {
        None
    }

    /// Processes one batch, emitting any number of batches.
    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()>;

    /// Called before each checkpoint barrier passes the operator (and
    /// before [`finish`](Operator::finish)), again while it returns
    /// `true`: each call emits a piece of what the
    /// operator hands on rather than hold across the checkpoint (a
    /// pre-aggregation's partials), and the runtime sends each piece on
    /// before the next call, so a large hand-on never sits in memory
    /// whole. Everything emitted reaches the operators after it ahead of
    /// the barrier. The default hands on nothing.
    fn before_barrier(&mut self, _out: &mut Collector) -> Result<bool> {
        Ok(false)
    }

    /// Called once when all input has ended; emits what the operator still holds.
    fn finish(&mut self, _out: &mut Collector) -> Result<()> {
        Ok(())
    }

    /// Returns the operator's state as of now, or `None` when it has none.
    /// Called between batches; should copy, not serialise (the runtime
    /// encodes and uploads the copy off the task).
    fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        Ok(None)
    }

    /// The columns of the batch [`snapshot`](Operator::snapshot) returns
    /// that hold each row's key, in the order of the `key_by` columns the
    /// operator reads, when that batch is one row per key (`None`, the
    /// default, when it is not).
    ///
    /// With them, a restore at another parallelism (up to the job's key
    /// group count) hands each subtask the rows of the key groups it now
    /// owns: the same hash routes input rows and splits state. Without them
    /// the state is one piece per subtask, and a restore that changes the
    /// operator's parallelism is refused.
    ///
    /// In the example above, `RowCounter`'s state is not per key. A
    /// deduplicator whose state is a column `id` of the ids it has seen,
    /// keyed by `id`, returns `Some(vec!["id".into()])` (as
    /// `examples/dedup.rs` does).
    fn state_keys(&self) -> Option<Vec<String>> {
        None
    }

    /// Starts tracking which keys change, for incremental checkpoints
    /// ([`JobConfig::incremental_checkpoints`](crate::JobConfig::incremental_checkpoints)).
    /// Called once per instance, after any restore and before the first
    /// batch, only in jobs that turned them on. Return `true` when the
    /// operator implements [`snapshot_changes`](Operator::snapshot_changes)
    /// (the default, `false`, keeps full snapshots). Only an operator whose
    /// state is one row per key ([`state_keys`](Operator::state_keys)) can
    /// track changes.
    fn track_changes(&mut self) -> bool {
        false
    }

    /// What changed since the previous snapshot (full or of changes): the
    /// rows of the changed keys, laid out as
    /// [`snapshot`](Operator::snapshot)'s, or the whole state when the
    /// operator cannot say (it dropped keys: a delta says how keys stand
    /// now, not that one is gone). Both kinds of snapshot start the
    /// tracking over. Called only after
    /// [`track_changes`](Operator::track_changes) returned `true`.
    ///
    /// A restore hands [`restore`](Operator::restore) the merged state:
    /// the last whole snapshot with each later changed row in place of the
    /// row of its key.
    fn snapshot_changes(&mut self) -> Result<StateChanges> {
        Ok(StateChanges::Whole(self.snapshot()?))
    }

    /// Rebuilds the state from a batch that [`snapshot`](Operator::snapshot) returned.
    fn restore(&mut self, _state: RecordBatch) -> Result<()> {
        Err(Error::InvalidPipeline(format!(
            "operator kind '{}' returned state from snapshot, and the checkpoint being restored \
             holds it, but the operator does not implement Operator::restore: implement restore \
             to rebuild the operator from that batch (or return None from snapshot if it keeps \
             no state)",
            self.kind()
        )))
    }
}

/// What [`Operator::snapshot_changes`] returns.
#[derive(Debug, Clone)]
pub enum StateChanges {
    /// The rows of the keys changed since the previous snapshot; `None`
    /// or no rows when none did.
    Changed(Option<RecordBatch>),
    /// The whole state, as [`Operator::snapshot`] returns it: the
    /// incremental chain starts over from it.
    Whole(Option<RecordBatch>),
}

/// Builds one operator instance per subtask.
pub type OperatorFactory = Arc<dyn Fn(&TaskContext) -> Result<Box<dyn Operator>> + Send + Sync>;
