//! The aggregation operator against a plain fold of its input.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Float64Array, Int64Array, PrimitiveArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema};

use super::*;
use crate::operator::{Collector, Operator};

fn batch(keys: Vec<i64>, values: Vec<Option<f64>>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(Float64Array::from(values)),
        ],
    )
    .unwrap()
}

/// (key, sum, max) per group, `None` where a group saw only nulls.
fn groups(op: &mut AggregateOperator) -> Vec<(i64, Option<f64>, Option<f64>)> {
    let out = op.output().unwrap().unwrap();
    let k = out.column(0).as_primitive::<Int64Type>();
    let sum = out.column(1).as_primitive::<Float64Type>();
    let max = out.column(2).as_primitive::<Float64Type>();
    let mut rows: Vec<_> = (0..out.num_rows())
        .map(|i| {
            let get = |a: &PrimitiveArray<Float64Type>| a.is_valid(i).then(|| a.value(i));
            (k.value(i), get(sum), get(max))
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    rows
}

#[test]
fn groups_with_only_nulls_stay_null_across_batches_with_and_without_nulls() {
    let spec = Arc::new(AggregateSpec::new().sum("v", "sum_v").max("v", "max_v"));
    let mut op = AggregateOperator::new(vec!["k".into()], spec).unwrap();
    let mut out = Collector::default();
    // Key 2 sees only a null; keys 1 and 3 see values.
    op.process(batch(vec![1, 2], vec![Some(1.0), None]), &mut out)
        .unwrap();
    // No nulls; key 3 is new, key 2 is not touched.
    op.process(batch(vec![1, 3], vec![Some(2.0), Some(5.0)]), &mut out)
        .unwrap();
    assert_eq!(
        groups(&mut op),
        vec![
            (1, Some(3.0), Some(2.0)),
            (2, None, None),
            (3, Some(5.0), Some(5.0))
        ]
    );
    // Now key 2 gets a value, in a batch without nulls.
    op.process(batch(vec![2, 4], vec![Some(-1.0), Some(0.5)]), &mut out)
        .unwrap();
    assert_eq!(groups(&mut op)[1], (2, Some(-1.0), Some(-1.0)));
    // Restored state keeps the null group null.
    let mut restored = AggregateOperator::new(
        vec!["k".into()],
        Arc::new(AggregateSpec::new().sum("v", "sum_v").max("v", "max_v")),
    )
    .unwrap();
    let mut first = AggregateOperator::new(
        vec!["k".into()],
        Arc::new(AggregateSpec::new().sum("v", "sum_v").max("v", "max_v")),
    )
    .unwrap();
    first.process(batch(vec![7], vec![None]), &mut out).unwrap();
    restored
        .restore(first.snapshot().unwrap().unwrap())
        .unwrap();
    restored
        .process(batch(vec![8], vec![Some(1.0)]), &mut out)
        .unwrap();
    assert_eq!(
        groups(&mut restored),
        vec![(7, None, None), (8, Some(1.0), Some(1.0))]
    );
}

#[test]
fn every_function_matches_a_plain_fold_across_one_pass_and_per_column_batches() {
    let spec = AggregateSpec::new()
        .count("n")
        .sum("i", "sum_i")
        .min("i", "min_i")
        .max("i", "max_i")
        .sum("f", "sum_f")
        .min("f", "min_f")
        .max("f", "max_f")
        .count_values("f", "n_f");
    let mut op = AggregateOperator::new(vec!["k".into()], Arc::new(spec)).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("i", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
    ]));
    // (key, i, f) rows; the second batch has a null, so it takes the
    // per-column loops while the others take the one-pass loop.
    let batches: Vec<Vec<(i64, i64, Option<f64>)>> = vec![
        (0..500)
            .map(|r| (r % 37, r * 7 - 1000, Some(r as f64 / 3.0)))
            .collect(),
        (0..300)
            .map(|r| (r % 53, 5 - r, (r != 10).then_some(-(r as f64))))
            .collect(),
        (0..400)
            .map(|r| (r % 41, r * r, Some(r as f64 * 1.5)))
            .collect(),
    ];
    let mut expected = std::collections::BTreeMap::new();
    let mut out = Collector::default();
    for rows in &batches {
        for &(k, i, f) in rows {
            let e = expected.entry(k).or_insert((
                0i64,
                0i64,
                i64::MAX,
                i64::MIN,
                0.0f64,
                f64::MAX,
                f64::MIN,
                0i64,
            ));
            e.0 += 1;
            e.1 += i;
            e.2 = e.2.min(i);
            e.3 = e.3.max(i);
            if let Some(f) = f {
                e.4 += f;
                e.5 = e.5.min(f);
                e.6 = e.6.max(f);
                e.7 += 1;
            }
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap();
        op.process(batch, &mut out).unwrap();
    }
    let state = op.output().unwrap().unwrap();
    let int = |c: usize, row: usize| state.column(c).as_primitive::<Int64Type>().value(row);
    let float = |c: usize, row: usize| state.column(c).as_primitive::<Float64Type>().value(row);
    assert_eq!(state.num_rows(), expected.len());
    for row in 0..state.num_rows() {
        let e = expected[&int(0, row)];
        assert_eq!(
            (
                int(1, row),
                int(2, row),
                int(3, row),
                int(4, row),
                int(8, row)
            ),
            (e.0, e.1, e.2, e.3, e.7)
        );
        assert!(
            (float(5, row) - e.4).abs() < 1e-9,
            "sum_f of key {}",
            int(0, row)
        );
        assert_eq!((float(6, row), float(7, row)), (e.5, e.6));
    }
}

#[test]
fn an_overflowing_int_sum_is_named_in_either_loop() {
    for with_null in [false, true] {
        let spec = Arc::new(AggregateSpec::new().sum("i", "total"));
        let mut op = AggregateOperator::new(vec!["k".into()], spec).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("i", DataType::Int64, true),
        ]));
        // A null sends the batch down the per-column loops.
        let values = if with_null {
            vec![Some(i64::MAX), None, Some(1)]
        } else {
            vec![Some(i64::MAX), Some(1)]
        };
        let keys = vec![1; values.len()];
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(Int64Array::from(values)),
            ],
        )
        .unwrap();
        let err = op.process(batch, &mut Collector::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("sum into 'total' overflowed Int64"),
            "with_null {with_null}: {err}"
        );
    }
}

#[test]
fn the_declared_output_schema_is_what_both_phases_emit() {
    let spec = Arc::new(
        AggregateSpec::new()
            .count("n")
            .count_values("v", "nv")
            .sum("v", "sum_v")
            .max("k", "max_k")
            .min("v", "min_v"),
    );
    let input = batch(vec![1, 2, 1], vec![Some(1.0), None, Some(3.0)]);
    let keys = vec!["k".to_string()];
    let declared = spec.output_schema(&keys, &input.schema()).unwrap();
    // One phase.
    let mut single = AggregateOperator::new(keys.clone(), spec.clone()).unwrap();
    single
        .process(input.clone(), &mut Collector::default())
        .unwrap();
    assert_eq!(single.output().unwrap().unwrap().schema(), declared);
    // Two phases: partials, then the merge.
    let mut local = AggregateOperator::new(keys.clone(), spec.clone()).unwrap();
    let partials = local.partial_rows(&input).unwrap();
    let mut merging = AggregateOperator::merging(keys.clone(), spec.clone()).unwrap();
    merging
        .process(partials, &mut Collector::default())
        .unwrap();
    assert_eq!(merging.output().unwrap().unwrap().schema(), declared);
    // A string column cannot be summed: said before any row.
    let err = AggregateSpec::new()
        .sum("s", "x")
        .output_schema(
            &keys,
            &Schema::new(vec![
                Field::new("k", DataType::Int64, false),
                Field::new("s", DataType::Utf8, false),
            ]),
        )
        .unwrap_err();
    assert!(err.to_string().contains("'s' is Utf8"), "{err}");
}

/// Rows of a state batch as text, sorted: equal states compare equal
/// whatever their row order.
fn sorted_rows(state: &RecordBatch) -> Vec<String> {
    let mut rows: Vec<String> = (0..state.num_rows())
        .map(|i| {
            state
                .columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, i).unwrap())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn a_base_and_its_deltas_add_up_to_the_full_state() {
    use crate::checkpoint::deltas::apply_deltas;
    use crate::operator::StateChanges;
    use crate::sources::generator::splitmix64;

    // Int64 keys with a null key (the dense/hashed index and its null
    // group), and the same keys as strings (the row-format index).
    for as_text in [false, true] {
        let spec = Arc::new(
            AggregateSpec::new()
                .count("n")
                .sum("v", "sum_v")
                .max("v", "max_v"),
        );
        let mut op = AggregateOperator::new(vec!["k".into()], spec).unwrap();
        assert!(op.track_changes());
        let mut out = Collector::default();
        let mut base = None;
        let mut deltas = Vec::new();
        for step in 0..40u64 {
            let rows: Vec<(Option<i64>, Option<f64>)> = (0..50)
                .map(|i| {
                    let h = splitmix64(step * 1000 + i);
                    // Keys spread more widely as steps go on: new and old ones.
                    let key = (!h.is_multiple_of(7)).then_some((h % (20 + step * 5)) as i64 - 3);
                    let value = (!h.is_multiple_of(5)).then_some((h % 100) as f64);
                    (key, value)
                })
                .collect();
            let keys: Arc<dyn Array> = if as_text {
                Arc::new(arrow::array::StringArray::from_iter(
                    rows.iter().map(|r| r.0.map(|k| format!("key-{k}"))),
                ))
            } else {
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0)))
            };
            let values = Float64Array::from_iter(rows.iter().map(|r| r.1));
            let input = RecordBatch::try_from_iter([
                ("k", keys),
                ("v", Arc::new(values) as Arc<dyn Array>),
            ])
            .unwrap();
            op.process(input, &mut out).unwrap();
            if step % 9 == 0 {
                base = op.snapshot().unwrap();
                deltas.clear();
            } else {
                match op.snapshot_changes().unwrap() {
                    StateChanges::Changed(Some(rows)) => deltas.push(rows),
                    StateChanges::Changed(None) => {}
                    StateChanges::Whole(_) => panic!("the aggregate always knows its changes"),
                }
            }
            let merged = apply_deltas(&[base.clone().unwrap()], &deltas, &["k".into()]).unwrap();
            let full = op.output().unwrap().unwrap();
            assert_eq!(sorted_rows(&merged), sorted_rows(&full), "step {step}");
        }
        // A step with no input changes nothing.
        op.snapshot().unwrap();
        match op.snapshot_changes().unwrap() {
            StateChanges::Changed(rows) => {
                assert_eq!(rows.map_or(0, |r| r.num_rows()), 0)
            }
            StateChanges::Whole(_) => panic!("whole"),
        }
    }
}
