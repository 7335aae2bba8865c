//! The Kafka connectors against a real Apache Kafka broker
//! (`scripts/kafka.sh`), driven through the `tidewater` binary as users
//! drive it: a topic replayed into Parquet and generated rows published
//! exactly once, each killed with SIGKILL at random instants and rerun
//! until complete; a paused producing run fenced by its successor; rows
//! published at least once; bad input named. The oracles are independent
//! consumers of the topics (librdkafka, `read_committed` and
//! `read_uncommitted`) and the generator's own definition of its rows.
//!
//! Skipped without `TIDEWATER_KAFKA_BROKERS`, unless
//! `TIDEWATER_REQUIRE_KAFKA` is set.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::{Int32Type, Int64Type};
use common::{Rng, read_output, signal, text};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use support::*;
use tidewater_core::splitmix64;

/// The test broker, or `None` (the test is skipped) when none runs.
fn brokers() -> Option<String> {
    match std::env::var("TIDEWATER_KAFKA_BROKERS") {
        Ok(brokers) => Some(brokers),
        Err(_) => {
            assert!(
                std::env::var_os("TIDEWATER_REQUIRE_KAFKA").is_none(),
                "TIDEWATER_REQUIRE_KAFKA is set but TIDEWATER_KAFKA_BROKERS is not: \
                 start the broker with `bash scripts/kafka.sh up`"
            );
            None
        }
    }
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// A topic of its own for each use, with `partitions` partitions.
fn new_topic(brokers: &str, what: &str, partitions: i32) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "tw-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let created = runtime
        .block_on(admin.create_topics(
            &[NewTopic::new(&name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        ))
        .unwrap();
    for result in created {
        result.unwrap_or_else(|(topic, e)| panic!("creating {topic}: {e}"));
    }
    name
}

/// A record as a consumer of the topic sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Record {
    partition: i32,
    offset: i64,
    key: Option<String>,
    value: String,
}

/// Every record of `topic`, read from the beginning to the high watermarks
/// with `isolation` (`read_committed` or `read_uncommitted`).
fn read_topic(brokers: &str, topic: &str, isolation: &str) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "tidewater-tests")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT).unwrap();
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    let mut ends = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, TIMEOUT).unwrap();
        ends.insert(p, high);
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut records = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let done = |consumer: &BaseConsumer| {
        let positions = consumer.position().unwrap();
        partitions.iter().all(|p| {
            ends[p] == 0
                || positions
                    .find_partition(topic, *p)
                    .is_some_and(|e| matches!(e.offset(), Offset::Offset(o) if o >= ends[p]))
        })
    };
    while !done(&consumer) {
        assert!(
            std::time::Instant::now() < deadline,
            "reading {topic} did not reach its end"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.offset() < ends[&m.partition()] => records.push(Record {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(|k| String::from_utf8(k.to_vec()).unwrap()),
                value: String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap(),
            }),
            Some(Ok(_)) | None => {}
            Some(Err(e)) => panic!("reading {topic}: {e}"),
        }
    }
    records.sort();
    records
}

/// Produces `rows` to `topic` (key, JSON value): plainly, or in one
/// transaction that is committed or aborted.
fn produce(brokers: &str, topic: &str, rows: &[(String, String)], transaction: Option<bool>) {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5");
    if transaction.is_some() {
        config.set("transactional.id", format!("tw-tests-{topic}"));
    }
    let producer: ThreadedProducer<DefaultProducerContext> = config.create().unwrap();
    if transaction.is_some() {
        producer.init_transactions(TIMEOUT).unwrap();
        producer.begin_transaction().unwrap();
    }
    for (key, value) in rows {
        let mut record = BaseRecord::to(topic)
            .key(key.as_str())
            .payload(value.as_str());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    match transaction {
        Some(true) => producer.commit_transaction(TIMEOUT).unwrap(),
        Some(false) => {
            producer.flush(TIMEOUT).unwrap();
            producer.abort_transaction(TIMEOUT).unwrap()
        }
        None => producer.flush(TIMEOUT).unwrap(),
    }
}

fn json_rows(ids: std::ops::Range<i64>) -> Vec<(String, String)> {
    ids.map(|i| (format!("k{i}"), format!(r#"{{"id":{i},"name":"n{i}"}}"#)))
        .collect()
}

/// A job reading `topic` as JSON (id, name) into Parquet at `out`, held to
/// `rate` rows/s.
fn replay_spec(brokers: &str, topic: &str, folder: &Folder, rate: u64) -> String {
    format!(
        r#"[job]
name = "replay"
state = "{state}"
checkpoint_interval = "100ms"
parallelism = 2

[sources.events]
type = "kafka"
brokers = "{brokers}"
topic = "{topic}"
format = "json"
schema = {{ id = "int64", name = "utf8" }}
batch_rows = 500
rate_limit = {rate}

[sinks.out]
inputs = ["events"]
type = "parquet"
path = "{out}"
"#,
        state = folder.s("state"),
        out = folder.s("out"),
    )
}

/// The Parquet rows of a replay, as records: (partition, offset, key, value).
fn replayed(folder: &Folder) -> Vec<Record> {
    let mut records = Vec::new();
    for batch in read_output(&folder.path("out")) {
        let id = batch
            .column_by_name("id")
            .unwrap()
            .as_primitive::<Int64Type>();
        let name = batch.column_by_name("name").unwrap().as_string::<i32>();
        let key = batch.column_by_name("key").unwrap().as_string::<i32>();
        let partition = batch
            .column_by_name("partition")
            .unwrap()
            .as_primitive::<Int32Type>();
        let offset = batch
            .column_by_name("offset")
            .unwrap()
            .as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            records.push(Record {
                partition: partition.value(row),
                offset: offset.value(row),
                key: Some(key.value(row).to_string()),
                value: format!(r#"{{"id":{},"name":"{}"}}"#, id.value(row), name.value(row)),
            });
        }
    }
    records.sort();
    records
}

#[test]
fn a_topic_replayed_into_parquet_under_kills_holds_each_committed_record_once() {
    let Some(brokers) = brokers() else { return };
    let topic = new_topic(&brokers, "replay", 3);
    produce(&brokers, &topic, &json_rows(0..20_000), None);
    // An aborted transaction (its records must not appear) and a committed one.
    produce(&brokers, &topic, &json_rows(900_000..900_500), Some(false));
    produce(&brokers, &topic, &json_rows(20_000..20_500), Some(true));
    let oracle = read_topic(&brokers, &topic, "read_committed");
    assert_eq!(oracle.len(), 20_500, "the broker's read_committed view");
    let everything = read_topic(&brokers, &topic, "read_uncommitted");
    assert_eq!(
        everything.len(),
        21_000,
        "the broker's read_uncommitted view"
    );

    killed_at_random_instants(
        "kafka replay",
        20,
        Duration::from_millis(2500),
        |folder| replay_spec(&brokers, &topic, folder, 8_000),
        |folder| {
            let got = replayed(folder);
            if got != oracle {
                let missing = oracle.iter().find(|r| got.binary_search(r).is_err());
                let extra = got.iter().find(|r| oracle.binary_search(r).is_err());
                let dup = got.windows(2).find(|w| w[0] == w[1]).map(|w| w[0].clone());
                panic!(
                    "replay: {} rows, the topic holds {}; first missing {missing:?}, first \
                     extra {extra:?}, first duplicate {dup:?}",
                    got.len(),
                    oracle.len()
                );
            }
        },
    );
}

/// A job publishing `rows` generated rows to `topic`, keyed by id, at
/// `rate` rows/s, in `mode`.
fn publish_spec(brokers: &str, topic: &str, folder: &Folder, rows: u64, mode: &str) -> String {
    format!(
        r#"[job]
name = "publish"
state = "{state}"
checkpoint_interval = "150ms"
parallelism = 2

[sources.gen]
type = "generator"
rows = {rows}
keys = 1000
rate_limit = 25_000

[sinks.out]
inputs = ["gen"]
type = "kafka"
brokers = "{brokers}"
topic = "{topic}"
mode = "{mode}"
key = "id"
"#,
        state = folder.s("state"),
    )
}

/// The generated rows' ids in `records`, each checked against the
/// generator's definition of its row (k, v, s) and its key.
fn published_ids(records: &[Record], keys: u64) -> Vec<u64> {
    let mut ids: Vec<u64> = records
        .iter()
        .map(|r| {
            let row: serde_json::Value = serde_json::from_str(&r.value).unwrap();
            let id = row["id"].as_u64().unwrap();
            let h = splitmix64(id);
            assert_eq!(row["k"].as_u64(), Some(h % keys), "k of {row}");
            assert_eq!(
                row["v"].as_f64(),
                Some((id % 1000) as f64 / 4.0),
                "v of {row}"
            );
            assert_eq!(
                row["s"].as_str(),
                Some(format!("{h:016x}").as_str()),
                "s of {row}"
            );
            assert_eq!(
                r.key.as_deref(),
                Some(id.to_string().as_str()),
                "key of {row}"
            );
            id
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// Panics, saying what differs in a few words, unless `ids` (sorted) are
/// `0..rows`, each once.
fn assert_each_once(ids: &[u64], rows: u64, what: &str) {
    if ids.iter().copied().eq(0..rows) {
        return;
    }
    let dup = ids.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
    let set: std::collections::HashSet<u64> = ids.iter().copied().collect();
    let missing = (0..rows).find(|i| !set.contains(i));
    panic!(
        "{what}: {} records read_committed, expected {rows}, each once; first duplicate \
         {dup:?}, first missing {missing:?}",
        ids.len()
    );
}

#[test]
fn generated_rows_published_exactly_once_under_kills_are_each_read_committed_once() {
    let Some(brokers) = brokers() else { return };
    let rows = 60_000;
    let aborted = std::sync::Mutex::new(Vec::new());
    let topics = std::sync::Mutex::new(Vec::new());
    killed_at_random_instants(
        "kafka exactly-once",
        20,
        Duration::from_millis(2500),
        |folder| {
            let topic = new_topic(&brokers, "publish", 3);
            topics.lock().unwrap().push(topic.clone());
            publish_spec(&brokers, &topic, folder, rows, "exactly-once")
        },
        |_folder| {
            let topic = topics.lock().unwrap().last().unwrap().clone();
            let committed = read_topic(&brokers, &topic, "read_committed");
            assert_each_once(&published_ids(&committed, 1000), rows, &topic);
            let all = read_topic(&brokers, &topic, "read_uncommitted").len();
            aborted.lock().unwrap().push(all - committed.len());
        },
    );
    let aborted = aborted.into_inner().unwrap();
    eprintln!(
        "kafka exactly-once: records of aborted attempts a read_uncommitted consumer saw, per \
         round: {aborted:?} (read_committed: none)"
    );
}

#[test]
fn rows_published_at_least_once_under_kills_are_all_there_duplicated_only_whole() {
    let Some(brokers) = brokers() else { return };
    let rows = 30_000;
    let topic = std::sync::Mutex::new(String::new());
    let duplicates = std::sync::Mutex::new(Vec::new());
    killed_at_random_instants(
        "kafka at-least-once",
        5,
        Duration::from_millis(1500),
        |folder| {
            let name = new_topic(&brokers, "atleast", 2);
            *topic.lock().unwrap() = name.clone();
            publish_spec(&brokers, &name, folder, rows, "at-least-once")
        },
        |_folder| {
            let topic = topic.lock().unwrap().clone();
            let records = read_topic(&brokers, &topic, "read_committed");
            // published_ids checks each record whole against the generator.
            let ids = published_ids(&records, 1000);
            let mut distinct = ids.clone();
            distinct.dedup();
            assert_eq!(
                distinct,
                (0..rows).collect::<Vec<_>>(),
                "{topic}: a row is missing"
            );
            duplicates.lock().unwrap().push(ids.len() - distinct.len());
        },
    );
    eprintln!(
        "kafka at-least-once: duplicated records per round: {:?}",
        duplicates.into_inner().unwrap()
    );
}

#[test]
fn a_paused_publisher_is_fenced_by_its_successor_and_the_topic_is_exact() {
    let Some(brokers) = brokers() else { return };
    let mut rng = Rng::from_time();
    let rows = 100_000;
    let mut trials = 0;
    while trials < 3 {
        let folder = Folder::new();
        let topic = new_topic(&brokers, "zombie", 3);
        let name = format!("publish-zombie-{trials}");
        let spec = folder.write(
            "job.toml",
            &publish_spec(&brokers, &topic, &folder, rows, "exactly-once")
                .replace("name = \"publish\"", &format!("name = \"{name}\"")),
        );
        let store = test_store();
        if paused_takeover_trial(&name, &spec, &store, &mut rng).is_none() {
            continue;
        }
        trials += 1;
        let ids = published_ids(&read_topic(&brokers, &topic, "read_committed"), 1000);
        assert_each_once(&ids, rows, &topic);
    }
}

#[test]
fn bad_input_is_named_topic_record_and_what_to_do() {
    let Some(brokers) = brokers() else { return };
    let folder = Folder::new();

    // A topic that does not exist.
    let missing = folder.write(
        "missing.toml",
        &replay_spec(&brokers, "tw-no-such-topic", &folder, 1000),
    );
    let output = run(&missing, &[]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("topic 'tw-no-such-topic' does not exist"),
        "{}",
        text(&output)
    );

    // `validate --connect` finds it before any run, and so for a sink's topic.
    let validated = tidewater()
        .args(["validate", "--connect"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!validated.status.success());
    assert!(
        text(&validated).contains("topic 'tw-no-such-topic' does not exist"),
        "{}",
        text(&validated)
    );
    let nowhere = Folder::new();
    let spec = nowhere.write(
        "job.toml",
        &publish_spec(&brokers, "tw-no-such-output", &nowhere, 100, "exactly-once"),
    );
    let output = run(&spec, &[]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("topic 'tw-no-such-output' does not exist"),
        "{}",
        text(&output)
    );

    // A record that is not JSON: its partition and offset.
    let topic = new_topic(&brokers, "badjson", 1);
    let mut rows = json_rows(0..10);
    rows.push(("k10".into(), "{\"id\": 10, oops".into()));
    produce(&brokers, &topic, &rows, None);
    let bad = Folder::new();
    let spec = bad.write("job.toml", &replay_spec(&brokers, &topic, &bad, 1000));
    let output = run(&spec, &[]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains(&format!(
            "Kafka topic '{topic}', partition 0, offset 10: the value is not one JSON object"
        )),
        "{}",
        text(&output)
    );

    // With a dead-letter output, records that do not decode are set aside
    // by partition and offset, under the budget.
    let topic = new_topic(&brokers, "deadletters", 1);
    let mut rows = json_rows(0..10);
    rows.insert(3, ("k-bad".into(), "{\"id\": 3, oops".into()));
    rows.insert(
        7,
        ("k-type".into(), r#"{"id": "seven", "name": "x"}"#.into()),
    );
    produce(&brokers, &topic, &rows, None);
    let lettered = |budget: u64| {
        let folder = Folder::new();
        let spec = replay_spec(&brokers, &topic, &folder, 1000).replace(
            "batch_rows = 500",
            &format!(
                "batch_rows = 500\ndead_letter = \"{}\"\nmax_bad_rows = {budget}",
                folder.s("dead")
            ),
        );
        let path = folder.write("job.toml", &spec);
        (run(&path, &[]), folder)
    };
    let (output, folder) = lettered(5);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(replayed(&folder).len(), 10, "the records that decode");
    let mut letters: Vec<(String, serde_json::Value)> = common::walk(&folder.path("dead"))
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap(),
            )
        })
        .collect();
    letters.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = letters.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["0-3.json", "0-7.json"], "{letters:?}");
    assert_eq!(letters[0].1["key"], "k-bad");
    assert!(
        letters[1].1["error"]
            .as_str()
            .unwrap()
            .contains("offset 7: the value does not fit the JSON schema"),
        "{letters:?}"
    );
    let (output, _) = lettered(1);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("more than its dead-letter budget of 1 (max_bad_rows)"),
        "{}",
        text(&output)
    );

    // A row larger than the producer's limit: named, with what to change.
    let out_topic = new_topic(&brokers, "large", 1);
    let large = Folder::new();
    let spec = large.write(
        "job.toml",
        &publish_spec(&brokers, &out_topic, &large, 100, "exactly-once").replace(
            "[sinks.out]\ninputs = [\"gen\"]",
            "[transforms.big]\ninputs = [\"gen\"]\ntype = \"sql\"\ncolumns = { s = \"repeat(s, 80000)\" }\n\n[sinks.out]\ninputs = [\"big\"]",
        ),
    );
    let output = run(&spec, &[]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("more than the producer's message.max.bytes"),
        "{}",
        text(&output)
    );
    assert!(
        read_topic(&brokers, &out_topic, "read_committed").is_empty(),
        "nothing of the failed checkpoint is visible"
    );
}

#[test]
fn a_crash_at_each_instant_of_the_commit_leaves_the_records_once() {
    let Some(brokers) = brokers() else { return };
    // About five seconds at the spec's rate: a fresh broker can take four
    // to hand out its first transactional producer id, and the run must
    // still reach checkpoint 3 after that (60k rows once ended at 2).
    let rows = 120_000;
    // After the manifest and before the transaction; half-way through it
    // (half the records sent, uncommitted); after it committed and before
    // its staged file is deleted (the marker is what says it is in).
    for point in [
        "after-manifest@3",
        "kafka-mid-transaction@3",
        "kafka-after-transaction@3",
    ] {
        let folder = Folder::new();
        let topic = new_topic(&brokers, "crash", 2);
        let spec = folder.write(
            "job.toml",
            &publish_spec(&brokers, &topic, &folder, rows, "exactly-once"),
        );
        let crashed = tidewater()
            .arg("run")
            .arg(&spec)
            .env("TIDEWATER_FAILPOINT", point)
            .output()
            .unwrap();
        assert!(
            !crashed.status.success() && stderr(&crashed).contains("aborting the process"),
            "{point}: {}",
            text(&crashed)
        );
        let resumed = run(&spec, &[]);
        assert!(resumed.status.success(), "{point}: {}", text(&resumed));
        let ids = published_ids(&read_topic(&brokers, &topic, "read_committed"), 1000);
        assert_each_once(&ids, rows, point);
    }
}

/// A broker of this test's own (`scripts/kafka.sh` on other ports and
/// folder), so that stopping it leaves the other tests' broker alone.
struct OwnBroker {
    port: u16,
    controller: u16,
    dir: tempfile::TempDir,
}

impl OwnBroker {
    fn script(&self, command: &str) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/kafka.sh");
        let status = std::process::Command::new("bash")
            .arg(script)
            .arg(command)
            .env("TIDEWATER_KAFKA_PORT", self.port.to_string())
            .env(
                "TIDEWATER_KAFKA_CONTROLLER_PORT",
                self.controller.to_string(),
            )
            .env("TIDEWATER_KAFKA_DIR", self.dir.path().join("kafka"))
            .status()
            .unwrap();
        assert!(status.success(), "kafka.sh {command}");
    }

    fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.script("down");
    }
}

#[test]
fn a_broker_restarted_mid_run_is_waited_out_and_the_output_is_exact() {
    if brokers().is_none() {
        return;
    }
    let broker = OwnBroker {
        port: free_port(),
        controller: free_port(),
        dir: tempfile::tempdir().unwrap(),
    };
    broker.script("up");
    let brokers = broker.brokers();
    let rows = 100_000;

    // Publishing, exactly once, while the broker is away for 3 s.
    let topic = new_topic(&brokers, "restart", 2);
    let folder = Folder::new();
    let spec = folder.write(
        "job.toml",
        &publish_spec(&brokers, &topic, &folder, rows, "exactly-once"),
    );
    let rode_out = through_a_restart(
        &broker,
        &spec,
        &format!("Kafka at {brokers}, topic '{topic}'"),
    );
    eprintln!("kafka restart: the publishing run rode out the restart: {rode_out}");
    let ids = published_ids(&read_topic(&brokers, &topic, "read_committed"), 1000);
    assert_each_once(&ids, rows, &topic);

    // Replaying that topic into Parquet while the broker restarts again.
    let replay = Folder::new();
    let spec = replay.write(
        "job.toml",
        &publish_to_parquet_spec(&brokers, &topic, &replay),
    );
    let rode_out = through_a_restart(&broker, &spec, &format!("Kafka at {brokers}"));
    eprintln!("kafka restart: the replaying run rode out the restart: {rode_out}");
    let mut ids: Vec<u64> = read_output(&replay.path("out"))
        .iter()
        .flat_map(|b| {
            let id = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            id.values().iter().map(|v| *v as u64).collect::<Vec<_>>()
        })
        .collect();
    ids.sort_unstable();
    assert_each_once(&ids, rows, "the replay");
}

/// Runs `spec` while `broker` is stopped for 3 s and started again. The run
/// either rides the restart out (true) or fails with an error saying
/// `names` (the broker, the topic), and then running it again finishes it.
fn through_a_restart(broker: &OwnBroker, spec: &std::path::Path, names: &str) -> bool {
    let mut child = spawn_run(spec, &[]);
    std::thread::sleep(Duration::from_millis(1500));
    broker.script("stop");
    std::thread::sleep(Duration::from_secs(3));
    broker.script("start");
    common::wait_or_kill(&mut child, Duration::from_secs(120)).expect("the run ends");
    let output = child.wait_with_output().unwrap();
    if output.status.success() {
        return true;
    }
    assert!(stderr(&output).contains(names), "{}", text(&output));
    let again = run(spec, &[]);
    assert!(again.status.success(), "{}", text(&again));
    false
}

/// Reads the generated rows `publish_spec` wrote to `topic` back into Parquet.
fn publish_to_parquet_spec(brokers: &str, topic: &str, folder: &Folder) -> String {
    replay_spec(brokers, topic, folder, 25_000).replace(
        "schema = { id = \"int64\", name = \"utf8\" }",
        "schema = { id = \"int64\", k = \"int64\", v = \"float64\", s = \"utf8\" }",
    )
}

#[test]
fn an_unbounded_replay_follows_the_topic_across_kills_and_ends_at_a_cancel() {
    let Some(brokers) = brokers() else { return };
    let mut rng = Rng::from_time();
    let topic = new_topic(&brokers, "follow", 3);
    produce(&brokers, &topic, &json_rows(0..5_000), None);
    let folder = Folder::new();
    let spec = folder.write(
        "job.toml",
        &replay_spec(&brokers, &topic, &folder, 20_000)
            .replace(
                "format = \"json\"",
                "format = \"json\"\nmode = \"unbounded\"",
            )
            .replace(
                "type = \"parquet\"",
                "type = \"parquet\"\nmax_file_age = \"1s\"",
            ),
    );
    // The topic grows while runs are killed: plain records, and a
    // transaction that is aborted (never to be read).
    let writer = {
        let (brokers, topic) = (brokers.clone(), topic.clone());
        std::thread::spawn(move || {
            for round in 0..8i64 {
                let from = 5_000 + round * 1_000;
                produce(&brokers, &topic, &json_rows(from..from + 1_000), None);
                if round == 3 {
                    produce(&brokers, &topic, &json_rows(800_000..800_300), Some(false));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let mut kills = 0;
    while !writer.is_finished() || kills < 6 {
        let mut child = spawn_run(&spec, &["--progress", "off"]);
        std::thread::sleep(Duration::from_millis(400 + rng.below(1600)));
        if child.try_wait().unwrap().is_some() {
            panic!(
                "an unbounded run ended by itself:\n{}",
                text(&child.wait_with_output().unwrap())
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
    }
    writer.join().unwrap();
    let oracle = read_topic(&brokers, &topic, "read_committed");
    assert_eq!(oracle.len(), 13_000);

    // The last run follows until everything is out, then a Ctrl-C ends it.
    let mut last = spawn_run(&spec, &["--progress", "off"]);
    // Past its start-up (and its Ctrl-C handler), and a checkpoint or two.
    std::thread::sleep(Duration::from_secs(3));
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while replayed(&folder).len() < oracle.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "after {kills} kills the replay has {} of {} records",
            replayed(&folder).len(),
            oracle.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    signal(&last, "INT");
    common::wait_or_kill(&mut last, Duration::from_secs(60)).expect("the run stops on Ctrl-C");
    let last = last.wait_with_output().unwrap();
    assert_eq!(last.status.code(), Some(3), "{}", text(&last));
    let got = replayed(&folder);
    assert_eq!(got.len(), oracle.len(), "after {kills} kills");
    assert!(
        got == oracle,
        "the replay differs from the topic after {kills} kills"
    );
}
