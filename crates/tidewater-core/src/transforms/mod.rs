//! Built-in operators.

pub(crate) mod accumulator_table;
pub mod aggregate;
pub(crate) mod changed_groups;
pub(crate) mod counting_sort;
pub(crate) mod group_index;
pub(crate) mod hand_on;
pub(crate) mod key_group_order;
pub(crate) mod local_aggregate;
pub(crate) mod prefetch;
pub(crate) mod row_update;
pub(crate) mod sender_groups;
pub(crate) mod spare_columns;
pub(crate) mod stateless;
