//! Keyed aggregation: count, sum, min and max per key, vectorised over Arrow arrays.
//!
//! Rows are mapped to dense group numbers (`group_index.rs`), then a
//! null-free batch updates every accumulator of its rows a block of rows
//! at a time (`row_update.rs`); a batch with nulls runs one tight
//! loop per accumulator over its input column. Both write into a row-wise
//! table of every group's values (`accumulator_table.rs`). The state batch
//! is the output batch itself (keys, then one column per aggregate), so a
//! snapshot is a copy of the accumulator columns and a restore re-inserts the keys.

mod accumulator;
mod operator;
mod routing;
mod spec;
mod state;
#[cfg(test)]
mod tests;

pub use operator::AggregateOperator;
pub use spec::{AggregateExpr, AggregateFunction, AggregateSpec};
