//! What an aggregation computes: functions over input columns, named outputs.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};

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

impl AggregateExpr {
    /// The output column over an input column of type `input` (`None` for
    /// a count of rows): counts are non-null Int64, integers aggregate as
    /// Int64 and floats as Float64 (null for a key with no values). `None`
    /// when the function cannot take that type.
    pub fn output_field(&self, input: Option<&DataType>) -> Option<Field> {
        let data_type = match (self.function, input) {
            (AggregateFunction::Count, _) => {
                return Some(Field::new(&self.output, DataType::Int64, false));
            }
            (_, Some(t)) if t.is_integer() => DataType::Int64,
            (_, Some(t)) if t.is_floating() => DataType::Float64,
            _ => return None,
        };
        Some(Field::new(&self.output, data_type, true))
    }
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

    /// What the aggregation emits for an input of `input`, keyed by `keys`:
    /// the key columns (nullable), then one column per aggregate.
    ///
    /// ```
    /// use arrow::datatypes::{DataType, Field, Schema};
    /// use tidewater_core::AggregateSpec;
    ///
    /// let input = Schema::new(vec![
    ///     Field::new("k", DataType::Utf8, false),
    ///     Field::new("v", DataType::Float32, false),
    /// ]);
    /// let spec = AggregateSpec::new().count("n").sum("v", "total");
    /// let out = spec.output_schema(&["k".to_string()], &input).unwrap();
    /// assert_eq!(out.field(2).data_type(), &DataType::Float64);
    /// ```
    pub fn output_schema(&self, keys: &[String], input: &Schema) -> Result<SchemaRef> {
        let find = |name: &str| {
            input.field_with_name(name).map_err(|_| {
                Error::InvalidPipeline(format!(
                    "aggregate: there is no column '{name}'; the columns are {}",
                    crate::error::field_list(input)
                ))
            })
        };
        let mut fields = Vec::with_capacity(keys.len() + self.exprs.len());
        for key in keys {
            fields.push(find(key)?.clone().with_nullable(true));
        }
        for expr in &self.exprs {
            let source = expr.column.as_deref().map(find).transpose()?;
            let field = expr
                .output_field(source.map(|f| f.data_type()))
                .ok_or_else(|| {
                    Error::InvalidPipeline(format!(
                        "aggregate output '{}': {:?} needs an integer or floating-point column, \
                         '{}' is {}",
                        expr.output,
                        expr.function,
                        expr.column.as_deref().unwrap_or_default(),
                        source.map_or(DataType::Null, |f| f.data_type().clone())
                    ))
                })?;
            fields.push(field);
        }
        Ok(Arc::new(Schema::new(fields)))
    }
}
