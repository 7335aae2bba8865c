//! State blobs: a `RecordBatch` as Arrow IPC bytes, with a CRC-32 to verify on restore.

use std::io::Write;

use arrow::buffer::Buffer;
use arrow::compute::concat_batches;
use arrow::error::ArrowError;
use arrow::ipc::reader::StreamDecoder;
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
/// batch per 4 MiB (`SLICE_BYTES`) or so of rows, so that the stream can be
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

/// Verifies a blob against its recorded checksum and decodes it into one
/// batch (the slices it was written in, joined).
pub fn decode_verified(bytes: Bytes, expected_crc: u32, what: &str) -> Result<RecordBatch> {
    join(&decode_slices(bytes, expected_crc, what)?, what)
}

/// The slices [`decode_slices`] gave, as one batch (one slice is not copied).
pub fn join(slices: &[RecordBatch], what: &str) -> Result<RecordBatch> {
    let Some(first) = slices.first() else {
        return Err(Error::Corrupt(format!("{what}: the stream holds no batch")));
    };
    concat_batches(&first.schema(), slices)
        .map_err(|e| Error::Corrupt(format!("{what}: slices do not join: {e}")))
}

/// Verifies a blob against its recorded checksum and decodes it into the
/// slices it was written in (at least one; see [`encode_to`]). The columns
/// share `bytes` instead of copying them (Arrow IPC keeps buffers aligned;
/// one that is not is copied), so a restore that goes on to pick rows from
/// the slices copies the state once.
pub fn decode_slices(bytes: Bytes, expected_crc: u32, what: &str) -> Result<Vec<RecordBatch>> {
    let actual = checksum(&bytes);
    if actual != expected_crc {
        return Err(Error::Corrupt(format!(
            "{what}: checksum {actual:08x} does not match the manifest's {expected_crc:08x}"
        )));
    }
    let not_ipc = |e: ArrowError| Error::Corrupt(format!("{what}: not an Arrow IPC stream: {e}"));
    let mut decoder = StreamDecoder::new();
    let mut buffer = Buffer::from(bytes);
    let mut slices = Vec::new();
    while !buffer.is_empty() {
        if let Some(batch) = decoder.decode(&mut buffer).map_err(not_ipc)? {
            slices.push(batch);
        }
    }
    decoder.finish().map_err(not_ipc)?;
    if slices.is_empty() {
        return Err(Error::Corrupt(format!("{what}: the stream holds no batch")));
    }
    Ok(slices)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;

    use super::*;

    /// A batch of one Int64 column.
    fn ints(values: Vec<i64>) -> RecordBatch {
        RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(values)) as _)]).unwrap()
    }

    #[test]
    fn round_trip_and_detect_a_flipped_byte() {
        let batch = ints(vec![1, 2, 3]);
        let bytes = encode(&batch).unwrap();
        let crc = checksum(&bytes);
        assert_eq!(decode_verified(bytes.clone(), crc, "t").unwrap(), batch);

        let mut bad = bytes.to_vec();
        let middle = bad.len() / 2;
        bad[middle] ^= 0x40;
        let err = decode_verified(bad.into(), crc, "blob x").unwrap_err();
        assert!(err.to_string().contains("blob x: checksum"), "{err}");
    }

    #[test]
    fn decoded_columns_share_the_blob_instead_of_copying_it() {
        let batch = ints(vec![7; 1000]);
        let bytes = encode(&batch).unwrap();
        let blob = bytes.as_ptr_range();
        let back = decode_slices(bytes.clone(), checksum(&bytes), "t").unwrap();
        let values = back[0].column(0).to_data().buffers()[0].as_ptr();
        assert!(
            blob.contains(&values),
            "the column was copied out of the blob"
        );
    }

    #[test]
    fn a_cut_short_stream_is_corrupt() {
        let batch = ints(vec![1, 2, 3]);
        let bytes = encode(&batch).unwrap();
        let cut = bytes.slice(..bytes.len() - 20);
        let err = decode_verified(cut.clone(), checksum(&cut), "blob y").unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{err:?}");
        assert!(err.to_string().contains("blob y"), "{err}");
    }

    #[test]
    fn a_large_state_is_written_in_slices_and_read_back_whole() {
        // 2M rows of 8 bytes: four slices of about 4 MiB.
        let batch = ints((0..2_000_000).collect());
        let bytes = encode(&batch).unwrap();
        let slices = decode_slices(bytes.clone(), checksum(&bytes), "t").unwrap();
        assert!((3..=5).contains(&slices.len()), "{} slices", slices.len());
        let back = decode_verified(bytes.clone(), checksum(&bytes), "t").unwrap();
        assert_eq!(back, batch);

        let empty = batch.slice(0, 0);
        let bytes = encode(&empty).unwrap();
        assert_eq!(
            decode_verified(bytes.clone(), checksum(&bytes), "t").unwrap(),
            empty
        );
    }
}
