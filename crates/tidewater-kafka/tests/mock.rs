//! Faults the real broker cannot be made to show on cue, injected with
//! librdkafka's mock cluster (in-process): fetch and produce requests that
//! fail a few times and then succeed are retried through, a fetch refused
//! for good fails the read with an error naming the brokers and the topic.
//! (The mock cluster has no transactional visibility, so exactly-once is
//! tested on the real broker, in the CLI's tests/kafka.rs.)

use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use tidewater_core::Source;
use tidewater_kafka::{ClientConfig, Format, KafkaSource};

fn produce(brokers: &str, topic: &str, n: usize) {
    let producer: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    for i in 0..n {
        let value = format!("record {i}");
        let key = format!("{}", i % 7);
        producer
            .send(BaseRecord::to(topic).key(&key).payload(&value))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// Reads every split of `source` to its end: the values, in offset order per partition.
async fn read_all(source: &KafkaSource) -> tidewater_core::Result<Vec<String>> {
    use arrow::array::AsArray;
    let mut values = Vec::new();
    for split in source.splits().await? {
        let mut reader = source.open(&split, None).await?;
        while let Some(batch) = reader.next_batch().await? {
            let column = batch.column_by_name("value").unwrap().as_string::<i32>();
            values.extend(column.iter().map(|v| v.unwrap().to_string()));
        }
    }
    Ok(values)
}

#[tokio::test]
async fn transient_fetch_errors_are_retried_through() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("events", 2, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    produce(&brokers, "events", 2000);
    mock.request_errors(
        RDKafkaApiKey::Fetch,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        ],
    );
    let source = KafkaSource::new(ClientConfig::new(&brokers), "events", Format::Utf8)
        .unwrap()
        .batch_rows(100);
    let mut values = read_all(&source).await.unwrap();
    values.sort();
    let mut expected: Vec<String> = (0..2000).map(|i| format!("record {i}")).collect();
    expected.sort();
    assert_eq!(values, expected);
}

#[tokio::test]
async fn a_topic_the_brokers_refuse_fails_with_its_name() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("secret", 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    produce(&brokers, "secret", 10);
    mock.topic_error(
        "secret",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )
    .unwrap();
    let source = KafkaSource::new(
        ClientConfig::new(&brokers).timeout(Duration::from_secs(5)),
        "secret",
        Format::Utf8,
    )
    .unwrap();
    let error = read_all(&source).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!("Kafka at {brokers}, topic 'secret'")),
        "{text}"
    );
    assert!(!error.is_retryable(), "{text}");
}

#[tokio::test]
async fn a_topic_that_does_not_exist_is_named() {
    let mock = MockCluster::new(1).unwrap();
    let brokers = mock.bootstrap_servers();
    let source = KafkaSource::new(
        ClientConfig::new(&brokers).timeout(Duration::from_secs(5)),
        "nowhere",
        Format::Utf8,
    )
    .unwrap();
    let text = source.splits().await.unwrap_err().to_string();
    assert!(text.contains("topic 'nowhere' does not exist"), "{text}");
}
