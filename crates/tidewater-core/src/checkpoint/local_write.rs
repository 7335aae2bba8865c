//! Durable writes of large blobs into a local folder, past the page cache.
//!
//! Writing a 32 MB blob through the page cache costs ~10 ms of CPU copying
//! it (measured on a 2-core machine, 4-5x that under load), which a 1 s
//! checkpoint interval pays every second. With `O_DIRECT` the device reads
//! the buffer itself. The blob is written to a temporary name, synced and
//! renamed, so a reader sees all of it or nothing, like the object store's
//! own local writes. Where direct I/O is refused (tmpfs, other systems,
//! a misaligned buffer) the write goes through the page cache.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Blobs from this size on are written directly; smaller ones go through
/// the object store.
pub(crate) const DIRECT_MIN_BYTES: usize = 1 << 20;

/// The alignment of buffer, length and offset that direct I/O needs
/// (4096 covers 512-byte and 4 KiB sectors).
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// Writes `bytes` to `path` durably: a temporary file, synced, renamed, and
/// the folder synced.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let folder = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a blob path has a folder"))?;
    std::fs::create_dir_all(folder)?;
    let mut temporary = path.as_os_str().to_owned();
    // `#` marks an unfinished write: the local object store does not list it.
    temporary.push("#direct");
    let temporary = std::path::PathBuf::from(temporary);

    let mut file = open_direct(&temporary).or_else(|_| create(&temporary))?;
    let direct_len = if is_direct(&file) && bytes.as_ptr().align_offset(DIRECT_ALIGN) == 0 {
        bytes.len() / DIRECT_ALIGN * DIRECT_ALIGN
    } else {
        0
    };
    if let Err(e) = file.write_all(&bytes[..direct_len]) {
        // Refused after all (some file systems check only at write time):
        // start over through the page cache.
        crate::events::InternalEvent::emit(crate::events::DirectWriteRefused {
            file: &temporary.display().to_string(),
            error: &e.to_string(),
        });
        file = create(&temporary)?;
        file.write_all(bytes)?;
    } else {
        // The tail is shorter than a block: finish it through the page cache.
        set_direct(&file, false)?;
        file.write_all(&bytes[direct_len..])?;
    }
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    File::open(folder)?.sync_all()
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

    #[test]
    fn aligned_and_unaligned_blobs_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        for (name, len, shift) in [
            ("aligned", 3 * DIRECT_ALIGN, 0),
            ("with_tail", 2 * DIRECT_ALIGN + 123, 0),
            ("misaligned", 2 * DIRECT_ALIGN + 7, 1),
        ] {
            let (buffer, range) = aligned_blob(len + shift);
            let blob = &buffer[range.start + shift..range.end];
            let path = dir.path().join("chk").join(name).join("0.arrow");
            write_durably(&path, blob).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), blob, "{name}");
            let temporary = path.with_file_name("0.arrow#direct");
            assert!(!temporary.exists(), "{name}: temporary left behind");
        }
    }

    #[test]
    fn a_rewrite_replaces_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.arrow");
        let (long, range) = aligned_blob(4 * DIRECT_ALIGN);
        write_durably(&path, &long[range.clone()]).unwrap();
        let short = &long[range.start..range.start + DIRECT_ALIGN + 5];
        write_durably(&path, short).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), short);
    }
}
