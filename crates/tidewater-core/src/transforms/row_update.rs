//! One pass over a batch's rows for all of an aggregate's accumulators.
//!
//! A group's accumulators share one row of the [`AccumulatorTable`], at most
//! a cache line. One loop per accumulator loads that row once per
//! accumulator, and at 1M groups each load misses the cache; one loop per
//! row loads it once. The per-accumulator loops remain for batches with
//! nulls, which need per-row bookkeeping.
//!
//! [`AccumulatorTable`]: super::accumulator_table::AccumulatorTable

use arrow::datatypes::ArrowNativeTypeOp;

use super::prefetch::{LOOKAHEAD, prefetch};
use crate::error::{Error, Result};

/// What one accumulator does with a row, over a null-free input.
#[derive(Clone, Copy)]
pub(crate) enum RowOp<'a> {
    /// Add one (count of rows, or of a column without nulls).
    Count { slot: usize },
    /// Add the value, refusing overflow (named after `output`).
    IntSum {
        slot: usize,
        values: &'a [i64],
        output: &'a str,
    },
    /// Keep the smaller value.
    IntMin { slot: usize, values: &'a [i64] },
    /// Keep the larger value.
    IntMax { slot: usize, values: &'a [i64] },
    /// Add the value.
    FloatSum { slot: usize, values: &'a [f64] },
    /// Keep the smaller value (total order, as the per-column loops).
    FloatMin { slot: usize, values: &'a [f64] },
    /// Keep the larger value (total order).
    FloatMax { slot: usize, values: &'a [f64] },
}

/// Applies every op to each row `i`, in the table row of group `groups[i]`
/// (`cells[(group << shift) | slot]`). Every op's values have a value per row.
pub(crate) fn update_rows(
    cells: &mut [u64],
    shift: u32,
    groups: &[u32],
    ops: &[RowOp<'_>],
) -> Result<()> {
    for (i, &group) in groups.iter().enumerate() {
        if let Some(&ahead) = groups.get(i + LOOKAHEAD) {
            prefetch(cells, (ahead as usize) << shift);
        }
        let row = (group as usize) << shift;
        for op in ops {
            match *op {
                RowOp::Count { slot } => cells[row | slot] += 1,
                RowOp::IntSum {
                    slot,
                    values,
                    output,
                } => {
                    let at = &mut cells[row | slot];
                    let sum = (*at as i64).add_checked(values[i]).map_err(|_| {
                        Error::BadInput(format!(
                            "sum into '{output}' overflowed Int64: aggregate a wider type"
                        ))
                    })?;
                    *at = sum as u64;
                }
                RowOp::IntMin { slot, values } => {
                    let at = &mut cells[row | slot];
                    *at = (*at as i64).min(values[i]) as u64;
                }
                RowOp::IntMax { slot, values } => {
                    let at = &mut cells[row | slot];
                    *at = (*at as i64).max(values[i]) as u64;
                }
                RowOp::FloatSum { slot, values } => {
                    let at = &mut cells[row | slot];
                    *at = (f64::from_bits(*at) + values[i]).to_bits();
                }
                RowOp::FloatMin { slot, values } => {
                    let at = &mut cells[row | slot];
                    if values[i].is_lt(f64::from_bits(*at)) {
                        *at = values[i].to_bits();
                    }
                }
                RowOp::FloatMax { slot, values } => {
                    let at = &mut cells[row | slot];
                    if values[i].is_gt(f64::from_bits(*at)) {
                        *at = values[i].to_bits();
                    }
                }
            }
        }
    }
    Ok(())
}
