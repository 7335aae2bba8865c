//! Apache Kafka connectors for tidewater, on librdkafka (the `rdkafka`
//! crate, built from its bundled sources).
//!
//! - [`KafkaSource`] reads a topic's partitions from explicit offsets (no
//!   consumer group, no rebalancing): each partition is a split, its next
//!   offset the checkpointed cursor. It is bounded: it reads up to the high
//!   watermarks seen when the job first started (kept in the split ids, so
//!   a resumed run stops at the same offsets), with `read_committed`
//!   isolation, and decodes records as raw bytes, UTF-8 text or JSON with a
//!   given Arrow schema. [`KafkaSource::unbounded`] reads without end
//!   instead, until the job is cancelled.
//! - [`KafkaSink`] writes rows as JSON records, at least once (an
//!   idempotent producer flushed at each checkpoint) or exactly once
//!   (Kafka transactions tied to checkpoints; see [`sink`] for the protocol
//!   and what it costs).
//!
//! Errors name the brokers and the topic; records that cannot be decoded
//! or produced are named by partition and offset, or by row.

mod client;
mod decode;
mod errors;
pub mod sink;
mod source;
mod stream;

pub use client::ClientConfig;
pub use decode::Format;
pub use sink::{KafkaSink, SinkMode};
pub use source::KafkaSource;
