//! PostgreSQL connectors for tidewater.
//!
//! - [`PostgresSource`]: a table read in key order by keyset pagination, split
//!   into key ranges for parallel reading; each split's cursor is its last key.
//! - [`PostgresSink`]: [`SinkMode::Upsert`] (idempotent, per batch) or
//!   [`SinkMode::ExactlyOnce`] (one prepared transaction per checkpoint and
//!   subtask, committed when the checkpoint completes).
//! - [`ReplicaLagThrottle`]: pauses sources while a streaming replica lags.
//!
//! See `docs/connectors/postgres.md` for options, type mapping and guarantees.

mod connect;
mod copy;
mod decode;
mod encode;
mod errors;
mod key;
pub mod schema;
mod sink;
mod source;
mod throttle;

pub use connect::{Timeouts, application_name, install_crypto_provider};
pub use sink::{PostgresSink, PostgresSinkBuilder, SinkMode};
pub use source::{KeyColumns, PostgresSource, PostgresSourceBuilder};
pub use throttle::{LagSource, ReplicaLagThrottle, next_paused};
