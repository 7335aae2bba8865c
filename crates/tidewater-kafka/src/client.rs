//! Where the brokers are and how to talk to them: the settings every
//! consumer and producer of a connector starts from.

use std::time::Duration;

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
