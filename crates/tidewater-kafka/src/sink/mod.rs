//! [`KafkaSink`]: rows as JSON records on a topic, at least once or
//! exactly once.
//!
//! # Exactly once
//!
//! librdkafka cannot resume a transaction that another process began
//! (Flink's Java sink does, by restoring the producer's id and epoch), so a
//! transaction never spans a checkpoint's manifest. Instead:
//!
//! 1. Between barriers a writer encodes its rows and keeps them.
//! 2. At the barrier it writes them as one Arrow IPC file to the sink's
//!    staging location, and the file's name is its commit handle: the
//!    records are durable with the checkpoint, and not yet in Kafka.
//! 3. Once the manifest exists, the commit produces the file's records in
//!    one Kafka transaction of the subtask's producer (transactional id
//!    `tidewater.{job}.{uid}.{subtask}`), which also commits the offset
//!    *checkpoint + 1* for the consumer group of the same name: a marker
//!    that becomes visible exactly when the records do. Then the file goes.
//! 4. A commit replayed on restore opens the subtask's producer
//!    (`init_transactions`: any transaction a dead or paused predecessor
//!    left open is aborted, and the predecessor is fenced), reads the
//!    marker, and produces the file's records only if the marker is not
//!    past the checkpoint yet.
//!
//! A kill at any instant therefore leaves each checkpoint's records in the
//! topic once, for `read_committed` consumers. The costs: records are
//! written twice (to staging, then to Kafka) and reach the topic one
//! checkpoint interval late; the sink keeps up to one interval's records
//! of each subtask in memory; a consumer group per subtask holds the
//! marker; and `read_uncommitted` consumers see the records of aborted
//! attempts too.
//!
//! # At least once
//!
//! An idempotent producer sends rows as they come, and each barrier waits
//! until the broker has them all. After a crash the rows since the last
//! checkpoint are sent again: whole records may appear twice, none is lost.

mod encode;
mod transaction;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use async_trait::async_trait;
use object_store::{ObjectStoreExt, PutPayload};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tidewater_core::{
    CheckpointId, CommitHandle, Epoch, Error, Result, Sink, SinkWriter, StoreLocation, TaskContext,
    open_location,
};

use crate::client::ClientConfig;
use crate::errors::kafka;
use transaction::{Transactor, identity};

/// A sink's subtask: job, uid, index.
type SubtaskId = (String, String, usize);

/// A subtask's producer, once opened; commits of one subtask take turns.
type Slot = Arc<Mutex<Option<Transactor>>>;

/// How the sink delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// Every row at least once; a restart may send the rows since the last
    /// checkpoint again.
    AtLeastOnce,
    /// Every row exactly once for `read_committed` consumers (see the module docs).
    ExactlyOnce,
}

/// Writes rows to a Kafka topic as JSON objects, keyed by a column's text
/// when one is given.
///
/// ```no_run
/// # async fn f() -> tidewater_core::Result<()> {
/// use tidewater_kafka::{ClientConfig, KafkaSink, SinkMode};
/// let sink = KafkaSink::new(
///     ClientConfig::new("127.0.0.1:9092"),
///     "events-v2",
///     SinkMode::ExactlyOnce,
///     "./tidewater-state/kafka-staging",
/// )?
/// .key_column("id");
/// # Ok(()) }
/// ```
pub struct KafkaSink {
    client: ClientConfig,
    topic: String,
    mode: SinkMode,
    key_column: Option<String>,
    staging: Arc<StoreLocation>,
    /// Each subtask's transactional producer, opened at its first commit.
    transactors: Mutex<HashMap<SubtaskId, Slot>>,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("brokers", &self.client.brokers())
            .field("topic", &self.topic)
            .field("mode", &self.mode)
            .field("staging", &self.staging.display)
            .finish()
    }
}

impl KafkaSink {
    /// Writes to `topic`; in exactly-once mode each checkpoint's records
    /// wait in `staging` (a folder or object-store URL) until they commit.
    pub fn new(client: ClientConfig, topic: &str, mode: SinkMode, staging: &str) -> Result<Self> {
        Ok(KafkaSink {
            client,
            topic: topic.to_string(),
            mode,
            key_column: None,
            staging: Arc::new(open_location(staging)?),
            transactors: Mutex::default(),
        })
    }

    /// Keys each record by this column's text (default: no key, so the
    /// producer spreads records over the partitions).
    pub fn key_column(mut self, column: &str) -> Self {
        self.key_column = Some(column.to_string());
        self
    }

    fn error(&self, doing: &str, e: KafkaError) -> Error {
        kafka(doing, self.client.brokers(), &self.topic, e)
    }

    /// Checks that the brokers answer and the topic exists (for `validate
    /// --connect`, and so that a run fails before its first checkpoint).
    pub async fn probe(&self) -> Result<()> {
        let (client, topic) = (self.client.clone(), self.topic.clone());
        tokio::task::spawn_blocking(move || {
            let consumer: rdkafka::consumer::BaseConsumer = client
                .rdkafka(&[])
                .create()
                .map_err(|e| kafka("creating a client", client.brokers(), &topic, e))?;
            crate::client::partitions(&consumer, &client, &topic).map(|_| ())
        })
        .await
        .map_err(|e| Error::Internal(format!("probing Kafka: {e}")))?
    }

    fn staged_prefix(&self, job: &str, uid: &str) -> object_store::path::Path {
        self.staging.prefix.clone().join(job).join(uid)
    }

    fn transactor(&self, job: &str, uid: &str, subtask: usize) -> Slot {
        let mut all = self.transactors.lock().unwrap_or_else(|p| p.into_inner());
        all.entry((job.to_string(), uid.to_string(), subtask))
            .or_default()
            .clone()
    }

    async fn read_staged(&self, path: &object_store::path::Path) -> Result<Option<RecordBatch>> {
        let bytes = match self.staging.store.get(path).await {
            Ok(found) => found
                .bytes()
                .await
                .map_err(|e| Error::storage("read staged Kafka records", path, e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(Error::storage("read staged Kafka records", path, e)),
        };
        let reader = arrow::ipc::reader::FileReader::try_new(std::io::Cursor::new(bytes), None)
            .map_err(|e| Error::Corrupt(format!("staged Kafka records {path}: {e}")))?;
        let batches = reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Corrupt(format!("staged Kafka records {path}: {e}")))?;
        Ok(Some(arrow::compute::concat_batches(
            &encode::records_schema(),
            &batches,
        )?))
    }

    async fn delete_under(
        &self,
        prefix: &object_store::path::Path,
        only: Option<&str>,
    ) -> Result<()> {
        use futures::TryStreamExt;
        let listed: Vec<_> = self
            .staging
            .store
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(|e| Error::storage("list staged Kafka records", prefix, e))?;
        for object in listed {
            if only.is_some_and(|suffix| !object.location.as_ref().ends_with(suffix)) {
                continue;
            }
            match self.staging.store.delete(&object.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(Error::storage(
                        "delete staged Kafka records",
                        &object.location,
                        e,
                    ));
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for KafkaSink {
    fn kind(&self) -> &str {
        "kafka"
    }

    async fn open_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        Ok(match self.mode {
            SinkMode::ExactlyOnce => Box::new(StagingWriter {
                staging: Arc::clone(&self.staging),
                prefix: self
                    .staged_prefix(&ctx.job, &ctx.uid)
                    .join(ctx.subtask.to_string()),
                job: ctx.job.to_string(),
                epoch: ctx.epoch,
                key_column: self.key_column.clone(),
                pending: Vec::new(),
            }),
            SinkMode::AtLeastOnce => {
                let producer: FutureProducer = self
                    .client
                    .rdkafka(&[("enable.idempotence", "true"), ("linger.ms", "5")])
                    .create()
                    .map_err(|e| self.error("creating a producer", e))?;
                Box::new(FlushingWriter {
                    producer,
                    topic: self.topic.clone(),
                    client: self.client.clone(),
                    key_column: self.key_column.clone(),
                    in_flight: Vec::new(),
                })
            }
        })
    }

    async fn commit(&self, handle: &CommitHandle) -> Result<()> {
        let Some(path) = handle.payload["file"].as_str() else {
            return Ok(());
        };
        let path = object_store::path::Path::from(path);
        // None: deleted by an earlier commit of this handle, after its
        // transaction committed; the marker must then say so.
        let records = self.read_staged(&path).await?;
        let job = handle.payload["job"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let slot = self.transactor(&job, &handle.uid, handle.subtask);
        let (client, topic) = (self.client.clone(), self.topic.clone());
        let (uid, subtask, checkpoint) = (handle.uid.clone(), handle.subtask, handle.checkpoint.0);
        let file = path.to_string();
        tokio::task::spawn_blocking(move || {
            let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(Transactor::open(
                    &client,
                    &topic,
                    &identity(&job, &uid, subtask),
                )?);
            }
            let transactor = slot.as_ref().expect("opened above");
            let committed = match &records {
                Some(records) => transactor.commit(checkpoint, records).map(|_| ()),
                None => transactor.confirm(checkpoint, &file),
            };
            if committed.is_err() {
                // Opened afresh next time: init_transactions clears what failed.
                *slot = None;
            }
            committed
        })
        .await
        .map_err(|e| Error::Internal(format!("committing Kafka records: {e}")))??;
        match self.staging.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::storage("delete staged Kafka records", &path, e)),
        }
    }

    // No `abort_epoch`: a superseded run must not delete what it staged,
    // since its successor's restore may still commit a checkpoint the
    // superseded run completed. Staged files cost only storage until the
    // next restore's `abort_uncommitted`.
    async fn abort_uncommitted(&self, job: &str, uid: &str) -> Result<()> {
        // The restored checkpoint's records were committed just before:
        // what is left was staged for checkpoints that never completed.
        self.delete_under(&self.staged_prefix(job, uid), None).await
    }
}

/// Exactly once: keeps a checkpoint's records, stages them at its barrier.
struct StagingWriter {
    staging: Arc<StoreLocation>,
    prefix: object_store::path::Path,
    job: String,
    epoch: Epoch,
    key_column: Option<String>,
    pending: Vec<RecordBatch>,
}

#[async_trait]
impl SinkWriter for StagingWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        self.pending
            .push(encode::encode(&batch, self.key_column.as_deref())?);
        Ok(())
    }

    async fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<Option<serde_json::Value>> {
        if self.pending.iter().all(|b| b.num_rows() == 0) {
            self.pending.clear();
            return Ok(None);
        }
        let schema = encode::records_schema();
        let mut file = Vec::new();
        {
            let mut writer = arrow::ipc::writer::FileWriter::try_new(&mut file, &schema)?;
            for batch in self.pending.drain(..) {
                writer.write(&batch)?;
            }
            writer.finish()?;
        }
        let path = self
            .prefix
            .clone()
            .join(format!("{}-e{}.arrow", checkpoint.0, self.epoch.0));
        let records = file.len();
        self.staging
            .store
            .put(&path, PutPayload::from(file))
            .await
            .map_err(|e| Error::storage("stage Kafka records", &path, e))?;
        Ok(Some(serde_json::json!({
            "file": path.as_ref(),
            "job": self.job,
            "bytes": records,
        })))
    }
}

/// At least once: sends rows as they come, waits for all at each barrier.
struct FlushingWriter {
    producer: FutureProducer,
    topic: String,
    client: ClientConfig,
    key_column: Option<String>,
    in_flight: Vec<rdkafka::producer::DeliveryFuture>,
}

impl FlushingWriter {
    fn error(&self, doing: &str, e: KafkaError) -> Error {
        kafka(doing, self.client.brokers(), &self.topic, e)
    }
}

#[async_trait]
impl SinkWriter for FlushingWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        use arrow::array::{Array, AsArray};
        let records = encode::encode(&batch, self.key_column.as_deref())?;
        let keys = records.column(0).as_binary::<i32>();
        let values = records.column(1).as_binary::<i32>();
        for row in 0..records.num_rows() {
            let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).payload(values.value(row));
            if !keys.is_null(row) {
                record = record.key(keys.value(row));
            }
            let future = loop {
                match self.producer.send_result(record) {
                    Ok(future) => break future,
                    Err((
                        KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                        back,
                    )) => {
                        record = back;
                        // Let deliveries drain before queueing more.
                        if let Some(oldest) = self.in_flight.first_mut() {
                            let _ = oldest.await;
                            self.in_flight.remove(0);
                        } else {
                            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                        }
                    }
                    Err((e, _)) => {
                        return Err(self.error(
                            &format!("producing a row of {} bytes", values.value(row).len()),
                            e,
                        ));
                    }
                }
            };
            self.in_flight.push(future);
        }
        Ok(())
    }

    async fn pre_commit(&mut self, _checkpoint: CheckpointId) -> Result<Option<serde_json::Value>> {
        for delivery in self.in_flight.drain(..) {
            match delivery.await {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => {
                    return Err(kafka(
                        "delivering a record",
                        self.client.brokers(),
                        &self.topic,
                        e,
                    ));
                }
                Err(_cancelled) => {
                    return Err(Error::External {
                        message: format!(
                            "Kafka at {}, topic '{}': the producer dropped a record before \
                             delivering it",
                            self.client.brokers(),
                            self.topic
                        ),
                        retryable: true,
                    });
                }
            }
        }
        // Every delivery is confirmed: nothing is left to flush.
        Ok(None)
    }
}
