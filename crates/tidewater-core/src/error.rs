//! The one error type of tidewater, with whose fault it is and whether a retry helps.

use arrow::error::ArrowError;

use crate::ids::{CheckpointId, Epoch};

/// `Result` with tidewater's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whose fault an error is: tells the reader where to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// The pipeline, its configuration or its input data: fix and rerun.
    User,
    /// A system outside tidewater (storage, a database, the network): often passes.
    External,
    /// A bug in tidewater: please report it.
    Internal,
}

/// Everything that can go wrong in a tidewater job.
///
/// Every message names what was wrong and, where one exists, what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pipeline as declared cannot run (a bad uid, a missing column, ...).
    #[error("invalid pipeline: {0}")]
    InvalidPipeline(String),

    /// A job configuration that cannot mean anything (a zero retention, a
    /// zero interval).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A row or batch that an operator cannot take (types, values, parse errors).
    #[error("bad input: {0}")]
    BadInput(String),

    /// The checkpointed state does not fit the pipeline that is being restored.
    #[error(
        "operator '{uid}': {detail}. The pipeline changed since checkpoint {checkpoint}; \
         restore with the original pipeline, allow the change explicitly (see RestoreOptions), \
         or start over with a fresh state location"
    )]
    IncompatibleState {
        /// The operator whose state does not fit.
        uid: String,
        /// The checkpoint being restored.
        checkpoint: CheckpointId,
        /// What differs.
        detail: String,
    },

    /// The checkpoint's keyed state was placed in subtasks by another
    /// partitioner than this build's: restored keys would sit where they are
    /// no longer routed.
    #[error(
        "operator '{uid}': its keyed state in checkpoint {checkpoint} was placed in subtasks by \
         {recorded}, and this build routes keys with partitioner {current}, so restored keys \
         would sit in subtasks that no longer receive them. Finish the job with the tidewater \
         version that started it, or start it anew with an empty state location"
    )]
    IncompatiblePartitioner {
        /// An operator whose state depends on the placement.
        uid: String,
        /// The checkpoint being restored.
        checkpoint: CheckpointId,
        /// The checkpoint's partitioner, as words.
        recorded: String,
        /// This build's partitioner.
        current: String,
    },

    /// A checkpoint's data failed verification (checksum, format).
    #[error("checkpoint data is corrupt: {0}")]
    Corrupt(String),

    /// A newer worker took over this job; this one must stop without writing.
    #[error(
        "fenced: this worker holds epoch {mine} but epoch {newer} took over job '{job}'; \
         this process stops without writing, the newer worker continues the job"
    )]
    Fenced {
        /// The job.
        job: String,
        /// This worker's epoch.
        mine: Epoch,
        /// The newer epoch found in the state store.
        newer: Epoch,
    },

    /// The job store's lease on the job was lost (not renewed in time, or
    /// taken over): the run stopped committing.
    #[error(
        "lost the lease on job '{job}': {why}; this process stopped committing and exits \
         (another worker, or a later run, takes the job over from its last checkpoint)"
    )]
    LeaseLost {
        /// The job.
        job: String,
        /// What happened to the lease.
        why: String,
    },

    /// Reading or writing object storage failed.
    #[error("storage: {action} '{path}' failed: {source}")]
    Storage {
        /// What was being done ("write manifest", "read blob", ...).
        action: &'static str,
        /// The object path.
        path: String,
        /// The object store's error.
        #[source]
        source: object_store::Error,
    },

    /// An Arrow computation failed.
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),

    /// A connector's external system failed (database, broker, filesystem).
    #[error("{message}")]
    External {
        /// What failed, and what to check.
        message: String,
        /// Whether running the job again may succeed.
        retryable: bool,
    },

    /// An error raised inside one operator, with where it happened.
    #[error("operator '{uid}' (subtask {subtask}): {source}")]
    InOperator {
        /// The operator's uid.
        uid: String,
        /// The subtask index.
        subtask: usize,
        /// The underlying error.
        #[source]
        source: Box<Error>,
    },

    /// A task stopped because another one failed; the other's error is the cause.
    #[error("stopped: {0}")]
    Stopped(String),

    /// A bug: an invariant of the runtime does not hold.
    #[error("internal error (please report): {0}")]
    Internal(String),
}

impl Error {
    /// Whose fault this error is.
    pub fn domain(&self) -> Domain {
        match self {
            Error::InvalidPipeline(_)
            | Error::InvalidConfig(_)
            | Error::BadInput(_)
            | Error::IncompatibleState { .. }
            | Error::IncompatiblePartitioner { .. } => Domain::User,
            Error::Corrupt(_)
            | Error::Fenced { .. }
            | Error::LeaseLost { .. }
            | Error::Storage { .. } => Domain::External,
            Error::External { .. } => Domain::External,
            Error::Arrow(_) => Domain::User,
            Error::InOperator { source, .. } => source.domain(),
            Error::Internal(_) | Error::Stopped(_) => Domain::Internal,
        }
    }

    /// Whether running the job again (it resumes from its checkpoint) may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Storage { .. } => true,
            Error::External { retryable, .. } => *retryable,
            Error::InOperator { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// Whether a newer run took the job over (fenced, or the lease lost):
    /// this run must stop and leave everything to its successor.
    pub fn superseded(&self) -> bool {
        match self {
            Error::Fenced { .. } | Error::LeaseLost { .. } => true,
            Error::InOperator { source, .. } => source.superseded(),
            _ => false,
        }
    }

    /// This worker's and the newer epoch, when this is (or wraps) a fencing error.
    pub fn fenced_epochs(&self) -> Option<(Epoch, Epoch)> {
        match self {
            Error::Fenced { mine, newer, .. } => Some((*mine, *newer)),
            Error::InOperator { source, .. } => source.fenced_epochs(),
            _ => None,
        }
    }

    /// Wraps the error with the operator it came from (once: an already wrapped one is kept).
    pub fn in_operator(self, uid: &str, subtask: usize) -> Error {
        match self {
            e @ Error::InOperator { .. } => e,
            e => Error::InOperator {
                uid: uid.to_string(),
                subtask,
                source: Box::new(e),
            },
        }
    }

    /// An error from a storage call.
    pub fn storage(action: &'static str, path: impl ToString, source: object_store::Error) -> Self {
        // Without credentials in the environment the S3 client asks the
        // cloud instance-metadata endpoint; off a cloud that fails with a
        // token-request error that says nothing of credentials.
        let text = source.to_string();
        if text.contains("169.254.169.254") || text.contains("token request") {
            return Error::InvalidConfig(format!(
                "{action} '{}': no S3 credentials were found, and looking them up at the cloud \
                 instance-metadata endpoint failed ({text}). {NO_CREDENTIALS}",
                path.to_string()
            ));
        }
        Error::Storage {
            action,
            path: path.to_string(),
            source,
        }
    }
}

/// How to give tidewater S3 credentials, for the messages that lack them.
pub(crate) const NO_CREDENTIALS: &str = "Provide them with AWS_ACCESS_KEY_ID and \
    AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), a web identity \
    (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN), a container role \
    (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI), or AWS_SKIP_SIGNATURE=true for a public bucket; \
    on a cloud instance with a role, leave AWS_EC2_METADATA_DISABLED unset. Outside a cloud, \
    set AWS_EC2_METADATA_DISABLED=true so that tidewater does not wait on the metadata \
    endpoint (docs/connectors/parquet.md)";

/// `name: type, ...` of a schema's columns, for messages that list them.
pub fn field_list(schema: &arrow::datatypes::Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}
