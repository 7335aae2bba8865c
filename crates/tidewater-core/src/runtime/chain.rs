//! Operators fused into one task: a batch passes through them with no channel hop.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use crate::checkpoint::incremental::{ChainLength, ChainPolicy, SnapshotKind};
use crate::error::Result;
use crate::events::OperatorMeter;
use crate::operator::{Collector, Operator, StateChanges};

pub(crate) struct ChainedOperator {
    pub uid: Arc<str>,
    pub operator: Box<dyn Operator>,
    pub meter: OperatorMeter,
    /// With incremental checkpoints, for an operator that tracks its
    /// changes: when its chain starts over, and how long it is.
    pub incremental: Option<(ChainPolicy, ChainLength)>,
}

/// One operator's part of a checkpoint.
pub(crate) struct OperatorState {
    pub uid: Arc<str>,
    pub batch: RecordBatch,
    /// Only the keys changed since the previous checkpoint.
    pub delta: bool,
}

/// What a chain's operators hand to a checkpoint.
#[derive(Default)]
pub(crate) struct ChainSnapshot {
    pub states: Vec<OperatorState>,
    /// Operators whose previous checkpoint's chain goes on in this one
    /// (they wrote a delta, or nothing changed).
    pub carried: Vec<Arc<str>>,
}

/// The operators of one subtask of a chain, in order.
pub(crate) struct OperatorChain {
    pub operators: Vec<ChainedOperator>,
    pub subtask: usize,
    /// The operator whose [`before_barrier`](Self::before_barrier) is
    /// under way (0 between barriers).
    handing_on: usize,
}

impl OperatorChain {
    /// The chain of `operators`, in order, for `subtask`.
    pub fn new(operators: Vec<ChainedOperator>, subtask: usize) -> Self {
        OperatorChain {
            operators,
            subtask,
            handing_on: 0,
        }
    }

    /// Runs a batch through every operator.
    pub fn process(&mut self, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        self.process_from(0, vec![batch])
    }

    fn process_from(
        &mut self,
        first: usize,
        mut batches: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        let mut collector = Collector::default();
        for op in &mut self.operators[first..] {
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                op.meter.batch_in(batch.num_rows());
                op.operator
                    .process(batch, &mut collector)
                    .map_err(|e| e.in_operator(&op.uid, self.subtask))?;
            }
            batches = collector.take();
            op.meter.rows_out(rows_of(&batches));
        }
        Ok(batches)
    }

    /// Ends the input: each operator's final output flows through the ones after it.
    pub fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        for i in 0..self.operators.len() {
            let emitted = self.call(i, |operator, out| operator.finish(out))?;
            out.extend(self.process_from(i + 1, emitted)?);
        }
        Ok(out)
    }

    /// Before a barrier: the next piece of what an operator hands on
    /// rather than hold across it ([`Operator::before_barrier`]), through
    /// the operators after it; `None` once every operator is done. Call it
    /// until `None`, sending each piece on before the next call.
    pub fn before_barrier(&mut self) -> Result<Option<Vec<RecordBatch>>> {
        while self.handing_on < self.operators.len() {
            let i = self.handing_on;
            let mut more = false;
            let emitted = self.call(i, |operator, out| {
                more = operator.before_barrier(out)?;
                Ok(())
            })?;
            if !more {
                self.handing_on += 1;
            }
            let out = self.process_from(i + 1, emitted)?;
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
        self.handing_on = 0;
        Ok(None)
    }

    /// Runs `step` on operator `i`; returns what it emitted.
    fn call(
        &mut self,
        i: usize,
        step: impl FnOnce(&mut dyn Operator, &mut Collector) -> Result<()>,
    ) -> Result<Vec<RecordBatch>> {
        let op = &mut self.operators[i];
        let mut collector = Collector::default();
        step(op.operator.as_mut(), &mut collector)
            .map_err(|e| e.in_operator(&op.uid, self.subtask))?;
        let emitted = collector.take();
        op.meter.rows_out(rows_of(&emitted));
        Ok(emitted)
    }

    /// The state of every stateful operator: whole, or for operators with
    /// an incremental chain going on, the keys changed since the last one.
    pub fn snapshot(&mut self) -> Result<ChainSnapshot> {
        let mut snapshot = ChainSnapshot::default();
        for op in &mut self.operators {
            if op.operator.state_version().is_none() {
                continue;
            }
            let asked = match &op.incremental {
                Some((policy, chain)) => chain.next(*policy),
                None => SnapshotKind::Full,
            };
            let (kind, state) = match asked {
                SnapshotKind::Full => (SnapshotKind::Full, op.operator.snapshot()),
                SnapshotKind::Changes => match op.operator.snapshot_changes() {
                    Ok(StateChanges::Changed(rows)) => (SnapshotKind::Changes, Ok(rows)),
                    Ok(StateChanges::Whole(state)) => (SnapshotKind::Full, Ok(state)),
                    Err(e) => (asked, Err(e)),
                },
            };
            let state = state.map_err(|e| e.in_operator(&op.uid, self.subtask))?;
            if let Some((_, chain)) = &mut op.incremental {
                chain.taken(kind, state.as_ref().map(RecordBatch::num_rows));
            }
            let delta = kind == SnapshotKind::Changes;
            if delta {
                snapshot.carried.push(op.uid.clone());
            }
            if let Some(batch) = state.filter(|b| !delta || b.num_rows() > 0) {
                snapshot.states.push(OperatorState {
                    uid: op.uid.clone(),
                    batch,
                    delta,
                });
            }
        }
        Ok(snapshot)
    }
}

fn rows_of(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}
