//! Durable writes of blobs into a local folder: large ones past the page
//! cache, small ones whole.
//!
//! Writing a 32 MB blob through the page cache costs ~10 ms of CPU copying
//! it (measured on a 2-core machine, 4-5x that under load), which a 1 s
//! checkpoint interval pays every second. With `O_DIRECT` the device reads
//! the buffer itself. A blob is written as it is encoded, through a small
//! aligned staging buffer, so that no copy of the whole blob is ever held;
//! it goes to a temporary name, synced and renamed, so a reader sees all of
//! it or nothing, like the object store's own local writes. Where direct
//! I/O is refused (tmpfs, other systems) the write goes through the page
//! cache.
//!
//! Neither syncs the folder it writes in: a checkpoint's folders are synced
//! once, before its manifest is written ([`sync_folders`]), rather than once
//! per blob as the object store's own local writes do. Nothing reads a blob
//! before a manifest lists it, so a blob's name needs to be durable only by
//! then.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatch;

use crate::checkpoint::blob;
use crate::error::{Error, Result};

/// Blobs from this size on are written directly; smaller ones go through
/// the object store.
pub(crate) const DIRECT_MIN_BYTES: usize = 1 << 20;

/// The alignment of buffer, length and offset that direct I/O needs
/// (4096 covers 512-byte and 4 KiB sectors).
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// Bytes gathered before each write: a multiple of [`DIRECT_ALIGN`].
const STAGING_BYTES: usize = 1 << 20;

/// What a blob's temporary file is called beside it until it is finished.
/// A `#` followed by anything but digits: the local object store lists it,
/// so deleting a checkpoint deletes a temporary a crash left behind too.
const TEMPORARY_SUFFIX: &str = "#writing";

fn temporary_of(path: &Path) -> PathBuf {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(TEMPORARY_SUFFIX);
    PathBuf::from(temporary)
}

/// Writes the small blob `bytes` to `path` (its folder created when
/// missing), durably but for the folder's entry: to a temporary beside it,
/// synced, then renamed. A reader sees all of it or nothing.
pub(crate) fn write_small(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temporary = temporary_of(path);
    // Opened first, the folder created only when missing: most blobs go
    // into a folder that an earlier subtask's blob already created.
    let mut file = match create(&temporary) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let folder = path.parent().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "a blob path has a folder")
            })?;
            std::fs::create_dir_all(folder)?;
            create(&temporary)?
        }
        opened => opened?,
    };
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_data())
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Syncs each of `folders` (missing ones skipped), so that the names
/// created in them are durable. An error names the folder.
pub(crate) fn sync_folders(folders: &[PathBuf]) -> io::Result<()> {
    for folder in folders {
        let synced = match File::open(folder) {
            Ok(opened) => opened.sync_all(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        synced.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", folder.display())))?;
    }
    Ok(())
}

/// A blob file being written: bytes go in through [`Write`], and
/// [`finish`](Self::finish) makes the file durable under its name. Dropped
/// unfinished, it removes its temporary.
pub(crate) struct DurableFile {
    file: File,
    path: PathBuf,
    temporary: PathBuf,
    direct: bool,
    /// Aligned staging: `staging[start..]` is waiting to be written.
    staging: Vec<u8>,
    start: usize,
    hasher: crc32fast::Hasher,
    bytes: u64,
    /// Bytes in the file so far (the rest is staged).
    in_file: u64,
    /// The first write error, which `Write` users may wrap beyond recognition.
    failed: Option<String>,
    finished: bool,
}

/// What a finished [`DurableFile`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    /// Its length.
    pub bytes: u64,
    /// Its CRC-32 (as `blob::checksum` computes it).
    pub crc32: u32,
}

/// Encodes `batch` (as `blob::encode_to` does) into the blob file `file`,
/// durably; `path` names the blob in errors.
pub(crate) fn write_state(
    file: &Path,
    path: &impl std::fmt::Display,
    batch: &RecordBatch,
) -> Result<Written> {
    let failed = |e: &dyn std::fmt::Display| write_failed(path, e);
    let mut out = DurableFile::create(file).map_err(|e| failed(&e))?;
    let encoded = blob::encode_to(batch, &mut out).map(|_| ());
    // Arrow wraps the writer's io error beyond recognition: say the first one.
    if let Some(why) = out.failure() {
        return Err(failed(&why));
    }
    encoded?;
    out.finish().map_err(|e| failed(&e))
}

/// Writes the encoded small blob `bytes` into the blob file `file` (see
/// [`write_small`]); `path` names the blob in errors.
pub(crate) fn write_small_blob(
    file: &Path,
    path: &impl std::fmt::Display,
    bytes: &[u8],
) -> Result<Written> {
    write_small(file, bytes).map_err(|e| write_failed(path, &e))?;
    Ok(Written {
        bytes: bytes.len() as u64,
        crc32: blob::checksum(bytes),
    })
}

fn write_failed(path: &impl std::fmt::Display, e: &dyn std::fmt::Display) -> Error {
    Error::External {
        message: format!(
            "storage: write state blob '{path}' failed: {e}; check the state folder's free \
             space and permissions"
        ),
        retryable: true,
    }
}

impl DurableFile {
    /// Starts writing `path` (its folder created): a temporary file beside it.
    pub fn create(path: &Path) -> io::Result<Self> {
        let folder = path.parent().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "a blob path has a folder")
        })?;
        std::fs::create_dir_all(folder)?;
        let temporary = temporary_of(path);
        let file = open_direct(&temporary).or_else(|_| create(&temporary))?;
        let direct = is_direct(&file);
        let mut staging = Vec::<u8>::with_capacity(STAGING_BYTES + DIRECT_ALIGN);
        let start = staging.as_ptr().align_offset(DIRECT_ALIGN);
        staging.resize(start, 0);
        Ok(DurableFile {
            file,
            path: path.to_path_buf(),
            temporary,
            direct,
            staging,
            start,
            hasher: crc32fast::Hasher::new(),
            bytes: 0,
            in_file: 0,
            failed: None,
            finished: false,
        })
    }

    /// The first error writing met, if any.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Writes what is staged, whole blocks directly when it can (only the
    /// blob's end is ever shorter than a block).
    fn write_staged(&mut self) -> io::Result<()> {
        let staged = &self.staging[self.start..];
        let direct_len = if self.direct {
            staged.len() / DIRECT_ALIGN * DIRECT_ALIGN
        } else {
            0
        };
        if direct_len > 0
            && let Err(e) = self.file.write_all(&staged[..direct_len])
        {
            // Refused after all (some file systems check only at write
            // time, with EINVAL): write it again through the page cache,
            // from where it began. Any other error is the write's.
            if e.kind() != io::ErrorKind::InvalidInput {
                return Err(e);
            }
            self.file.set_len(self.in_file)?;
            self.file.seek(SeekFrom::Start(self.in_file))?;
            crate::events::InternalEvent::emit(crate::events::DirectWriteRefused {
                file: &self.temporary.display().to_string(),
                error: &e.to_string(),
            });
            set_direct(&self.file, false)?;
            self.direct = false;
            return self.write_staged();
        }
        let rest = &self.staging[self.start + direct_len..];
        if !rest.is_empty() {
            if self.direct {
                // The tail is shorter than a block: through the page cache.
                set_direct(&self.file, false)?;
                self.direct = false;
            }
            self.file.write_all(rest)?;
        }
        self.in_file += (self.staging.len() - self.start) as u64;
        self.staging.truncate(self.start);
        Ok(())
    }

    /// Writes the rest, syncs, and renames the temporary to the blob's name
    /// (the folder is synced with the checkpoint's others, see
    /// [`sync_folders`]).
    pub fn finish(mut self) -> io::Result<Written> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(why.clone()));
        }
        self.write_staged()?;
        self.file.sync_all()?;
        std::fs::rename(&self.temporary, &self.path)?;
        self.finished = true;
        Ok(Written {
            bytes: self.bytes,
            crc32: self.hasher.clone().finalize(),
        })
    }
}

impl Write for DurableFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = STAGING_BYTES - (self.staging.len() - self.start);
        let n = buf.len().min(room);
        self.staging.extend_from_slice(&buf[..n]);
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        if self.staging.len() - self.start == STAGING_BYTES
            && let Err(e) = self.write_staged()
        {
            self.failed.get_or_insert_with(|| e.to_string());
            return Err(e);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Durability comes with `finish`; staged bytes wait for a full block.
        Ok(())
    }
}

impl Drop for DurableFile {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

fn create(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

#[cfg(not(target_os = "linux"))]
fn open_direct(path: &Path) -> io::Result<File> {
    create(path)
}

#[cfg(target_os = "linux")]
fn is_direct(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFL on an open descriptor reads its flags.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}

#[cfg(not(target_os = "linux"))]
fn is_direct(_: &File) -> bool {
    false
}

#[cfg(target_os = "linux")]
fn set_direct(file: &File, direct: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on an open descriptor read and set its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if direct {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_direct(_: &File, _: bool) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` bytes of a recognisable pattern, starting at an aligned address.
    fn aligned_blob(len: usize) -> (Vec<u8>, std::ops::Range<usize>) {
        let mut buffer: Vec<u8> = Vec::with_capacity(len + DIRECT_ALIGN);
        let pad = buffer.as_ptr().align_offset(DIRECT_ALIGN);
        buffer.resize(pad, 0);
        buffer.extend((0..len).map(|i| (i * 31 % 251) as u8));
        (buffer, pad..pad + len)
    }

    /// Writes `bytes` through a `DurableFile`, in pieces of `piece` bytes.
    fn write_in_pieces(path: &Path, bytes: &[u8], piece: usize) -> Written {
        let mut file = DurableFile::create(path).unwrap();
        for chunk in bytes.chunks(piece.max(1)) {
            file.write_all(chunk).unwrap();
        }
        file.finish().unwrap()
    }

    #[test]
    fn blobs_of_any_length_written_in_any_pieces_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        for (name, len, piece) in [
            ("aligned", 3 * DIRECT_ALIGN, 1000),
            ("with_tail", 2 * DIRECT_ALIGN + 123, 4096),
            ("staged_twice", 2 * STAGING_BYTES + 7, 300_001),
            ("whole_staging", STAGING_BYTES, STAGING_BYTES),
            ("short", 5, 1),
            ("empty", 0, 1),
        ] {
            let (buffer, range) = aligned_blob(len);
            let blob = &buffer[range];
            let path = dir.path().join("chk").join(name).join("0.arrow");
            let written = write_in_pieces(&path, blob, piece);
            assert_eq!(std::fs::read(&path).unwrap(), blob, "{name}");
            assert_eq!(
                written,
                Written {
                    bytes: len as u64,
                    crc32: crc32fast::hash(blob)
                },
                "{name}"
            );
            let temporary = temporary_of(&path);
            assert!(!temporary.exists(), "{name}: temporary left behind");
        }
    }

    #[test]
    fn a_small_blob_is_written_whole_into_a_folder_made_for_it_and_replaces_an_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chk-1").join("aggregate").join("0.arrow");
        write_small(&path, b"first state").unwrap();
        write_small(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert!(!temporary_of(&path).exists());
        // A temporary a crash left behind is written over.
        std::fs::write(temporary_of(&path), b"a crash left this, longer").unwrap();
        write_small(&path, b"third").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        assert!(!temporary_of(&path).exists());

        sync_folders(&[dir.path().join("chk-1"), dir.path().join("missing")]).unwrap();
    }

    #[test]
    fn a_rewrite_replaces_the_whole_file_and_an_unfinished_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.arrow");
        let (long, range) = aligned_blob(4 * DIRECT_ALIGN);
        write_in_pieces(&path, &long[range.clone()], 5000);
        let short = &long[range.start..range.start + DIRECT_ALIGN + 5];
        write_in_pieces(&path, short, 5000);
        assert_eq!(std::fs::read(&path).unwrap(), short);

        let mut abandoned = DurableFile::create(&path).unwrap();
        abandoned.write_all(&long[range]).unwrap();
        drop(abandoned);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            short,
            "the blob is untouched"
        );
        assert!(!temporary_of(&path).exists());
    }
}
