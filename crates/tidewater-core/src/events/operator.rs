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

/// The row and batch counters of one operator's subtask, registered once
/// so that counting a batch costs two atomic adds, not a registry lookup:
/// `tidewater_operator_rows_in_total`, `tidewater_operator_batches_in_total`
/// and `tidewater_operator_rows_out_total`, labelled by job, uid and subtask.
/// A source counts only its output, a sink only its input.
#[derive(Clone)]
pub struct OperatorMeter {
    rows_in: metrics::Counter,
    batches_in: metrics::Counter,
    rows_out: metrics::Counter,
}

impl OperatorMeter {
    /// The meter of subtask `subtask` of operator `uid`.
    pub fn new(job: &str, uid: &str, subtask: usize) -> OperatorMeter {
        let labels = super::task_labels(job, uid, subtask);
        OperatorMeter {
            rows_in: metrics::counter!("tidewater_operator_rows_in_total", &labels),
            batches_in: metrics::counter!("tidewater_operator_batches_in_total", &labels),
            rows_out: metrics::counter!("tidewater_operator_rows_out_total", &labels),
        }
    }

    /// A batch of `rows` came in.
    pub fn batch_in(&self, rows: usize) {
        self.batches_in.increment(1);
        self.rows_in.increment(rows as u64);
    }

    /// `rows` went out.
    pub fn rows_out(&self, rows: usize) {
        self.rows_out.increment(rows as u64);
    }
}

impl std::fmt::Debug for OperatorMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorMeter")
    }
}
