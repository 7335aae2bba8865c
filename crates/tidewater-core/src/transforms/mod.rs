//! Built-in operators.

pub mod aggregate;
pub(crate) mod group_index;
pub(crate) mod stateless;
