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
        // Class 08: connection exceptions; 57P01: admin shutdown / terminated; 25P03: ended
        // idle in a transaction; 40001: serialization.
        .is_some_and(|c| {
            c.starts_with("08") || ["57P01", "25P03", "40001", "40P01"].contains(&c.as_ref())
        });
    let advice = match error.as_database_error().and_then(|d| d.code()).as_deref() {
        Some("57014") if error.to_string().contains("statement timeout") => {
            "; a query ran longer than `statement_timeout`: raise it (a spec's \
             `statement_timeout`, or the builder's `timeouts`) if the table is slow to read, \
             or see what held the query up in pg_stat_activity"
        }
        Some("55P03") => {
            "; a lock was not granted within `lock_timeout`: something (often a migration) \
             holds the table; see pg_locks, or raise `lock_timeout`"
        }
        _ => "",
    };
    // A timeout may pass (a lock released, a load gone): the job's retry decides.
    let retryable = retryable || !advice.is_empty();
    Error::External {
        message: format!("PostgreSQL: {what}: {error}{advice}"),
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

/// Whether the error means the connection is gone and the operation may be
/// retried (25P03: the server ended a session that sat idle in a
/// transaction, as one of a paused process does).
pub fn is_connection_error(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::PoolTimedOut
    ) || error
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c.starts_with("08") || c == "57P01" || c == "25P03")
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
