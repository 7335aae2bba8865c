//! State blobs: a `RecordBatch` as Arrow IPC bytes, with a CRC-32 to verify on restore.

use std::io::{Cursor, Write};

use arrow::compute::concat_batches;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::error::{Error, Result};

/// A large state is encoded this many bytes' worth of rows at a time: Arrow's
/// IPC writer gathers each batch's body into a buffer of its own first, so
/// one batch of the whole state would hold a second copy of it.
const SLICE_BYTES: usize = 4 << 20;

/// Encodes a state batch as an Arrow IPC stream.
pub fn encode(batch: &RecordBatch) -> Result<Bytes> {
    let buffer = Vec::with_capacity(batch.get_array_memory_size() + 1024);
    Ok(Bytes::from(encode_to(batch, buffer)?))
}

/// Encodes a state batch as an Arrow IPC stream into `writer`: one IPC
/// batch per [`SLICE_BYTES`] or so of rows, so that the stream can be
/// written out as it is made without ever holding the whole of it.
pub fn encode_to<W: Write>(batch: &RecordBatch, writer: W) -> Result<W> {
    let mut writer = StreamWriter::try_new(writer, &batch.schema())?;
    let rows = batch.num_rows();
    let bytes = batch.get_array_memory_size().max(1);
    let per_slice = if bytes <= SLICE_BYTES {
        rows
    } else {
        (rows as u128 * SLICE_BYTES as u128 / bytes as u128).max(1) as usize
    };
    if per_slice >= rows {
        writer.write(batch)?;
    } else {
        let mut offset = 0;
        while offset < rows {
            let len = per_slice.min(rows - offset);
            writer.write(&batch.slice(offset, len))?;
            offset += len;
        }
    }
    writer.finish()?;
    Ok(writer.into_inner()?)
}

/// The checksum recorded for a blob.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Verifies a blob against its recorded checksum and decodes it.
pub fn decode_verified(bytes: &[u8], expected_crc: u32, what: &str) -> Result<RecordBatch> {
    let actual = checksum(bytes);
    if actual != expected_crc {
        return Err(Error::Corrupt(format!(
            "{what}: checksum {actual:08x} does not match the manifest's {expected_crc:08x}"
        )));
    }
    let reader = StreamReader::try_new(Cursor::new(bytes), None)
        .map_err(|e| Error::Corrupt(format!("{what}: not an Arrow IPC stream: {e}")))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Corrupt(format!("{what}: {e}")))?;
    // One batch, or the slices of one (see `encode_to`).
    match batches.as_slice() {
        [] => Err(Error::Corrupt(format!("{what}: the stream holds no batch"))),
        [one] => Ok(one.clone()),
        [first, ..] => concat_batches(&first.schema(), &batches)
            .map_err(|e| Error::Corrupt(format!("{what}: slices do not join: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;

    use super::*;

    #[test]
    fn round_trip_and_detect_a_flipped_byte() {
        let batch =
            RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1, 2, 3])) as _)])
                .unwrap();
        let bytes = encode(&batch).unwrap();
        let crc = checksum(&bytes);
        assert_eq!(decode_verified(&bytes, crc, "t").unwrap(), batch);

        let mut bad = bytes.to_vec();
        let middle = bad.len() / 2;
        bad[middle] ^= 0x40;
        let err = decode_verified(&bad, crc, "blob x").unwrap_err();
        assert!(err.to_string().contains("blob x: checksum"), "{err}");
    }

    #[test]
    fn a_large_state_is_written_in_slices_and_read_back_whole() {
        // 2M rows of 8 bytes: four slices of about 4 MiB.
        let values: Vec<i64> = (0..2_000_000).collect();
        let batch =
            RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(values)) as _)]).unwrap();
        let bytes = encode(&batch).unwrap();
        let slices = StreamReader::try_new(Cursor::new(&bytes[..]), None)
            .unwrap()
            .count();
        assert!((3..=5).contains(&slices), "{slices} slices");
        let back = decode_verified(&bytes, checksum(&bytes), "t").unwrap();
        assert_eq!(back, batch);

        let empty = batch.slice(0, 0);
        let bytes = encode(&empty).unwrap();
        assert_eq!(
            decode_verified(&bytes, checksum(&bytes), "t").unwrap(),
            empty
        );
    }
}
