//! Keyed aggregation: count, sum, min and max per key, vectorised over Arrow arrays.
//!
//! Rows are mapped to dense group numbers (`group_index.rs`), then a
//! null-free batch updates every accumulator of a row in one pass
//! (`row_update.rs`); a batch with nulls runs one tight
//! loop per accumulator over its input column. Both write into a row-wise
//! table of every group's values (`accumulator_table.rs`). The state batch
//! is the output batch itself (keys, then one column per aggregate), so a
//! snapshot is a copy of the accumulator columns and a restore re-inserts the keys.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, PrimitiveArray};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use arrow::compute::{cast, is_not_null};
use arrow::datatypes::{
    ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Field, Float64Type, Int64Type, Schema,
    SchemaRef,
};
use arrow::record_batch::RecordBatch;

use super::accumulator_table::{AccumulatorTable, Word};
use super::group_index::GroupIndex;
use super::prefetch::{LOOKAHEAD, prefetch};
use super::row_update::{RowOp, update_rows};
use super::spare_columns::SpareColumns;
use crate::error::{Error, Result};
use crate::operator::{Collector, Operator};

/// Rows per batch emitted at the end of input.
const OUTPUT_BATCH_ROWS: usize = 65_536;

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateFunction {
    /// Number of rows (or of non-null values of a column).
    Count,
    /// Sum of the non-null values; null when there are none.
    Sum,
    /// Smallest non-null value.
    Min,
    /// Largest non-null value.
    Max,
}

/// One output column of an aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateExpr {
    /// The function.
    pub function: AggregateFunction,
    /// Its input column; `None` for count of rows.
    pub column: Option<String>,
    /// The output column's name.
    pub output: String,
}

/// The aggregates to compute per key.
///
/// Integer inputs are summed and compared as Int64 (an overflowing sum is an
/// error, not a wrap); floating-point inputs as Float64.
///
/// # Examples
///
/// ```
/// use tidewater_core::AggregateSpec;
/// let spec = AggregateSpec::new().count("count").sum("v", "sum_v").max("id", "max_id");
/// assert_eq!(spec.exprs().len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AggregateSpec {
    exprs: Vec<AggregateExpr>,
}

impl AggregateSpec {
    /// An empty spec.
    pub fn new() -> Self {
        Self::default()
    }

    fn with(mut self, function: AggregateFunction, column: Option<&str>, output: &str) -> Self {
        self.exprs.push(AggregateExpr {
            function,
            column: column.map(str::to_string),
            output: output.to_string(),
        });
        self
    }

    /// Counts rows, into `output`.
    pub fn count(self, output: &str) -> Self {
        self.with(AggregateFunction::Count, None, output)
    }

    /// Counts the non-null values of `column`, into `output`.
    pub fn count_values(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Count, Some(column), output)
    }

    /// Sums `column`, into `output`.
    pub fn sum(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Sum, Some(column), output)
    }

    /// The minimum of `column`, into `output`.
    pub fn min(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Min, Some(column), output)
    }

    /// The maximum of `column`, into `output`.
    pub fn max(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Max, Some(column), output)
    }

    /// The aggregates, in output order.
    pub fn exprs(&self) -> &[AggregateExpr] {
        &self.exprs
    }
}

/// One aggregate over one numeric type; its values live in the
/// [`AccumulatorTable`] at `slot`.
struct Numeric<T: ArrowPrimitiveType> {
    function: AggregateFunction,
    slot: usize,
    /// Whether a group got a non-null value (else its output is null).
    seen: Vec<bool>,
    /// Groups not seen yet.
    unseen: usize,
    /// Groups from this index on were added by the last resize.
    fresh_from: usize,
    _type: std::marker::PhantomData<T>,
}

impl<T: ArrowPrimitiveType> Numeric<T>
where
    T::Native: Word,
{
    fn new(function: AggregateFunction, slot: usize) -> Self {
        Numeric {
            function,
            slot,
            seen: Vec::new(),
            unseen: 0,
            fresh_from: 0,
            _type: std::marker::PhantomData,
        }
    }

    /// The value a group starts from: the identity of its function, so the
    /// loops below need no "first value" branch.
    fn identity(&self) -> T::Native {
        match self.function {
            AggregateFunction::Min => T::Native::MAX_TOTAL_ORDER,
            AggregateFunction::Max => T::Native::MIN_TOTAL_ORDER,
            _ => T::Native::default(),
        }
    }

    fn resize(&mut self, groups: usize) {
        self.fresh_from = self.seen.len();
        self.seen.resize(groups, false);
        self.unseen += groups - self.fresh_from;
    }

    fn update(
        &mut self,
        table: &mut AccumulatorTable,
        groups: &[u32],
        input: &PrimitiveArray<T>,
        output: &str,
    ) -> Result<()> {
        let nulls = input.nulls().filter(|n| n.null_count() > 0);
        let (cells, shift) = table.cells();
        let cell = Cell {
            shift,
            slot: self.slot,
        };
        // Without nulls, every row's group gets a value. When only the groups
        // this batch added are unseen, they are exactly the ones it sees: mark
        // them in bulk and keep the per-row loops free of `seen` writes.
        if nulls.is_none() && self.only_fresh_unseen() {
            fold::<T>(
                self.function,
                cells,
                cell,
                groups,
                input.values(),
                output,
                |_, _| true,
            )?;
            self.mark_fresh_seen();
            return Ok(());
        }
        let seen = &mut self.seen;
        let mut newly_seen = 0;
        fold::<T>(
            self.function,
            cells,
            cell,
            groups,
            input.values(),
            output,
            |i, g| {
                if nulls.is_some_and(|n| n.is_null(i)) {
                    return false;
                }
                newly_seen += usize::from(!seen[g]);
                seen[g] = true;
                true
            },
        )?;
        self.unseen -= newly_seen;
        Ok(())
    }

    /// Whether a null-free batch can skip per-row `seen` bookkeeping: the
    /// groups not seen yet are exactly the ones the last resize added.
    fn only_fresh_unseen(&self) -> bool {
        self.unseen == self.seen.len() - self.fresh_from
    }

    /// Notes that a null-free batch gave every group a value.
    fn mark_fresh_seen(&mut self) {
        self.seen[self.fresh_from..].fill(true);
        self.unseen = 0;
    }

    /// The output column from this accumulator's words, null where a group
    /// got no value.
    fn to_array(&self, values: Buffer) -> ArrayRef {
        let nulls =
            (self.unseen > 0).then(|| NullBuffer::new(BooleanBuffer::from(self.seen.as_slice())));
        let values = ScalarBuffer::new(values, 0, self.seen.len());
        Arc::new(PrimitiveArray::<T>::new(values, nulls))
    }

    fn restore(&mut self, table: &mut AccumulatorTable, array: &ArrayRef) -> Result<()> {
        let array = array.as_primitive_opt::<T>().ok_or_else(|| {
            Error::Corrupt(format!(
                "aggregate state column has type {}",
                array.data_type()
            ))
        })?;
        let identity = self.identity();
        self.seen = (0..array.len()).map(|i| array.is_valid(i)).collect();
        self.unseen = self.seen.iter().filter(|seen| !**seen).count();
        self.fresh_from = array.len();
        table.set_column(
            self.slot,
            array
                .values()
                .iter()
                .zip(&self.seen)
                .map(|(v, seen)| if *seen { *v } else { identity }),
        );
        Ok(())
    }
}

/// Where one accumulator's value of a group is in the table's words.
#[derive(Clone, Copy)]
struct Cell {
    shift: u32,
    slot: usize,
}

impl Cell {
    #[inline]
    fn of(self, group: usize) -> usize {
        (group << self.shift) | self.slot
    }

    /// Prefetches the cell of the group `LOOKAHEAD` rows after row `i`.
    #[inline(always)]
    fn prefetch_ahead(self, cells: &[u64], groups: &[u32], i: usize) {
        if let Some(&ahead) = groups.get(i + LOOKAHEAD) {
            prefetch(cells, self.of(ahead as usize));
        }
    }
}

/// Folds `input` into the groups' cells with `function`, for the rows that
/// `take(row, group)` accepts (it also notes which groups it saw). The
/// all-valid case passes `|_, _| true` and compiles to loops without checks.
fn fold<T: ArrowPrimitiveType>(
    function: AggregateFunction,
    cells: &mut [u64],
    cell: Cell,
    groups: &[u32],
    input: &[T::Native],
    output: &str,
    mut take: impl FnMut(usize, usize) -> bool,
) -> Result<()>
where
    T::Native: Word,
{
    let rows = groups.iter().zip(input).enumerate();
    match function {
        AggregateFunction::Sum => {
            for (i, (group, value)) in rows {
                cell.prefetch_ahead(cells, groups, i);
                let g = *group as usize;
                if take(i, g) {
                    let at = &mut cells[cell.of(g)];
                    let sum = T::Native::from_word(*at).add_checked(*value).map_err(|_| {
                        Error::BadInput(format!(
                            "sum into '{output}' overflowed {}: aggregate a wider type",
                            T::DATA_TYPE
                        ))
                    })?;
                    *at = sum.to_word();
                }
            }
        }
        AggregateFunction::Min => {
            for (i, (group, value)) in rows {
                cell.prefetch_ahead(cells, groups, i);
                let g = *group as usize;
                if take(i, g) {
                    let at = &mut cells[cell.of(g)];
                    if value.is_lt(T::Native::from_word(*at)) {
                        *at = value.to_word();
                    }
                }
            }
        }
        AggregateFunction::Max => {
            for (i, (group, value)) in rows {
                cell.prefetch_ahead(cells, groups, i);
                let g = *group as usize;
                if take(i, g) {
                    let at = &mut cells[cell.of(g)];
                    if value.is_gt(T::Native::from_word(*at)) {
                        *at = value.to_word();
                    }
                }
            }
        }
        AggregateFunction::Count => unreachable!("count has its own accumulator"),
    }
    Ok(())
}

/// One aggregate; its values are in the [`AccumulatorTable`].
enum Accumulator {
    CountRows(usize),
    CountValues(usize),
    Int(Numeric<Int64Type>),
    Float(Numeric<Float64Type>),
}

impl Accumulator {
    /// The accumulator for `function` over an input of `input_type` (after
    /// the cast to Int64 or Float64), at table slot `slot`; `None` when the
    /// type cannot be aggregated.
    fn for_type(
        function: AggregateFunction,
        has_column: bool,
        input_type: &DataType,
        slot: usize,
    ) -> Option<Self> {
        Some(match (function, has_column) {
            (AggregateFunction::Count, false) => Accumulator::CountRows(slot),
            (AggregateFunction::Count, true) => Accumulator::CountValues(slot),
            _ if input_type.is_integer() => Accumulator::Int(Numeric::new(function, slot)),
            _ if input_type.is_floating() => Accumulator::Float(Numeric::new(function, slot)),
            _ => return None,
        })
    }

    fn output_type(&self) -> DataType {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) | Accumulator::Int(_) => {
                DataType::Int64
            }
            Accumulator::Float(_) => DataType::Float64,
        }
    }

    /// The word a new group starts with.
    fn identity(&self) -> u64 {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => 0,
            Accumulator::Int(n) => n.identity().to_word(),
            Accumulator::Float(n) => n.identity().to_word(),
        }
    }

    fn resize(&mut self, groups: usize) {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => {}
            Accumulator::Int(n) => n.resize(groups),
            Accumulator::Float(n) => n.resize(groups),
        }
    }

    fn update(
        &mut self,
        table: &mut AccumulatorTable,
        groups: &[u32],
        input: Option<&ArrayRef>,
        output: &str,
    ) -> Result<()> {
        match (self, input) {
            (Accumulator::CountRows(slot), _) => {
                let (cells, shift) = table.cells();
                let cell = Cell { shift, slot: *slot };
                for (i, group) in groups.iter().enumerate() {
                    cell.prefetch_ahead(cells, groups, i);
                    cells[cell.of(*group as usize)] += 1;
                }
            }
            (Accumulator::CountValues(slot), Some(input)) => {
                let (cells, shift) = table.cells();
                let cell = Cell { shift, slot: *slot };
                for (i, group) in groups.iter().enumerate() {
                    cell.prefetch_ahead(cells, groups, i);
                    cells[cell.of(*group as usize)] += u64::from(input.is_valid(i));
                }
            }
            (Accumulator::Int(n), Some(input)) => {
                n.update(table, groups, input.as_primitive(), output)?
            }
            (Accumulator::Float(n), Some(input)) => {
                n.update(table, groups, input.as_primitive(), output)?
            }
            _ => return Err(Error::Internal("aggregate input column missing".into())),
        }
        Ok(())
    }

    /// This accumulator's part of a one-pass update of a batch, when its
    /// input has no nulls and needs no per-row bookkeeping.
    fn row_op<'a>(&self, input: Option<&'a ArrayRef>, output: &'a str) -> Option<RowOp<'a>> {
        let null_free = input.is_none_or(|input| input.null_count() == 0);
        if !null_free {
            return None;
        }
        Some(match (self, input) {
            (Accumulator::CountRows(slot) | Accumulator::CountValues(slot), _) => {
                RowOp::Count { slot: *slot }
            }
            (Accumulator::Int(n), Some(input)) if n.only_fresh_unseen() => {
                let values = input.as_primitive_opt::<Int64Type>()?.values();
                let slot = n.slot;
                match n.function {
                    AggregateFunction::Sum => RowOp::IntSum {
                        slot,
                        values,
                        output,
                    },
                    AggregateFunction::Min => RowOp::IntMin { slot, values },
                    AggregateFunction::Max => RowOp::IntMax { slot, values },
                    AggregateFunction::Count => return None,
                }
            }
            (Accumulator::Float(n), Some(input)) if n.only_fresh_unseen() => {
                let values = input.as_primitive_opt::<Float64Type>()?.values();
                let slot = n.slot;
                match n.function {
                    AggregateFunction::Sum => RowOp::FloatSum { slot, values },
                    AggregateFunction::Min => RowOp::FloatMin { slot, values },
                    AggregateFunction::Max => RowOp::FloatMax { slot, values },
                    AggregateFunction::Count => return None,
                }
            }
            _ => return None,
        })
    }

    /// After a one-pass update: every group of the batch got a value.
    fn mark_fresh_seen(&mut self) {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => {}
            Accumulator::Int(n) => n.mark_fresh_seen(),
            Accumulator::Float(n) => n.mark_fresh_seen(),
        }
    }

    /// The output column from this accumulator's words (one per group, as
    /// [`Word`]s of its type).
    fn to_array(&self, values: Buffer, groups: usize) -> ArrayRef {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => {
                Arc::new(PrimitiveArray::<Int64Type>::new(
                    ScalarBuffer::new(values, 0, groups),
                    None,
                ))
            }
            Accumulator::Int(n) => n.to_array(values),
            Accumulator::Float(n) => n.to_array(values),
        }
    }

    fn restore(&mut self, table: &mut AccumulatorTable, array: &ArrayRef) -> Result<()> {
        match self {
            Accumulator::CountRows(slot) | Accumulator::CountValues(slot) => {
                let array = array.as_primitive_opt::<Int64Type>().ok_or_else(|| {
                    Error::Corrupt(format!("count state column has type {}", array.data_type()))
                })?;
                table.set_column(*slot, array.values().iter().copied());
                Ok(())
            }
            Accumulator::Int(n) => n.restore(table, array),
            Accumulator::Float(n) => n.restore(table, array),
        }
    }
}

/// Where the inputs sit in the incoming batches, fixed by the first batch.
struct Layout {
    key_indices: Vec<usize>,
    input_indices: Vec<Option<usize>>,
    /// What each input column is cast to before accumulation.
    input_types: Vec<Option<DataType>>,
}

/// The partial aggregates: what a checkpoint stores.
struct Groups {
    index: GroupIndex,
    accumulators: Vec<Accumulator>,
    table: AccumulatorTable,
    schema: SchemaRef,
}

impl Groups {
    fn new(index: GroupIndex, accumulators: Vec<Accumulator>, schema: SchemaRef) -> Self {
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
    keys: Vec<String>,
    spec: Arc<AggregateSpec>,
    /// The input holds partial aggregates (one column per output, named as
    /// it) from local pre-aggregations, not raw rows.
    merge: bool,
    layout: Option<Layout>,
    groups: Option<Groups>,
    scratch: Vec<u32>,
    /// Output column memory kept across snapshots.
    spare: SpareColumns,
}

impl AggregateOperator {
    /// An aggregation of `spec` grouped by the `keys` columns.
    pub fn new(keys: Vec<String>, spec: Arc<AggregateSpec>) -> Result<Self> {
        if keys.is_empty() {
            return Err(Error::InvalidPipeline(
                "key_by needs at least one key column".into(),
            ));
        }
        if spec.exprs.is_empty() {
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
    fn accumulated<'a>(&self, expr: &'a AggregateExpr) -> (AggregateFunction, Option<&'a str>) {
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
    /// schema: what [`emit_and_clear`](Self::emit_and_clear) would emit if
    /// every row had a key of its own.
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

    /// Emits every group and starts again from none.
    pub(crate) fn emit_and_clear(&mut self, out: &mut Collector) -> Result<()> {
        self.finish(out)?;
        self.groups = None;
        self.layout = None;
        Ok(())
    }

    fn bind(&self, input: &Schema) -> Result<(Layout, Groups)> {
        let index_of = |name: &str| {
            input.index_of(name).map_err(|_| {
                Error::BadInput(format!(
                    "aggregate: column '{name}' is not in the input (columns: {})",
                    field_names(input)
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
        for expr in &self.spec.exprs {
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
            let nullable = !matches!(expr.function, AggregateFunction::Count);
            fields.push(Field::new(
                &expr.output,
                accumulator.output_type(),
                nullable,
            ));
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

    /// Every group as one batch: keys, then one column per aggregate.
    fn output(&mut self) -> Result<Option<RecordBatch>> {
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
        groups.index.assign(&keys, &mut self.scratch)?;
        let n_groups = groups.index.len();
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
        let exprs = &self.spec.exprs;
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
        self.output()
    }

    fn restore(&mut self, state: RecordBatch) -> Result<()> {
        // The state's schema stands in for the input's until the first batch:
        // keys keep their types, and each aggregate's type picks its accumulator.
        let schema = state.schema();
        let n_keys = self.keys.len();
        if schema.fields().len() != n_keys + self.spec.exprs.len() {
            return Err(Error::Corrupt(format!(
                "aggregate state has {} columns, the aggregation needs {}",
                schema.fields().len(),
                n_keys + self.spec.exprs.len()
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
        for (i, expr) in self.spec.exprs.iter().enumerate() {
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

fn check_same_types(restored: &Schema, now: &Schema) -> Result<()> {
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
            field_names(restored),
            field_names(now)
        )))
    }
}

fn field_names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(keys: Vec<i64>, values: Vec<Option<f64>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Float64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(Float64Array::from(values)),
            ],
        )
        .unwrap()
    }

    /// (key, sum, max) per group, `None` where a group saw only nulls.
    fn groups(op: &mut AggregateOperator) -> Vec<(i64, Option<f64>, Option<f64>)> {
        let out = op.output().unwrap().unwrap();
        let k = out.column(0).as_primitive::<Int64Type>();
        let sum = out.column(1).as_primitive::<Float64Type>();
        let max = out.column(2).as_primitive::<Float64Type>();
        let mut rows: Vec<_> = (0..out.num_rows())
            .map(|i| {
                let get = |a: &PrimitiveArray<Float64Type>| a.is_valid(i).then(|| a.value(i));
                (k.value(i), get(sum), get(max))
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        rows
    }

    #[test]
    fn groups_with_only_nulls_stay_null_across_batches_with_and_without_nulls() {
        let spec = Arc::new(AggregateSpec::new().sum("v", "sum_v").max("v", "max_v"));
        let mut op = AggregateOperator::new(vec!["k".into()], spec).unwrap();
        let mut out = Collector::default();
        // Key 2 sees only a null; keys 1 and 3 see values.
        op.process(batch(vec![1, 2], vec![Some(1.0), None]), &mut out)
            .unwrap();
        // No nulls; key 3 is new, key 2 is not touched.
        op.process(batch(vec![1, 3], vec![Some(2.0), Some(5.0)]), &mut out)
            .unwrap();
        assert_eq!(
            groups(&mut op),
            vec![
                (1, Some(3.0), Some(2.0)),
                (2, None, None),
                (3, Some(5.0), Some(5.0))
            ]
        );
        // Now key 2 gets a value, in a batch without nulls.
        op.process(batch(vec![2, 4], vec![Some(-1.0), Some(0.5)]), &mut out)
            .unwrap();
        assert_eq!(groups(&mut op)[1], (2, Some(-1.0), Some(-1.0)));
        // Restored state keeps the null group null.
        let mut restored = AggregateOperator::new(
            vec!["k".into()],
            Arc::new(AggregateSpec::new().sum("v", "sum_v").max("v", "max_v")),
        )
        .unwrap();
        let mut first = AggregateOperator::new(
            vec!["k".into()],
            Arc::new(AggregateSpec::new().sum("v", "sum_v").max("v", "max_v")),
        )
        .unwrap();
        first.process(batch(vec![7], vec![None]), &mut out).unwrap();
        restored
            .restore(first.snapshot().unwrap().unwrap())
            .unwrap();
        restored
            .process(batch(vec![8], vec![Some(1.0)]), &mut out)
            .unwrap();
        assert_eq!(
            groups(&mut restored),
            vec![(7, None, None), (8, Some(1.0), Some(1.0))]
        );
    }

    #[test]
    fn every_function_matches_a_plain_fold_across_one_pass_and_per_column_batches() {
        let spec = AggregateSpec::new()
            .count("n")
            .sum("i", "sum_i")
            .min("i", "min_i")
            .max("i", "max_i")
            .sum("f", "sum_f")
            .min("f", "min_f")
            .max("f", "max_f")
            .count_values("f", "n_f");
        let mut op = AggregateOperator::new(vec!["k".into()], Arc::new(spec)).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
        ]));
        // (key, i, f) rows; the second batch has a null, so it takes the
        // per-column loops while the others take the one-pass loop.
        let batches: Vec<Vec<(i64, i64, Option<f64>)>> = vec![
            (0..500)
                .map(|r| (r % 37, r * 7 - 1000, Some(r as f64 / 3.0)))
                .collect(),
            (0..300)
                .map(|r| (r % 53, 5 - r, (r != 10).then_some(-(r as f64))))
                .collect(),
            (0..400)
                .map(|r| (r % 41, r * r, Some(r as f64 * 1.5)))
                .collect(),
        ];
        let mut expected = std::collections::BTreeMap::new();
        let mut out = Collector::default();
        for rows in &batches {
            for &(k, i, f) in rows {
                let e = expected.entry(k).or_insert((
                    0i64,
                    0i64,
                    i64::MAX,
                    i64::MIN,
                    0.0f64,
                    f64::MAX,
                    f64::MIN,
                    0i64,
                ));
                e.0 += 1;
                e.1 += i;
                e.2 = e.2.min(i);
                e.3 = e.3.max(i);
                if let Some(f) = f {
                    e.4 += f;
                    e.5 = e.5.min(f);
                    e.6 = e.6.max(f);
                    e.7 += 1;
                }
            }
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                    Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2))),
                ],
            )
            .unwrap();
            op.process(batch, &mut out).unwrap();
        }
        let state = op.output().unwrap().unwrap();
        let int = |c: usize, row: usize| state.column(c).as_primitive::<Int64Type>().value(row);
        let float = |c: usize, row: usize| state.column(c).as_primitive::<Float64Type>().value(row);
        assert_eq!(state.num_rows(), expected.len());
        for row in 0..state.num_rows() {
            let e = expected[&int(0, row)];
            assert_eq!(
                (
                    int(1, row),
                    int(2, row),
                    int(3, row),
                    int(4, row),
                    int(8, row)
                ),
                (e.0, e.1, e.2, e.3, e.7)
            );
            assert!(
                (float(5, row) - e.4).abs() < 1e-9,
                "sum_f of key {}",
                int(0, row)
            );
            assert_eq!((float(6, row), float(7, row)), (e.5, e.6));
        }
    }

    #[test]
    fn an_overflowing_int_sum_is_named_in_either_loop() {
        for with_null in [false, true] {
            let spec = Arc::new(AggregateSpec::new().sum("i", "total"));
            let mut op = AggregateOperator::new(vec!["k".into()], spec).unwrap();
            let schema = Arc::new(Schema::new(vec![
                Field::new("k", DataType::Int64, false),
                Field::new("i", DataType::Int64, true),
            ]));
            // A null sends the batch down the per-column loops.
            let values = if with_null {
                vec![Some(i64::MAX), None, Some(1)]
            } else {
                vec![Some(i64::MAX), Some(1)]
            };
            let keys = vec![1; values.len()];
            let batch = RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(Int64Array::from(keys)),
                    Arc::new(Int64Array::from(values)),
                ],
            )
            .unwrap();
            let err = op.process(batch, &mut Collector::default()).unwrap_err();
            assert!(
                err.to_string()
                    .contains("sum into 'total' overflowed Int64"),
                "with_null {with_null}: {err}"
            );
        }
    }
}
