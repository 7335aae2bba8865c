//! What can go wrong with an expression.

/// A problem with one SQL expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqlError {
    /// The text is not a SQL expression.
    #[error("this is not a SQL expression: {0}")]
    Syntax(String),
    /// A column the input does not have.
    #[error("there is no column '{column}'; the input's columns are {columns}")]
    UnknownColumn {
        /// The name used.
        column: String,
        /// What there is.
        columns: String,
    },
    /// A function DataFusion does not know.
    #[error("{0}")]
    UnknownFunction(String),
    /// Types that do not fit (`v + 'x'`), or another planning failure.
    #[error("{0}")]
    Type(String),
    /// A filter that is not true/false.
    #[error("a filter must be true or false for each row, but this is {0}")]
    NotBoolean(String),
    /// `select` names a column the transform's output does not have.
    #[error("`select` names '{column}', which is not a column here; the columns are {columns}")]
    UnknownSelected {
        /// The name used.
        column: String,
        /// What there is.
        columns: String,
    },
    /// An aggregate that is not `count(*)`, `count(col)`, `sum(col)`,
    /// `min(col)` or `max(col)`.
    #[error("{0}")]
    Aggregate(String),
    /// Evaluating on a row failed (division by zero, a failed cast).
    #[error("{message} (on the row {row})")]
    Row {
        /// What the evaluation said.
        message: String,
        /// The row's values.
        row: String,
    },
    /// Something that should not happen; please report it.
    #[error("internal error in the SQL layer: {0}")]
    Internal(String),
}

impl From<crate::bridge::BridgeError> for SqlError {
    fn from(e: crate::bridge::BridgeError) -> Self {
        SqlError::Internal(e.to_string())
    }
}
