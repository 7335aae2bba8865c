//! The "limit" reference for benchmarks: the backfill's work written by hand,
//! fused into one loop per thread, with no graph, no channels and no
//! checkpoints. The framework's throughput is reported as a ratio of this.
//!
//! Threads take the generator's splits as the framework does (split j on
//! thread j % p). Copy mode filters, adds `w` and writes Parquet with the
//! sink's settings; aggregate mode aggregates per thread (into a `Vec`
//! indexed by key when keys are small, else a hash map) with row-wise
//! accumulators, merges the partials, and writes one file.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use arrow::array::{AsArray, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema};
use hashbrown::hash_map::Entry;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tidewater_core::GeneratorSource;

const BATCH_ROWS: u64 = 8192;

fn writer(path: &Path, schema: Arc<Schema>) -> anyhow::Result<ArrowWriter<File>> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .set_max_row_group_row_count(Some(128 * 1024))
        .build();
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(ArrowWriter::try_new(file, schema, Some(props))?)
}

/// The ranges of thread `t` of `p`: the generator's own splits, assigned as
/// the framework assigns them (split j to subtask j % p).
fn ranges(source: &GeneratorSource, t: usize, p: usize) -> Vec<(u64, u64)> {
    source
        .split_ranges()
        .into_iter()
        .enumerate()
        .filter(|(j, _)| j % p == t)
        .map(|(_, range)| range)
        .collect()
}

/// The filter and the new column of copy mode.
type Transform = dyn Fn(&RecordBatch) -> tidewater_core::Result<RecordBatch> + Sync;

/// Copy mode, by hand. Returns rows read.
pub fn copy(
    rows: u64,
    keys: u64,
    p: usize,
    out: &Path,
    schema: Arc<Schema>,
    transform: &Transform,
) -> anyhow::Result<u64> {
    std::fs::create_dir_all(out)?;
    let source = GeneratorSource::new(rows, keys);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p)
            .map(|t| {
                let (source, schema, transform) = (&source, schema.clone(), &transform);
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut w = writer(&out.join(format!("part-fused-{t:04}.parquet")), schema)?;
                    for (start, end) in ranges(source, t, p) {
                        let mut at = start;
                        while at < end {
                            let next = (at + BATCH_ROWS).min(end);
                            w.write(&transform(&source.batch(at, next)?)?)?;
                            at = next;
                        }
                    }
                    w.close()?;
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("fused thread panicked"))
    })?;
    Ok(rows)
}

/// One group's count, sum of v and max of id.
type Acc = (i64, f64, i64);
const EMPTY: Acc = (0, 0.0, i64::MIN);

/// Up to this many keys a hand-written loop that knows its keys are small
/// non-negative integers indexes a `Vec` by key instead of hashing (the
/// framework's aggregate does the same with its direct key table).
const DENSE_KEYS: u64 = 4 << 20;

fn add(acc: &mut Acc, id: i64, v: f64) {
    acc.0 += 1;
    acc.1 += v;
    acc.2 = acc.2.max(id);
}

fn merge(into: &mut Acc, from: Acc) {
    into.0 += from.0;
    into.1 += from.1;
    into.2 = into.2.max(from.2);
}

/// Feeds thread `t`'s rows, batch by batch, as (id, k, v) slices to `f`.
fn scan(
    source: &GeneratorSource,
    t: usize,
    p: usize,
    mut f: impl FnMut(&[i64], &[i64], &[f64]),
) -> anyhow::Result<()> {
    for (start, end) in ranges(source, t, p) {
        let mut at = start;
        while at < end {
            let next = (at + BATCH_ROWS).min(end);
            let batch = source.batch(at, next)?;
            f(
                batch.column(0).as_primitive::<Int64Type>().values(),
                batch.column(1).as_primitive::<Int64Type>().values(),
                batch.column(2).as_primitive::<Float64Type>().values(),
            );
            at = next;
        }
    }
    Ok(())
}

type Groups = hashbrown::HashMap<i64, Acc, foldhash::fast::RandomState>;

/// One thread's groups.
enum Partial {
    /// Indexed by key; a count of 0 is a key not seen.
    Dense(Vec<Acc>),
    Hashed(Groups),
}

/// The threads' groups combined (all partials are of one kind).
fn merge_partials(partials: Vec<Partial>) -> Partial {
    let mut partials = partials.into_iter();
    let first = partials
        .next()
        .unwrap_or(Partial::Hashed(Groups::default()));
    partials.fold(first, |into, from| match (into, from) {
        (Partial::Dense(mut into), Partial::Dense(from)) => {
            for (into, from) in into.iter_mut().zip(from) {
                merge(into, from);
            }
            Partial::Dense(into)
        }
        (Partial::Hashed(mut into), Partial::Hashed(from)) => {
            for (k, acc) in from {
                match into.entry(k) {
                    Entry::Vacant(e) => {
                        e.insert(acc);
                    }
                    Entry::Occupied(mut e) => merge(e.get_mut(), acc),
                }
            }
            Partial::Hashed(into)
        }
        _ => unreachable!("every thread picks the same kind of table"),
    })
}

/// Aggregate mode, by hand. Returns rows read.
pub fn aggregate(rows: u64, keys: u64, p: usize, out: &Path) -> anyhow::Result<u64> {
    std::fs::create_dir_all(out)?;
    let source = GeneratorSource::new(rows, keys);
    let dense = keys <= DENSE_KEYS;
    let partials: Vec<Partial> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p)
            .map(|t| {
                let source = &source;
                scope.spawn(move || -> anyhow::Result<Partial> {
                    if dense {
                        let mut table = vec![EMPTY; keys as usize];
                        scan(source, t, p, |id, k, v| {
                            for i in 0..k.len() {
                                add(&mut table[k[i] as usize], id[i], v[i]);
                            }
                        })?;
                        return Ok(Partial::Dense(table));
                    }
                    let mut groups = Groups::default();
                    scan(source, t, p, |id, k, v| {
                        for i in 0..k.len() {
                            add(groups.entry(k[i]).or_insert(EMPTY), id[i], v[i]);
                        }
                    })?;
                    Ok(Partial::Hashed(groups))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("fused thread panicked"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let merged: Vec<(i64, Acc)> = match merge_partials(partials) {
        Partial::Dense(table) => (0..).zip(table).filter(|(_, acc)| acc.0 > 0).collect(),
        Partial::Hashed(groups) => groups.into_iter().collect(),
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("count", DataType::Int64, false),
        Field::new("sum_v", DataType::Float64, true),
        Field::new("max_id", DataType::Int64, true),
    ]));
    let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (k, (count, sum, max)) in merged {
        columns.0.push(k);
        columns.1.push(count);
        columns.2.push(sum);
        columns.3.push(max);
    }
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(columns.0)),
            Arc::new(Int64Array::from(columns.1)),
            Arc::new(Float64Array::from(columns.2)),
            Arc::new(Int64Array::from(columns.3)),
        ],
    )?;
    let mut w = writer(&out.join("part-fused-0000.parquet"), schema)?;
    w.write(&batch)?;
    w.close()?;
    Ok(rows)
}
