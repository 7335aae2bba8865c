//! What an aggregation computes: functions over input columns, named outputs.

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateFunction {
    /// Number of rows (or of non-null values of a column).
    Count,
    /// Sum of the non-null values; null when there are none.
    Sum,
    /// Smallest non-null value.
    Min,
    /// Largest non-null value.
    Max,
}

/// One output column of an aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateExpr {
    /// The function.
    pub function: AggregateFunction,
    /// Its input column; `None` for count of rows.
    pub column: Option<String>,
    /// The output column's name.
    pub output: String,
}

/// The aggregates to compute per key.
///
/// Integer inputs are summed and compared as Int64 (an overflowing sum is an
/// error, not a wrap); floating-point inputs as Float64.
///
/// # Examples
///
/// ```
/// use tidewater_core::AggregateSpec;
/// let spec = AggregateSpec::new().count("count").sum("v", "sum_v").max("id", "max_id");
/// assert_eq!(spec.exprs().len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AggregateSpec {
    exprs: Vec<AggregateExpr>,
}

impl AggregateSpec {
    /// An empty spec.
    pub fn new() -> Self {
        Self::default()
    }

    fn with(mut self, function: AggregateFunction, column: Option<&str>, output: &str) -> Self {
        self.exprs.push(AggregateExpr {
            function,
            column: column.map(str::to_string),
            output: output.to_string(),
        });
        self
    }

    /// Counts rows, into `output`.
    pub fn count(self, output: &str) -> Self {
        self.with(AggregateFunction::Count, None, output)
    }

    /// Counts the non-null values of `column`, into `output`.
    pub fn count_values(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Count, Some(column), output)
    }

    /// Sums `column`, into `output`.
    pub fn sum(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Sum, Some(column), output)
    }

    /// The minimum of `column`, into `output`.
    pub fn min(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Min, Some(column), output)
    }

    /// The maximum of `column`, into `output`.
    pub fn max(self, column: &str, output: &str) -> Self {
        self.with(AggregateFunction::Max, Some(column), output)
    }

    /// The aggregates, in output order.
    pub fn exprs(&self) -> &[AggregateExpr] {
        &self.exprs
    }
}
