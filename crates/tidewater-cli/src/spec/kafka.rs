//! The `kafka` source and sink tables of a spec.

use arrow::datatypes::{DataType, TimeUnit};

use super::diagnostic::Diagnostic;
use super::model::{KafkaFormat, Kind, ThrottleSpec};
use super::reader::Fields;

/// The column types a JSON schema may name, and what each is.
const TYPES: &[(&str, DataType)] = &[
    ("boolean", DataType::Boolean),
    ("int32", DataType::Int32),
    ("int64", DataType::Int64),
    ("float32", DataType::Float32),
    ("float64", DataType::Float64),
    ("utf8", DataType::Utf8),
    ("string", DataType::Utf8),
    ("date", DataType::Date32),
];

/// The Arrow type a spec calls `name` (`timestamp` is ms, UTC).
fn column_type(name: &str) -> Option<DataType> {
    if name == "timestamp" {
        return Some(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("UTC".into()),
        ));
    }
    TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| t.clone())
}

fn properties(f: &Fields<'_, '_>) -> Vec<(String, String)> {
    f.string_table("properties")
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.value))
        .collect()
}

/// `[sources.ID]` with `type = "kafka"`.
pub(super) fn source(f: &Fields<'_, '_>, throttle: ThrottleSpec) -> Option<Kind> {
    let brokers = f.required_string("brokers", "the brokers, like \"127.0.0.1:9092\"");
    let topic = f.required_string("topic", "the topic to read");
    let format = f.choice("format", &["raw", "utf8", "json"]);
    let bad_format = format.is_none() && f.has("format");
    let schema = f.string_table("schema");
    let mode = f.choice("mode", &["bounded", "unbounded"]);
    let bad_mode = mode.is_none() && f.has("mode");
    let batch_rows = f.integer("batch_rows", 1).map(|v| v.value as usize);
    let dead_letter = f.string("dead_letter");
    let max_bad_rows = f.integer("max_bad_rows", 0);
    if let Some(budget) = &max_bad_rows
        && dead_letter.is_none()
    {
        f.report(
            Diagnostic::at(
                budget.span.clone(),
                format!("{}: `max_bad_rows` needs `dead_letter`", f.name),
            )
            .help("add dead_letter = \"./dead-letters\": where the records that do not decode go"),
        );
    }
    let properties = properties(f);
    let format = match format.as_ref().map_or("utf8", |v| v.value.as_str()) {
        "raw" => KafkaFormat::Raw,
        "utf8" => KafkaFormat::Utf8,
        _ => {
            let Some(schema) = schema.as_ref() else {
                f.missing(
                    "schema",
                    "the JSON fields to read and their types, like { id = \"int64\", name = \"utf8\" }",
                );
                return None;
            };
            let mut columns = Vec::new();
            for (name, kind) in schema {
                match column_type(&kind.value) {
                    Some(t) => columns.push((name.clone(), t)),
                    None => f.report(
                        Diagnostic::at(
                            kind.span.clone(),
                            format!(
                                "{}: schema.{name} = \"{}\" is not a type this source reads",
                                f.name, kind.value
                            ),
                        )
                        .help(format!(
                            "one of {}, \"timestamp\"",
                            TYPES
                                .iter()
                                .map(|(n, _)| format!("\"{n}\""))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    ),
                }
            }
            KafkaFormat::Json(columns)
        }
    };
    if let Some(schema) = &schema
        && !matches!(format, KafkaFormat::Json(_))
        && let Some((_, first)) = schema.first()
    {
        f.report(Diagnostic::at(
            first.span.clone(),
            format!("{}: `schema` is for format = \"json\"", f.name),
        ));
    }
    if bad_format || bad_mode {
        return None;
    }
    Some(Kind::KafkaSource {
        brokers: brokers?.value,
        topic: topic?.value,
        format,
        unbounded: mode.is_some_and(|m| m.value == "unbounded"),
        batch_rows,
        dead_letter: dead_letter.map(|v| v.value),
        max_bad_rows: max_bad_rows.map(|v| v.value),
        properties,
        throttle,
    })
}

/// `[sinks.ID]` with `type = "kafka"`.
pub(super) fn sink(f: &Fields<'_, '_>) -> Option<Kind> {
    let brokers = f.required_string("brokers", "the brokers, like \"127.0.0.1:9092\"");
    let topic = f.required_string("topic", "the topic to write");
    let mode = f.choice("mode", &["exactly-once", "at-least-once"]);
    let bad_mode = mode.is_none() && f.has("mode");
    let key = f.string("key").map(|v| v.value);
    let staging = f.string("staging").map(|v| v.value);
    let properties = properties(f);
    if bad_mode {
        return None;
    }
    Some(Kind::KafkaSink {
        brokers: brokers?.value,
        topic: topic?.value,
        exactly_once: mode.is_none_or(|m| m.value == "exactly-once"),
        key,
        staging,
        properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_a_schema_names() {
        assert_eq!(column_type("int64"), Some(DataType::Int64));
        assert_eq!(column_type("string"), Some(DataType::Utf8));
        assert!(matches!(
            column_type("timestamp"),
            Some(DataType::Timestamp(TimeUnit::Millisecond, Some(_)))
        ));
        assert_eq!(column_type("varchar"), None);
    }
}
