//! The accumulator kernels: one aggregate's values of every group in the
//! row-wise table, updated per batch in tight loops, and read back out.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use arrow::datatypes::{ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Float64Type, Int64Type};

use super::super::accumulator_table::{AccumulatorTable, Word};
use super::super::prefetch::{LOOKAHEAD, prefetch};
use super::super::row_update::RowOp;
use super::spec::AggregateFunction;
use crate::error::{Error, Result};

/// One aggregate over one numeric type; its values live in the
/// [`AccumulatorTable`] at `slot`.
pub(super) struct Numeric<T: ArrowPrimitiveType> {
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
    pub(super) fn new(function: AggregateFunction, slot: usize) -> Self {
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
    pub(super) fn identity(&self) -> T::Native {
        match self.function {
            AggregateFunction::Min => T::Native::MAX_TOTAL_ORDER,
            AggregateFunction::Max => T::Native::MIN_TOTAL_ORDER,
            _ => T::Native::default(),
        }
    }

    pub(super) fn resize(&mut self, groups: usize) {
        self.fresh_from = self.seen.len();
        self.seen.resize(groups, false);
        self.unseen += groups - self.fresh_from;
    }

    pub(super) fn update(
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
    pub(super) fn only_fresh_unseen(&self) -> bool {
        self.unseen == self.seen.len() - self.fresh_from
    }

    /// The groups that got no value yet, appended to `into`.
    pub(super) fn unseen_into(&self, into: &mut Vec<u32>) {
        if self.unseen > 0 {
            let unseen = self.seen.iter().enumerate().filter(|(_, seen)| !**seen);
            into.extend(unseen.map(|(g, _)| g as u32));
        }
    }

    /// Notes that a null-free batch gave every group a value.
    pub(super) fn mark_fresh_seen(&mut self) {
        self.seen[self.fresh_from..].fill(true);
        self.unseen = 0;
    }

    /// The output column from this accumulator's words, null where a group
    /// got no value.
    pub(super) fn to_array(&self, values: Buffer) -> ArrayRef {
        let nulls =
            (self.unseen > 0).then(|| NullBuffer::new(BooleanBuffer::from(self.seen.as_slice())));
        let values = ScalarBuffer::new(values, 0, self.seen.len());
        Arc::new(PrimitiveArray::<T>::new(values, nulls))
    }

    /// The output column of `groups` only, from their words in that order.
    pub(super) fn to_array_of(&self, values: Buffer, groups: &[u32]) -> ArrayRef {
        let nulls = (self.unseen > 0).then(|| {
            groups
                .iter()
                .map(|g| self.seen[*g as usize])
                .collect::<NullBuffer>()
        });
        let values = ScalarBuffer::new(values, 0, groups.len());
        Arc::new(PrimitiveArray::<T>::new(values, nulls))
    }

    /// Numbers the groups anew, as [`AccumulatorTable::renumber`] does.
    pub(super) fn renumber(&mut self, order: &[u32]) {
        self.seen = order.iter().map(|g| self.seen[*g as usize]).collect();
        self.fresh_from = self.seen.len();
    }

    pub(super) fn restore(&mut self, table: &mut AccumulatorTable, array: &ArrayRef) -> Result<()> {
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
pub(super) struct Cell {
    shift: u32,
    slot: usize,
}

impl Cell {
    #[inline]
    pub(super) fn of(self, group: usize) -> usize {
        (group << self.shift) | self.slot
    }

    /// Prefetches the cell of the group `LOOKAHEAD` rows after row `i`.
    #[inline(always)]
    pub(super) fn prefetch_ahead(self, cells: &[u64], groups: &[u32], i: usize) {
        if let Some(&ahead) = groups.get(i + LOOKAHEAD) {
            prefetch(cells, self.of(ahead as usize));
        }
    }
}

/// Folds `input` into the groups' cells with `function`, for the rows that
/// `take(row, group)` accepts (it also notes which groups it saw). The
/// all-valid case passes `|_, _| true` and compiles to loops without checks.
pub(super) fn fold<T: ArrowPrimitiveType>(
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
pub(super) enum Accumulator {
    CountRows(usize),
    CountValues(usize),
    Int(Numeric<Int64Type>),
    Float(Numeric<Float64Type>),
}

impl Accumulator {
    /// The accumulator for `function` over an input of `input_type` (after
    /// the cast to Int64 or Float64), at table slot `slot`; `None` when the
    /// type cannot be aggregated.
    pub(super) fn for_type(
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

    pub(super) fn output_type(&self) -> DataType {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) | Accumulator::Int(_) => {
                DataType::Int64
            }
            Accumulator::Float(_) => DataType::Float64,
        }
    }

    /// The word a new group starts with.
    pub(super) fn identity(&self) -> u64 {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => 0,
            Accumulator::Int(n) => n.identity().to_word(),
            Accumulator::Float(n) => n.identity().to_word(),
        }
    }

    pub(super) fn resize(&mut self, groups: usize) {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => {}
            Accumulator::Int(n) => n.resize(groups),
            Accumulator::Float(n) => n.resize(groups),
        }
    }

    pub(super) fn update(
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
    pub(super) fn row_op<'a>(
        &self,
        input: Option<&'a ArrayRef>,
        output: &'a str,
    ) -> Option<RowOp<'a>> {
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
    /// Whether group `g` has a value (a count always has one).
    pub(super) fn seen(&self, g: u32) -> bool {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => true,
            Accumulator::Int(n) => n.seen[g as usize],
            Accumulator::Float(n) => n.seen[g as usize],
        }
    }

    /// Numbers the groups anew (group `order[i]` becomes group `i`) in
    /// what it keeps outside the table.
    pub(super) fn renumber(&mut self, order: &[u32]) {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => {}
            Accumulator::Int(n) => n.renumber(order),
            Accumulator::Float(n) => n.renumber(order),
        }
    }

    /// The groups that have no value yet, appended to `into`.
    pub(super) fn unseen_into(&self, into: &mut Vec<u32>) {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => {}
            Accumulator::Int(n) => n.unseen_into(into),
            Accumulator::Float(n) => n.unseen_into(into),
        }
    }

    pub(super) fn mark_fresh_seen(&mut self) {
        match self {
            Accumulator::CountRows(_) | Accumulator::CountValues(_) => {}
            Accumulator::Int(n) => n.mark_fresh_seen(),
            Accumulator::Float(n) => n.mark_fresh_seen(),
        }
    }

    /// The output column from this accumulator's words (one per group, as
    /// [`Word`]s of its type).
    pub(super) fn to_array(&self, values: Buffer, groups: usize) -> ArrayRef {
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

    /// The output column of `groups` only (see [`to_array`](Self::to_array)).
    pub(super) fn to_array_of(&self, values: Buffer, groups: &[u32]) -> ArrayRef {
        match self {
            Accumulator::Int(n) => n.to_array_of(values, groups),
            Accumulator::Float(n) => n.to_array_of(values, groups),
            counts => counts.to_array(values, groups.len()),
        }
    }

    pub(super) fn restore(&mut self, table: &mut AccumulatorTable, array: &ArrayRef) -> Result<()> {
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
