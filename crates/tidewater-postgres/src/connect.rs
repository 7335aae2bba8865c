//! Connecting: the URL's options (TLS as libpq spells it: `sslmode`,
//! `sslrootcert`, `sslcert`, `sslkey`), the session settings tidewater adds
//! (`application_name`, timeouts, read-only reads), and a first connection
//! that says what is wrong when there is no way in.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};
use tidewater_core::{Error, Result, TaskContext};

use crate::errors::db_error;

/// How long a first connection may take before the server counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one statement and one lock wait may take: a job never hangs on a
/// stuck query or a table locked by someone's migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// `statement_timeout`: the longest one query (a batch's COPY, a commit) may run.
    pub statement: Duration,
    /// `lock_timeout`: the longest a query waits for a lock before failing.
    pub lock: Duration,
}

impl Default for Timeouts {
    /// 10 minutes a statement (a batch takes seconds; this only ends a stuck
    /// one), 1 minute a lock wait (a migration holding the table).
    fn default() -> Self {
        Timeouts {
            statement: Duration::from_secs(600),
            lock: Duration::from_secs(60),
        }
    }
}

/// The `application_name` of a subtask's connections, as a DBA sees it in
/// `pg_stat_activity`: `tidewater/{job}/{uid}/{subtask}`.
pub fn application_name(task: &TaskContext) -> String {
    format!("tidewater/{}/{}/{}", task.job, task.uid, task.subtask)
}

/// The options of a connection URL, refusing one that cannot be used and
/// naming any TLS file it points at that cannot be read.
pub(crate) fn parse_url(url: &str, what: &str) -> Result<PgConnectOptions> {
    install_crypto_provider();
    let options: PgConnectOptions = url.parse().map_err(|e| {
        Error::InvalidConfig(format!(
            "PostgreSQL, {what}: the connection URL is not valid ({e}); write it as \
             postgres://user:password@host:port/database[?sslmode=verify-full&sslrootcert=ca.pem]"
        ))
    })?;
    // A missing file would surface as an I/O "not found", indistinguishable
    // from an unknown host: check them here and say which.
    for (key, path) in tls_files(url) {
        if let Err(e) = std::fs::metadata(&path) {
            return Err(Error::InvalidConfig(format!(
                "PostgreSQL, {what}: `{key}` in the URL names '{path}', which cannot be read \
                 ({e}); give the path of the PEM file"
            )));
        }
    }
    Ok(options)
}

/// Makes ring rustls's process-wide crypto provider, once. sqlx's
/// `sslmode=verify-ca` asks rustls for the process default, which rustls
/// cannot choose while another crate (the object store's HTTP client)
/// enables aws-lc-rs beside ring, and panics. The connectors call this
/// before connecting; a program whose other PostgreSQL clients (the job
/// store) may connect first calls it at start. An application that
/// installed a provider of its own keeps it.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The TLS files a URL names, as `(key, path)` (inline PEM text is not a file).
fn tls_files(url: &str) -> Vec<(String, String)> {
    let Ok(url) = url::Url::parse(url) else {
        return Vec::new();
    };
    url.query_pairs()
        .filter(|(key, value)| {
            matches!(
                key.as_ref(),
                "sslrootcert"
                    | "ssl-root-cert"
                    | "ssl-ca"
                    | "sslcert"
                    | "ssl-cert"
                    | "sslkey"
                    | "ssl-key"
            ) && !value.starts_with("-----BEGIN")
        })
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect()
}

/// `options` with tidewater's session settings: its name, its timeouts, and
/// for readers a read-only, repeatable-read default transaction (each batch's
/// COPY is one such transaction: one snapshot, and it cannot write).
pub(crate) fn session(
    options: &PgConnectOptions,
    name: &str,
    timeouts: Timeouts,
    read_only: bool,
) -> PgConnectOptions {
    let mut settings = vec![
        ("statement_timeout", millis(timeouts.statement)),
        ("lock_timeout", millis(timeouts.lock)),
    ];
    if read_only {
        settings.push(("default_transaction_read_only", "on".to_string()));
        settings.push((
            "default_transaction_isolation",
            "repeatable read".to_string(),
        ));
    }
    options.clone().application_name(name).options(settings)
}

/// A duration as PostgreSQL's milliseconds; 0 (PostgreSQL's "no limit") is
/// never produced: a zero duration becomes 1 ms.
fn millis(duration: Duration) -> String {
    duration.as_millis().clamp(1, i32::MAX as u128).to_string()
}

/// Opens one connection to learn at once whether the server can be reached
/// and lets this user in: a pool would retry a refused connection until its
/// timeout and then report only the timeout. `what` names the connection's
/// use in messages (e.g. "the source").
pub(crate) async fn probe(options: &PgConnectOptions, what: &str) -> Result<()> {
    let (host, port) = (options.get_host().to_string(), options.get_port());
    match connect_within(options).await {
        Ok(Some(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(None) => Err(Error::External {
            message: format!(
                "PostgreSQL, {what}: no answer from {host}:{port} within {} s: is the address \
                 right, and does the network (a firewall, a security group) let it through?",
                PROBE_TIMEOUT.as_secs()
            ),
            retryable: true,
        }),
        Err(error) => {
            // Refused without TLS: would TLS have been let in? Then say so.
            let tls_would_do = is_refused_without_tls(&error)
                && matches!(
                    options.get_ssl_mode(),
                    PgSslMode::Disable | PgSslMode::Allow
                )
                && matches!(
                    connect_within(&options.clone().ssl_mode(PgSslMode::Require)).await,
                    Ok(Some(_))
                );
            Err(explain_connect(
                what,
                options,
                &host,
                port,
                error,
                tls_would_do,
            ))
        }
    }
}

async fn connect_within(
    options: &PgConnectOptions,
) -> std::result::Result<Option<PgConnection>, sqlx::Error> {
    match tokio::time::timeout(PROBE_TIMEOUT, PgConnection::connect_with(options)).await {
        Ok(result) => result.map(Some),
        Err(_) => Ok(None),
    }
}

fn is_refused_without_tls(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|d| {
        d.code().as_deref() == Some("28000") && d.message().contains("no encryption")
    })
}

/// Says why a connection failed, in the words of what to check.
fn explain_connect(
    what: &str,
    options: &PgConnectOptions,
    host: &str,
    port: u16,
    error: sqlx::Error,
    tls_would_do: bool,
) -> Error {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    if is_tls_failure(&error) {
        let mode = ssl_mode_name(options.get_ssl_mode());
        return Error::InvalidConfig(format!(
            "PostgreSQL, {what}: {}",
            explain_tls(host, port, mode, &error.to_string())
        ));
    }
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
        Some("28000") if tls_would_do => Some(format!(
            "the server at {host}:{port} requires TLS for user '{user}' on database \
             '{database}', and the URL turns TLS off (sslmode={}): use \
             sslmode=verify-full&sslrootcert=/path/to/ca.pem (or sslmode=require)",
            ssl_mode_name(options.get_ssl_mode())
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

/// A failed TLS handshake: sqlx reports some as TLS errors, and the
/// verifier's (a certificate refused) as I/O errors carrying rustls's.
fn is_tls_failure(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Tls(_) => true,
        sqlx::Error::Io(io) => {
            let text = io.to_string();
            text.contains("peer certificate") || text.contains("received fatal alert")
        }
        _ => false,
    }
}

fn ssl_mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// What a failed TLS handshake means, from the TLS library's `message`.
fn explain_tls(host: &str, port: u16, mode: &str, message: &str) -> String {
    if message.contains("UnknownIssuer") {
        format!(
            "the TLS certificate of {host}:{port} is not signed by a CA this client trusts \
             ({message}): set sslrootcert in the URL to the CA certificate that signed it \
             (your provider publishes it)"
        )
    } else if message.contains("NotValidForName") || message.contains("not valid for name") {
        format!(
            "the TLS certificate of {host}:{port} is not valid for the host name '{host}' \
             ({message}): connect by a name the certificate lists, or use sslmode=verify-ca \
             to check the CA but not the name"
        )
    } else if message.contains("does not support TLS") {
        format!(
            "the server at {host}:{port} does not accept TLS, and sslmode={mode} requires it: \
             turn TLS on at the server (ssl = on), or use sslmode=prefer"
        )
    } else {
        format!(
            "TLS with {host}:{port} failed ({message}): check sslmode, sslrootcert, sslcert and \
             sslkey in the URL"
        )
    }
}

/// Why the server's pg_hba.conf refused the connection (SQLSTATE 28000),
/// from the server's `message`: a missing TLS entry is named as such.
fn refused_by_pg_hba(host: &str, port: u16, user: &str, database: &str, message: &str) -> String {
    if message.contains("no pg_hba.conf entry") && message.contains("no encryption") {
        return format!(
            "the server at {host}:{port} has no pg_hba.conf entry that lets user '{user}' into \
             database '{database}' without TLS: if the server takes these connections only \
             over TLS (`hostssl`), set sslmode=verify-full&sslrootcert=/path/to/ca.pem in the \
             URL; otherwise add an entry for this host, user and database"
        );
    }
    format!(
        "the server at {host}:{port} does not let user '{user}' into database '{database}' \
         ({message}); its pg_hba.conf needs an entry for this host, user and database"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(tls.contains("sslmode=verify-full"), "{tls}");
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

    #[test]
    fn tls_failures_say_what_to_change() {
        let cases = [
            ("invalid peer certificate: UnknownIssuer", "sslrootcert"),
            ("invalid peer certificate: NotValidForName", "verify-ca"),
            ("certificate not valid for name \"10.0.0.1\"", "verify-ca"),
            ("server does not support TLS", "ssl = on"),
            ("handshake failure", "check sslmode"),
        ];
        for (message, advice) in cases {
            let text = explain_tls("db", 5432, "require", message);
            assert!(text.contains(advice), "{message}: {text}");
        }
    }

    #[test]
    fn tls_files_are_read_from_the_query_decoded() {
        assert_eq!(
            tls_files(
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20x.pem&sslkey=/k.pem&application_name=x"
            ),
            vec![
                ("sslrootcert".to_string(), "/etc/ca x.pem".to_string()),
                ("sslkey".to_string(), "/k.pem".to_string()),
            ]
        );
        assert!(tls_files("postgres://u@h/db").is_empty());
        assert!(
            parse_url(
                "postgres://u@h/db?sslrootcert=/nonexistent/ca.pem",
                "the source"
            )
            .unwrap_err()
            .to_string()
            .contains("'/nonexistent/ca.pem', which cannot be read")
        );
    }

    #[test]
    fn sessions_name_the_task_and_never_disable_a_timeout() {
        let task = TaskContext {
            job: "orders".into(),
            uid: "src".into(),
            subtask: 2,
            parallelism: 4,
            epoch: tidewater_core::Epoch(1),
        };
        assert_eq!(application_name(&task), "tidewater/orders/src/2");
        assert_eq!(millis(Duration::ZERO), "1");
        assert_eq!(millis(Duration::from_secs(3)), "3000");
        let base: PgConnectOptions = "postgres://u@h/db".parse().unwrap();
        let options = session(&base, "tidewater/orders/src/2", Timeouts::default(), true);
        assert_eq!(
            options.get_application_name(),
            Some("tidewater/orders/src/2")
        );
        let set = options.get_options().unwrap_or_default();
        for part in [
            "statement_timeout=600000",
            "lock_timeout=60000",
            "default_transaction_read_only=on",
        ] {
            assert!(set.contains(part), "{set}");
        }
    }
}
