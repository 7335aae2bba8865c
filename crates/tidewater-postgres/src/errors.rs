//! How database errors become tidewater errors: whose fault, and whether a retry helps.

use tidewater_core::Error;

/// A mistake in the configuration or the data: say what to fix.
pub fn user_error(message: String) -> Error {
    Error::BadInput(message)
}

/// An error from the database or the connection while doing `what`.
pub fn db_error(what: &str, error: sqlx::Error) -> Error {
    let retryable = matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_)
    ) || error
        .as_database_error()
        .and_then(|d| d.code())
        // Class 08: connection exceptions; 57P01: admin shutdown / terminated; 40001: serialization.
        .is_some_and(|c| c.starts_with("08") || c == "57P01" || c == "40001" || c == "40P01");
    Error::External {
        message: format!("PostgreSQL: {what}: {error}"),
        retryable,
    }
}

/// Whether the error is a problem with the data of a row (class 22: data
/// exception, class 23: integrity constraint violation).
pub fn is_row_error(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c.starts_with("22") || c.starts_with("23"))
}

/// Whether the error means the connection is gone and the operation may be retried.
pub fn is_connection_error(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::PoolTimedOut
    ) || error
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c.starts_with("08") || c == "57P01")
}

/// "constraint \"name\"" when the database named one.
pub fn constraint_of(error: &sqlx::Error) -> String {
    error
        .as_database_error()
        .and_then(|d| d.constraint().map(|c| format!("constraint \"{c}\"")))
        .unwrap_or_else(|| "a constraint".to_string())
}

/// Whether the error is "no such object" (e.g. an unknown prepared transaction).
pub fn is_undefined_object(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "42704")
}
