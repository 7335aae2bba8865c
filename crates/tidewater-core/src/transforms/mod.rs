//! Built-in operators.

pub mod aggregate;
pub(crate) mod accumulator_table;
pub(crate) mod group_index;
pub(crate) mod stateless;
