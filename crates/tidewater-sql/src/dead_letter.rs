//! Dead letters: the rows a SQL transform's expressions fail on (a division
//! by zero, a failed cast), set aside with what failed instead of failing
//! the job, under an error budget.
//!
//! An operator has one output, so in this mode the transform's batches
//! carry both kinds of row: the output's columns (made nullable), then the
//! four columns of [`dead_letter_schema`] under reserved names, null on the
//! rows that passed. [`PassedRows`] and [`DeadLetterRows`] split them again;
//! [`ErrorBudget`] counts the dead letters in its checkpointed state and
//! fails the job past the budget. The dead letters then go to an ordinary
//! sink, so they are committed with the checkpoint, exactly once.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, UInt64Array, new_null_array};
use arrow::compute::{concat, filter_record_batch, is_not_null, is_null};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use tidewater_core::events::{InternalEvent, RowDeadLettered};
use tidewater_core::{Collector, Error, Operator, Result, row_json};

use crate::error::SqlError;
use crate::transform::{FailedRow, Part};

/// The columns of a dead letter, each a string: `transform` (the
/// component's id), `expression` (the part that failed, as the spec wrote
/// it), `error` (what the evaluation said) and `row` (the input row as a
/// JSON object of its values).
pub fn dead_letter_schema() -> SchemaRef {
    Arc::new(Schema::new(
        COLUMNS
            .iter()
            .map(|name| Field::new(*name, DataType::Utf8, false))
            .collect::<Vec<_>>(),
    ))
}

const COLUMNS: [&str; 4] = ["transform", "expression", "error", "row"];

/// Where the dead-letter columns sit in a transform's combined output.
const RESERVED_PREFIX: &str = "_tidewater_dead_letter_";

/// How a transform's combined output is laid out: the output's columns,
/// then the dead letter's.
#[derive(Debug)]
pub struct DeadLetterLayout {
    transform: Arc<str>,
    output: SchemaRef,
    combined: SchemaRef,
}

impl DeadLetterLayout {
    /// The layout for transform `transform` whose rows have schema `output`.
    pub fn new(transform: &str, output: SchemaRef) -> Self {
        let mut fields: Vec<Field> = output
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.extend(
            COLUMNS
                .iter()
                .map(|name| Field::new(format!("{RESERVED_PREFIX}{name}"), DataType::Utf8, true)),
        );
        DeadLetterLayout {
            transform: transform.into(),
            output,
            combined: Arc::new(Schema::new(fields)),
        }
    }

    /// The schema of the transform's batches in this mode.
    pub fn combined_schema(&self) -> SchemaRef {
        Arc::clone(&self.combined)
    }

    /// The rows that passed, then one row per failure of `input`'s rows.
    pub(crate) fn combine(
        &self,
        passed: Vec<RecordBatch>,
        failed: &[FailedRow],
        input: &RecordBatch,
        describe: &dyn Fn(Part) -> String,
    ) -> Result<RecordBatch> {
        let passed_rows: usize = passed.iter().map(RecordBatch::num_rows).sum();
        if failed.is_empty() && passed.len() == 1 {
            // The common case: one batch, nothing set aside.
            let nulls = new_null_array(&DataType::Utf8, passed_rows);
            let mut columns = passed[0].columns().to_vec();
            columns.extend(std::iter::repeat_n(nulls, COLUMNS.len()));
            return Ok(RecordBatch::try_new(self.combined_schema(), columns)?);
        }
        let width = self.output.fields().len();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(width + COLUMNS.len());
        for (i, field) in self.output.fields().iter().enumerate() {
            let mut parts: Vec<ArrayRef> = passed.iter().map(|b| b.column(i).clone()).collect();
            parts.push(new_null_array(field.data_type(), failed.len()));
            columns.push(concat_all(&parts)?);
        }
        let letters: [Vec<String>; 4] = [
            vec![self.transform.to_string(); failed.len()],
            failed.iter().map(|f| describe(f.part)).collect(),
            failed.iter().map(|f| message(&f.error)).collect(),
            failed
                .iter()
                .map(|f| row_json(input, f.row).to_string())
                .collect(),
        ];
        let nulls = new_null_array(&DataType::Utf8, passed_rows);
        for values in letters {
            let values: ArrayRef = Arc::new(StringArray::from(values));
            columns.push(concat_all(&[Arc::clone(&nulls), values])?);
        }
        Ok(RecordBatch::try_new(self.combined_schema(), columns)?)
    }

    fn error_column<'a>(&self, combined: &'a RecordBatch) -> &'a ArrayRef {
        combined.column(self.output.fields().len() + 2)
    }

    /// The rows of `combined` that passed, in the transform's output schema.
    pub fn passed(&self, combined: &RecordBatch) -> Result<RecordBatch> {
        let errors = self.error_column(combined);
        let rows = if errors.null_count() == errors.len() {
            combined.clone()
        } else {
            filter_record_batch(combined, &is_null(errors)?)?
        };
        let width = self.output.fields().len();
        Ok(RecordBatch::try_new(
            Arc::clone(&self.output),
            rows.columns()[..width].to_vec(),
        )?)
    }

    /// The dead letters of `combined`, in [`dead_letter_schema`]; `None`
    /// when every row passed.
    pub fn dead_letters(&self, combined: &RecordBatch) -> Result<Option<RecordBatch>> {
        let errors = self.error_column(combined);
        if errors.null_count() == errors.len() {
            return Ok(None);
        }
        let rows = filter_record_batch(combined, &is_not_null(errors)?)?;
        let width = self.output.fields().len();
        Ok(Some(RecordBatch::try_new(
            dead_letter_schema(),
            rows.columns()[width..].to_vec(),
        )?))
    }
}

fn concat_all(parts: &[ArrayRef]) -> Result<ArrayRef> {
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(concat(&refs)?)
}

/// An evaluation's own words, without the row (the row has its column).
fn message(error: &SqlError) -> String {
    match error {
        SqlError::Row { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Keeps the rows of a transform's combined output that passed.
pub struct PassedRows(pub Arc<DeadLetterLayout>);

impl Operator for PassedRows {
    fn kind(&self) -> &str {
        "sql-passed-rows"
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        out.emit(self.0.passed(&batch)?);
        Ok(())
    }
}

/// Keeps the dead letters of a transform's combined output.
pub struct DeadLetterRows(pub Arc<DeadLetterLayout>);

impl Operator for DeadLetterRows {
    fn kind(&self) -> &str {
        "sql-dead-letter-rows"
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        if let Some(letters) = self.0.dead_letters(&batch)? {
            out.emit(letters);
        }
        Ok(())
    }
}

/// Counts dead letters, and fails the job when there are more than the
/// budget allows. The count is checkpointed, so a restored job goes on
/// counting from where its checkpoint was: run it at parallelism 1 to
/// count the whole job's.
pub struct ErrorBudget {
    job: Arc<str>,
    transform: String,
    max: u64,
    location: String,
    count: u64,
}

impl ErrorBudget {
    /// A budget of `max` dead letters for `transform` of `job`, whose dead
    /// letters are written to `location` (named in logs and in the error
    /// past the budget).
    pub fn new(job: &str, transform: &str, max: u64, location: &str) -> Self {
        ErrorBudget {
            job: job.into(),
            transform: transform.to_string(),
            max,
            location: location.to_string(),
            count: 0,
        }
    }

    /// The error for the first dead letter past the budget: row `row` of `letters`.
    fn over_budget(&self, letters: &RecordBatch, row: usize, count: u64) -> Error {
        let text = |i: usize| {
            letters
                .column(i)
                .as_any()
                .downcast_ref::<StringArray>()
                .map_or_else(String::new, |a| a.value(row).to_string())
        };
        Error::BadInput(format!(
            "{}: {} (on the row {}); {count} {} of transforms.{} failed, more than its error \
             budget max_bad_rows = {}: fix the expression, or raise max_bad_rows and run again \
             to resume (the rows set aside before the last checkpoint are in {})",
            text(1),
            text(2),
            text(3),
            if count == 1 { "row" } else { "rows" },
            self.transform,
            self.max,
            self.location
        ))
    }
}

impl Operator for ErrorBudget {
    fn kind(&self) -> &str {
        "sql-error-budget"
    }

    fn state_version(&self) -> Option<u32> {
        Some(1)
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let count = self.count + batch.num_rows() as u64;
        if count > self.max {
            let first_over = (self.max - self.count) as usize;
            return Err(self.over_budget(&batch, first_over, self.max + 1));
        }
        self.count = count;
        let text = |i: usize| batch.column(i).as_any().downcast_ref::<StringArray>();
        if let (Some(expressions), Some(errors), Some(rows)) = (text(1), text(2), text(3)) {
            for row in 0..batch.num_rows() {
                // One line a row: the budget bounds how many.
                RowDeadLettered {
                    job: &self.job,
                    uid: &self.transform,
                    subtask: 0,
                    target: &self.location,
                    row: rows.value(row),
                    reason: &format!("{}: {}", expressions.value(row), errors.value(row)),
                }
                .emit();
            }
        }
        out.emit(batch);
        Ok(())
    }

    fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "dead_letters",
            DataType::UInt64,
            false,
        )]));
        let count: ArrayRef = Arc::new(UInt64Array::from(vec![self.count]));
        Ok(Some(RecordBatch::try_new(schema, vec![count])?))
    }

    fn restore(&mut self, state: RecordBatch) -> Result<()> {
        let count = tidewater_core::state::column::<UInt64Array>(&state, "dead_letters")?;
        self.count = count.iter().flatten().sum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;

    use super::*;
    use crate::transform::{SqlTransform, SqlTransformSpec, describe_row};

    fn input(ids: Vec<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids))]).unwrap()
    }

    fn transform(filter: Option<&str>, column: &str) -> SqlTransform {
        let spec = SqlTransformSpec {
            filter: filter.map(str::to_string),
            columns: vec![("r".into(), column.into())],
            select: None,
        };
        SqlTransform::new(&spec, &input(vec![]).schema()).unwrap()
    }

    fn split(t: &SqlTransform, batch: &RecordBatch) -> (RecordBatch, Option<RecordBatch>) {
        let layout = DeadLetterLayout::new("keep", t.output_schema());
        let (passed, failed) = t.apply_setting_aside(batch);
        let combined = layout
            .combine(passed, &failed, batch, &|part| format!("{part:?}"))
            .unwrap();
        assert_eq!(combined.num_rows(), batch.num_rows() - skipped(t, batch));
        (
            layout.passed(&combined).unwrap(),
            layout.dead_letters(&combined).unwrap(),
        )
    }

    /// Rows the filter drops without failing.
    fn skipped(t: &SqlTransform, batch: &RecordBatch) -> usize {
        let (passed, failed) = t.apply_setting_aside(batch);
        batch.num_rows() - failed.len() - passed.iter().map(|b| b.num_rows()).sum::<usize>()
    }

    fn ids(batch: &RecordBatch) -> Vec<i64> {
        let ids = batch.column(0).as_any().downcast_ref::<Int64Array>();
        ids.unwrap().values().to_vec()
    }

    fn strings(batch: &RecordBatch, column: &str) -> Vec<String> {
        let array = batch.column_by_name(column).unwrap();
        let array = array.as_any().downcast_ref::<StringArray>().unwrap();
        array.iter().map(|v| v.unwrap().to_string()).collect()
    }

    #[test]
    fn failing_rows_are_set_aside_and_the_rest_pass() {
        let t = transform(None, "100 / (id % 7)");
        let batch = input((1..=30).collect());
        let (passed, letters) = split(&t, &batch);
        let expected: Vec<i64> = (1..=30).filter(|i| i % 7 != 0).collect();
        assert_eq!(ids(&passed), expected);
        assert_eq!(passed.schema(), t.output_schema());
        let letters = letters.expect("rows 7, 14, 21 and 28 fail");
        assert_eq!(letters.schema(), dead_letter_schema());
        assert_eq!(
            strings(&letters, "row"),
            [7, 14, 21, 28].map(|i| format!(r#"{{"id":"{i}"}}"#))
        );
        assert_eq!(strings(&letters, "transform"), vec!["keep"; 4]);
        assert_eq!(strings(&letters, "expression"), vec!["Column(0)"; 4]);
        assert!(strings(&letters, "error")[0].contains("Divide by zero"));
    }

    #[test]
    fn a_filter_can_fail_too_and_rows_it_drops_are_not_letters() {
        let t = transform(Some("100 / (id - 5) > 0"), "id * 2");
        let batch = input((1..=8).collect());
        let (passed, letters) = split(&t, &batch);
        assert_eq!(ids(&passed), vec![6, 7, 8]);
        let letters = letters.unwrap();
        assert_eq!(strings(&letters, "row"), vec![r#"{"id":"5"}"#]);
        assert_eq!(strings(&letters, "expression"), vec!["Filter"]);
    }

    #[test]
    fn a_batch_without_failures_passes_whole() {
        let t = transform(None, "id + 1");
        let batch = input((1..=1000).collect());
        let (passed, letters) = split(&t, &batch);
        assert_eq!(passed.num_rows(), 1000);
        assert!(letters.is_none());
        assert_eq!(describe_row(&passed, 0), "{id: 1, r: 2}");
    }

    fn letters(n: usize) -> RecordBatch {
        let column = |v: String| -> ArrayRef { Arc::new(StringArray::from(vec![v; n])) };
        RecordBatch::try_new(
            dead_letter_schema(),
            vec![
                column("keep".into()),
                column("columns.r = \"1 / 0\"".into()),
                column("Divide by zero error".into()),
                column(r#"{"id":"0"}"#.into()),
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_budget_fails_at_the_first_row_over_it_and_survives_a_restore() {
        let mut budget = ErrorBudget::new("job", "keep", 5, "./dead");
        let mut out = Collector::default();
        budget.process(letters(3), &mut out).unwrap();
        let state = budget.snapshot().unwrap().unwrap();
        let mut restored = ErrorBudget::new("job", "keep", 5, "./dead");
        restored.restore(state).unwrap();
        restored.process(letters(2), &mut out).unwrap();
        let error = restored
            .process(letters(1), &mut out)
            .unwrap_err()
            .to_string();
        for part in [
            "columns.r = \"1 / 0\": Divide by zero error (on the row {\"id\":\"0\"})",
            "6 rows of transforms.keep failed, more than its error budget max_bad_rows = 5",
            "raise max_bad_rows",
            "./dead",
        ] {
            assert!(error.contains(part), "'{error}' lacks '{part}'");
        }
        // A fresh budget of 5 refuses the sixth of six at once.
        let mut fresh = ErrorBudget::new("job", "keep", 5, "./dead");
        let error = fresh.process(letters(6), &mut out).unwrap_err().to_string();
        assert!(
            error.contains("6 rows of transforms.keep failed"),
            "{error}"
        );
    }
}
