//! [`KafkaSource`]: a topic's partitions as splits, read from explicit
//! offsets up to the high watermarks of the job's first start.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use object_store::ObjectStoreExt;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tidewater_core::events::{ConnectionRetried, InternalEvent, RecordDeadLettered};
use tidewater_core::{
    Cursor, Error, Result, Source, Split, SplitReader, StoreLocation, open_location,
};

use crate::client::ClientConfig;
use crate::decode::{Format, RecordsBuilder, Rejected};
use crate::errors::{code_of, is_transient, kafka};
use crate::stream;

/// How long a read waits for records before handing back what it has (or
/// an empty batch), so that checkpoints and cancels are not held up by a
/// quiet partition.
pub(crate) const WAIT: Duration = Duration::from_millis(200);

/// Transient errors in a row (no record between) before a read fails:
/// librdkafka reconnects by itself, this bounds how long it may try.
pub(crate) const MAX_TRANSIENT_ERRORS: u32 = 60;

/// Reads a Kafka topic, bounded: each partition from its low watermark (or
/// the checkpointed offset) up to the high watermark it had when the job
/// first started. Transactional records are read `read_committed`: those of
/// aborted transactions are skipped, and reading waits for open ones.
///
/// ```no_run
/// # async fn f() -> tidewater_core::Result<()> {
/// use tidewater_kafka::{ClientConfig, Format, KafkaSource};
/// let source = KafkaSource::new(ClientConfig::new("127.0.0.1:9092"), "events", Format::Utf8)?
///     .batch_rows(10_000);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct KafkaSource {
    client: ClientConfig,
    topic: Arc<str>,
    format: Format,
    schema: SchemaRef,
    batch_rows: usize,
    dead_letters: Option<DeadLetters>,
    /// Unbounded: this many readers, each over a share of the partitions.
    readers: Option<usize>,
}

/// Where records that do not decode go, and how many a partition may have.
#[derive(Debug, Clone)]
struct DeadLetters {
    location: Arc<StoreLocation>,
    max_per_partition: u64,
}

impl KafkaSource {
    /// Reads `topic` of the cluster `client` names, decoding values as `format`.
    pub fn new(client: ClientConfig, topic: &str, format: Format) -> Result<Self> {
        let schema = format.schema()?;
        Ok(KafkaSource {
            client,
            topic: topic.into(),
            format,
            schema,
            batch_rows: 8192,
            dead_letters: None,
            readers: None,
        })
    }

    /// Reads without end, until the job is cancelled: `readers` consumers
    /// (at most one per partition), reader `i` taking the partitions `p`
    /// with `p % readers == i`, each from the beginning (or its cursor).
    /// Give it as many readers as the source has subtasks: a subtask reads
    /// its splits one after another, and an unbounded one never ends.
    /// Partitions added to the topic later are not read.
    pub fn unbounded(mut self, readers: usize) -> Self {
        self.readers = Some(readers.max(1));
        self
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn batch_rows_limit(&self) -> usize {
        self.batch_rows
    }

    pub(crate) fn schema_ref(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// A builder of this source's batches for `partition`.
    pub(crate) fn builder(&self, partition: i32) -> Result<RecordsBuilder> {
        RecordsBuilder::new(
            &self.format,
            Arc::clone(&self.schema),
            Arc::clone(&self.topic),
            partition,
            self.batch_rows,
        )
    }

    /// The topic's partitions (blocking: call from a blocking thread).
    fn partitions_now(&self) -> Result<Vec<i32>> {
        let consumer: BaseConsumer = self
            .consumer_config()
            .create()
            .map_err(|e| self.error("creating a consumer", e))?;
        crate::client::partitions(&consumer, &self.client, &self.topic)
    }

    async fn partitions(&self) -> Result<Vec<i32>> {
        let source = self.clone();
        tokio::task::spawn_blocking(move || source.partitions_now())
            .await
            .map_err(|e| Error::Internal(format!("reading the topic's partitions: {e}")))?
    }

    /// Records that do not decode are written to `location` (a folder or
    /// URL) as `{topic}/{partition}-{offset}.json` (the record's key, value
    /// and what is wrong) and skipped, up to `max_per_partition` in each
    /// partition; past that the job fails. Without this, the first such
    /// record fails the job.
    pub fn dead_letter(mut self, location: &str, max_per_partition: u64) -> Result<Self> {
        self.dead_letters = Some(DeadLetters {
            location: Arc::new(open_location(location)?),
            max_per_partition,
        });
        Ok(self)
    }

    /// Records per batch at most (default 8192).
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows;
        self
    }

    fn consumer_config(&self) -> rdkafka::ClientConfig {
        self.client.rdkafka(&[
            // Offsets are tidewater's cursors: the group only names the client.
            ("group.id", "tidewater-source"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("isolation.level", "read_committed"),
            // A checkpointed offset that retention deleted is lost data: fail.
            ("auto.offset.reset", "error"),
            ("enable.partition.eof", "true"),
        ])
    }

    pub(crate) fn error(&self, doing: &str, e: KafkaError) -> Error {
        kafka(doing, self.client.brokers(), &self.topic, e)
    }
}

/// A split: one partition, from `start` to `end` (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    partition: i32,
    start: i64,
    end: i64,
}

impl Range {
    /// `{topic}:{partition}:{start}-{end}` (`:` is not allowed in topic names).
    fn id(&self, topic: &str) -> String {
        format!("{topic}:{}:{}-{}", self.partition, self.start, self.end)
    }

    fn parse(topic: &str, id: &str) -> Option<Range> {
        let rest = id.strip_prefix(topic)?.strip_prefix(':')?;
        let (partition, offsets) = rest.split_once(':')?;
        let (start, end) = offsets.split_once('-')?;
        let range = Range {
            partition: partition.parse().ok()?,
            start: start.parse().ok()?,
            end: end.parse().ok()?,
        };
        (range.start <= range.end && range.start >= 0).then_some(range)
    }

    fn split(&self, topic: &str) -> Split {
        Split {
            id: self.id(topic),
            estimated_rows: Some((self.end - self.start) as u64),
        }
    }
}

#[async_trait]
impl Source for KafkaSource {
    fn kind(&self) -> &str {
        "kafka"
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn validate(&self) -> Result<()> {
        if self.batch_rows == 0 {
            return Err(Error::InvalidConfig(
                "the Kafka source's batch_rows is 0; give at least 1".into(),
            ));
        }
        if self.topic.is_empty() || self.topic.contains(':') {
            return Err(Error::InvalidConfig(format!(
                "'{}' is not a Kafka topic name (letters, digits, '.', '_' and '-')",
                self.topic
            )));
        }
        Ok(())
    }

    async fn splits(&self) -> Result<Vec<Split>> {
        if let Some(readers) = self.readers {
            let partitions = self.partitions().await?;
            return Ok(stream::shares(readers, partitions.len())
                .iter()
                .map(|share| Split {
                    id: share.id(&self.topic),
                    estimated_rows: None,
                })
                .collect());
        }
        let source = self.clone();
        let ranges = tokio::task::spawn_blocking(move || source.watermarks())
            .await
            .map_err(|e| Error::Internal(format!("reading watermarks: {e}")))??;
        Ok(ranges.iter().map(|r| r.split(&self.topic)).collect())
    }

    async fn resume_splits(&self, checkpointed: &[String]) -> Result<Option<Vec<Split>>> {
        let mut splits = Vec::with_capacity(checkpointed.len());
        for id in checkpointed {
            if let Some(range) = Range::parse(&self.topic, id) {
                splits.push(range.split(&self.topic));
            } else if stream::Share::parse(&self.topic, id).is_some() {
                splits.push(Split {
                    id: id.clone(),
                    estimated_rows: None,
                });
            } else {
                return Err(stream::unknown_split(&self.topic, id));
            }
        }
        Ok(Some(splits))
    }

    async fn open(&self, split: &Split, cursor: Option<&Cursor>) -> Result<Box<dyn SplitReader>> {
        if let Some(share) = stream::Share::parse(&self.topic, &split.id) {
            let partitions = self.partitions().await?;
            let consumer: StreamConsumer = self
                .consumer_config()
                .create()
                .map_err(|e| self.error("creating a consumer", e))?;
            return Ok(Box::new(stream::ShareReader::open(
                self,
                consumer,
                share,
                &partitions,
                cursor,
            )?));
        }
        let range = Range::parse(&self.topic, &split.id)
            .ok_or_else(|| Error::Internal(format!("split '{}' is not a range", split.id)))?;
        let next = match cursor {
            None => range.start,
            Some(c) => c["offset"].as_i64().ok_or_else(|| {
                Error::Corrupt(format!(
                    "Kafka cursor {c} of split '{}' has no offset",
                    split.id
                ))
            })?,
        };
        let bad = cursor.and_then(|c| c["bad"].as_u64()).unwrap_or(0);
        let consumer: StreamConsumer = self
            .consumer_config()
            .create()
            .map_err(|e| self.error("creating a consumer", e))?;
        if next < range.end {
            let mut assignment = TopicPartitionList::new();
            assignment
                .add_partition_offset(&self.topic, range.partition, Offset::Offset(next))
                .map_err(|e| self.error("assigning a partition", e))?;
            consumer
                .assign(&assignment)
                .map_err(|e| self.error("assigning a partition", e))?;
        }
        let builder = self.builder(range.partition)?;
        Ok(Box::new(PartitionReader {
            source: self.clone(),
            consumer,
            range,
            next,
            builder,
            transient_errors: 0,
            bad,
        }))
    }
}

impl KafkaSource {
    /// Sets `rejected` aside as dead letters, or fails the read with the
    /// first when the source has no dead-letter output or its budget ran out.
    pub(crate) async fn set_aside(
        &self,
        partition: i32,
        bad: &mut u64,
        rejected: Vec<Rejected>,
    ) -> Result<()> {
        let Some(first) = rejected.first() else {
            return Ok(());
        };
        let Some(dead) = self.dead_letters.clone() else {
            return Err(Error::BadInput(format!(
                "{}; fix the record's producer, or give the source a dead_letter location to \
                 set such records aside",
                first.reason
            )));
        };
        let topic = &self.topic;
        for r in rejected {
            *bad += 1;
            if *bad > dead.max_per_partition {
                return Err(Error::BadInput(format!(
                    "{}; that is {} records of partition {partition} that do not decode, more \
                     than its dead-letter budget of {} (max_bad_rows): fix the records' \
                     producer, or raise the budget and run again",
                    r.reason, bad, dead.max_per_partition
                )));
            }
            let path = dead
                .location
                .prefix
                .clone()
                .join(topic.as_ref())
                .join(format!("{partition}-{}.json", r.offset));
            fn text(bytes: &Option<Vec<u8>>) -> Option<String> {
                bytes
                    .as_deref()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
            }
            let letter = serde_json::json!({
                "topic": topic.as_ref(),
                "partition": partition,
                "offset": r.offset,
                "key": text(&r.key),
                "value": text(&r.value),
                "error": r.reason,
            });
            RecordDeadLettered {
                topic,
                partition,
                offset: r.offset,
                target: &dead.location.display,
                error: &r.reason,
            }
            .emit();
            dead.location
                .store
                .put(&path, letter.to_string().into_bytes().into())
                .await
                .map_err(|e| Error::storage("write a dead letter", &path, e))?;
        }
        Ok(())
    }

    /// A consumer's error: waited out while it is transient and one of at
    /// most [`MAX_TRANSIENT_ERRORS`] in a row (`in_a_row` counts them; a
    /// record resets it), the read's failure otherwise.
    pub(crate) fn read_failed(&self, in_a_row: &mut u32, doing: &str, e: KafkaError) -> Result<()> {
        *in_a_row += 1;
        if !code_of(&e).is_none_or(is_transient) || *in_a_row > MAX_TRANSIENT_ERRORS {
            return Err(self.error(doing, e));
        }
        ConnectionRetried {
            what: "kafka source",
            target: self.client.brokers(),
            attempt: *in_a_row,
            of: MAX_TRANSIENT_ERRORS,
            backoff: WAIT,
            error: &e.to_string(),
        }
        .emit();
        Ok(())
    }

    /// Checks that the brokers answer and the topic exists (for `validate
    /// --connect`, and so that a run fails before it starts).
    pub async fn probe(&self) -> Result<()> {
        let source = self.clone();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = source
                .consumer_config()
                .create()
                .map_err(|e| source.error("creating a consumer", e))?;
            crate::client::partitions(&consumer, &source.client, &source.topic).map(|_| ())
        })
        .await
        .map_err(|e| Error::Internal(format!("probing Kafka: {e}")))?
    }

    /// Each partition's range now: low to high watermark.
    fn watermarks(&self) -> Result<Vec<Range>> {
        let timeout = self.client.request_timeout();
        let consumer: BaseConsumer = self
            .consumer_config()
            .create()
            .map_err(|e| self.error("creating a consumer", e))?;
        let partitions = crate::client::partitions(&consumer, &self.client, &self.topic)?;
        let mut ranges = Vec::new();
        for partition in partitions {
            let (start, end) = consumer
                .fetch_watermarks(&self.topic, partition, timeout)
                .map_err(|e| self.error(&format!("reading partition {partition}'s offsets"), e))?;
            ranges.push(Range {
                partition,
                start,
                end,
            });
        }
        ranges.sort_by_key(|r| r.partition);
        Ok(ranges)
    }
}

/// Reads one partition's range.
struct PartitionReader {
    source: KafkaSource,
    consumer: StreamConsumer,
    range: Range,
    /// The offset after the last record returned: the cursor.
    next: i64,
    builder: RecordsBuilder,
    transient_errors: u32,
    /// Records of this partition set aside as dead letters, over all runs.
    bad: u64,
}

impl PartitionReader {
    /// The consumer's position: past the records consumed and the
    /// transaction markers among them.
    fn position(&self) -> Option<i64> {
        let positions = self.consumer.position().ok()?;
        let element = positions.find_partition(&self.source.topic, self.range.partition)?;
        match element.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        }
    }

    /// Whether the range is read: the position reached its end (only
    /// markers or aborted records may lie between the last record and it).
    fn reached_end(&mut self) -> bool {
        if self.position().is_some_and(|p| p >= self.range.end) {
            self.next = self.range.end;
        }
        self.next >= self.range.end
    }
}

#[async_trait]
impl SplitReader for PartitionReader {
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.next >= self.range.end {
            return Ok(None);
        }
        let deadline = Instant::now() + WAIT;
        let mut rejected = Vec::new();
        while self.builder.len() < self.source.batch_rows {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.consumer.recv()).await {
                Ok(Ok(message)) => {
                    self.transient_errors = 0;
                    let offset = message.offset();
                    if offset >= self.range.end {
                        self.next = self.range.end;
                        break;
                    }
                    rejected.extend(self.builder.push(
                        offset,
                        message.timestamp().to_millis(),
                        message.key(),
                        message.payload(),
                    ));
                    self.next = offset + 1;
                    if self.next >= self.range.end {
                        break;
                    }
                }
                Ok(Err(KafkaError::PartitionEOF(_))) => {
                    if self.reached_end() || self.builder.len() > 0 {
                        break;
                    }
                }
                Ok(Err(e)) => {
                    let doing = format!("reading partition {}", self.range.partition);
                    self.source
                        .read_failed(&mut self.transient_errors, &doing, e)?;
                }
                Err(_waited) => {
                    // Nothing more for now: hand back what there is, so that
                    // barriers pass.
                    self.reached_end();
                    break;
                }
            }
        }
        let (batch, more) = self.builder.finish()?;
        rejected.extend(more);
        rejected.sort_by_key(|r| r.offset);
        let partition = self.range.partition;
        self.source
            .set_aside(partition, &mut self.bad, rejected)
            .await?;
        if batch.num_rows() == 0 && self.next >= self.range.end {
            return Ok(None);
        }
        Ok(Some(batch))
    }

    fn cursor(&self) -> Cursor {
        serde_json::json!({ "offset": self.next, "bad": self.bad })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_id_keeps_its_range_and_its_topic() {
        let range = Range {
            partition: 7,
            start: 100,
            end: 2500,
        };
        let id = range.id("orders.v2");
        assert_eq!(id, "orders.v2:7:100-2500");
        assert_eq!(Range::parse("orders.v2", &id), Some(range));
        for bad in [
            "orders:7:100-2500",
            "orders.v2:7:100",
            "orders.v2:x:1-2",
            "orders.v2:1:5-2",
            "orders.v2:1:-1-2",
        ] {
            assert_eq!(Range::parse("orders.v2", bad), None, "{bad}");
        }
    }
}
