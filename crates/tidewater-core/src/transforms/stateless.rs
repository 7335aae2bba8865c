//! map, filter and flat_map: stateless operators around a user closure.

use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::compute::filter_record_batch;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::operator::{Collector, Operator};

type MapFn = dyn Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync;
type FilterFn = dyn Fn(&RecordBatch) -> Result<BooleanArray> + Send + Sync;
type FlatMapFn = dyn Fn(RecordBatch) -> Result<Vec<RecordBatch>> + Send + Sync;

pub(crate) struct MapOperator(Arc<MapFn>);

impl MapOperator {
    pub fn new(f: Arc<MapFn>) -> Self {
        MapOperator(f)
    }
}

impl Operator for MapOperator {
    fn kind(&self) -> &str {
        "map"
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        out.emit((self.0)(batch)?);
        Ok(())
    }
}

pub(crate) struct FilterOperator(Arc<FilterFn>);

impl FilterOperator {
    pub fn new(f: Arc<FilterFn>) -> Self {
        FilterOperator(f)
    }
}

impl Operator for FilterOperator {
    fn kind(&self) -> &str {
        "filter"
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let mask = (self.0)(&batch)?;
        if mask.len() != batch.num_rows() {
            return Err(Error::BadInput(format!(
                "filter predicate returned {} values for a batch of {} rows",
                mask.len(),
                batch.num_rows()
            )));
        }
        if mask.true_count() == batch.num_rows() {
            out.emit(batch);
        } else {
            out.emit(filter_record_batch(&batch, &mask)?);
        }
        Ok(())
    }
}

pub(crate) struct FlatMapOperator(Arc<FlatMapFn>);

impl FlatMapOperator {
    pub fn new(f: Arc<FlatMapFn>) -> Self {
        FlatMapOperator(f)
    }
}

impl Operator for FlatMapOperator {
    fn kind(&self) -> &str {
        "flat_map"
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        for batch in (self.0)(batch)? {
            out.emit(batch);
        }
        Ok(())
    }
}
