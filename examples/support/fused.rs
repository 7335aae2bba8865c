//! The "limit" reference for benchmarks: the backfill's work written by hand,
//! fused into one loop per thread, with no graph, no channels and no
//! checkpoints. The framework's throughput is reported as a ratio of this.
//!
//! Threads take the generator's splits as the framework does (split j on
//! thread j % p). Copy mode filters, adds `w` and writes Parquet with the
//! sink's settings; aggregate mode aggregates per thread into a hash map with
//! row-wise accumulators, merges the maps, and writes one file.

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
use tidewater::GeneratorSource;

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
type Transform = dyn Fn(&RecordBatch) -> tidewater::Result<RecordBatch> + Sync;

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

/// Aggregate mode, by hand. Returns rows read.
pub fn aggregate(rows: u64, keys: u64, p: usize, out: &Path) -> anyhow::Result<u64> {
    type Groups = hashbrown::HashMap<i64, (i64, f64, i64), foldhash::fast::RandomState>;
    std::fs::create_dir_all(out)?;
    let source = GeneratorSource::new(rows, keys);
    let partials: Vec<Groups> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p)
            .map(|t| {
                let source = &source;
                scope.spawn(move || -> anyhow::Result<Groups> {
                    let mut groups = Groups::default();
                    for (start, end) in ranges(source, t, p) {
                        let mut at = start;
                        while at < end {
                            let next = (at + BATCH_ROWS).min(end);
                            let batch = source.batch(at, next)?;
                            let id = batch.column(0).as_primitive::<Int64Type>().values();
                            let k = batch.column(1).as_primitive::<Int64Type>().values();
                            let v = batch.column(2).as_primitive::<Float64Type>().values();
                            for i in 0..batch.num_rows() {
                                let acc = groups.entry(k[i]).or_insert((0, 0.0, i64::MIN));
                                acc.0 += 1;
                                acc.1 += v[i];
                                acc.2 = acc.2.max(id[i]);
                            }
                            at = next;
                        }
                    }
                    Ok(groups)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("fused thread panicked"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut merged = Groups::default();
    for partial in partials {
        for (k, (count, sum, max)) in partial {
            match merged.entry(k) {
                Entry::Vacant(e) => {
                    e.insert((count, sum, max));
                }
                Entry::Occupied(mut e) => {
                    let acc = e.get_mut();
                    acc.0 += count;
                    acc.1 += sum;
                    acc.2 = acc.2.max(max);
                }
            }
        }
    }
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
