//! SQL expressions for tidewater: filters, computed columns and aggregate
//! calls written as SQL, checked against the input's Arrow schema before a
//! job starts and evaluated vectorised on each batch.
//!
//! Parsing, name resolution, type coercion and evaluation are DataFusion's
//! (its expression crates only, pinned exactly); nothing of DataFusion shows
//! in this crate's API. [`SqlTransform`] plans a filter, computed columns and
//! a projection; [`add_aggregate`] reads `count(*)`, `sum(v)` & co. into an
//! [`AggregateSpec`](tidewater_core::AggregateSpec).

mod aggregate;
mod bridge;
mod compile;
mod dead_letter;
mod error;
mod transform;

pub use aggregate::add_aggregate;
pub use dead_letter::{
    DeadLetterLayout, DeadLetterRows, ErrorBudget, PassedRows, dead_letter_schema,
};
pub use error::SqlError;
pub use transform::{FailedRow, Part, SqlOperator, SqlTransform, SqlTransformSpec, describe_row};

/// Checks that `text` is one SQL expression, without a schema: what can be
/// checked before the input's columns are known.
///
/// ```
/// assert!(tidewater_sql::check_syntax("id % 3 <> 0").is_ok());
/// assert!(tidewater_sql::check_syntax("id % ").is_err());
/// ```
pub fn check_syntax(text: &str) -> Result<(), SqlError> {
    compile::parse(text).map(|_| ())
}
