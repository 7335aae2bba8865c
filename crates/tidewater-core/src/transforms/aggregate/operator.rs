//! The keyed aggregation operator and its state: groups, their accumulators,
//! and the batch a checkpoint stores (keys, then one column per aggregate).

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::compute::{cast, is_not_null};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::super::accumulator_table::AccumulatorTable;
use super::super::changed_groups::ChangedGroups;
use super::super::group_index::GroupIndex;
use super::super::row_update::{RowOp, update_rows};
use super::super::sender_groups::{SenderTables, sender_of};
use super::super::spare_columns::SpareColumns;
use super::accumulator::*;
use super::spec::{AggregateExpr, AggregateFunction, AggregateSpec};
use super::state::check_same_types;
use crate::error::{Error, Result};
use crate::operator::{Collector, Operator, StateChanges};

/// Rows per batch emitted at the end of input.
const OUTPUT_BATCH_ROWS: usize = 65_536;

/// Where the inputs sit in the incoming batches, fixed by the first batch.
pub(super) struct Layout {
    pub(super) key_indices: Vec<usize>,
    pub(super) input_indices: Vec<Option<usize>>,
    /// What each input column is cast to before accumulation.
    pub(super) input_types: Vec<Option<DataType>>,
}

/// The partial aggregates: what a checkpoint stores.
pub(super) struct Groups {
    pub(super) index: GroupIndex,
    pub(super) accumulators: Vec<Accumulator>,
    pub(super) table: AccumulatorTable,
    pub(super) schema: SchemaRef,
}

impl Groups {
    pub(super) fn new(
        index: GroupIndex,
        accumulators: Vec<Accumulator>,
        schema: SchemaRef,
    ) -> Self {
        let identities: Vec<u64> = accumulators.iter().map(Accumulator::identity).collect();
        Groups {
            index,
            table: AccumulatorTable::new(&identities),
            accumulators,
            schema,
        }
    }
}

/// The keyed aggregation operator (see [`KeyedStream::aggregate`](crate::KeyedStream::aggregate)).
pub struct AggregateOperator {
    pub(super) keys: Vec<String>,
    pub(super) spec: Arc<AggregateSpec>,
    /// The input holds partial aggregates (one column per output, named as
    /// it) from local pre-aggregations, not raw rows.
    pub(super) merge: bool,
    pub(super) layout: Option<Layout>,
    pub(super) groups: Option<Groups>,
    pub(super) scratch: Vec<u32>,
    /// Output column memory kept across snapshots.
    pub(super) spare: SpareColumns,
    /// The groups changed since the last snapshot, when incremental
    /// checkpoints track them.
    pub(super) changed: Option<ChangedGroups>,
    /// Merging: each pre-aggregation's group numbers mapped to this one's.
    pub(super) senders: SenderTables,
}

impl AggregateOperator {
    /// An aggregation of `spec` grouped by the `keys` columns.
    pub fn new(keys: Vec<String>, spec: Arc<AggregateSpec>) -> Result<Self> {
        if keys.is_empty() {
            return Err(Error::InvalidPipeline(
                "key_by needs at least one key column".into(),
            ));
        }
        if spec.exprs().is_empty() {
            return Err(Error::InvalidPipeline(
                "aggregate needs at least one aggregate".into(),
            ));
        }
        Ok(AggregateOperator {
            keys,
            spec,
            merge: false,
            layout: None,
            groups: None,
            scratch: Vec::new(),
            spare: SpareColumns::default(),
            changed: None,
            senders: SenderTables::default(),
        })
    }

    /// The aggregation that merges the partial aggregates of `spec` that
    /// [`LocalAggregateOperator`](super::local_aggregate::LocalAggregateOperator)s emit.
    /// Its output and its state are the same as the one-phase aggregation's.
    pub(crate) fn merging(keys: Vec<String>, spec: Arc<AggregateSpec>) -> Result<Self> {
        let mut operator = Self::new(keys, spec)?;
        operator.merge = true;
        Ok(operator)
    }

    /// What `expr` accumulates: its function and the column it reads.
    /// Merging partials, a count is the sum of the partial counts.
    pub(super) fn accumulated<'a>(
        &self,
        expr: &'a AggregateExpr,
    ) -> (AggregateFunction, Option<&'a str>) {
        if !self.merge {
            return (expr.function, expr.column.as_deref());
        }
        let function = match expr.function {
            AggregateFunction::Count => AggregateFunction::Sum,
            other => other,
        };
        (function, Some(&expr.output))
    }

    /// How many groups the operator holds.
    pub(crate) fn group_count(&self) -> usize {
        self.groups.as_ref().map_or(0, |g| g.index.len())
    }

    /// The memory the groups take, roughly: key index, accumulator words
    /// and a byte per group for each null-tracking accumulator.
    pub(crate) fn approx_bytes(&self) -> usize {
        self.groups.as_ref().map_or(0, |g| {
            let tracked = g
                .accumulators
                .iter()
                .filter(|a| matches!(a, Accumulator::Int(_) | Accumulator::Float(_)))
                .count();
            g.index.approx_bytes() + g.table.bytes() + tracked * g.index.len()
        })
    }

    /// Raw rows as partial aggregates of one row each, in the output's
    /// schema: what a hand-on of every group would emit if every row had a key of
    /// its own.
    pub(crate) fn partial_rows(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        if self.layout.is_none() || self.groups.is_none() {
            let (layout, groups) = self.bind(&batch.schema())?;
            self.layout = Some(layout);
            self.groups = Some(groups);
        }
        let layout = self.layout.as_ref().expect("bound above");
        let schema = self.groups.as_ref().expect("bound above").schema.clone();
        let mut columns: Vec<ArrayRef> = layout
            .key_indices
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        for (index, cast_to) in layout.input_indices.iter().zip(&layout.input_types) {
            columns.push(match (index, cast_to) {
                (None, _) => Arc::new(Int64Array::from_value(1, batch.num_rows())),
                // A count of values: 1 where there is one.
                (Some(i), None) => cast(&is_not_null(batch.column(*i))?, &DataType::Int64)?,
                (Some(i), Some(to)) => cast(batch.column(*i), to)?,
            });
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// Appends to `into`, in ascending order, the groups of `range` a
    /// pre-aggregation hands on before a barrier, given the group count
    /// at its last hand-on (`new_from`) and the groups that must go on
    /// whatever their values (`first_values`, from
    /// [`first_values_since`](Self::first_values_since)): the groups added
    /// since, the older ones whose accumulators left their identities, and
    /// those. Stops once it has found `max` by their values (the groups of
    /// `first_values` it passed come on top), and returns where it stopped,
    /// as `AccumulatorTable::changed_rows` does.
    pub(crate) fn changed_groups(
        &self,
        range: Range<u32>,
        new_from: usize,
        first_values: &[u32],
        max: usize,
        into: &mut Vec<u32>,
    ) -> u32 {
        let Some(groups) = &self.groups else {
            return range.end;
        };
        let start = into.len();
        let stop = groups
            .table
            .changed_rows(range.clone(), new_from, max, into);
        let from = first_values.partition_point(|g| *g < range.start);
        let to = first_values.partition_point(|g| *g < stop);
        if to > from {
            into.extend_from_slice(&first_values[from..to]);
            let mut changed = into.split_off(start);
            changed.sort_unstable();
            changed.dedup();
            into.extend(changed);
        }
        stop
    }

    /// The groups, in ascending order, that had no value in some aggregate
    /// at the last hand-on (`unseen_then`, from
    /// [`unseen_groups`](Self::unseen_groups)) and have one now: they go
    /// on even if the value is the aggregate's identity (a sum of zeros).
    pub(crate) fn first_values_since(&self, unseen_then: &[Vec<u32>]) -> Vec<u32> {
        let Some(groups) = &self.groups else {
            return Vec::new();
        };
        let mut seen = Vec::new();
        for (accumulator, unseen) in groups.accumulators.iter().zip(unseen_then) {
            seen.extend(unseen.iter().filter(|g| accumulator.seen(**g)));
        }
        seen.sort_unstable();
        seen.dedup();
        seen
    }

    /// For each aggregate, the groups that have no value in it yet (all
    /// their rows so far were null), in ascending order.
    pub(crate) fn unseen_groups(&self) -> Vec<Vec<u32>> {
        let Some(groups) = &self.groups else {
            return Vec::new();
        };
        let unseen = |accumulator: &Accumulator| {
            let mut unseen = Vec::new();
            accumulator.unseen_into(&mut unseen);
            unseen
        };
        groups.accumulators.iter().map(unseen).collect()
    }

    /// The rows of `wanted`, put back to their identities as they are read.
    /// The groups stay: the same keys tend to come again after the barrier,
    /// and finding them in place costs less than adding them anew.
    pub(crate) fn take_partials(&mut self, wanted: &[u32]) -> Result<Option<RecordBatch>> {
        self.output_of(wanted, true)
    }

    /// Drops every group: the next batch starts from none.
    pub(crate) fn clear(&mut self) {
        self.groups = None;
        self.layout = None;
        // Group numbers start over: marks of the old groups mean nothing.
        if let Some(changed) = &mut self.changed {
            changed.clear();
        }
    }

    fn bind(&self, input: &Schema) -> Result<(Layout, Groups)> {
        let index_of = |name: &str| {
            input.index_of(name).map_err(|_| {
                Error::BadInput(format!(
                    "aggregate: column '{name}' is not in the input (columns: {})",
                    crate::error::field_list(input)
                ))
            })
        };
        let key_indices = self
            .keys
            .iter()
            .map(|k| index_of(k))
            .collect::<Result<Vec<_>>>()?;
        let mut fields: Vec<Field> = key_indices
            .iter()
            .map(|i| input.field(*i).clone().with_nullable(true))
            .collect();
        let mut input_indices = Vec::new();
        let mut input_types = Vec::new();
        let mut accumulators = Vec::new();
        for expr in self.spec.exprs() {
            let (function, column) = self.accumulated(expr);
            let index = column.map(index_of).transpose()?;
            let source_type = index.map(|i| input.field(i).data_type().clone());
            let slot = accumulators.len();
            // Integers aggregate as Int64, floats as Float64; count takes any column.
            let cast_to = match (function, &source_type) {
                (AggregateFunction::Count, _) => None,
                (_, Some(t)) if t.is_integer() => Some(DataType::Int64),
                (_, Some(t)) if t.is_floating() => Some(DataType::Float64),
                (function, Some(t)) => {
                    return Err(Error::BadInput(format!(
                        "aggregate '{}': {function:?} needs an integer or floating-point column, \
                         '{}' is {t}",
                        expr.output,
                        column.unwrap_or_default()
                    )));
                }
                (function, None) => {
                    return Err(Error::InvalidPipeline(format!(
                        "aggregate '{}': {function:?} needs an input column",
                        expr.output
                    )));
                }
            };
            let accumulator = Accumulator::for_type(
                function,
                index.is_some(),
                cast_to.as_ref().unwrap_or(&DataType::Int64),
                slot,
            )
            .ok_or_else(|| Error::Internal(format!("no accumulator for '{}'", expr.output)))?;
            let field = expr
                .output_field(cast_to.as_ref().or(source_type.as_ref()))
                .ok_or_else(|| Error::Internal(format!("no output type for '{}'", expr.output)))?;
            debug_assert_eq!(field.data_type(), &accumulator.output_type());
            fields.push(field);
            input_indices.push(index);
            input_types.push(cast_to);
            accumulators.push(accumulator);
        }
        let key_types: Vec<DataType> = key_indices
            .iter()
            .map(|i| input.field(*i).data_type().clone())
            .collect();
        let layout = Layout {
            key_indices,
            input_indices,
            input_types,
        };
        let groups = Groups::new(
            GroupIndex::new(&key_types)?,
            accumulators,
            Arc::new(Schema::new(fields)),
        );
        Ok((layout, groups))
    }
}

impl Operator for AggregateOperator {
    fn kind(&self) -> &str {
        "aggregate"
    }

    fn state_version(&self) -> Option<u32> {
        Some(1)
    }

    fn process(&mut self, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        if self.layout.is_none() {
            let (layout, fresh) = self.bind(&batch.schema())?;
            match &self.groups {
                None => self.groups = Some(fresh),
                Some(restored) => check_same_types(&restored.schema, &fresh.schema)?,
            }
            self.layout = Some(layout);
        }
        let layout = self.layout.as_ref().expect("bound above");
        let groups = self.groups.as_mut().expect("bound above");
        let keys: Vec<ArrayRef> = layout
            .key_indices
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        // Only a merge reads the tag: raw rows never carry one.
        let tagged = if self.merge { sender_of(&batch)? } else { None };
        match tagged {
            Some(tagged) => {
                self.senders
                    .assign(tagged, &keys, &mut groups.index, &mut self.scratch)?
            }
            None => groups.index.assign(&keys, &mut self.scratch)?,
        }
        let n_groups = groups.index.len();
        if let Some(changed) = &mut self.changed {
            changed.mark(&self.scratch, n_groups);
        }
        groups.table.resize(n_groups);
        let mut inputs = Vec::with_capacity(groups.accumulators.len());
        for (i, accumulator) in groups.accumulators.iter_mut().enumerate() {
            accumulator.resize(n_groups);
            inputs.push(match (layout.input_indices[i], &layout.input_types[i]) {
                (Some(index), Some(to)) if batch.column(index).data_type() != to => {
                    Some(cast(batch.column(index), to)?)
                }
                (Some(index), _) => Some(batch.column(index).clone()),
                (None, _) => None,
            });
        }
        let exprs = self.spec.exprs();
        let ops: Option<Vec<RowOp<'_>>> = groups
            .accumulators
            .iter()
            .zip(&inputs)
            .zip(exprs.iter())
            .map(|((a, input), expr)| a.row_op(input.as_ref(), &expr.output))
            .collect();
        if let Some(ops) = ops {
            let (cells, shift) = groups.table.cells();
            update_rows(cells, shift, &self.scratch, &ops)?;
            groups
                .accumulators
                .iter_mut()
                .for_each(Accumulator::mark_fresh_seen);
            return Ok(());
        }
        for ((accumulator, input), expr) in groups
            .accumulators
            .iter_mut()
            .zip(&inputs)
            .zip(exprs.iter())
        {
            accumulator.update(
                &mut groups.table,
                &self.scratch,
                input.as_ref(),
                &expr.output,
            )?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Collector) -> Result<()> {
        if let Some(batch) = self.output()? {
            let mut offset = 0;
            while offset < batch.num_rows() {
                let len = OUTPUT_BATCH_ROWS.min(batch.num_rows() - offset);
                out.emit(batch.slice(offset, len));
                offset += len;
            }
        }
        Ok(())
    }

    fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(changed) = &mut self.changed {
            changed.clear();
        }
        self.output()
    }

    fn track_changes(&mut self) -> bool {
        self.changed = Some(ChangedGroups::default());
        true
    }

    fn snapshot_changes(&mut self) -> Result<StateChanges> {
        let Some(changed) = &mut self.changed else {
            return Ok(StateChanges::Whole(self.snapshot()?));
        };
        let groups = changed.take();
        Ok(StateChanges::Changed(self.output_of(&groups, false)?))
    }

    /// One row per group, the keys first under their own names.
    fn state_keys(&self) -> Option<Vec<String>> {
        Some(self.keys.clone())
    }

    fn restore(&mut self, state: RecordBatch) -> Result<()> {
        // The restored groups are numbered anew.
        self.senders.clear();
        self.restore_state(state)
    }
}
