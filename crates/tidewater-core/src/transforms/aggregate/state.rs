//! The aggregate's state: the groups as one batch (keys, then one column per
//! aggregate), which is both the checkpoint and the output, and rebuilding
//! the groups from it.

use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;

use super::accumulator::Accumulator;
use super::operator::{AggregateOperator, Groups};
use crate::error::{Error, Result};
use crate::transforms::group_index::GroupIndex;

impl AggregateOperator {
    /// Every group as one batch: keys, then one column per aggregate.
    pub(super) fn output(&mut self) -> Result<Option<RecordBatch>> {
        let Some(groups) = &self.groups else {
            return Ok(None);
        };
        let spare = &mut self.spare;
        spare.reclaim();
        let n = groups.index.len();
        let mut columns = groups.index.key_columns(spare)?;
        let mut words: Vec<Vec<u64>> = groups.accumulators.iter().map(|_| spare.take(n)).collect();
        groups.table.columns_into(&mut words);
        for (accumulator, words) in groups.accumulators.iter().zip(words) {
            columns.push(accumulator.to_array(spare.lend(words), n));
        }
        Ok(Some(RecordBatch::try_new(groups.schema.clone(), columns)?))
    }

    /// The rows of `groups` only, in that order, laid out as
    /// [`output`](Self::output)'s. The columns come from the same spare
    /// memory as whole snapshots: while every key changes (a job's first
    /// minutes), a delta is as large as the base, and fresh columns would
    /// hold a second copy of the state beside the spare one. With `reset`,
    /// the rows go back to their identities as they are read.
    pub(super) fn output_of(&mut self, wanted: &[u32], reset: bool) -> Result<Option<RecordBatch>> {
        let Some(groups) = &mut self.groups else {
            return Ok(None);
        };
        let spare = &mut self.spare;
        spare.reclaim();
        let mut columns = groups.index.key_columns_of(wanted, spare)?;
        let mut words: Vec<Vec<u64>> = groups
            .accumulators
            .iter()
            .map(|_| spare.take(wanted.len()))
            .collect();
        groups.table.columns_of(wanted, &mut words, reset);
        for (accumulator, words) in groups.accumulators.iter().zip(words) {
            columns.push(accumulator.to_array_of(spare.lend(words), wanted));
        }
        Ok(Some(RecordBatch::try_new(groups.schema.clone(), columns)?))
    }

    /// Rebuilds the groups from a batch that [`output`](Self::output) made.
    pub(super) fn restore_state(&mut self, state: RecordBatch) -> Result<()> {
        // The state's schema stands in for the input's until the first batch:
        // keys keep their types, and each aggregate's type picks its accumulator.
        let schema = state.schema();
        let n_keys = self.keys.len();
        if schema.fields().len() != n_keys + self.spec.exprs().len() {
            return Err(Error::Corrupt(format!(
                "aggregate state has {} columns, the aggregation needs {}",
                schema.fields().len(),
                n_keys + self.spec.exprs().len()
            )));
        }
        let key_types: Vec<DataType> = (0..n_keys)
            .map(|i| schema.field(i).data_type().clone())
            .collect();
        let mut index = GroupIndex::new(&key_types)?;
        index.assign(&state.columns()[..n_keys], &mut self.scratch)?;
        if index.len() != state.num_rows() {
            return Err(Error::Corrupt("aggregate state holds a key twice".into()));
        }
        let mut accumulators = Vec::new();
        for (i, expr) in self.spec.exprs().iter().enumerate() {
            let state_type = schema.field(n_keys + i).data_type();
            let (function, column) = self.accumulated(expr);
            let accumulator = Accumulator::for_type(function, column.is_some(), state_type, i)
                .ok_or_else(|| {
                    Error::Corrupt(format!(
                        "aggregate state column '{}' has type {state_type}",
                        expr.output
                    ))
                })?;
            accumulators.push(accumulator);
        }
        let mut groups = Groups::new(index, accumulators, schema);
        groups.table.resize(state.num_rows());
        for (i, accumulator) in groups.accumulators.iter_mut().enumerate() {
            accumulator.restore(&mut groups.table, state.column(n_keys + i))?;
        }
        self.layout = None;
        self.groups = Some(groups);
        Ok(())
    }
}

/// Refuses input whose types differ from the restored state's.
pub(super) fn check_same_types(restored: &Schema, now: &Schema) -> Result<()> {
    let types = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect::<Vec<_>>()
    };
    if types(restored) == types(now) {
        Ok(())
    } else {
        Err(Error::BadInput(format!(
            "aggregate: the input's types changed since the checkpoint: state columns were \
             [{}], the input now gives [{}]; restore with the original input or start over",
            crate::error::field_list(restored),
            crate::error::field_list(now)
        )))
    }
}
