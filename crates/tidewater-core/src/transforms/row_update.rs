//! One pass over a batch's rows for all of an aggregate's accumulators, a
//! block of rows at a time.
//!
//! A group's accumulators share one row of the [`AccumulatorTable`], at most
//! a cache line. One loop per accumulator over the whole batch loads that
//! row once per accumulator, and at 1M groups each load misses the cache.
//! One loop per row loads it once, but matches on every accumulator's op
//! for every row, which cost more than the loads where the rows are near
//! each other (a merge's). Blocks of [`BLOCK`] rows do both: each op runs
//! over the block in a loop of its own, the first op's loads bring the
//! block's rows in (asked for while the block before was updated), and the
//! others find them in the first-level cache. The per-accumulator loops
//! remain for batches with nulls, which need per-row bookkeeping.
//!
//! [`AccumulatorTable`]: super::accumulator_table::AccumulatorTable

use std::ops::Range;

use arrow::datatypes::ArrowNativeTypeOp;

use super::prefetch::prefetch;
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

/// Rows updated together, op by op: 32 rows of 4 words are 1 KiB, well
/// inside the first-level cache. Against one row at a time, in concurrent
/// pairs at 1M keys (docs/benchmarks.md, forty-second session): 2.3% less
/// CPU with checkpoints off, 3.5% less with a checkpoint every ~500 ms,
/// where the merge's rows come near each other. In a micro-benchmark, 32
/// rows were as fast as 64 or 128.
const BLOCK: usize = 32;

/// Applies every op to each row `i`, in the table row of group `groups[i]`
/// (`cells[(group << shift) | slot]`). Every op's values have a value per row.
/// The rows go a [`BLOCK`] at a time, and the next block's table rows are
/// asked for while this one's are updated. Each op touches its own slot, so
/// the order of ops within a block changes no result. An error (an integer
/// sum that overflows) leaves some of the batch's rows applied, as one row
/// at a time did: the job fails, and a resume starts from its checkpoint.
pub(crate) fn update_rows(
    cells: &mut [u64],
    shift: u32,
    groups: &[u32],
    ops: &[RowOp<'_>],
) -> Result<()> {
    let mut from = 0;
    while from < groups.len() {
        let to = (from + BLOCK).min(groups.len());
        for &ahead in &groups[to..(to + BLOCK).min(groups.len())] {
            prefetch(cells, (ahead as usize) << shift);
        }
        let block = &groups[from..to];
        for op in ops {
            apply(*op, cells, shift, block, from..to)?;
        }
        from = to;
    }
    Ok(())
}

/// Applies `op` to the rows of `block`, whose values are at `rows` of the op's.
#[inline(always)]
fn apply(
    op: RowOp<'_>,
    cells: &mut [u64],
    shift: u32,
    block: &[u32],
    rows: Range<usize>,
) -> Result<()> {
    let at = Rows {
        cells,
        shift,
        block,
    };
    match op {
        RowOp::Count { slot } => {
            for group in block {
                at.cells[((*group as usize) << shift) | slot] += 1;
            }
            Ok(())
        }
        RowOp::IntSum {
            slot,
            values,
            output,
        } => at.each(slot, &values[rows], |cell, v| {
            let sum = (*cell as i64).add_checked(v).map_err(|_| {
                Error::BadInput(format!(
                    "sum into '{output}' overflowed Int64: aggregate a wider type"
                ))
            })?;
            *cell = sum as u64;
            Ok(())
        }),
        RowOp::IntMin { slot, values } => at.each(slot, &values[rows], |cell, v| {
            *cell = (*cell as i64).min(v) as u64;
            Ok(())
        }),
        RowOp::IntMax { slot, values } => at.each(slot, &values[rows], |cell, v| {
            *cell = (*cell as i64).max(v) as u64;
            Ok(())
        }),
        RowOp::FloatSum { slot, values } => at.each(slot, &values[rows], |cell, v| {
            *cell = (f64::from_bits(*cell) + v).to_bits();
            Ok(())
        }),
        RowOp::FloatMin { slot, values } => at.each(slot, &values[rows], |cell, v| {
            if v.is_lt(f64::from_bits(*cell)) {
                *cell = v.to_bits();
            }
            Ok(())
        }),
        RowOp::FloatMax { slot, values } => at.each(slot, &values[rows], |cell, v| {
            if v.is_gt(f64::from_bits(*cell)) {
                *cell = v.to_bits();
            }
            Ok(())
        }),
    }
}

/// A block's rows in the table.
struct Rows<'c, 'b> {
    cells: &'c mut [u64],
    shift: u32,
    block: &'b [u32],
}

impl Rows<'_, '_> {
    /// `update(cell, value)` for each row of the block, at its `slot`,
    /// stopping at the first error (inlined, an op that cannot fail checks
    /// nothing).
    #[inline(always)]
    fn each<T: Copy>(
        self,
        slot: usize,
        values: &[T],
        mut update: impl FnMut(&mut u64, T) -> Result<()>,
    ) -> Result<()> {
        for (group, value) in self.block.iter().zip(values) {
            update(
                &mut self.cells[((*group as usize) << self.shift) | slot],
                *value,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row at a time, the plain way: what the blocks must match.
    fn by_row(cells: &mut [u64], shift: u32, groups: &[u32], ints: &[i64], floats: &[f64]) {
        for (i, &group) in groups.iter().enumerate() {
            let row = (group as usize) << shift;
            cells[row] += 1;
            cells[row | 1] = (cells[row | 1] as i64 + ints[i]) as u64;
            cells[row | 2] = (cells[row | 2] as i64).min(ints[i]) as u64;
            cells[row | 3] = (cells[row | 3] as i64).max(ints[i]) as u64;
            cells[row | 4] = (f64::from_bits(cells[row | 4]) + floats[i]).to_bits();
            cells[row | 5] = f64::from_bits(cells[row | 5]).min(floats[i]).to_bits();
            cells[row | 6] = f64::from_bits(cells[row | 6]).max(floats[i]).to_bits();
        }
    }

    fn ops<'a>(ints: &'a [i64], floats: &'a [f64]) -> Vec<RowOp<'a>> {
        vec![
            RowOp::Count { slot: 0 },
            RowOp::IntSum {
                slot: 1,
                values: ints,
                output: "total",
            },
            RowOp::IntMin {
                slot: 2,
                values: ints,
            },
            RowOp::IntMax {
                slot: 3,
                values: ints,
            },
            RowOp::FloatSum {
                slot: 4,
                values: floats,
            },
            RowOp::FloatMin {
                slot: 5,
                values: floats,
            },
            RowOp::FloatMax {
                slot: 6,
                values: floats,
            },
        ]
    }

    /// Rows of 8 words (shift 3) for 7 ops; every group starts at the same
    /// values, so a row updated twice or not at all shows.
    fn table(groups: usize) -> Vec<u64> {
        let row = [
            0,
            0,
            i64::MAX as u64,
            i64::MIN as u64,
            0,
            f64::INFINITY.to_bits(),
            f64::NEG_INFINITY.to_bits(),
            0,
        ];
        row.repeat(groups)
    }

    #[test]
    fn blocks_update_as_rows_one_at_a_time() {
        // Lengths around the block's: none, less than one, exactly one,
        // several with a part block, and groups repeated within a block.
        for len in [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5] {
            let groups: Vec<u32> = (0..len as u32).map(|i| (i * 7) % 11).collect();
            let ints: Vec<i64> = (0..len as i64).map(|i| i * 13 % 17 - 8).collect();
            let floats: Vec<f64> = ints.iter().map(|v| *v as f64 * 0.5).collect();
            let mut blocks = table(11);
            let mut rows = table(11);
            update_rows(&mut blocks, 3, &groups, &ops(&ints, &floats)).unwrap();
            by_row(&mut rows, 3, &groups, &ints, &floats);
            assert_eq!(blocks, rows, "{len} rows");
        }
    }

    #[test]
    fn an_overflowing_sum_is_refused_by_name() {
        let groups = vec![0u32; BLOCK + 2];
        let mut ints = vec![1i64; BLOCK + 2];
        ints[BLOCK + 1] = i64::MAX;
        let floats = vec![0.0; BLOCK + 2];
        let mut cells = table(1);
        let error = update_rows(&mut cells, 3, &groups, &ops(&ints, &floats)).unwrap_err();
        assert!(
            error.to_string().contains("'total' overflowed Int64"),
            "{error}"
        );
    }
}
