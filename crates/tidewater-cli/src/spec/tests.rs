//! Broken specs and what each says, at which line and column.

use super::*;
use std::time::Duration;

const GOOD: &str = r#"
[job]
name = "backfill"
checkpoint_interval = "1s"
parallelism = 2

[sources.gen]
type = "generator"
rows = 1000
keys = 10

[transforms.keep]
inputs = ["gen"]
type = "sql"
filter = "id % 3 <> 0"
columns = { w = "v * 2.0" }

[sinks.out]
inputs = ["keep"]
type = "parquet"
path = "./out"
"#;

fn env(name: &str) -> Option<String> {
    (name == "SET").then(|| "value".to_string())
}

/// Problems as `(line, message start)`.
fn problems(text: &str) -> Vec<(usize, String)> {
    match Spec::parse("t.toml", text, &env) {
        Ok(_) => Vec::new(),
        Err(d) => d
            .located()
            .into_iter()
            .map(|(line, _, message)| (line, message))
            .collect(),
    }
}

fn expect(name: &str, text: &str, expected: &[(usize, &str)]) {
    let got = problems(text);
    assert_eq!(got.len(), expected.len(), "{name}: {got:#?}");
    for ((line, message), (want_line, want)) in got.iter().zip(expected) {
        assert_eq!(line, want_line, "{name}: {message}");
        assert!(
            message.contains(want),
            "{name}: '{message}' should contain '{want}'"
        );
    }
}

#[test]
fn the_good_spec_reads() {
    let spec = Spec::parse("t.toml", GOOD, &env).unwrap();
    assert_eq!(spec.job.parallelism, 2);
    assert_eq!(spec.job.key_groups, 4096);
    assert_eq!(spec.job.checkpoint_interval, Some(Duration::from_secs(1)));
    assert!(!spec.job.incremental_checkpoints);
    assert_eq!(
        spec.job.full_checkpoint_every, 100,
        "the documented default"
    );
    let incremental = GOOD.replace(
        "parallelism = 2",
        "parallelism = 2\nincremental_checkpoints = true\nfull_checkpoint_every = 5",
    );
    let spec_on = Spec::parse("t.toml", &incremental, &env).unwrap();
    assert!(spec_on.job.incremental_checkpoints);
    assert_eq!(spec_on.job.full_checkpoint_every, 5);
    let keep = spec.component("keep").unwrap();
    let Kind::Sql(sql) = &keep.kind else { panic!() };
    assert_eq!(sql.filter.as_ref().unwrap().value, "id % 3 <> 0");
    assert_eq!(sql.columns[0].0, "w");
}

#[test]
fn broken_specs_say_where_and_what() {
    expect(
        "not TOML",
        "[job]\nname = \"x\nrows = 1\n",
        &[(2, "this is not valid TOML")],
    );
    expect(
        "an unknown key with its nearest",
        &GOOD.replace("parallelism = 2", "paralelism = 2"),
        &[(5, "unknown key `paralelism` in [job]")],
    );
    expect(
        "a wrong type",
        &GOOD.replace("rows = 1000", "rows = \"many\""),
        &[(
            9,
            "`rows` in [sources.gen] must be a whole number, not the string \"many\"",
        )],
    );
    expect(
        "a missing key",
        &GOOD.replace("path = \"./out\"\n", ""),
        &[(18, "[sinks.out] is missing `path`")],
    );
    expect(
        "an input that names nothing",
        &GOOD.replace("inputs = [\"keep\"]", "inputs = [\"kepe\"]"),
        &[
            (12, "nothing reads [transforms.keep]"),
            (19, "'out' reads 'kepe', but no component"),
        ],
    );
    expect(
        "a cycle",
        &GOOD.replace("inputs = [\"gen\"]", "inputs = [\"gen\", \"keep\"]"),
        &[(12, "the components form a cycle: keep -> keep")],
    );
    expect(
        "no sink",
        &GOOD[..GOOD.find("[sinks.out]").unwrap()],
        &[
            (12, "nothing reads [transforms.keep]"),
            (0, "the spec has no sink"),
        ],
    );
    expect(
        "an unknown type",
        &GOOD.replace("type = \"parquet\"", "type = \"parquette\""),
        &[(
            20,
            "`type` in [sinks.out] is \"parquette\"; expected one of \"parquet\", \"postgres\"",
        )],
    );
    expect(
        "a bad duration",
        &GOOD.replace("\"1s\"", "\"soon\""),
        &[(4, "'soon' is not a duration")],
    );
    expect(
        "a missing environment variable",
        &GOOD.replace("./out", "${env:OUT_DIR}"),
        &[(21, "environment variable OUT_DIR is not set")],
    );
    expect(
        "zero parallelism",
        &GOOD.replace("parallelism = 2", "parallelism = 0"),
        &[(5, "`parallelism` in [job] must be at least 1")],
    );
    expect(
        "too many key groups",
        &GOOD.replace("parallelism = 2", "parallelism = 2\nkey_groups = 40000"),
        &[(6, "`key_groups` in [job] must be at most 32768")],
    );
    expect(
        "no key groups",
        &GOOD.replace("parallelism = 2", "parallelism = 2\nkey_groups = 0"),
        &[(6, "`key_groups` in [job] must be at least 1")],
    );
    expect(
        "incremental checkpoints as a string",
        &GOOD.replace(
            "parallelism = 2",
            "parallelism = 2\nincremental_checkpoints = \"yes\"",
        ),
        &[(6, "`incremental_checkpoints`")],
    );
    expect(
        "no full checkpoints",
        &GOOD.replace(
            "parallelism = 2",
            "parallelism = 2\nfull_checkpoint_every = 0",
        ),
        &[(6, "`full_checkpoint_every` in [job] must be at least 1")],
    );
    expect(
        "an empty selection",
        &GOOD.replace("columns = { w = \"v * 2.0\" }", "select = []"),
        &[(12, "`select` is empty")],
    );
    expect(
        "no job name",
        &GOOD.replace("name = \"backfill\"\n", ""),
        &[(2, "[job] is missing `name`")],
    );
    expect(
        "a budget without a dead-letter output",
        &GOOD.replace("columns = {", "max_bad_rows = 10\ncolumns = {"),
        &[(16, "[transforms.keep]: `max_bad_rows` needs `dead_letter`")],
    );
    expect(
        "a component id with a dot",
        &GOOD.replace("[sinks.out]", "[sinks.\"out.parquet\"]"),
        &[(
            18,
            "[sinks.out.parquet]: a component id may hold only letters, digits",
        )],
    );
    expect(
        "several problems at once",
        &GOOD
            .replace("rows = 1000", "rows = -1")
            .replace("filter = \"id % 3 <> 0\"", "filtre = \"id % 3 <> 0\""),
        &[
            (9, "`rows` in [sources.gen] must be at least 0"),
            (15, "unknown key `filtre` in [transforms.keep]"),
        ],
    );
}

#[test]
fn an_unknown_key_names_the_nearest_valid_one() {
    let text = GOOD.replace("parallelism = 2", "paralelism = 2");
    let d = Spec::parse("t.toml", &text, &env).unwrap_err();
    assert_eq!(
        d.items[0].help.as_deref(),
        Some("did you mean `parallelism`?")
    );
}

#[test]
fn env_variables_expand_in_values_not_in_comments() {
    let text = GOOD.replace("./out", "./${env:SET}") + "# ${env:NOT_SET} in a comment\n";
    let spec = Spec::parse("t.toml", &text, &env).unwrap();
    let Kind::ParquetSink { path, .. } = &spec.component("out").unwrap().kind else {
        panic!()
    };
    assert_eq!(path, "./value");
}

#[test]
fn computed_columns_and_aggregates_keep_the_files_order() {
    let text = GOOD.replace(
        "columns = { w = \"v * 2.0\" }",
        "columns = { z = \"1\", a = \"2\" }",
    );
    let spec = Spec::parse("t.toml", &text, &env).unwrap();
    let Kind::Sql(sql) = &spec.component("keep").unwrap().kind else {
        panic!()
    };
    let names: Vec<&str> = sql.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["z", "a"]);
}

const PG: &str = r#"
[job]
name = "pg"

[sources.src]
type = "postgres"
url = "postgres://u@h/db"
table = "orders"
key = ["tenant", "created_at"]
rows_per_second = 500
max_replica_lag = "3s"
replica_url = "postgres://u@replica/db"
statement_timeout = "30s"

[sinks.out]
inputs = ["src"]
type = "postgres"
url = "postgres://u@h/db"
table = "orders_v2"
mode = "upsert"
key = "id"
lock_timeout = "5s"
"#;

#[test]
fn postgres_keys_lists_and_throttle_shorthands_read() {
    let spec = Spec::parse("t.toml", PG, &env).unwrap();
    let Kind::PostgresSource {
        key,
        throttle,
        statement_timeout,
        lock_timeout,
        ..
    } = &spec.component("src").unwrap().kind
    else {
        panic!()
    };
    assert_eq!(key, &["tenant", "created_at"]);
    assert_eq!(throttle.rate_limit, Some(500.0));
    let lag = throttle.replica_lag.as_ref().unwrap();
    assert_eq!(
        (lag.url.as_str(), lag.on_replica, lag.high),
        ("postgres://u@replica/db", true, Duration::from_secs(3))
    );
    assert_eq!(*statement_timeout, Some(Duration::from_secs(30)));
    assert_eq!(*lock_timeout, None);
    let Kind::PostgresSink {
        key, lock_timeout, ..
    } = &spec.component("out").unwrap().kind
    else {
        panic!()
    };
    assert_eq!(key.as_deref(), Some(&["id".to_string()][..]));
    assert_eq!(*lock_timeout, Some(Duration::from_secs(5)));
    // The older name of a one-column key still reads.
    let older = PG.replace(
        r#"key = ["tenant", "created_at"]"#,
        r#"split_column = "id""#,
    );
    let spec = Spec::parse("t.toml", &older, &env).unwrap();
    let Kind::PostgresSource { key, .. } = &spec.component("src").unwrap().kind else {
        panic!()
    };
    assert_eq!(key, &["id"]);
}

#[test]
fn postgres_key_and_throttle_mistakes_say_where() {
    let key_line = 9;
    let cases = [
        (
            "both names of the key",
            PG.replace("rows_per_second = 500", "split_column = \"id\""),
            vec![(10, "`split_column` and `key` say the same thing")],
        ),
        (
            "no key",
            PG.replace(r#"key = ["tenant", "created_at"]"#, ""),
            vec![(5, "[sources.src] is missing `key`")],
        ),
        (
            "an empty key",
            PG.replace(r#"key = ["tenant", "created_at"]"#, "key = []"),
            vec![(5, "`key` is empty")],
        ),
        (
            "a key of the wrong type",
            PG.replace(r#"key = ["tenant", "created_at"]"#, "key = 3"),
            vec![(
                key_line,
                "`key` in [sources.src] must be a column name or a list",
            )],
        ),
        (
            "both rate limits",
            PG.replace(
                "rows_per_second = 500",
                "rows_per_second = 500\nrate_limit = 10",
            ),
            vec![(10, "`rows_per_second` and `rate_limit` say the same thing")],
        ),
        (
            "a lag without a replica",
            PG.replace("replica_url = \"postgres://u@replica/db\"", ""),
            vec![(5, "[sources.src] is missing `replica_url`")],
        ),
        (
            "a replica without a lag",
            PG.replace("max_replica_lag = \"3s\"", ""),
            vec![(12, "`replica_url` needs `max_replica_lag`")],
        ),
    ];
    for (name, text, want) in cases {
        expect(name, &text, &want);
    }
}
