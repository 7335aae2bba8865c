//! How database errors become tidewater errors: whose fault, and whether a retry helps.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tidewater_core::{Error, Result};

/// How long a first connection may take before the server counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens one connection to `url` to learn at once whether the server can be
/// reached and lets this user in: a pool would retry a refused connection
/// until its timeout and then report only the timeout. `what` names the
/// connection's use in messages (e.g. "the source").
pub async fn probe(url: &str, what: &str) -> Result<()> {
    let options: PgConnectOptions = url.parse().map_err(|e| {
        Error::InvalidConfig(format!(
            "PostgreSQL, {what}: the connection URL is not valid ({e}); write it as \
             postgres://user:password@host:port/database"
        ))
    })?;
    let (host, port) = (options.get_host().to_string(), options.get_port());
    match tokio::time::timeout(PROBE_TIMEOUT, PgConnection::connect_with(&options)).await {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(error)) => Err(explain_connect(what, &options, &host, port, error)),
        Err(_) => Err(Error::External {
            message: format!(
                "PostgreSQL, {what}: no answer from {host}:{port} within {} s: is the address \
                 right, and does the network (a firewall, a security group) let it through?",
                PROBE_TIMEOUT.as_secs()
            ),
            retryable: true,
        }),
    }
}

/// Says why a connection failed, in the words of what to check.
fn explain_connect(
    what: &str,
    options: &PgConnectOptions,
    host: &str,
    port: u16,
    error: sqlx::Error,
) -> Error {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    if let sqlx::Error::Io(io) = &error {
        let message = match io.kind() {
            std::io::ErrorKind::ConnectionRefused => Some(format!(
                "connection refused by {host}:{port}: is PostgreSQL running there, and on that port?"
            )),
            std::io::ErrorKind::NotFound => Some(format!(
                "the host '{host}' cannot be found: check the host name in the URL"
            )),
            _ => None,
        };
        if let Some(message) = message {
            return Error::External {
                message: format!("PostgreSQL, {what}: {message}"),
                retryable: true,
            };
        }
    }
    let code = error
        .as_database_error()
        .and_then(|d| d.code().map(|c| c.to_string()));
    let mistake = match code.as_deref() {
        Some("28P01") => Some(format!(
            "password authentication failed for user '{user}': check the user and password in \
             the URL"
        )),
        Some("3D000") => Some(format!(
            "database '{database}' does not exist on {host}:{port}: create it, or fix the \
             database in the URL"
        )),
        Some("28000") => Some(refused_by_pg_hba(
            host,
            port,
            user,
            database,
            &error.to_string(),
        )),
        _ => None,
    };
    match mistake {
        Some(message) => Error::InvalidConfig(format!("PostgreSQL, {what}: {message}")),
        None => db_error(&format!("connecting {what} to {host}:{port}"), error),
    }
}

/// Why the server's pg_hba.conf refused the connection (SQLSTATE 28000),
/// from the server's `message`: a TLS requirement is named as such.
fn refused_by_pg_hba(host: &str, port: u16, user: &str, database: &str, message: &str) -> String {
    if message.contains("no pg_hba.conf entry") && message.contains("no encryption") {
        return format!(
            "the server at {host}:{port} has no pg_hba.conf entry that lets user '{user}' into \
             database '{database}' without TLS, and this build connects without TLS: if the \
             server takes these connections only over TLS (`hostssl`), connect through a proxy \
             that terminates TLS or add a `host` entry for this host; otherwise add an entry \
             for this host, user and database"
        );
    }
    format!(
        "the server at {host}:{port} does not let user '{user}' into database '{database}' \
         ({message}); its pg_hba.conf needs an entry for this host, user and database"
    )
}

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

#[cfg(test)]
mod tests {
    use super::refused_by_pg_hba;

    #[test]
    fn a_pg_hba_refusal_says_whether_tls_is_what_is_missing() {
        let tls = refused_by_pg_hba(
            "db",
            5432,
            "app",
            "prod",
            "no pg_hba.conf entry for host \"10.0.0.5\", user \"app\", database \"prod\", no encryption",
        );
        assert!(tls.contains("without TLS"), "{tls}");
        assert!(tls.contains("hostssl"), "{tls}");
        let other = refused_by_pg_hba(
            "db",
            5432,
            "app",
            "prod",
            "pg_hba.conf rejects connection for host \"10.0.0.5\", user \"app\", database \"prod\", no encryption",
        );
        assert!(
            other.contains("needs an entry for this host, user and database"),
            "{other}"
        );
        assert!(!other.contains("TLS"), "{other}");
    }
}
