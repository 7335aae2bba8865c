//! The unbounded mode of [`KafkaSource`](crate::KafkaSource): a fixed
//! number of readers, each one consumer over its share of the partitions
//! (partition `p` goes to reader `p % readers`), reading until the job is
//! cancelled. The cursor is the next offset of each of its partitions.

use std::collections::BTreeMap;
use std::time::Instant;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tidewater_core::{Cursor, Error, Result, SplitReader};

use crate::decode::RecordsBuilder;
use crate::source::{KafkaSource, WAIT};

/// Reader `index` of `count`: `{topic}:*{index}/{count}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    pub index: usize,
    pub count: usize,
}

impl Share {
    pub(crate) fn id(&self, topic: &str) -> String {
        format!("{topic}:*{}/{}", self.index, self.count)
    }

    pub(crate) fn parse(topic: &str, id: &str) -> Option<Share> {
        let rest = id.strip_prefix(topic)?.strip_prefix(":*")?;
        let (index, count) = rest.split_once('/')?;
        let share = Share {
            index: index.parse().ok()?,
            count: count.parse().ok()?,
        };
        (share.count > 0 && share.index < share.count).then_some(share)
    }

    /// Whether `partition` is this reader's.
    pub(crate) fn owns(&self, partition: i32) -> bool {
        partition as usize % self.count == self.index
    }
}

/// One partition of a reader.
struct Part {
    /// The offset after the last record returned.
    next: Option<i64>,
    /// Records set aside as dead letters, over all runs.
    bad: u64,
    builder: RecordsBuilder,
}

/// Reads a share of the partitions, without end.
pub(crate) struct ShareReader {
    source: KafkaSource,
    consumer: StreamConsumer,
    parts: BTreeMap<i32, Part>,
    transient_errors: u32,
}

impl ShareReader {
    /// Opens `share` of `partitions` at `cursor` (each partition's next
    /// offset; the beginning for those it does not name).
    pub(crate) fn open(
        source: &KafkaSource,
        consumer: StreamConsumer,
        share: Share,
        partitions: &[i32],
        cursor: Option<&Cursor>,
    ) -> Result<ShareReader> {
        let mut assignment = TopicPartitionList::new();
        let mut parts = BTreeMap::new();
        for &p in partitions.iter().filter(|p| share.owns(**p)) {
            let key = p.to_string();
            let next = cursor.and_then(|c| c["offsets"][&key].as_i64());
            let bad = cursor.and_then(|c| c["bad"][&key].as_u64()).unwrap_or(0);
            let offset = next.map_or(Offset::Beginning, Offset::Offset);
            assignment
                .add_partition_offset(source.topic(), p, offset)
                .map_err(|e| source.error("assigning a partition", e))?;
            parts.insert(
                p,
                Part {
                    next,
                    bad,
                    builder: source.builder(p)?,
                },
            );
        }
        if !parts.is_empty() {
            consumer
                .assign(&assignment)
                .map_err(|e| source.error("assigning partitions", e))?;
        }
        Ok(ShareReader {
            source: source.clone(),
            consumer,
            parts,
            transient_errors: 0,
        })
    }

    fn buffered(&self) -> usize {
        self.parts.values().map(|p| p.builder.len()).sum()
    }
}

#[async_trait]
impl SplitReader for ShareReader {
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let deadline = Instant::now() + WAIT;
        let mut rejected: BTreeMap<i32, Vec<_>> = BTreeMap::new();
        while self.buffered() < self.source.batch_rows_limit() {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.consumer.recv()).await {
                Ok(Ok(message)) => {
                    self.transient_errors = 0;
                    let Some(part) = self.parts.get_mut(&message.partition()) else {
                        continue;
                    };
                    let offset = message.offset();
                    rejected
                        .entry(message.partition())
                        .or_default()
                        .extend(part.builder.push(
                            offset,
                            message.timestamp().to_millis(),
                            message.key(),
                            message.payload(),
                        ));
                    part.next = Some(offset + 1);
                }
                Ok(Err(KafkaError::PartitionEOF(_))) => {}
                Ok(Err(e)) => {
                    self.source
                        .read_failed(&mut self.transient_errors, "reading", e)?;
                }
                // Hand back what there is, so that barriers pass.
                Err(_waited) => break,
            }
        }
        let mut batches = Vec::new();
        for (&partition, part) in self.parts.iter_mut() {
            if part.builder.len() == 0 && !rejected.contains_key(&partition) {
                continue;
            }
            let (batch, more) = part.builder.finish()?;
            let mut set_aside = rejected.remove(&partition).unwrap_or_default();
            set_aside.extend(more);
            set_aside.sort_by_key(|r| r.offset);
            self.source
                .set_aside(partition, &mut part.bad, set_aside)
                .await?;
            batches.push(batch);
        }
        let schema = self.source.schema_ref();
        Ok(Some(arrow::compute::concat_batches(&schema, &batches)?))
    }

    fn cursor(&self) -> Cursor {
        let offsets: serde_json::Map<String, serde_json::Value> = self
            .parts
            .iter()
            .filter_map(|(p, part)| part.next.map(|n| (p.to_string(), n.into())))
            .collect();
        let bad: serde_json::Map<String, serde_json::Value> = self
            .parts
            .iter()
            .map(|(p, part)| (p.to_string(), part.bad.into()))
            .collect();
        serde_json::json!({ "offsets": offsets, "bad": bad })
    }
}

/// The error for a split id that is neither a range nor a share.
pub(crate) fn unknown_split(topic: &str, id: &str) -> Error {
    Error::InvalidConfig(format!(
        "the checkpoint being restored read the split '{id}', which is not a partition of \
         topic '{topic}' nor a share of them: restore with the topic (and mode) it was \
         started with, or start the job anew with an empty state location"
    ))
}

/// The shares of a topic read by `readers` readers.
pub(crate) fn shares(readers: usize, partitions: usize) -> Vec<Share> {
    let count = readers.clamp(1, partitions.max(1));
    (0..count).map(|index| Share { index, count }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_divide_the_partitions_and_keep_their_ids() {
        let all = shares(3, 8);
        assert_eq!(all.len(), 3);
        let owned: Vec<Vec<i32>> = all
            .iter()
            .map(|s| (0..8).filter(|p| s.owns(*p)).collect())
            .collect();
        assert_eq!(owned, [vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]);
        // More readers than partitions: one each.
        assert_eq!(shares(5, 2).len(), 2);
        let id = all[1].id("orders");
        assert_eq!(id, "orders:*1/3");
        assert_eq!(Share::parse("orders", &id), Some(all[1]));
        for bad in ["orders:*3/3", "orders:*0/0", "orders:1/3", "other:*0/1"] {
            assert_eq!(Share::parse("orders", bad), None, "{bad}");
        }
    }
}
