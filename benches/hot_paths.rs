//! Micro-benchmarks of the runtime's hot paths (run: `cargo bench --bench hot_paths`).
//!
//! - the keyed aggregation kernel (count, sum, max per key), 100k and 1M keys
//! - hash partitioning of a batch over 2 subtasks
//! - one hop of a batch through a bounded tokio channel
//! - snapshot of a 1M-key aggregate state (copy + Arrow IPC encode)
//! - restore of that state (checksum, decode, rebuild the hash map)
//! - restore of the same state from a base and 99 deltas (checksum and
//!   decode each, apply the deltas by key, rebuild): the longest chain the
//!   default policy writes, with deltas as large as it lets them grow
//!   (10,000 keys each) and small ones (1,000); and from 19 deltas of
//!   50,000, the longest chain of the earlier default (a base every 20)
//! - a delta of a 10M-key state where 100k keys changed (gather their rows)

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tidewater::checkpoint::blob;
use tidewater::checkpoint::deltas::apply_deltas;
use tidewater::checkpoint::incremental::DEFAULT_FULL_EVERY;
use tidewater::partition::{DEFAULT_KEY_GROUPS, KeyGroups, partition_batch};
use tidewater::transforms::aggregate::AggregateOperator;
use tidewater::{AggregateSpec, Collector, GeneratorSource, Operator};

// The allocator the binaries use: large restores fault fresh pages in very
// differently under the system allocator, and that is not what users run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: u64 = 8192;

fn batches(rows: u64, keys: u64) -> Vec<RecordBatch> {
    let source = GeneratorSource::new(rows, keys);
    (0..rows)
        .step_by(BATCH as usize)
        .map(|start| {
            source
                .batch(start, (start + BATCH).min(rows))
                .expect("batch")
        })
        .collect()
}

fn aggregate() -> AggregateOperator {
    let spec = AggregateSpec::new()
        .count("count")
        .sum("v", "sum_v")
        .max("id", "max_id");
    AggregateOperator::new(vec!["k".into()], Arc::new(spec)).expect("aggregate")
}

/// An aggregate that has seen every one of `keys` keys.
fn filled(keys: u64) -> AggregateOperator {
    let mut op = aggregate();
    let mut out = Collector::default();
    for batch in batches(keys * 3, keys) {
        op.process(batch, &mut out).expect("process");
    }
    op
}

fn kernels(c: &mut Criterion) {
    let input = batches(1 << 20, 1_000_000);
    let rows: u64 = input.iter().map(|b| b.num_rows() as u64).sum();

    let mut group = c.benchmark_group("aggregate");
    group.throughput(Throughput::Elements(rows));
    for keys in [100_000u64, 1_000_000] {
        let input = batches(1 << 20, keys);
        // A warm state: the table already holds the keys, as in a long backfill.
        let mut op = filled(keys);
        group.bench_function(format!("{keys}_keys"), |b| {
            b.iter(|| {
                let mut out = Collector::default();
                for batch in &input {
                    op.process(batch.clone(), &mut out).expect("process");
                }
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("partition");
    group.throughput(Throughput::Elements(rows));
    group.bench_function("hash_k_over_2", |b| {
        let mut scratch = Vec::new();
        let groups = KeyGroups::new(DEFAULT_KEY_GROUPS, 2).expect("key groups");
        b.iter(|| {
            for batch in &input {
                black_box(partition_batch(batch, &[1], &groups, &mut scratch).expect("partition"));
            }
        })
    });
    group.finish();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("channel");
    group.throughput(Throughput::Elements(input.len() as u64));
    group.bench_function("hop_capacity_4", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<RecordBatch>(4);
                let consumer = tokio::spawn(async move {
                    let mut n = 0usize;
                    while let Some(batch) = rx.recv().await {
                        n += batch.num_rows();
                    }
                    n
                });
                for batch in &input {
                    tx.send(batch.clone()).await.expect("send");
                }
                drop(tx);
                black_box(consumer.await.expect("consumer"));
            })
        })
    });
    group.finish();
}

fn snapshots(c: &mut Criterion) {
    let mut op = filled(1_000_000);
    let state = op.snapshot().expect("snapshot").expect("state");
    let bytes = blob::encode(&state).expect("encode");
    let crc = blob::checksum(&bytes);

    let mut group = c.benchmark_group("state_1m_keys");
    group.sample_size(20);
    group.bench_function("snapshot_copy", |b| {
        b.iter(|| black_box(op.snapshot().expect("snapshot")))
    });
    group.bench_function("encode_ipc", |b| {
        b.iter(|| black_box(blob::encode(&state).expect("encode")))
    });
    group.bench_function("restore", |b| {
        b.iter_batched(
            aggregate,
            |mut fresh| {
                let decoded = blob::decode_verified(bytes.clone(), crc, "bench").expect("decode");
                fresh.restore(decoded).expect("restore");
                fresh
            },
            BatchSize::LargeInput,
        )
    });
    let longest = DEFAULT_FULL_EVERY as usize - 1;
    // Deltas together just under the base: the most a chain holds before it starts over.
    let largest = state.num_rows() as u64 / u64::from(DEFAULT_FULL_EVERY);
    for (deltas, rows_each) in [(longest, largest), (longest, 1_000), (19, 50_000)] {
        let chain = chain_of(&state, deltas, rows_each);
        group.bench_function(
            format!("restore_base_and_{deltas}_deltas_of_{rows_each}"),
            |b| {
                b.iter_batched(
                    aggregate,
                    |mut fresh| {
                        let base = blob::decode_slices(chain[0].0.clone(), chain[0].1, "bench")
                            .expect("decode");
                        let deltas = chain[1..]
                            .iter()
                            .map(|(bytes, crc)| blob::decode_verified(bytes.clone(), *crc, "bench"))
                            .collect::<tidewater::Result<Vec<_>>>()
                            .expect("decode");
                        let state = apply_deltas(&base, &deltas, &["k".into()]).expect("apply");
                        fresh.restore(state).expect("restore");
                        fresh
                    },
                    BatchSize::LargeInput,
                )
            },
        );
    }
    group.finish();
}

/// A delta of a 10M-key aggregate: the rows of the ~100k keys a batch of
/// 100k random rows changed (gathered from a table far larger than the
/// cache), the work an incremental checkpoint does on the task when 1% of
/// a large state changes between checkpoints.
fn deltas(c: &mut Criterion) {
    let mut op = filled(10_000_000);
    assert!(op.track_changes(), "the aggregate tracks its changes");
    op.snapshot().expect("base");
    let changes = batches(100_000, 10_000_000);
    let mut group = c.benchmark_group("state_10m_keys");
    group.sample_size(20);
    group.bench_function("delta_of_100k_changed", |b| {
        b.iter_custom(|iterations| {
            let mut spent = std::time::Duration::ZERO;
            for _ in 0..iterations {
                let mut out = Collector::default();
                for batch in &changes {
                    op.process(batch.clone(), &mut out).expect("process");
                }
                let started = std::time::Instant::now();
                black_box(op.snapshot_changes().expect("delta"));
                spent += started.elapsed();
            }
            spent
        })
    });
    group.finish();
}

/// `state` encoded as the base of a chain, then `deltas` deltas of
/// `rows_each` of its keys each, drawn at random (keys repeat across
/// deltas, as keys updated again do): what a restore reads.
fn chain_of(state: &RecordBatch, deltas: usize, rows_each: u64) -> Vec<(Bytes, u32)> {
    let encoded = |batch: &RecordBatch| {
        let bytes = blob::encode(batch).expect("encode");
        let crc = blob::checksum(&bytes);
        (bytes, crc)
    };
    let rows = state.num_rows() as u64;
    let mut chain = vec![encoded(state)];
    for d in 0..deltas as u64 {
        let indices: UInt32Array = (0..rows_each)
            .map(|i| (tidewater::splitmix64(d * rows_each + i) % rows) as u32)
            .collect::<std::collections::BTreeSet<u32>>()
            .into_iter()
            .collect();
        chain.push(encoded(&take_record_batch(state, &indices).expect("take")));
    }
    chain
}

criterion_group!(benches, kernels, snapshots, deltas);
criterion_main!(benches);
