//! State blobs: a `RecordBatch` as Arrow IPC bytes, with a CRC-32 to verify on restore.

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::checkpoint::local_write::DIRECT_ALIGN;
use crate::error::{Error, Result};

/// Encodes a state batch as an Arrow IPC stream.
pub fn encode(batch: &RecordBatch) -> Result<Bytes> {
    encode_into(batch, Vec::new())
}

/// Encodes a state batch as an Arrow IPC stream into `buffer` (emptied
/// first), so that a buffer kept from an earlier checkpoint is reused. The
/// stream starts at an address aligned for direct I/O.
pub fn encode_into(batch: &RecordBatch, mut buffer: Vec<u8>) -> Result<Bytes> {
    let needed = batch.get_array_memory_size() + 1024 + DIRECT_ALIGN;
    if buffer.capacity() < needed {
        // Growing would copy the old capacity over: start anew, with room
        // for the next checkpoint's slightly larger state.
        buffer = Vec::with_capacity(needed + needed / 8);
    }
    buffer.clear();
    let start = buffer.as_ptr().align_offset(DIRECT_ALIGN);
    buffer.resize(start, 0);
    let mut writer = StreamWriter::try_new(&mut buffer, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(Bytes::from(buffer).slice(start..))
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
    match batches.len() {
        1 => Ok(batches.into_iter().next().expect("one batch")),
        n => Err(Error::Corrupt(format!(
            "{what}: expected one batch, found {n}"
        ))),
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
}
