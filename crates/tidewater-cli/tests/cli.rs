//! The `tidewater` binary, driven as users drive it: specs run, killed with
//! SIGKILL at random instants and rerun, cancelled with Ctrl-C and resumed,
//! validated broken, inspected. Outputs are checked against the generator's
//! spec (the same oracle as the engine's crash tests).

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{
    Rng, assert_aggregate_output, assert_copy_output, s3_prefix, signal, text, wait_or_kill, walk,
};
use support::*;

/// Runs `spec`, sends SIGINT (Ctrl-C) after `after`, and waits for the exit.
fn interrupted_run(spec: &Path, after: Duration) -> Output {
    let mut child = spawn_run(spec, &[]);
    std::thread::sleep(after);
    signal(&child, "INT");
    wait_or_kill(&mut child, Duration::from_secs(60)).expect("exits after SIGINT");
    child.wait_with_output().expect("output")
}

/// About half a second per run, so that most kills land mid-run.
fn at_a_million_rows_a_second(spec: String) -> String {
    spec.replace(
        "batch_rows = 4096",
        "batch_rows = 4096\nrate_limit = 1_000_000",
    )
}

#[test]
fn spec_runs_killed_at_random_instants_end_with_the_exact_output() {
    let (rows, keys) = (2_000_000, 20_000);
    killed_at_random_instants(
        "copy",
        8,
        Duration::from_millis(700),
        |f| at_a_million_rows_a_second(copy_spec(rows, keys, &f.s("state"), &f.s("out"))),
        |f| assert_copy_output(&f.path("out"), rows, keys),
    );
    killed_at_random_instants(
        "aggregate",
        8,
        Duration::from_millis(700),
        |f| at_a_million_rows_a_second(aggregate_spec(rows, keys, &f.s("state"), &f.s("out"))),
        |f| assert_aggregate_output(&f.path("out"), rows, keys),
    );
}

#[test]
fn ctrl_c_takes_a_savepoint_and_the_same_command_resumes() {
    let folder = Folder::new();
    let (rows, keys) = (3_000_000, 1_000);
    let mut body = copy_spec(rows, keys, &folder.s("state"), &folder.s("out"));
    // Slow enough that Ctrl-C lands mid-run.
    body = body.replace(
        "batch_rows = 4096",
        "batch_rows = 4096\nrate_limit = 1_000_000",
    );
    let spec = folder.write("job.toml", &body);
    let first = interrupted_run(&spec, Duration::from_millis(800));
    assert_eq!(
        first.status.code(),
        Some(3),
        "cancelled runs exit 3:\n{}",
        text(&first)
    );
    assert!(
        stderr(&first).contains("cancelled at savepoint"),
        "{}",
        text(&first)
    );
    let list = tidewater()
        .args(["checkpoints", "list"])
        .arg(folder.path("state"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("savepoint"),
        "{}",
        text(&list)
    );
    let second = run(&spec, &["--checkpoint-interval", "200ms"]);
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("resumed from checkpoint"),
        "{}",
        text(&second)
    );
    assert_copy_output(&folder.path("out"), rows, keys);
}

/// A broken spec and what validate must say: `(line, message)`.
struct Broken {
    name: &'static str,
    from: &'static str,
    to: &'static str,
    line: usize,
    message: &'static str,
}

#[test]
fn validate_names_the_file_line_and_problem_of_broken_specs() {
    let folder = Folder::new();
    let good = copy_spec(1000, 10, "./state", "./out");
    let cases = [
        Broken {
            name: "typo",
            from: "parallelism = 2",
            to: "paralelism = 2",
            line: 6,
            message: "unknown key `paralelism` in [job]",
        },
        Broken {
            name: "type",
            from: "rows = 1000",
            to: "rows = \"many\"",
            line: 10,
            message: "`rows` in [sources.gen] must be a whole number",
        },
        Broken {
            name: "missing",
            from: "path = \"./out\"",
            to: "",
            line: 20,
            message: "[sinks.out] is missing `path`",
        },
        Broken {
            name: "dangling",
            from: "inputs = [\"keep\"]",
            to: "inputs = [\"kep\"]",
            line: 21,
            message: "'out' reads 'kep', but no component is called that",
        },
        Broken {
            name: "cycle",
            from: "inputs = [\"gen\"]",
            to: "inputs = [\"gen\", \"keep\"]",
            line: 14,
            message: "the components form a cycle",
        },
        Broken {
            name: "unread",
            from: "inputs = [\"keep\"]",
            to: "inputs = [\"gen\"]",
            line: 14,
            message: "nothing reads [transforms.keep]",
        },
        Broken {
            name: "kind",
            from: "type = \"parquet\"",
            to: "type = \"csv\"",
            line: 22,
            message: "`type` in [sinks.out] is \"csv\"",
        },
        Broken {
            name: "interval",
            from: "\"50ms\"",
            to: "\"fast\"",
            line: 5,
            message: "'fast' is not a duration",
        },
        Broken {
            name: "type error",
            from: "id % 3 <> 0",
            to: "v + 'x'",
            line: 17,
            message: "[transforms.keep] filter = \"v + 'x'\": Cannot coerce",
        },
        Broken {
            name: "unknown column",
            from: "v * 2.0",
            to: "vv * 2.0",
            line: 18,
            message: "there is no column 'vv'",
        },
        Broken {
            name: "unknown function",
            from: "v * 2.0",
            to: "frobnicate(v)",
            line: 18,
            message: "Invalid function 'frobnicate'",
        },
        Broken {
            name: "not boolean",
            from: "id % 3 <> 0",
            to: "id % 3",
            line: 17,
            message: "a filter must be true or false",
        },
        Broken {
            name: "bad TOML",
            from: "rows = 1000",
            to: "rows = ",
            line: 10,
            message: "this is not valid TOML",
        },
    ];
    for case in &cases {
        assert!(
            good.contains(case.from),
            "{}: the good spec lacks {}",
            case.name,
            case.from
        );
        let file = format!("{}.toml", case.name.replace(' ', "_"));
        let spec = folder.write(&file, &good.replacen(case.from, case.to, 1));
        let output = tidewater().arg("validate").arg(&spec).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: {}",
            case.name,
            text(&output)
        );
        let want = format!("{}:{}:", spec.display(), case.line);
        let said = stderr(&output);
        let line = said
            .lines()
            .find(|l| l.contains(case.message))
            .unwrap_or_else(|| panic!("{}: no '{}' in\n{said}", case.name, case.message));
        assert!(
            line.contains(&want),
            "{}: '{line}' is not at {want}",
            case.name
        );
    }
    // All problems of a spec in one run.
    let many = good
        .replace("parallelism = 2", "paralelism = 2")
        .replace("v * 2.0", "vv * 2.0")
        .replace("inputs = [\"keep\"]", "inputs = [\"kep\"]");
    let spec = folder.write("many.toml", &many);
    let output = tidewater().arg("validate").arg(&spec).output().unwrap();
    assert!(
        stderr(&output).contains("4 problems in"),
        "{}",
        text(&output)
    );
    // And the good one passes.
    let spec = folder.write("good.toml", &good);
    let output = tidewater().arg("validate").arg(&spec).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
}

#[test]
fn a_missing_environment_variable_is_named_with_its_key() {
    let folder = Folder::new();
    let spec = folder.write(
        "job.toml",
        &copy_spec(1000, 10, "./state", "${env:TIDEWATER_TEST_NOT_SET}"),
    );
    let output = tidewater()
        .arg("run")
        .arg(&spec)
        .env_remove("TIDEWATER_TEST_NOT_SET")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let said = stderr(&output);
    assert!(
        said.contains(
            "`path` in [sinks.out]: environment variable TIDEWATER_TEST_NOT_SET is not set"
        ),
        "{said}"
    );
    // Set, it expands; in a comment, nothing happens.
    let spec = folder.write(
        "set.toml",
        &(copy_spec(1000, 10, &folder.s("state"), "${env:TIDEWATER_TEST_OUT}")
            + "# ${env:NOT_SET_EITHER}\n"),
    );
    let output = tidewater()
        .arg("run")
        .arg(&spec)
        .env("TIDEWATER_TEST_OUT", folder.path("out"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert_copy_output(&folder.path("out"), 1000, 10);
}

#[test]
fn a_row_an_expression_fails_on_fails_the_job_naming_the_transform_and_the_row() {
    let folder = Folder::new();
    let spec = copy_spec(10_000, 10, &folder.s("state"), &folder.s("out"))
        .replace("w = \"v * 2.0\"", "w = \"id / (id - 7001)\"");
    let spec = folder.write("job.toml", &spec);
    let output = run(&spec, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = stderr(&output);
    assert!(
        said.contains("[transforms.keep] columns.w = \"id / (id - 7001)\""),
        "{said}"
    );
    assert!(said.contains("Divide by zero"), "{said}");
    assert!(said.contains("{id: 7001, k: "), "{said}");
}

/// A copy spec whose computed column `r` divides by zero on every
/// thousandth row: those rows go to `dead` under a budget of `max_bad_rows`.
fn dead_letter_spec(rows: u64, folder: &Folder, max_bad_rows: u64, rate_limit: u64) -> String {
    let transform = format!(
        r#"[transforms.keep]
inputs = ["gen"]
type = "sql"
filter = "id % 3 <> 0"
columns = {{ r = "id / (id % 1000)" }}
select = ["id", "r"]
dead_letter = "{}"
max_bad_rows = {max_bad_rows}"#,
        folder.s("dead")
    );
    spec_with(
        "dead-letters",
        rows,
        100,
        &folder.s("state"),
        &folder.s("out"),
        &transform,
        "keep",
    )
    .replace(
        "batch_rows = 4096",
        &format!("batch_rows = 4096\nrate_limit = {rate_limit}"),
    )
}

/// The output holds each row that passed once with its `r`, and the dead
/// letters each row that failed once, with its error: the oracle is the
/// generator's ids.
fn assert_dead_letter_output(folder: &Folder, rows: u64) {
    use arrow::array::{AsArray, RecordBatch};
    use arrow::datatypes::Int64Type;
    let mut passed = Vec::new();
    for batch in common::read_output(&folder.path("out")) {
        let (id, r) = (
            batch.column(0).as_primitive::<Int64Type>(),
            batch.column(1).as_primitive::<Int64Type>(),
        );
        for row in 0..batch.num_rows() {
            assert_eq!(r.value(row), id.value(row) / (id.value(row) % 1000));
            passed.push(id.value(row) as u64);
        }
    }
    passed.sort_unstable();
    let expected: Vec<u64> = (0..rows).filter(|i| i % 3 != 0 && i % 1000 != 0).collect();
    assert_eq!(passed.len(), expected.len(), "rows that passed");
    assert!(
        passed == expected,
        "the rows that passed differ from the oracle's"
    );
    let letters: Vec<RecordBatch> = common::read_output(&folder.path("dead"));
    let mut failed = Vec::new();
    for batch in &letters {
        let names: Vec<String> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["transform", "expression", "error", "row"]);
        let string = |i: usize| batch.column(i).as_string::<i32>();
        for row in 0..batch.num_rows() {
            assert_eq!(string(0).value(row), "keep");
            assert_eq!(
                string(1).value(row),
                "[transforms.keep] columns.r = \"id / (id % 1000)\""
            );
            assert!(
                string(2).value(row).contains("Divide by zero"),
                "{}",
                string(2).value(row)
            );
            let json: serde_json::Value = serde_json::from_str(string(3).value(row)).unwrap();
            failed.push(json["id"].as_str().unwrap().parse::<u64>().unwrap());
        }
    }
    failed.sort_unstable();
    let expected: Vec<u64> = (0..rows).filter(|i| i % 3 != 0 && i % 1000 == 0).collect();
    assert_eq!(failed, expected, "dead letters: each failed row once");
}

#[test]
fn rows_an_expression_fails_on_become_dead_letters_exactly_once_across_kills() {
    let rows = 2_000_000;
    killed_at_random_instants(
        "dead letters",
        6,
        Duration::from_millis(700),
        |f| dead_letter_spec(rows, f, 1400, 1_000_000),
        |f| assert_dead_letter_output(f, rows),
    );
}

#[test]
fn past_the_error_budget_the_job_fails_and_a_larger_budget_resumes_it() {
    let folder = Folder::new();
    // 133 rows fail (ids 1000, 2000, ... not divisible by 3). Slowly, so
    // that checkpoints are taken before the budget runs out.
    let (rows, rate) = (200_000, 40_000);
    let spec = folder.write("job.toml", &dead_letter_spec(rows, &folder, 100, rate));
    let output = run(&spec, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = stderr(&output);
    for part in [
        "[transforms.keep] columns.r = \"id / (id % 1000)\": Divide by zero",
        "101 rows of transforms.keep failed, more than its error budget max_bad_rows = 100",
        "raise max_bad_rows",
    ] {
        assert!(said.contains(part), "'{part}' not in:\n{said}");
    }
    assert!(said.contains("checkpoint complete"), "{said}");
    // The count resumes from the checkpoint: one short of the 133 fails at
    // the last, exactly 133 is enough.
    folder.write("job.toml", &dead_letter_spec(rows, &folder, 132, rate));
    let output = run(&spec, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        stderr(&output).contains("133 rows of transforms.keep failed"),
        "{}",
        text(&output)
    );
    folder.write("job.toml", &dead_letter_spec(rows, &folder, 133, rate));
    let output = run(&spec, &[]);
    assert!(output.status.success(), "{}", text(&output));
    assert_dead_letter_output(&folder, rows);
}

#[test]
fn checkpoints_list_and_inspect_a_state_folder() {
    let folder = Folder::new();
    let spec = folder.write(
        "job.toml",
        &aggregate_spec(200_000, 1_000, &folder.s("state"), &folder.s("out")),
    );
    let output = run(&spec, &[]);
    assert!(output.status.success(), "{}", text(&output));
    let list = tidewater()
        .args(["checkpoints", "list"])
        .arg(folder.path("state"))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(list.status.success(), "{}", text(&list));
    assert!(listed.contains("job aggregate:"), "{listed}");
    let final_line = listed
        .lines()
        .find(|l| l.contains(" final "))
        .unwrap_or_else(|| panic!("no final checkpoint in\n{listed}"));
    assert!(
        final_line.contains("200000") && final_line.ends_with("kept"),
        "{final_line}"
    );
    let id: String = final_line.split_whitespace().next().unwrap().to_string();
    let inspect = tidewater()
        .args(["checkpoints", "inspect"])
        .arg(folder.path("state"))
        .arg(&id)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&inspect.stdout).into_owned();
    assert!(inspect.status.success(), "{}", text(&inspect));
    for uid in [
        "gen (Source",
        "per_key.local",
        "per_key (Operator",
        "out (Sink",
    ] {
        assert!(shown.contains(uid), "no {uid} in\n{shown}");
    }
    assert!(shown.contains("commit handle"), "{shown}");
    assert!(!shown.contains("BAD"), "{shown}");
    // What a resume at another parallelism may do with it.
    assert!(shown.contains(", 4096 key groups"), "{shown}");
    assert!(
        shown
            .lines()
            .any(|l| l.contains("per_key (Operator") && l.ends_with(", rescalable)")),
        "{shown}"
    );
}

#[test]
fn inspect_reports_a_damaged_blob() {
    let folder = Folder::new();
    let mut spec = aggregate_spec(3_000_000, 1_000, &folder.s("state"), &folder.s("out"));
    spec = spec.replace(
        "batch_rows = 4096",
        "batch_rows = 4096\nrate_limit = 1_000_000",
    );
    let spec = folder.write("job.toml", &spec);
    let cancelled = interrupted_run(&spec, Duration::from_millis(600));
    assert_eq!(cancelled.status.code(), Some(3), "{}", text(&cancelled));
    // The savepoint is the newest checkpoint; flip a byte of a state blob.
    let job = folder.path("state").join("aggregate");
    let newest = std::fs::read_dir(&job)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("_MANIFEST.json").exists())
        .max()
        .expect("a checkpoint folder");
    // The merging aggregate's: the pre-aggregation `per_key.local` hands
    // its partials on before each barrier and holds none across it.
    let blob = walk(&newest)
        .into_iter()
        .find(|p| p.parent().and_then(|d| d.file_name()) == Some("per_key".as_ref()))
        .expect("a blob of per_key");
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let id = newest
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches(|c: char| !c.is_ascii_digit())
        .trim_start_matches('0')
        .to_string();
    let inspect = tidewater()
        .args(["checkpoints", "inspect"])
        .arg(folder.path("state"))
        .arg(&id)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&inspect.stdout).into_owned();
    assert_eq!(inspect.status.code(), Some(1), "{}", text(&inspect));
    assert!(shown.contains("BAD:"), "{shown}");
    assert!(
        shown.contains("a restore falls back past this checkpoint"),
        "{shown}"
    );
}

#[test]
fn checkpoints_on_the_s3_test_server() {
    let Some(prefix) = s3_prefix("cli-checkpoints") else {
        return;
    };
    let folder = Folder::new();
    let state = format!("{prefix}/state");
    let spec = folder.write(
        "job.toml",
        &copy_spec(100_000, 100, &state, &format!("{prefix}/out")),
    );
    let output = run(&spec, &[]);
    assert!(output.status.success(), "{}", text(&output));
    let list = tidewater()
        .args(["checkpoints", "list", &state])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        list.status.success() && listed.contains(" final "),
        "{}",
        text(&list)
    );
    let id = listed
        .lines()
        .find(|l| l.contains(" final "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    let inspect = tidewater()
        .args(["checkpoints", "inspect", &state, &id, "--job", "copy"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&inspect.stdout).into_owned();
    assert!(inspect.status.success(), "{}", text(&inspect));
    assert!(
        shown.contains("out (Sink") && shown.contains("commit handle"),
        "{shown}"
    );
}

fn example_spec(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/specs")
        .join(name)
}

/// Runs an example spec in `dir` (its paths are relative) with `env`.
fn run_example(dir: &Path, name: &str, env: &[(&str, &str)]) -> Output {
    let mut command = tidewater();
    command.current_dir(dir).arg("run").arg(example_spec(name));
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("running tidewater");
    assert!(output.status.success(), "{name}:\n{}", text(&output));
    output
}

/// Asserts `out` holds what parquet_to_parquet.toml makes of the copy job's
/// output: rows with v >= 0.5, as (id, tag, v_cents, s).
fn assert_reshaped(batches: &[arrow::array::RecordBatch], rows: u64, keys: u64) {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    let mut ids = Vec::new();
    for batch in batches {
        let names: Vec<_> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["id", "tag", "v_cents", "s"]);
        let id = batch.column(0).as_primitive::<Int64Type>();
        let tag = batch.column(1).as_string::<i32>();
        let cents = batch.column(2).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            let i = id.value(row) as u64;
            let k = tidewater_core::splitmix64(i) % keys;
            assert_eq!(tag.value(row), format!("k-{k}"), "tag of {i}");
            assert_eq!(
                cents.value(row),
                ((i % 1000) as f64 / 4.0 * 100.0).round() as i64
            );
            ids.push(i);
        }
    }
    ids.sort_unstable();
    let expected: Vec<u64> = (0..rows)
        .filter(|i| i % 3 != 0 && (i % 1000) as f64 / 4.0 >= 0.5)
        .collect();
    assert_eq!(ids.len(), expected.len(), "reshaped rows");
    assert!(ids == expected, "reshaped ids differ");
}

#[test]
fn the_example_specs_run_and_write_what_they_say() {
    let folder = Folder::new();
    run_example(&folder.root, "copy.toml", &[]);
    assert_copy_output(&folder.path("tidewater-out"), 10_000_000, 100_000);
    run_example(&folder.root, "aggregate.toml", &[]);
    assert_aggregate_output(&folder.path("tidewater-out-aggregate"), 10_000_000, 100_000);
    // Parquet to Parquet, locally and onto the S3 test server.
    let input = folder.s("tidewater-out");
    run_example(
        &folder.root,
        "parquet_to_parquet.toml",
        &[("IN", &input), ("OUT", &folder.s("reshaped"))],
    );
    assert_reshaped(
        &common::read_output(&folder.path("reshaped")),
        10_000_000,
        100_000,
    );
    if let Some(prefix) = s3_prefix("cli-example") {
        let s3_folder = Folder::new();
        let out = format!("{prefix}/reshaped");
        run_example(
            &s3_folder.root,
            "parquet_to_parquet.toml",
            &[("IN", &input), ("OUT", &out)],
        );
        // Read back through the CLI itself: a copy spec from S3 to a folder.
        let back = s3_folder.write(
            "back.toml",
            &format!(
                r#"
[job]
name = "back"
state = "{}"

[sources.s3]
type = "parquet"
path = "{out}"

[sinks.local]
inputs = ["s3"]
type = "parquet"
path = "{}"
"#,
                s3_folder.s("state-back"),
                s3_folder.s("back")
            ),
        );
        let output = run(&back, &[]);
        assert!(output.status.success(), "{}", text(&output));
        assert_reshaped(
            &common::read_output(&s3_folder.path("back")),
            10_000_000,
            100_000,
        );
    }
}

#[test]
fn the_postgres_example_specs_run_against_the_test_servers() {
    let Some(db) = common::Db::fresh("cli_examples") else {
        return;
    };
    let folder = Folder::new();
    common::sql(
        &db.url,
        "CREATE TABLE events (id bigint PRIMARY KEY, k bigint, v double precision, s text);
         INSERT INTO events SELECT i, i % 100, (i % 1000) / 4.0, md5(i::text)
           FROM generate_series(1, 50000) i;
         ANALYZE events",
    );
    run_example(
        &folder.root,
        "postgres_to_postgres.toml",
        &[("PG_URL", &db.url), ("PG_REPLICA_URL", &db.replica)],
    );
    assert_eq!(
        common::one(
            &db.url,
            "SELECT count(*), sum(n.v) = 100 * sum(o.v), bool_and(n.s = upper(o.s) AND n.k = o.k)
               FROM events_v2 n JOIN events o USING (id)"
        ),
        "50000|t|t"
    );
    assert_eq!(
        common::one(&db.url, "SELECT count(*) FROM events_v2"),
        "50000"
    );
    assert_replica_lag_recorded("events-v2");
    // Parquet into the table: files of (id, k, v, s) from a small copy job.
    let make = folder.write(
        "make.toml",
        &copy_spec(30_000, 100, &folder.s("state-make"), &folder.s("files")).replace(
            "columns = { w = \"v * 2.0\" }",
            "select = [\"id\", \"k\", \"v\", \"s\"]",
        ),
    );
    let output = run(&make, &[]);
    assert!(output.status.success(), "{}", text(&output));
    let files = folder.s("files");
    run_example(
        &folder.root,
        "parquet_to_postgres.toml",
        &[("IN", &files), ("PG_URL", &db.url)],
    );
    assert_eq!(
        common::one(
            &db.url,
            "SELECT count(*), count(*) FILTER (WHERE id % 3 = 0), sum(v) FROM events_loaded"
        ),
        {
            let sum: f64 = (0..30_000u64)
                .filter(|i| i % 3 != 0)
                .map(|i| (i % 1000) as f64 / 4.0)
                .sum();
            format!("20000|0|{sum}")
        }
    );
}

/// The newest job called `name` in the test store has samples with the
/// replica's lag, as the dashboard's lag chart reads them over HTTP.
fn assert_replica_lag_recorded(name: &str) {
    let port = free_port();
    let mut server = tidewater()
        .args(["serve", "--store", &test_store(), "--http"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}/api/v1");
    let jobs = poll(&format!("{base}/jobs"), "serving", |a| a.status == 200).json();
    let id = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == name)
        .unwrap_or_else(|| panic!("no job {name}: {jobs}"))["id"]
        .as_i64()
        .unwrap();
    let history = http(&format!("{base}/jobs/{id}/history"), &[], None)
        .unwrap()
        .json();
    let _ = server.kill();
    let _ = server.wait();
    let lags: Vec<f64> = history["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["replica_lag_seconds"].as_f64())
        .collect();
    assert!(
        !lags.is_empty() && lags.iter().all(|lag| (0.0..60.0).contains(lag)),
        "no replica lag in the samples of {name}: {history}"
    );
}

#[test]
fn validate_connect_opens_every_source_and_sink() {
    let Some(db) = common::Db::fresh("cli_validate") else {
        return;
    };
    let folder = Folder::new();
    common::sql(
        &db.url,
        "CREATE TABLE events (id bigint PRIMARY KEY, k bigint, v double precision, s text)",
    );
    let spec = std::fs::read_to_string(example_spec("postgres_to_postgres.toml")).unwrap();
    let validate = |text: &str, connect: bool| {
        let path = folder.write("job.toml", text);
        let mut command = tidewater();
        command
            .current_dir(&folder.root)
            .arg("validate")
            .arg(&path)
            .env("PG_URL", &db.url)
            .env("PG_REPLICA_URL", &db.replica);
        if connect {
            command.arg("--connect");
        }
        command.output().unwrap()
    };
    let good = validate(&spec, true);
    assert!(good.status.success(), "{}", text(&good));
    // Opened, not written: the sink's `create` ran, no row went in.
    assert_eq!(common::one(&db.url, "SELECT count(*) FROM events_v2"), "0");
    // Offline, a type error in an expression over a PostgreSQL source
    // cannot be seen (its schema is unknown); connected, it is.
    let typo = spec.replace("v = \"v * 100\"", "v = \"s * 100\"");
    assert!(validate(&typo, false).status.success());
    let connected = validate(&typo, true);
    assert_eq!(connected.status.code(), Some(2), "{}", text(&connected));
    assert!(
        stderr(&connected).contains("[transforms.v2] columns.v = \"s * 100\""),
        "{}",
        text(&connected)
    );
    // A table that is not there is named with its component.
    let missing = spec.replace("table = \"events\"", "table = \"no_such_table\"");
    let output = validate(&missing, true);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let said = stderr(&output);
    assert!(
        said.contains("[sources.events] could not be opened"),
        "{said}"
    );
    assert!(said.contains("no_such_table"), "{said}");
}

#[test]
fn json_progress_says_rows_eta_and_what_throttles() {
    let folder = Folder::new();
    let spec = copy_spec(1_500_000, 100, &folder.s("state"), &folder.s("out")).replace(
        "batch_rows = 4096",
        "batch_rows = 4096\nrate_limit = 500_000",
    );
    let spec = folder.write("job.toml", &spec);
    let output = run(
        &spec,
        &["--progress", "json", "--progress-interval", "300ms"],
    );
    assert!(output.status.success(), "{}", text(&output));
    let lines: Vec<serde_json::Value> = stderr(&output)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("rows_read").is_some())
        .collect();
    assert!(lines.len() >= 2, "{}", text(&output));
    for line in &lines {
        assert_eq!(line["rows_total"], 1_500_000, "{line}");
        assert_ne!(line["eta"], "0s", "{line}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["throttled_by"][0] == "rate limit 500000 rows/s"),
        "{}",
        text(&output)
    );
}

#[test]
fn validate_connect_learns_whether_the_output_takes_writes() {
    let folder = Folder::new();
    // A local output: the probe is written and deleted, nothing stays.
    let spec = folder.write(
        "local.toml",
        &copy_spec(1000, 10, &folder.s("state"), &folder.s("out")),
    );
    let output = tidewater()
        .args(["validate", "--connect"])
        .arg(&spec)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let left: Vec<_> = std::fs::read_dir(folder.path("out"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "validate left {left:?} in the output");
    // A bucket that does not exist is named, with the sink.
    let Some(prefix) = s3_prefix("cli-probe") else {
        return;
    };
    let missing_bucket = prefix.replacen("s3://", "s3://no-such-bucket-", 1);
    let spec = folder.write(
        "s3.toml",
        &copy_spec(1000, 10, &folder.s("state"), &missing_bucket),
    );
    let output = tidewater()
        .args(["validate", "--connect"])
        .arg(&spec)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let said = stderr(&output);
    assert!(said.contains("[sinks.out] could not be opened"), "{said}");
    assert!(said.contains("does not take writes"), "{said}");
    // A transform's dead-letter output is probed too.
    let dead = dead_letter_spec(1000, &folder, 10, 1_000_000)
        .replace(&folder.s("dead"), &format!("{missing_bucket}/dead"));
    let dead = folder.write("dead.toml", &dead);
    let output = tidewater()
        .args(["validate", "--connect"])
        .arg(&dead)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let said = stderr(&output);
    assert!(
        said.contains("[transforms.keep] could not be opened"),
        "{said}"
    );
    assert!(said.contains("does not take writes"), "{said}");
    // Offline, the same spec is valid: nothing was opened.
    let output = tidewater().arg("validate").arg(&spec).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
}

/// The screen of a tmux pane, as a user would see it.
fn screen(socket: &str) -> String {
    let out = Command::new("tmux")
        .args(["-L", socket, "capture-pane", "-p", "-t", "bar"])
        .output()
        .expect("tmux capture-pane");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn on_a_terminal_the_bar_shows_the_progress_and_logs_never_tear_it() {
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(
            std::env::var_os("TIDEWATER_REQUIRE_TMUX").is_none(),
            "TIDEWATER_REQUIRE_TMUX is set but tmux is not installed: scripts/test.sh installs it"
        );
        eprintln!("tmux is not installed: skipping the terminal test");
        return;
    }
    let folder = Folder::new();
    // About four seconds, with a checkpoint (and its log line) every 50 ms.
    let spec = copy_spec(600_000, 100, &folder.s("state"), &folder.s("out")).replace(
        "batch_rows = 4096",
        "batch_rows = 4096\nrate_limit = 150_000",
    );
    let spec = folder.write("job.toml", &spec);
    let socket = format!("tidewater-test-{}", std::process::id());
    let command = format!(
        "env RUST_LOG=info NO_COLOR=1 TIDEWATER_STORE={} {} run {} 2>&1; echo EXIT=$?; sleep 60",
        test_store(),
        env!("CARGO_BIN_EXE_tidewater"),
        spec.display()
    );
    let started = Command::new("tmux")
        .args(["-L", &socket, "new-session", "-d", "-s", "bar", "-x", "100"])
        .args(["-y", "30", &command])
        .status()
        .expect("tmux new-session");
    assert!(started.success());
    let mut screens = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = screen(&socket);
        let done = now.contains("EXIT=");
        screens.push(now);
        if done {
            break;
        }
    }
    let _ = Command::new("tmux")
        .args(["-L", &socket, "kill-server"])
        .status();
    let last = screens.last().expect("a screen").clone();
    assert!(last.contains("EXIT=0"), "{last}");
    assert!(last.contains("done: 600000 rows read"), "{last}");
    assert!(
        !last.contains('█'),
        "the bar is cleared at the end:\n{last}"
    );
    let is_log = |line: &str| line.starts_with("20") && line.contains("Z  INFO ");
    let mut bar_seen = false;
    for s in &screens {
        let lines: Vec<&str> = s.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let is_bar = line.contains('█') || line.contains('░');
            assert!(
                !(is_bar && line.contains(" INFO ")),
                "a log line tore the bar:\n{s}"
            );
            if line.contains(" INFO ") && !is_log(line) {
                panic!("a log line does not start its own line:\n{s}");
            }
            assert!(
                !line.contains("ETA 0s"),
                "an ETA of 0s while rows remain:\n{s}"
            );
            if is_bar && line.contains("/600000 rows, ") && line.contains("M rows/s, ETA ") {
                let next = lines.get(i + 1).copied().unwrap_or_default();
                assert!(
                    next.starts_with("  ") && !next.contains(" INFO "),
                    "the bar's second line is not its own:\n{s}"
                );
                if next.contains("checkpoints (last #")
                    && next.contains("throttled: rate limit 150000 rows/s")
                {
                    bar_seen = true;
                }
            }
        }
    }
    assert!(
        bar_seen,
        "no screen showed the bar with its checkpoints and throttle; the last:\n{last}"
    );
}

#[test]
fn a_second_run_is_refused_while_the_first_holds_the_lease_and_status_follows_the_job() {
    for (i, store) in job_stores("tw_cli_lease").iter().enumerate() {
        let store = store.as_str();
        let name = format!("leased-{i}");
        let folder = Folder::new();
        // About three seconds.
        let spec = copy_spec(600_000, 100, &folder.s("state"), &folder.s("out"))
            .replace("name = \"copy\"", &format!("name = \"{name}\""))
            .replace(
                "batch_rows = 4096",
                "batch_rows = 4096\nrate_limit = 200_000",
            );
        let spec = folder.write("job.toml", &spec);
        let mut first = spawn_run(&spec, &["--progress", "off", "--store", store]);
        let running = wait_for_status(&name, store, "running with progress", |s| {
            s["state"] == "RUNNING" && s["progress"]["rows_done"].as_u64() > Some(0)
        });
        let holder = running["lease"]["owner"]["pid"].as_u64().unwrap();
        assert_eq!(holder, u64::from(first.id()), "{running}");
        let second = tidewater()
            .args(["run", "--progress", "off", "--store", store])
            .arg(&spec)
            .output()
            .unwrap();
        assert_eq!(second.status.code(), Some(1), "{}", text(&second));
        let said = stderr(&second);
        assert!(
            said.contains(&format!("pid {holder} on ")) && said.contains("holds its lease"),
            "{said}"
        );
        let page = tidewater()
            .args(["status", &name, "--store", store])
            .output()
            .unwrap();
        let page = String::from_utf8_lossy(&page.stdout).into_owned();
        let running = format!("'{name}': RUNNING");
        for part in [
            running.as_str(),
            "rows, ",
            "M rows/s, ETA ",
            "lease:       pid ",
        ] {
            assert!(page.contains(part), "'{part}' not in:\n{page}");
        }
        assert!(first.wait().unwrap().success());
        let done = status(&name, store);
        assert_eq!(done["state"], "SUCCEEDED", "{done}");
        assert_eq!(done["progress"]["rows_done"], 600_000, "{done}");
        assert!(done["lease"].is_null(), "{done}");
        assert_copy_output(&folder.path("out"), 600_000, 100);
        let listed = tidewater()
            .args(["jobs", "--state", "succeeded", "--store", store])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&listed.stdout).contains(&name),
            "{}",
            text(&listed)
        );
    }
}

#[test]
fn an_idempotency_key_returns_the_first_job_instead_of_a_second() {
    let folder = Folder::new();
    let spec = folder.write(
        "job.toml",
        &copy_spec(10_000, 10, &folder.s("state"), &folder.s("out")),
    );
    let first = run(&spec, &["--idempotency-key", "nightly-2026-12-01"]);
    assert!(first.status.success(), "{}", text(&first));
    // The same key, even for another spec file: the first job, not a run.
    let other = folder.write(
        "other.toml",
        &copy_spec(10_000, 10, &folder.s("state2"), &folder.s("out2")),
    );
    let again = run(&other, &["--idempotency-key", "nightly-2026-12-01"]);
    assert!(again.status.success(), "{}", text(&again));
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(
        said.contains("('copy') was submitted with this idempotency key before; it is SUCCEEDED"),
        "{said}"
    );
    assert!(!folder.path("out2").exists(), "a second job ran");
}

/// A cancel from another process, mid-run: the rate-limited copy job
/// `name` (1M rows) is started with `--summary-json`, and once past its first
/// checkpoint `tidewater cancel NAME CANCEL_ARGS` is run, which must print
/// `cancel_says`; the run must then stop with exit 3, saying `run_says`.
/// Returns the job's folder (with `summary.json`) and its spec.
fn cancelled_mid_run(
    name: &str,
    cancel_args: &[&str],
    cancel_says: &str,
    run_says: &str,
) -> (Folder, PathBuf) {
    let store = test_store();
    let folder = Folder::new();
    let spec = copy_spec(1_000_000, 100, &folder.s("state"), &folder.s("out"))
        .replace("name = \"copy\"", &format!("name = \"{name}\""))
        .replace(
            "batch_rows = 4096",
            "batch_rows = 4096\nrate_limit = 200_000",
        );
    let spec = folder.write("job.toml", &spec);
    let summary = folder.s("summary.json");
    let mut child = spawn_run(&spec, &["--progress", "off", "--summary-json", &summary]);
    wait_for_status(name, &store, "past its first checkpoint", |s| {
        s["progress"]["last_checkpoint"].as_u64() > Some(0)
    });
    let cancel = tidewater()
        .args(["cancel", name])
        .args(cancel_args)
        .output()
        .unwrap();
    assert!(cancel.status.success(), "{}", text(&cancel));
    assert!(
        String::from_utf8_lossy(&cancel.stdout).contains(cancel_says),
        "{}",
        text(&cancel)
    );
    wait_or_kill(&mut child, Duration::from_secs(60)).expect("the run stops");
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
    assert!(stderr(&output).contains(run_says), "{}", text(&output));
    assert_eq!(status(name, &store)["state"], "CANCELLED");
    (folder, spec)
}

/// `tidewater resume NAME`, which must succeed; its stdout.
fn resume(name: &str) -> String {
    let resumed = tidewater()
        .args(["resume", name, "--progress", "off"])
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", text(&resumed));
    String::from_utf8_lossy(&resumed.stdout).into_owned()
}

#[test]
fn cancel_from_another_process_takes_a_savepoint_and_resume_continues_from_it() {
    let (folder, spec) = cancelled_mid_run(
        "cancel-me",
        &[],
        "is CANCELLING",
        "cancelled in the job store",
    );
    // Its stored spec, from the store alone.
    std::fs::remove_file(&spec).unwrap();
    let said = resume("cancel-me");
    assert!(said.contains("resumed from checkpoint"), "{said}");
    assert_copy_output(&folder.path("out"), 1_000_000, 100);
    assert_eq!(status("cancel-me", &test_store())["state"], "SUCCEEDED");
}

#[test]
fn cancel_with_discard_stops_without_a_savepoint_and_resume_continues_from_the_last_checkpoint() {
    let (folder, _) = cancelled_mid_run(
        "discard-me",
        &["--discard"],
        "without a savepoint",
        "cancelled without a savepoint",
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder.path("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["outcome"], "discarded", "{summary}");
    let kinds: Vec<&str> = summary["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.iter().all(|k| *k == "periodic"), "{kinds:?}");
    resume("discard-me");
    assert_copy_output(&folder.path("out"), 1_000_000, 100);
}

/// The spec of a fencing trial in `mode` (copy or aggregate), job `name`,
/// state and output at `state` and `out`: about five seconds of work.
fn trial_spec(mode: &str, name: &str, state: &str, out: &str, rows: u64, keys: u64) -> String {
    let body = match mode {
        "copy" => copy_spec(rows, keys, state, out),
        _ => aggregate_spec(rows, keys, state, out),
    };
    body.replace(&format!("name = \"{mode}\""), &format!("name = \"{name}\""))
        .replace(
            "batch_rows = 4096",
            "batch_rows = 4096\nrate_limit = 200_000",
        )
}

/// 20 fencing trials for the copy spec and 20 for the aggregate spec, four
/// at a time (they mostly wait on a rate limit or a lease); `place` gives a
/// trial's state and output locations (a folder or URL), from its name.
/// Every other aggregate trial checkpoints incrementally over 200k keys, so
/// that chains of deltas grow (about 10k keys change between checkpoints)
/// and the woken run's retention races the new run's chain.
fn fencing_trials(db: &str, place: &(dyn Fn(&Folder, &str) -> (String, String) + Sync)) {
    // A worker stopped in the middle of a SQLite write holds the file's lock
    // until it wakes, and so stalls every process of that store (see
    // docs/operations.md): the trials use the PostgreSQL store when the
    // test servers run.
    let store = common::Db::fresh(db).map_or_else(test_store, |db| db.url);
    let store = store.as_str();
    const TRIALS: usize = 20;
    const LANES: usize = 4;
    let (rows, keys) = (1_000_000, 100);
    for mode in ["copy", "aggregate"] {
        let seed = Rng::from_time().below(u64::MAX);
        std::thread::scope(|scope| {
            for lane in 0..LANES {
                scope.spawn(move || {
                    let mut rng = Rng::from_seed(seed.wrapping_add(lane as u64));
                    let mut trial = lane;
                    while trial < TRIALS {
                        let folder = Folder::new();
                        let name = format!("paused-{mode}-{trial}-{}", rng.below(1 << 30));
                        let (state, out) = place(&folder, &name);
                        let incremental = mode == "aggregate" && trial % 2 == 1;
                        let keys = if incremental { 200_000 } else { keys };
                        let mut spec = trial_spec(mode, &name, &state, &out, rows, keys);
                        if incremental {
                            spec = spec.replace(
                                "parallelism = 2",
                                "parallelism = 2\nincremental_checkpoints = true\n\
                                 full_checkpoint_every = 12",
                            );
                        }
                        let spec = folder.write("job.toml", &spec);
                        let Some(said) = paused_takeover_trial(&name, &spec, store, &mut rng)
                        else {
                            continue;
                        };
                        let how = if said.contains("lost the lease") {
                            "lease lost"
                        } else {
                            "fenced"
                        };
                        let checkpoints = if incremental { ", incremental" } else { "" };
                        eprintln!("{name}: the woken run stopped ({how}){checkpoints}");
                        let local = folder.path("downloaded");
                        common::download(&out, &local);
                        match mode {
                            "copy" => assert_copy_output(&local, rows, keys),
                            _ => assert_aggregate_output(&local, rows, keys),
                        }
                        assert_eq!(status(&name, store)["state"], "SUCCEEDED");
                        trial += LANES;
                    }
                });
            }
        });
    }
}

#[test]
fn paused_workers_whose_lease_ran_out_are_fenced_and_the_output_is_exact() {
    fencing_trials("tw_cli_fencing_local", &|folder, _| {
        (folder.s("state"), folder.s("out"))
    });
}

#[test]
fn on_s3_paused_workers_whose_lease_ran_out_are_fenced_and_the_output_is_exact() {
    let Some(base) = s3_prefix("cli-paused") else {
        return;
    };
    fencing_trials("tw_cli_fencing_s3", &|_, name| {
        (format!("{base}/{name}/state"), format!("{base}/{name}/out"))
    });
}

#[test]
fn a_succeeded_job_whose_state_was_emptied_runs_anew() {
    let folder = Folder::new();
    let body = copy_spec(10_000, 10, &folder.s("state"), &folder.s("out"))
        .replace("name = \"copy\"", "name = \"again\"");
    let spec = folder.write("job.toml", &body);
    assert!(run(&spec, &[]).status.success());
    let done = run(&spec, &[]);
    assert!(
        String::from_utf8_lossy(&done.stdout).contains("already complete"),
        "{}",
        text(&done)
    );
    std::fs::remove_dir_all(folder.path("state")).unwrap();
    std::fs::remove_dir_all(folder.path("out")).unwrap();
    let anew = run(&spec, &[]);
    assert!(anew.status.success(), "{}", text(&anew));
    assert!(stderr(&anew).contains("running it anew"), "{}", text(&anew));
    assert_copy_output(&folder.path("out"), 10_000, 10);
}

/// A postgres→postgres exactly-once job of the `events` table at `url`
/// into `dst`, held to 40k rows/s: about five seconds for 200k rows.
fn pg_trial_spec(name: &str, state: &str, url: &str, dst: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
state = "{state}"
checkpoint_interval = "200ms"
parallelism = 2

[sources.events]
type = "postgres"
url = "{url}"
table = "events"
split_column = "id"
columns = ["id", "k", "v", "s"]
splits = 8
batch_rows = 5000
rate_limit = 40_000

[transforms.v2]
inputs = ["events"]
type = "sql"
columns = {{ v = "v * 100" }}

[sinks.out]
inputs = ["v2"]
type = "postgres"
url = "{url}"
table = "{dst}"
mode = "exactly-once"
create = "CREATE TABLE IF NOT EXISTS {dst} (id bigint, k bigint, v double precision, s text)"
"#
    )
}

/// A process stopped while it migrates a new PostgreSQL job store (here
/// stalled by a failpoint at that instant: a SIGSTOP aimed there would
/// rarely land in its few milliseconds) holds the migration lock. The
/// server ends its idle transaction, so the next process opens the store
/// instead of waiting for the first to wake (a fencing trial once hung for
/// 23 minutes on this).
#[test]
fn a_process_stalled_while_migrating_a_new_store_blocks_no_other() {
    use std::io::BufRead;
    let Some(db) = common::Db::fresh("tw_cli_stalled_migration") else {
        return;
    };
    let status = || {
        let mut command = tidewater();
        command
            .args(["status", "nope", "--json", "--store", &db.url])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    };
    let mut stalled = status()
        .env("TIDEWATER_FAILPOINT", "store-mid-migration@0")
        .spawn()
        .unwrap();
    let said = std::io::BufReader::new(stalled.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|line| line.contains("failpoint store-mid-migration: stalling"));
    assert!(
        said.is_some(),
        "the first process never reached its migration"
    );
    let mut next = status().spawn().unwrap();
    let ended = wait_or_kill(&mut next, Duration::from_secs(120));
    let _ = stalled.kill();
    let _ = stalled.wait();
    assert!(
        ended.is_some(),
        "a second process waited for the stalled one's migration lock"
    );
    let next = next.wait_with_output().unwrap();
    assert!(stderr(&next).contains("no job 'nope'"), "{}", text(&next));
    // The stalled migration was rolled back and the second applied it: the
    // store works.
    let folder = Folder::new();
    let body = copy_spec(10_000, 10, &folder.s("state"), &folder.s("out"));
    let spec = folder.write("job.toml", &body);
    let done = run(&spec, &["--store", &db.url]);
    assert!(done.status.success(), "{}", text(&done));
    assert_eq!(status_of("copy", &db.url).unwrap()["state"], "SUCCEEDED");
}

#[test]
fn paused_postgres_to_postgres_workers_are_fenced_and_the_table_is_exact() {
    let (Some(data), Some(jobs)) = (
        common::Db::fresh("tw_cli_fencing_pg_data"),
        common::Db::fresh("tw_cli_fencing_pg"),
    ) else {
        return;
    };
    const ROWS: u64 = 200_000;
    common::sql(
        &data.url,
        &format!(
            "CREATE TABLE events (id bigint PRIMARY KEY, k bigint, v double precision, s text);
             INSERT INTO events SELECT i, i % 100, (i % 1000) / 4.0, md5(i::text)
               FROM generate_series(1, {ROWS}) i;
             ANALYZE events"
        ),
    );
    const TRIALS: usize = 20;
    const LANES: usize = 4;
    let seed = Rng::from_time().below(u64::MAX);
    std::thread::scope(|scope| {
        for lane in 0..LANES {
            let (data, store) = (&data.url, jobs.url.as_str());
            scope.spawn(move || {
                let mut rng = Rng::from_seed(seed.wrapping_add(lane as u64));
                let mut trial = lane;
                while trial < TRIALS {
                    let folder = Folder::new();
                    let dst = format!("dst_{trial}_{}", rng.below(1 << 30));
                    let name = format!("paused-pg-{dst}");
                    let spec = pg_trial_spec(&name, &folder.s("state"), data, &dst);
                    let spec = folder.write("job.toml", &spec);
                    let Some(said) = paused_takeover_trial(&name, &spec, store, &mut rng) else {
                        common::sql(data, &format!("DROP TABLE IF EXISTS {dst}"));
                        continue;
                    };
                    eprintln!("{name}: the woken run stopped: {}", said.lines().last().unwrap_or(""));
                    // Every row once (no key on dst: a duplicate would show), each rewritten.
                    assert_eq!(
                        common::one(
                            data,
                            &format!(
                                "SELECT count(*), count(DISTINCT n.id), bool_and(n.v = 100 * o.v AND n.s = o.s)
                                   FROM {dst} n JOIN events o USING (id)"
                            )
                        ),
                        format!("{ROWS}|{ROWS}|t"),
                        "{name}"
                    );
                    assert_eq!(common::one(data, &format!("SELECT count(*) FROM {dst}")), ROWS.to_string());
                    assert_eq!(
                        common::one(
                            data,
                            &format!("SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, 'tw:{name}:')")
                        ),
                        "0",
                        "{name}: a prepared transaction outlived the trial"
                    );
                    assert_eq!(status(&name, store)["state"], "SUCCEEDED");
                    trial += LANES;
                }
            });
        }
    });
}

/// A tmpfs of `size` mounted at `at` (root only: `None` elsewhere).
fn tmpfs(at: &Path, size: &str) -> Option<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small volume needs root");
        return None;
    }
    std::fs::create_dir_all(at).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .status()
        .expect("running mount");
    assert!(mounted.success(), "mount -t tmpfs failed");
    Some(())
}

#[test]
fn a_full_disk_names_the_volume_and_the_same_command_resumes_once_there_is_room() {
    let folder = Folder::new();
    let out = folder.path("small");
    if tmpfs(&out, "8m").is_none() {
        return;
    }
    let unmount = || {
        let _ = Command::new("umount").arg(&out).status();
    };
    let spec = folder.write(
        "job.toml",
        &copy_spec(
            4_000_000,
            100,
            &folder.s("state"),
            &out.display().to_string(),
        )
        .replace("name = \"copy\"", "name = \"fills-its-disk\""),
    );
    let started = std::time::Instant::now();
    let full = run(&spec, &["--progress", "off"]);
    // The error, not the restarts logged before it.
    let said = stderr(&full)
        .lines()
        .rfind(|l| l.starts_with("error: "))
        .unwrap_or_default()
        .to_string();
    let result = std::panic::catch_unwind(|| {
        assert_eq!(full.status.code(), Some(1), "{}", text(&full));
        assert!(
            said.contains(&format!(
                "The disk is full: the volume mounted at {} holds ",
                out.display()
            )),
            "{said}"
        );
        assert!(said.contains("B free)"), "{said}");
        assert_eq!(said.matches("No space left on device").count(), 1, "{said}");
        assert_eq!(said.matches("Free space there").count(), 1, "{said}");
        assert!(
            said.contains("running the same command again resumes from "),
            "{said}"
        );
        assert!(started.elapsed() < Duration::from_secs(60), "{said}");
        // Room again: the same command resumes and nothing is lost.
        let grown = Command::new("mount")
            .args(["-o", "remount,size=200m"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(grown.success());
        let again = run(&spec, &["--progress", "off"]);
        assert!(again.status.success(), "{}", text(&again));
        assert_copy_output(&out, 4_000_000, 100);
    });
    unmount();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
