//! One subtask's transactional producer and the commit of one checkpoint's
//! records: produced in a Kafka transaction that also moves a marker (the
//! committed offset of a consumer group of the subtask's own) to the
//! checkpoint, so that a commit replayed after a crash knows whether the
//! broker already has it.

use std::time::Duration;

use arrow::array::{Array, AsArray, RecordBatch};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tidewater_core::{CheckpointId, Error, Result, failpoint};

use crate::client::ClientConfig;
use crate::errors::kafka;

/// What committing checkpoint `checkpoint` must do, given the marker the
/// broker holds for the subtask (`None`: no transaction ever committed).
/// The marker is the last committed checkpoint plus one; a subtask commits
/// its checkpoints in order, so any marker past `checkpoint` means it is in.
///
/// ```text
/// marker None    checkpoint 4  -> Produce
/// marker Some(4) checkpoint 4  -> Produce   (checkpoint 3 was the last in)
/// marker Some(5) checkpoint 4  -> Skip      (checkpoint 4 is in)
/// marker Some(9) checkpoint 4  -> Skip
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// The records are not in the topic: produce them.
    Produce,
    /// A transaction of this checkpoint committed already: nothing to do.
    Skip,
}

pub(crate) fn decide(marker: Option<i64>, checkpoint: u64) -> Action {
    match marker {
        Some(m) if m > checkpoint as i64 => Action::Skip,
        _ => Action::Produce,
    }
}

/// Names of one subtask's transactional identity: its producer's
/// transactional id and its marker's consumer group (the same text).
pub(crate) fn identity(job: &str, uid: &str, subtask: usize) -> String {
    format!("tidewater.{job}.{uid}.{subtask}")
}

/// A subtask's producer, with the transactions of any earlier producer of
/// the same identity fenced and aborted (by `init_transactions`).
pub(crate) struct Transactor {
    producer: ThreadedProducer<DefaultProducerContext>,
    marker: BaseConsumer,
    group: ConsumerGroupMetadata,
    client: ClientConfig,
    topic: String,
}

impl Transactor {
    /// Opens the producer of `identity` on `topic`, fencing its predecessors.
    pub(crate) fn open(client: &ClientConfig, topic: &str, identity: &str) -> Result<Transactor> {
        let error = |doing: &str, e: KafkaError| kafka(doing, client.brokers(), topic, e);
        let timeout = client.request_timeout();
        let producer: ThreadedProducer<DefaultProducerContext> = client
            .rdkafka(&[
                ("transactional.id", identity),
                ("enable.idempotence", "true"),
                ("linger.ms", "5"),
            ])
            .create()
            .map_err(|e| error("creating a transactional producer", e))?;
        producer
            .init_transactions(timeout)
            .map_err(|e| error(&format!("initialising transactions of '{identity}'"), e))?;
        let marker: BaseConsumer = client
            .rdkafka(&[
                ("group.id", identity),
                ("enable.auto.commit", "false"),
                ("isolation.level", "read_committed"),
            ])
            .create()
            .map_err(|e| error("creating the marker's consumer", e))?;
        let group = marker.group_metadata().ok_or_else(|| {
            Error::Internal(format!(
                "no group metadata for the consumer group '{identity}'"
            ))
        })?;
        Ok(Transactor {
            producer,
            marker,
            group,
            client: client.clone(),
            topic: topic.to_string(),
        })
    }

    fn error(&self, doing: &str, e: KafkaError) -> Error {
        kafka(doing, self.client.brokers(), &self.topic, e)
    }

    fn marker_partition(&self, offset: Offset) -> Result<TopicPartitionList> {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.topic, 0, offset)
            .map_err(|e| self.error("naming the marker", e))?;
        Ok(list)
    }

    /// The marker: the last committed checkpoint plus one.
    pub(crate) fn marker(&self) -> Result<Option<i64>> {
        let asked = self.marker_partition(Offset::Invalid)?;
        let committed = self
            .marker
            .committed_offsets(asked, self.client.request_timeout())
            .map_err(|e| self.error("reading the last committed checkpoint", e))?;
        Ok(committed
            .find_partition(&self.topic, 0)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            }))
    }

    /// Checks that checkpoint `checkpoint`, whose staged `file` is gone,
    /// is in the topic; a loud error if not (its records would be lost).
    pub(crate) fn confirm(&self, checkpoint: u64, file: &str) -> Result<()> {
        match decide(self.marker()?, checkpoint) {
            Action::Skip => Ok(()),
            Action::Produce => Err(Error::Corrupt(format!(
                "the staged records of checkpoint {checkpoint} ({file}) are gone, and Kafka \
                 (topic '{}') has no transaction of that checkpoint: they cannot be produced. \
                 Something deleted the sink's staging folder; start the job anew with an empty \
                 state location to produce everything again",
                self.topic
            ))),
        }
    }

    /// Produces `records` (see [`super::encode`]) as the transaction of
    /// `checkpoint`, unless one committed already. Returns whether it produced.
    pub(crate) fn commit(&self, checkpoint: u64, records: &RecordBatch) -> Result<bool> {
        if decide(self.marker()?, checkpoint) == Action::Skip {
            return Ok(false);
        }
        let timeout = self.client.request_timeout();
        self.producer
            .begin_transaction()
            .map_err(|e| self.error("beginning a transaction", e))?;
        let produced = self.produce_all(checkpoint, records).and_then(|()| {
            let marker = self.marker_partition(Offset::Offset(checkpoint as i64 + 1))?;
            self.producer
                .send_offsets_to_transaction(&marker, &self.group, timeout)
                .map_err(|e| self.error("recording the checkpoint in the transaction", e))?;
            self.producer
                .commit_transaction(timeout)
                .map_err(|e| self.error(&format!("committing checkpoint {checkpoint}"), e))
        });
        if let Err(e) = produced {
            // Best effort: a transaction left open is aborted by the next
            // producer of this identity, or by the broker's timeout.
            let _ = self.producer.abort_transaction(timeout);
            return Err(e);
        }
        failpoint::hit("kafka-after-transaction", CheckpointId(checkpoint));
        Ok(true)
    }

    fn produce_all(&self, checkpoint: u64, records: &RecordBatch) -> Result<()> {
        let keys = records.column(0).as_binary::<i32>();
        let values = records.column(1).as_binary::<i32>();
        for row in 0..records.num_rows() {
            if row == records.num_rows() / 2 && failpoint::is_armed("kafka-mid-transaction") {
                // Half the records at the broker, in a transaction never committed.
                let _ = self.producer.flush(self.client.request_timeout());
                failpoint::hit("kafka-mid-transaction", CheckpointId(checkpoint));
            }
            let value = values.value(row);
            let key = (!keys.is_null(row)).then(|| keys.value(row));
            let mut record = BaseRecord::<[u8], [u8]>::to(&self.topic).payload(value);
            if let Some(key) = key {
                record = record.key(key);
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err((e, _)) => {
                        let too_large = matches!(
                            e,
                            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
                        );
                        let what = if too_large {
                            format!(
                                "row {row} of checkpoint {checkpoint} (key {}) is a record of {} \
                                 bytes, more than the producer's message.max.bytes: shrink the \
                                 row, or raise message.max.bytes (and the topic's \
                                 max.message.bytes)",
                                key.map_or("none".into(), |k| String::from_utf8_lossy(k)
                                    .into_owned()),
                                value.len()
                            )
                        } else {
                            format!("producing row {row} of checkpoint {checkpoint}")
                        };
                        return Err(self.error(&what, e));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_produced_once_whatever_the_marker_says() {
        let cases = [
            (None, 4, Action::Produce),
            (Some(0), 0, Action::Produce),
            (Some(4), 4, Action::Produce),
            (Some(5), 4, Action::Skip),
            (Some(9), 4, Action::Skip),
            (Some(1), 0, Action::Skip),
        ];
        for (marker, checkpoint, action) in cases {
            assert_eq!(
                decide(marker, checkpoint),
                action,
                "{marker:?} {checkpoint}"
            );
        }
    }

    #[test]
    fn each_subtask_has_an_identity_of_its_own() {
        assert_eq!(identity("copy", "out", 1), "tidewater.copy.out.1");
        assert_ne!(identity("copy", "out", 1), identity("copy", "out", 2));
    }
}
