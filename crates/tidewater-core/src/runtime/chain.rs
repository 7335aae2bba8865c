//! Operators fused into one task: a batch passes through them with no channel hop.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::events::OperatorMeter;
use crate::operator::{Collector, Operator};

pub(crate) struct ChainedOperator {
    pub uid: Arc<str>,
    pub operator: Box<dyn Operator>,
    pub meter: OperatorMeter,
}

/// The operators of one subtask of a chain, in order.
pub(crate) struct OperatorChain {
    pub operators: Vec<ChainedOperator>,
    pub subtask: usize,
}

impl OperatorChain {
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
            let op = &mut self.operators[i];
            let mut collector = Collector::default();
            op.operator
                .finish(&mut collector)
                .map_err(|e| e.in_operator(&op.uid, self.subtask))?;
            let emitted = collector.take();
            op.meter.rows_out(rows_of(&emitted));
            out.extend(self.process_from(i + 1, emitted)?);
        }
        Ok(out)
    }

    /// The state of every stateful operator.
    pub fn snapshot(&mut self) -> Result<Vec<(Arc<str>, RecordBatch)>> {
        let mut states = Vec::new();
        for op in &mut self.operators {
            if op.operator.state_version().is_none() {
                continue;
            }
            if let Some(state) = op
                .operator
                .snapshot()
                .map_err(|e| e.in_operator(&op.uid, self.subtask))?
            {
                states.push((op.uid.clone(), state));
            }
        }
        Ok(states)
    }
}

fn rows_of(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}
