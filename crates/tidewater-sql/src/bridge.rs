//! Moves arrays between the engine's arrow and the one DataFusion is built
//! on, through the Arrow C data interface: no bytes are copied, only the
//! buffers' ownership is handed over.
//!
//! DataFusion's newest release is built on the previous arrow major version.
//! The C data interface is arrow's stable ABI for exactly this (two arrow
//! implementations in one process), so the engine keeps its arrow and only
//! this module sees both. When DataFusion catches up, this file goes away.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Schema};
use arrow::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow59 as df_arrow;

/// The arrow DataFusion uses.
pub mod df {
    pub use super::df_arrow::array::{Array, ArrayRef, RecordBatch};
    pub use super::df_arrow::datatypes::{DataType, Schema, SchemaRef};
}

/// A conversion that failed; only types the C data interface cannot carry
/// (none that the engine produces) get here.
#[derive(Debug, thiserror::Error)]
#[error("moving arrow data to or from DataFusion failed: {0}")]
pub struct BridgeError(String);

// The two crates' FFI structs are the same `#[repr(C)]` layout of the C
// data interface; the compiler checks the sizes for each transmute below.
fn ffi_array_to_df(array: FFI_ArrowArray) -> df_arrow::ffi::FFI_ArrowArray {
    // SAFETY: both are the C ABI's `struct ArrowArray`; ownership (the
    // release callback) moves with the value.
    unsafe { std::mem::transmute::<FFI_ArrowArray, df_arrow::ffi::FFI_ArrowArray>(array) }
}

fn ffi_array_from_df(array: df_arrow::ffi::FFI_ArrowArray) -> FFI_ArrowArray {
    // SAFETY: as above, the other way.
    unsafe { std::mem::transmute::<df_arrow::ffi::FFI_ArrowArray, FFI_ArrowArray>(array) }
}

fn ffi_schema_to_df(schema: FFI_ArrowSchema) -> df_arrow::ffi::FFI_ArrowSchema {
    // SAFETY: both are the C ABI's `struct ArrowSchema`.
    unsafe { std::mem::transmute::<FFI_ArrowSchema, df_arrow::ffi::FFI_ArrowSchema>(schema) }
}

fn ffi_schema_from_df(schema: df_arrow::ffi::FFI_ArrowSchema) -> FFI_ArrowSchema {
    // SAFETY: as above, the other way.
    unsafe { std::mem::transmute::<df_arrow::ffi::FFI_ArrowSchema, FFI_ArrowSchema>(schema) }
}

/// The engine's schema in DataFusion's arrow.
pub fn schema_to_df(schema: &Schema) -> Result<df::Schema, BridgeError> {
    let ffi = FFI_ArrowSchema::try_from(schema).map_err(|e| BridgeError(e.to_string()))?;
    df::Schema::try_from(&ffi_schema_to_df(ffi)).map_err(|e| BridgeError(e.to_string()))
}

/// A data type from DataFusion's arrow in the engine's.
pub fn data_type_from_df(data_type: &df::DataType) -> Result<DataType, BridgeError> {
    let ffi = df_arrow::ffi::FFI_ArrowSchema::try_from(data_type)
        .map_err(|e| BridgeError(e.to_string()))?;
    DataType::try_from(&ffi_schema_from_df(ffi)).map_err(|e| BridgeError(e.to_string()))
}

/// An engine array in DataFusion's arrow, of type `as_type` (the same type,
/// converted once by the caller).
pub fn array_to_df(array: &dyn Array, as_type: &df::DataType) -> Result<df::ArrayRef, BridgeError> {
    let ffi = ffi_array_to_df(FFI_ArrowArray::new(&array.to_data()));
    // SAFETY: `ffi` was just exported from a valid array of this type.
    let data = unsafe { df_arrow::ffi::from_ffi_and_data_type(ffi, as_type.clone()) }
        .map_err(|e| BridgeError(e.to_string()))?;
    Ok(df_arrow::array::make_array(data))
}

/// A DataFusion array in the engine's arrow, of type `as_type`.
pub fn array_from_df(array: &dyn df::Array, as_type: &DataType) -> Result<ArrayRef, BridgeError> {
    let ffi = ffi_array_from_df(df_arrow::ffi::FFI_ArrowArray::new(&array.to_data()));
    // SAFETY: `ffi` was just exported from a valid array of this type.
    let data = unsafe { arrow::ffi::from_ffi_and_data_type(ffi, as_type.clone()) }
        .map_err(|e| BridgeError(e.to_string()))?;
    Ok(arrow::array::make_array(data))
}

/// An engine batch in DataFusion's arrow, against `schema` (the batch's
/// schema, converted once by the caller).
pub fn batch_to_df(
    batch: &RecordBatch,
    schema: &df::SchemaRef,
) -> Result<df::RecordBatch, BridgeError> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| array_to_df(column.as_ref(), field.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    let options = df_arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    df::RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
        .map_err(|e| BridgeError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array, StringArray};
    use arrow::datatypes::Field;

    #[test]
    fn arrays_cross_both_ways_unchanged() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(Float64Array::from(vec![Some(1.5), None, Some(3.0)])),
                Arc::new(StringArray::from(vec![Some("a"), Some("é"), None])),
            ],
        )
        .unwrap();
        // A slice: the offset must survive the crossing.
        let batch = batch.slice(1, 2);
        let df_schema = Arc::new(schema_to_df(&schema).unwrap());
        let crossed = batch_to_df(&batch, &df_schema).unwrap();
        assert_eq!(crossed.num_rows(), 2);
        for (i, field) in schema.fields().iter().enumerate() {
            let back = array_from_df(crossed.column(i).as_ref(), field.data_type()).unwrap();
            assert_eq!(
                back.as_ref(),
                batch.column(i).as_ref(),
                "column {}",
                field.name()
            );
        }
        assert_eq!(
            data_type_from_df(df_schema.field(2).data_type()).unwrap(),
            DataType::Utf8
        );
    }
}
