//! Operators: decisions an operator takes about how it runs.

use tracing::debug;

use super::InternalEvent;

/// A pre-aggregation found too few rows per key to pay and passes rows on.
#[derive(Debug)]
pub struct PreAggregationPassesRowsOn {
    /// Groups its table held.
    pub groups: usize,
    /// Rows it had aggregated into them.
    pub rows: u64,
}

impl InternalEvent for PreAggregationPassesRowsOn {
    fn emit(self) {
        debug!(
            groups = self.groups,
            rows = self.rows,
            "pre-aggregation does not pay for these keys: passing rows on"
        );
    }
}
