//! The SQL transform: keep the rows a filter accepts, compute columns (added
//! or replaced, in order, each seeing the ones before it), project.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use tidewater_core::{Collector, Error, Operator};

use crate::bridge::{self, df};
use crate::compile::{Compiled, compile};
use crate::dead_letter::DeadLetterLayout;
use crate::error::SqlError;

/// What a SQL transform does, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SqlTransformSpec {
    /// Rows to keep (`id % 3 <> 0`).
    pub filter: Option<String>,
    /// `(name, expression)`: added, or replacing the column of that name.
    pub columns: Vec<(String, String)>,
    /// The output's columns, in order (default: all).
    pub select: Option<Vec<String>>,
}

/// Which part of the spec a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `filter`.
    Filter,
    /// The i-th entry of `columns`.
    Column(usize),
    /// The i-th entry of `select`.
    Select(usize),
}

/// A computed column: where it goes and how it is computed.
#[derive(Debug, Clone)]
struct Step {
    expr: Compiled,
    /// Replaces this column; `None` appends.
    replaces: Option<usize>,
    /// The engine's type of the result.
    data_type: arrow::datatypes::DataType,
    /// The schemas after this step (engine and DataFusion).
    schema: SchemaRef,
    df_schema: df::SchemaRef,
}

/// A [`SqlTransformSpec`] planned against an input schema.
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Float64Array, Int64Array, RecordBatch};
/// use arrow::datatypes::{DataType, Field, Schema};
/// use tidewater_sql::{SqlTransform, SqlTransformSpec};
///
/// let schema = Arc::new(Schema::new(vec![
///     Field::new("id", DataType::Int64, false),
///     Field::new("v", DataType::Float64, false),
/// ]));
/// let spec = SqlTransformSpec {
///     filter: Some("id % 3 <> 0".into()),
///     columns: vec![("w".into(), "v * 2".into())],
///     select: Some(vec!["id".into(), "w".into()]),
/// };
/// let transform = SqlTransform::new(&spec, &schema).unwrap();
/// let batch = RecordBatch::try_new(schema, vec![
///     Arc::new(Int64Array::from(vec![1, 3, 4])),
///     Arc::new(Float64Array::from(vec![0.5, 1.0, 2.0])),
/// ]).unwrap();
/// let out = transform.apply(&batch).unwrap();
/// assert_eq!(out.num_rows(), 2);
/// assert_eq!(out.schema().field(1).name(), "w");
/// ```
#[derive(Debug, Clone)]
pub struct SqlTransform {
    input_df: df::SchemaRef,
    filter: Option<Compiled>,
    steps: Vec<Step>,
    select: Option<Vec<usize>>,
    output: SchemaRef,
}

impl SqlTransform {
    /// Plans every part; all problems are returned, each with its part.
    pub fn new(spec: &SqlTransformSpec, input: &Schema) -> Result<Self, Vec<(Part, SqlError)>> {
        let mut problems = Vec::new();
        let input_df: df::SchemaRef = match bridge::schema_to_df(input) {
            Ok(s) => Arc::new(s),
            Err(e) => return Err(vec![(Part::Filter, e.into())]),
        };
        let filter = spec
            .filter
            .as_ref()
            .and_then(|text| match compile(text, &input_df) {
                Ok(c) if c.data_type == df::DataType::Boolean => Some(c),
                Ok(c) => {
                    problems.push((Part::Filter, SqlError::NotBoolean(c.data_type.to_string())));
                    None
                }
                Err(e) => {
                    problems.push((Part::Filter, e));
                    None
                }
            });
        let mut schema: SchemaRef = Arc::new(input.clone());
        let mut df_schema = Arc::clone(&input_df);
        let mut steps = Vec::new();
        for (i, (name, text)) in spec.columns.iter().enumerate() {
            let compiled = match compile(text, &df_schema) {
                Ok(c) => c,
                Err(e) => {
                    problems.push((Part::Column(i), e));
                    continue;
                }
            };
            let data_type = match bridge::data_type_from_df(&compiled.data_type) {
                Ok(t) => plain(t),
                Err(e) => {
                    problems.push((Part::Column(i), e.into()));
                    continue;
                }
            };
            let field = Field::new(name, data_type.clone(), compiled.nullable);
            let replaces = schema.index_of(name).ok();
            let mut fields: Vec<Field> =
                schema.fields().iter().map(|f| f.as_ref().clone()).collect();
            match replaces {
                Some(at) => fields[at] = field,
                None => fields.push(field),
            }
            schema = Arc::new(Schema::new(fields));
            df_schema = match bridge::schema_to_df(&schema) {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    problems.push((Part::Column(i), e.into()));
                    continue;
                }
            };
            steps.push(Step {
                expr: compiled,
                replaces,
                data_type,
                schema: Arc::clone(&schema),
                df_schema: Arc::clone(&df_schema),
            });
        }
        let select = spec.select.as_ref().map(|names| {
            names
                .iter()
                .enumerate()
                .filter_map(|(i, name)| match schema.index_of(name) {
                    Ok(at) => Some(at),
                    Err(_) => {
                        problems.push((
                            Part::Select(i),
                            SqlError::UnknownSelected {
                                column: name.clone(),
                                columns: tidewater_core::field_list(&schema),
                            },
                        ));
                        None
                    }
                })
                .collect::<Vec<_>>()
        });
        if !problems.is_empty() {
            return Err(problems);
        }
        let output = match &select {
            Some(indices) => Arc::new(schema.project(indices).expect("indices were found above")),
            None => schema,
        };
        Ok(SqlTransform {
            input_df,
            filter,
            steps,
            select,
            output,
        })
    }

    /// The schema of what [`apply`](Self::apply) returns.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// Runs the transform on one batch. A row an expression fails on
    /// (division by zero, a failed cast) is named in the error.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, (Part, SqlError)> {
        self.apply_naming(batch, true)
    }

    /// Runs the transform on one batch, setting aside the rows an
    /// expression fails on instead of failing: the output of the rows that
    /// pass, and each failed row with its part and error. A batch that
    /// fails is halved until the failing rows stand alone, so `k` failed
    /// rows in `n` cost about `2k·log2(n)` extra evaluations; batches
    /// without a failure cost nothing more.
    pub fn apply_setting_aside(&self, batch: &RecordBatch) -> (Vec<RecordBatch>, Vec<FailedRow>) {
        let mut passed = Vec::new();
        let mut failed = Vec::new();
        self.bisect(batch, 0, &mut passed, &mut failed);
        (passed, failed)
    }

    fn bisect(
        &self,
        batch: &RecordBatch,
        offset: usize,
        passed: &mut Vec<RecordBatch>,
        failed: &mut Vec<FailedRow>,
    ) {
        match self.apply_naming(batch, false) {
            Ok(out) => passed.push(out),
            Err((part, error)) if batch.num_rows() == 1 => failed.push(FailedRow {
                row: offset,
                part,
                error,
            }),
            Err(_) => {
                let half = batch.num_rows() / 2;
                let rest = batch.num_rows() - half;
                self.bisect(&batch.slice(0, half), offset, passed, failed);
                self.bisect(&batch.slice(half, rest), offset + half, passed, failed);
            }
        }
    }

    /// [`apply`](Self::apply); with `name_rows` false a failure does not
    /// look for the row it failed on.
    fn apply_naming(
        &self,
        batch: &RecordBatch,
        name_rows: bool,
    ) -> Result<RecordBatch, (Part, SqlError)> {
        let mut batch = match &self.filter {
            Some(filter) => {
                let mask = self
                    .evaluate(filter, batch, &self.input_df, name_rows)
                    .map_err(|e| (Part::Filter, e))?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| {
                        (
                            Part::Filter,
                            SqlError::Internal("a filter gave no booleans".into()),
                        )
                    })?;
                if mask.true_count() == batch.num_rows() {
                    batch.clone()
                } else {
                    filter_record_batch(batch, mask)
                        .map_err(|e| (Part::Filter, SqlError::Internal(e.to_string())))?
                }
            }
            None => batch.clone(),
        };
        let mut df_schema = &self.input_df;
        for (i, step) in self.steps.iter().enumerate() {
            let column = self
                .evaluate(&step.expr, &batch, df_schema, name_rows)
                .map_err(|e| (Part::Column(i), e))?;
            let column = if column.data_type() == &step.data_type {
                column
            } else {
                arrow::compute::cast(&column, &step.data_type)
                    .map_err(|e| (Part::Column(i), SqlError::Internal(e.to_string())))?
            };
            let mut columns = batch.columns().to_vec();
            match step.replaces {
                Some(at) => columns[at] = column,
                None => columns.push(column),
            }
            batch = RecordBatch::try_new(Arc::clone(&step.schema), columns)
                .map_err(|e| (Part::Column(i), SqlError::Internal(e.to_string())))?;
            df_schema = &step.df_schema;
        }
        match &self.select {
            Some(indices) => batch
                .project(indices)
                .map_err(|e| (Part::Select(0), SqlError::Internal(e.to_string()))),
            None => Ok(batch),
        }
    }

    /// Evaluates `expr` on `batch` (whose schema is `df_schema` in
    /// DataFusion's arrow) into an engine array; on failure, with
    /// `name_rows`, finds the row to name.
    fn evaluate(
        &self,
        expr: &Compiled,
        batch: &RecordBatch,
        df_schema: &df::SchemaRef,
        name_rows: bool,
    ) -> Result<ArrayRef, SqlError> {
        let crossed = bridge::batch_to_df(batch, df_schema)?;
        match expr
            .physical
            .evaluate(&crossed)
            .and_then(|v| v.into_array(crossed.num_rows()))
        {
            Ok(array) => {
                let data_type = bridge::data_type_from_df(array.data_type())?;
                Ok(bridge::array_from_df(array.as_ref(), &data_type)?)
            }
            Err(e) if name_rows => Err(self.failing_row(expr, batch, &crossed, e)),
            Err(e) => Err(SqlError::Row {
                message: crate::compile::clean(&e.find_root().to_string()),
                row: if batch.num_rows() == 1 {
                    describe_row(batch, 0)
                } else {
                    "(not looked for)".to_string()
                },
            }),
        }
    }

    /// The batch failed as a whole: find the first row that fails alone, to
    /// name it. Only failing batches pay for this.
    fn failing_row(
        &self,
        expr: &Compiled,
        batch: &RecordBatch,
        crossed: &df::RecordBatch,
        error: datafusion_common::DataFusionError,
    ) -> SqlError {
        let message = crate::compile::clean(&error.find_root().to_string());
        for i in 0..crossed.num_rows() {
            let row = crossed.slice(i, 1);
            if expr
                .physical
                .evaluate(&row)
                .and_then(|v| v.into_array(1))
                .is_err()
            {
                return SqlError::Row {
                    message,
                    row: describe_row(batch, i),
                };
            }
        }
        SqlError::Row {
            message,
            row: "(no single row fails alone)".to_string(),
        }
    }
}

/// A row [`SqlTransform::apply_setting_aside`] set aside.
#[derive(Debug, Clone)]
pub struct FailedRow {
    /// Its index in the input batch.
    pub row: usize,
    /// The part that failed on it.
    pub part: Part,
    /// What the evaluation said.
    pub error: SqlError,
}

/// The type a computed column gets: DataFusion's string and binary views
/// become plain strings and binaries, which every connector writes.
fn plain(data_type: arrow::datatypes::DataType) -> arrow::datatypes::DataType {
    use arrow::datatypes::DataType;
    match data_type {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        other => other,
    }
}

/// `{id: 3, v: 1.5}`: a row for messages.
pub fn describe_row(batch: &RecordBatch, row: usize) -> String {
    let options = FormatOptions::default().with_null("null");
    let fields: Vec<String> = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| {
            let value = ArrayFormatter::try_new(column.as_ref(), &options)
                .map(|f| f.value(row).to_string())
                .unwrap_or_else(|_| "?".to_string());
            format!("{}: {value}", field.name())
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// The transform as a pipeline operator. A row an expression fails on
/// fails the job, naming the transform, the expression's place and the
/// row; or, made with [`setting_aside`](Self::setting_aside), becomes a dead
/// letter in the combined output.
pub struct SqlOperator {
    transform: Arc<SqlTransform>,
    describe: Arc<dyn Fn(Part) -> String + Send + Sync>,
    set_aside: Option<Arc<DeadLetterLayout>>,
}

impl SqlOperator {
    /// Runs `transform`; `describe` names a part in messages (e.g.
    /// `transforms.keep.columns.w = "v / 0"`).
    pub fn new(
        transform: Arc<SqlTransform>,
        describe: Arc<dyn Fn(Part) -> String + Send + Sync>,
    ) -> Self {
        SqlOperator {
            transform,
            describe,
            set_aside: None,
        }
    }

    /// Runs `transform`, emitting `layout`'s combined batches: the rows
    /// that passed and the dead letters of those that failed.
    pub fn setting_aside(
        transform: Arc<SqlTransform>,
        describe: Arc<dyn Fn(Part) -> String + Send + Sync>,
        layout: Arc<DeadLetterLayout>,
    ) -> Self {
        SqlOperator {
            transform,
            describe,
            set_aside: Some(layout),
        }
    }
}

impl Operator for SqlOperator {
    fn kind(&self) -> &str {
        "sql"
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> tidewater_core::Result<()> {
        if let Some(layout) = &self.set_aside {
            let (passed, failed) = self.transform.apply_setting_aside(&batch);
            out.emit(layout.combine(passed, &failed, &batch, self.describe.as_ref())?);
            return Ok(());
        }
        match self.transform.apply(&batch) {
            Ok(batch) => {
                out.emit(batch);
                Ok(())
            }
            Err((part, e)) => Err(Error::BadInput(format!("{}: {e}", (self.describe)(part)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array, StringArray};
    use arrow::datatypes::DataType;

    use super::*;

    fn input() -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(Float64Array::from(vec![
                    Some(1.0),
                    None,
                    Some(3.0),
                    Some(4.0),
                ])),
                Arc::new(StringArray::from(vec!["1", "2", "x", "4"])),
            ],
        )
        .unwrap();
        (schema, batch)
    }

    fn column(text: &str) -> SqlTransformSpec {
        SqlTransformSpec {
            columns: vec![("c".into(), text.into())],
            ..SqlTransformSpec::default()
        }
    }

    fn planning_error(spec: SqlTransformSpec) -> String {
        let (schema, _) = input();
        let problems = SqlTransform::new(&spec, &schema).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        problems[0].1.to_string()
    }

    #[test]
    fn planning_errors_name_what_is_wrong() {
        let cases = [
            (column("v + 'x'"), "Cannot coerce"),
            (
                column("nope + 1"),
                "there is no column 'nope'; the input's columns are id: Int64",
            ),
            (column("frob(v)"), "Invalid function 'frob'"),
            (column("id > 1 garbage"), "this is not a SQL expression"),
            (column("id % "), "this is not a SQL expression"),
            (
                SqlTransformSpec {
                    filter: Some("v * 2".into()),
                    ..SqlTransformSpec::default()
                },
                "a filter must be true or false for each row, but this is Float64",
            ),
            (
                SqlTransformSpec {
                    select: Some(vec!["id".into(), "w".into()]),
                    ..SqlTransformSpec::default()
                },
                "`select` names 'w', which is not a column here",
            ),
        ];
        for (spec, expected) in cases {
            let message = planning_error(spec.clone());
            assert!(
                message.contains(expected),
                "{spec:?}: '{message}' lacks '{expected}'"
            );
        }
    }

    #[test]
    fn columns_are_added_or_replaced_in_order_and_see_earlier_ones() {
        let (schema, batch) = input();
        let spec = SqlTransformSpec {
            filter: Some("id <> 2".into()),
            columns: vec![
                ("w".into(), "v * 2".into()),
                ("v".into(), "w + 1".into()),
                ("u".into(), "upper(s) || '!'".into()),
            ],
            select: Some(vec!["u".into(), "v".into(), "id".into()]),
        };
        let t = SqlTransform::new(&spec, &schema).unwrap();
        let out = t.apply(&batch).unwrap();
        assert_eq!(out.schema(), t.output_schema());
        assert_eq!(describe_row(&out, 0), "{u: 1!, v: 3.0, id: 1}");
        // Strings come out as Utf8, whatever DataFusion computes them in.
        assert_eq!(out.schema().field(0).data_type(), &DataType::Utf8);
        // Strings come out as Utf8, whatever DataFusion computes them in.
        assert_eq!(out.schema().field(0).data_type(), &DataType::Utf8);
        assert_eq!(describe_row(&out, 1), "{u: X!, v: 7.0, id: 3}");
        assert_eq!(out.num_rows(), 3);
    }

    #[test]
    fn a_row_that_fails_is_named() {
        let (schema, batch) = input();
        let t = SqlTransform::new(&column("id / (id - 3)"), &schema).unwrap();
        let (part, e) = t.apply(&batch).unwrap_err();
        assert_eq!(part, Part::Column(0));
        let text = e.to_string();
        assert!(text.contains("Divide by zero"), "{text}");
        assert!(text.contains("{id: 3, v: 3.0, s: x}"), "{text}");
        let t = SqlTransform::new(&column("cast(s as bigint)"), &schema).unwrap();
        let text = t.apply(&batch).unwrap_err().1.to_string();
        assert!(text.contains("s: x}"), "{text}");
    }
}

#[cfg(test)]
mod supported {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::DataType;

    use super::*;

    /// What docs/cli.md says expressions can use, planned and run.
    #[test]
    fn the_documented_syntax_plans_and_runs() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("2026-12-01"), None])),
            ],
        )
        .unwrap();
        for text in [
            "id BETWEEN 1 AND 3 AND id IN (1, 2) AND NOT id IS NULL",
            "s LIKE '2026%' OR s ILIKE 'x%'",
            "s || '!'",
            "CASE WHEN id = 1 THEN 'one' ELSE 'many' END",
            "CAST(id AS DOUBLE) / 3",
            "id::varchar",
            "try_cast(s AS bigint)",
            "upper(trim(s))",
            "substr(s, 1, 4)",
            "split_part(s, '-', 2)",
            "regexp_replace(s, '[0-9]', 'x', 'g')",
            "regexp_like(s, '^2026')",
            "abs(id - 5) + round(1.5) + floor(2.5) + sqrt(4.0) + power(2, 3)",
            "date_trunc('month', to_timestamp(s))",
            "date_part('year', to_timestamp(s))",
            "coalesce(s, 'none')",
            "nullif(id, 1)",
            "greatest(id, 2) + least(id, 0)",
            "starts_with(s, '2026')",
            "length(s) + character_length(s)",
            "concat(s, '-', id)",
            "replace(s, '-', '/')",
        ] {
            let spec = SqlTransformSpec {
                columns: vec![("c".into(), text.into())],
                ..SqlTransformSpec::default()
            };
            let t = SqlTransform::new(&spec, &schema).unwrap_or_else(|e| panic!("{text}: {e:?}"));
            let out = t.apply(&batch).unwrap_or_else(|e| panic!("{text}: {e:?}"));
            assert_eq!(out.num_rows(), 2, "{text}");
        }
    }
}
