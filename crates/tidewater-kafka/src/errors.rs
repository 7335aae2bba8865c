//! librdkafka's errors as tidewater's: each names what was being done, the
//! brokers and the topic, and says whether trying again may help.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tidewater_core::Error;

/// Whether an error of this code may go away by itself (a broker
/// restarting, a leader moving, a timeout), as opposed to one that needs a
/// change (a topic that does not exist, a record too large).
///
/// A fenced producer is transient: the producer cannot tell whether a
/// newer run took its transactional id over or a paused older one woke up
/// and did (its later sends then fail as `Fatal`: a fenced producer is
/// dead). The run restarts from its last checkpoint, and the job's lease
/// decides: a superseded run stops at its lease check before it opens a
/// producer again; the legitimate one opens its producer anew (fencing
/// the woken one) and replays its commit, which the marker keeps exact.
pub(crate) fn is_transient(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    !matches!(
        code,
        C::UnknownTopicOrPartition
            | C::UnknownTopic
            | C::UnknownPartition
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::GroupAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::SaslAuthenticationFailed
            | C::Authentication
            | C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::InvalidConfig
            | C::InvalidArgument
            | C::InvalidTransactionalState
            | C::OffsetOutOfRange
    )
}

/// The code of an error, when librdkafka gave one.
pub(crate) fn code_of(e: &KafkaError) -> Option<RDKafkaErrorCode> {
    e.rdkafka_error_code()
}

/// `e`, met while `doing` with `topic` on `brokers`.
pub(crate) fn kafka(doing: &str, brokers: &str, topic: &str, e: KafkaError) -> Error {
    let code = code_of(&e);
    let retryable = code.is_none_or(is_transient);
    let hint = match code {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            format!(": the topic '{topic}' does not exist; create it, or fix the topic's name")
        }
        Some(
            RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::Fatal,
        ) => ": another producer took this subtask's transactional id over; the run restarts \
             from its last checkpoint, and stops there if its lease says a newer run holds the \
             job"
        .to_string(),
        Some(RDKafkaErrorCode::OffsetOutOfRange) => ": the records at the checkpointed offset \
             were deleted by the topic's retention before they were read; they are lost to this \
             job (start it anew, or raise retention.ms)"
            .to_string(),
        _ if retryable => "; retrying may help once the brokers answer".to_string(),
        _ => String::new(),
    };
    Error::External {
        message: format!("Kafka at {brokers}, topic '{topic}': {doing}: {e}{hint}"),
        retryable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_needs_a_change_is_not_retried() {
        let cases = [
            (RDKafkaErrorCode::BrokerTransportFailure, true),
            (RDKafkaErrorCode::AllBrokersDown, true),
            (RDKafkaErrorCode::RequestTimedOut, true),
            (RDKafkaErrorCode::NotLeaderForPartition, true),
            (RDKafkaErrorCode::UnknownTopicOrPartition, false),
            (RDKafkaErrorCode::MessageSizeTooLarge, false),
            // Who is newer is the lease's to say, after a restart.
            (RDKafkaErrorCode::ProducerFenced, true),
            (RDKafkaErrorCode::Fenced, true),
            (RDKafkaErrorCode::Fatal, true),
            (RDKafkaErrorCode::OffsetOutOfRange, false),
        ];
        for (code, transient) in cases {
            assert_eq!(is_transient(code), transient, "{code:?}");
        }
    }

    #[test]
    fn the_message_names_the_brokers_the_topic_and_the_fix() {
        let e = kafka(
            "reading partition 0",
            "b1:9092",
            "events",
            KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition),
        );
        let text = e.to_string();
        assert!(text.contains("Kafka at b1:9092, topic 'events'"), "{text}");
        assert!(text.contains("does not exist"), "{text}");
        assert!(!e.is_retryable());
    }
}
