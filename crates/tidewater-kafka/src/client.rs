//! Where the brokers are and how to talk to them: the settings every
//! consumer and producer of a connector starts from, and the one question
//! both connectors ask first (does the topic exist, with what partitions).

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use tidewater_core::{Error, Result};

use crate::errors::kafka;

/// The partitions of `topic`, sorted; an error naming the topic when it
/// does not exist or the brokers refuse it.
pub(crate) fn partitions<C: ClientContext + ConsumerContext>(
    consumer: &BaseConsumer<C>,
    client: &ClientConfig,
    topic: &str,
) -> Result<Vec<i32>> {
    let error = |doing: &str, e: KafkaError| kafka(doing, client.brokers(), topic, e);
    let metadata = consumer
        .fetch_metadata(Some(topic), client.request_timeout())
        .map_err(|e| error("reading the topic's metadata", e))?;
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| Error::External {
            message: format!(
                "Kafka at {}: no metadata for topic '{topic}'",
                client.brokers()
            ),
            retryable: true,
        })?;
    if let Some(e) = found.error() {
        return Err(error(
            "reading the topic's metadata",
            KafkaError::MetadataFetch(e.into()),
        ));
    }
    if found.partitions().is_empty() {
        return Err(Error::InvalidConfig(format!(
            "Kafka at {}: the topic '{topic}' does not exist (it has no partitions); create \
             it, or fix the topic's name",
            client.brokers()
        )));
    }
    let mut ids: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// The brokers and any librdkafka settings of the user's (TLS, SASL, ...).
///
/// ```
/// let config = tidewater_kafka::ClientConfig::new("127.0.0.1:9092")
///     .set("security.protocol", "plaintext");
/// assert_eq!(config.brokers(), "127.0.0.1:9092");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    brokers: String,
    properties: Vec<(String, String)>,
    timeout: Duration,
}

impl ClientConfig {
    /// The brokers to bootstrap from: `host:port[,host:port...]`.
    pub fn new(brokers: impl Into<String>) -> Self {
        ClientConfig {
            brokers: brokers.into(),
            properties: Vec::new(),
            timeout: Duration::from_secs(30),
        }
    }

    /// A librdkafka setting, applied after tidewater's own (so it wins).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    /// How long one request to the cluster may take (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The brokers.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// librdkafka's configuration: the brokers, `defaults`, then the user's
    /// settings.
    pub(crate) fn rdkafka(&self, defaults: &[(&str, &str)]) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        // librdkafka's own log lines would bypass tracing.
        config.set("log_level", "3");
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }
}
