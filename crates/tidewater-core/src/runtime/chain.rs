//! Operators fused into one task: a batch passes through them with no channel hop.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use crate::checkpoint::incremental::{ChainLength, ChainPolicy, SnapshotKind};
use crate::error::Result;
use crate::events::OperatorMeter;
use crate::operator::{Collector, Operator, Outgoing, StateChanges};
use crate::partition::KeyRouting;

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
    /// How the task's one hash edge routes rows, told to the last operator
    /// so that it may route what it emits.
    routing: Option<Arc<KeyRouting>>,
}

impl OperatorChain {
    /// The chain of `operators`, in order, for `subtask`; its output
    /// crosses the edge `routing` when that is one hash edge.
    pub fn new(
        operators: Vec<ChainedOperator>,
        subtask: usize,
        routing: Option<KeyRouting>,
    ) -> Self {
        OperatorChain {
            operators,
            subtask,
            handing_on: 0,
            routing: routing.map(Arc::new),
        }
    }

    /// Runs a batch through every operator.
    pub fn process(&mut self, batch: RecordBatch) -> Result<Vec<Outgoing>> {
        self.process_from(0, vec![(batch, None)])
    }

    /// The collector of operator `i`: the last one learns the edge's routing.
    fn collector(&self, i: usize) -> Collector {
        let last = i + 1 == self.operators.len();
        Collector::routed_by(self.routing.clone().filter(|_| last))
    }

    /// Runs `emitted` through the operators from `first` on. Batches that
    /// pass no operator keep their routes.
    fn process_from(&mut self, first: usize, emitted: Vec<Outgoing>) -> Result<Vec<Outgoing>> {
        if emitted.is_empty() || first >= self.operators.len() {
            return Ok(emitted);
        }
        let mut batches: Vec<RecordBatch> = emitted.into_iter().map(|(batch, _)| batch).collect();
        for i in first..self.operators.len() {
            let mut collector = self.collector(i);
            let op = &mut self.operators[i];
            for batch in batches {
                op.meter.batch_in(batch.num_rows());
                op.operator
                    .process(batch, &mut collector)
                    .map_err(|e| e.in_operator(&op.uid, self.subtask))?;
            }
            let out = collector.take_routed();
            op.meter.rows_out(rows_of(&out));
            if i + 1 == self.operators.len() || out.is_empty() {
                return Ok(out);
            }
            batches = out.into_iter().map(|(batch, _)| batch).collect();
        }
        Ok(Vec::new())
    }

    /// Ends the input: each operator's final output flows through the ones after it.
    pub fn finish(&mut self) -> Result<Vec<Outgoing>> {
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
    /// `ending`: before the end of input rather than a barrier.
    pub fn before_barrier(&mut self, ending: bool) -> Result<Option<Vec<Outgoing>>> {
        while self.handing_on < self.operators.len() {
            let i = self.handing_on;
            let mut more = false;
            let emitted = self.call(i, |operator, out| {
                out.set_ending(ending);
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
    ) -> Result<Vec<Outgoing>> {
        let mut collector = self.collector(i);
        let op = &mut self.operators[i];
        step(op.operator.as_mut(), &mut collector)
            .map_err(|e| e.in_operator(&op.uid, self.subtask))?;
        let emitted = collector.take_routed();
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

fn rows_of(batches: &[Outgoing]) -> usize {
    batches.iter().map(|(batch, _)| batch.num_rows()).sum()
}
