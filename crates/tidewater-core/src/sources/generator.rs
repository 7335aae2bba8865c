//! A deterministic generator source, so any output can be checked independently.
//!
//! Row `i`, for `0 <= i < rows`:
//! - `id = i` (Int64)
//! - `k = splitmix64(i) % keys` (Int64)
//! - `v = (i % 1000) as f64 / 4.0` (Float64; values and their sums stay exact)
//! - `s = format!("{:016x}", splitmix64(i))` (Utf8)

use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use serde_json::json;

use crate::error::{Error, Result};
use crate::source::{Cursor, Source, Split, SplitReader};

/// Vigna's splitmix64 finalizer with wrapping arithmetic.
pub fn splitmix64(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Generates `rows` rows of (id, k, v, s) by the spec in this module's docs.
///
/// # Examples
///
/// ```
/// use tidewater_core::GeneratorSource;
/// let source = GeneratorSource::new(1_000_000, 100_000).with_splits(8);
/// assert_eq!(source.rows(), 1_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct GeneratorSource {
    rows: u64,
    keys: u64,
    splits: u64,
    batch_rows: usize,
    schema: SchemaRef,
    /// Settings that cannot mean anything, refused by `validate`.
    refused: Vec<String>,
}

impl GeneratorSource {
    /// `rows` rows with keys in `0..keys`; `keys` must be at least 1 (a
    /// pipeline with `keys` of 0 is refused when built).
    pub fn new(rows: u64, keys: u64) -> Self {
        GeneratorSource {
            refused: (keys == 0)
                .then(|| {
                    "keys is 0, but k = splitmix64(id) % keys needs at least one key: pass \
                     --keys 1 or more"
                        .to_string()
                })
                .into_iter()
                .collect(),
            rows,
            keys: keys.max(1),
            splits: 32,
            batch_rows: 8192,
            schema: Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("k", DataType::Int64, false),
                Field::new("v", DataType::Float64, false),
                Field::new("s", DataType::Utf8, false),
            ])),
        }
    }

    /// Divides the rows into `splits` ranges (default 32, at least 1).
    pub fn with_splits(mut self, splits: u64) -> Self {
        if splits == 0 {
            self.refused
                .push("splits is 0: the rows need at least one split".into());
        }
        self.splits = splits.max(1);
        self
    }

    /// Rows per batch (default 8192, at least 1).
    pub fn with_batch_rows(mut self, rows: usize) -> Self {
        if rows == 0 {
            self.refused
                .push("batch_rows is 0: a batch needs at least one row".into());
        }
        self.batch_rows = rows.max(1);
        self
    }

    /// The schema of the generated batches: id, k, v, s.
    pub fn schema_ref(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The number of rows.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Row `i`'s key.
    pub fn key(&self, i: u64) -> i64 {
        (splitmix64(i) % self.keys) as i64
    }

    /// Builds the batch of rows `start..end`.
    pub fn batch(&self, start: u64, end: u64) -> Result<RecordBatch> {
        let n = (end - start) as usize;
        let mut ids = Vec::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        let mut text = Vec::with_capacity(n * 16);
        for i in start..end {
            let h = splitmix64(i);
            ids.push(i as i64);
            keys.push((h % self.keys) as i64);
            values.push((i % 1000) as f64 / 4.0);
            push_hex16(&mut text, h);
        }
        let offsets = OffsetBuffer::new(ScalarBuffer::from_iter((0..=n as i32).map(|i| i * 16)));
        let strings = StringArray::try_new(offsets, Buffer::from_vec(text), None)?;
        Ok(RecordBatch::try_new(
            self.schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(Int64Array::from(keys)),
                Arc::new(Float64Array::from(values)),
                Arc::new(strings),
            ],
        )?)
    }

    /// The row ranges `[start, end)` of the splits, in split order: split `j`
    /// is read by subtask `j % parallelism`.
    pub fn split_ranges(&self) -> Vec<(u64, u64)> {
        (0..self.splits.min(self.rows.max(1)))
            .map(|index| self.split_range(index))
            .collect()
    }

    fn split_range(&self, index: u64) -> (u64, u64) {
        let splits = self.splits.min(self.rows.max(1));
        let per = self.rows / splits;
        let extra = self.rows % splits;
        let start = index * per + index.min(extra);
        let len = per + u64::from(index < extra);
        (start, start + len)
    }

    fn split_id(&self, start: u64, end: u64) -> String {
        // The key count is part of the id: resuming with other keys would mix two datasets.
        format!("rows-{start}-{end}-keys-{}", self.keys)
    }
}

fn push_hex16(out: &mut Vec<u8>, value: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        out.push(DIGITS[((value >> (shift * 4)) & 0xf) as usize]);
    }
}

#[async_trait]
impl Source for GeneratorSource {
    fn validate(&self) -> Result<()> {
        match self.refused.first() {
            Some(why) => Err(Error::InvalidPipeline(format!("generator: {why}"))),
            None => Ok(()),
        }
    }

    fn kind(&self) -> &str {
        "generator"
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn splits(&self) -> Result<Vec<Split>> {
        Ok(self
            .split_ranges()
            .into_iter()
            .map(|(start, end)| Split {
                id: self.split_id(start, end),
                estimated_rows: Some(end - start),
            })
            .collect())
    }

    async fn open(&self, split: &Split, cursor: Option<&Cursor>) -> Result<Box<dyn SplitReader>> {
        let (start, end) = parse_split_id(&split.id)?;
        let next = match cursor {
            None => start,
            Some(cursor) => cursor
                .get("next")
                .and_then(|n| n.as_u64())
                .filter(|n| (start..=end).contains(n))
                .ok_or_else(|| {
                    Error::Corrupt(format!(
                        "generator cursor {cursor} does not fit split {}",
                        split.id
                    ))
                })?,
        };
        Ok(Box::new(GeneratorReader {
            source: self.clone(),
            next,
            end,
        }))
    }
}

fn parse_split_id(id: &str) -> Result<(u64, u64)> {
    let mut parts = id.split('-');
    let parsed = match (parts.next(), parts.next(), parts.next()) {
        (Some("rows"), Some(start), Some(end)) => start.parse().ok().zip(end.parse().ok()),
        _ => None,
    };
    parsed.ok_or_else(|| Error::Corrupt(format!("'{id}' is not a generator split id")))
}

struct GeneratorReader {
    source: GeneratorSource,
    next: u64,
    end: u64,
}

#[async_trait]
impl SplitReader for GeneratorReader {
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.next >= self.end {
            return Ok(None);
        }
        let end = (self.next + self.source.batch_rows as u64).min(self.end);
        let batch = self.source.batch(self.next, end)?;
        self.next = end;
        Ok(Some(batch))
    }

    fn cursor(&self) -> Cursor {
        json!({ "next": self.next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_spec() {
        let source = GeneratorSource::new(10, 7);
        let batch = source.batch(3, 5).unwrap();
        let s = batch
            .column(3)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(s.value(0), format!("{:016x}", splitmix64(3)));
        let k = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(k.value(1), (splitmix64(4) % 7) as i64);
        let v = batch
            .column(2)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        assert_eq!(v.value(0), 0.75);
    }

    #[tokio::test]
    async fn splits_cover_every_row_once() {
        for (rows, splits) in [(0, 4), (1, 4), (10, 3), (1000, 32), (31, 32)] {
            let source = GeneratorSource::new(rows, 5).with_splits(splits);
            let mut covered = 0;
            let mut expected_start = 0;
            for split in source.splits().await.unwrap() {
                let (start, end) = parse_split_id(&split.id).unwrap();
                assert_eq!(start, expected_start);
                covered += end - start;
                expected_start = end;
            }
            assert_eq!(covered, rows, "rows {rows} splits {splits}");
        }
    }
}
