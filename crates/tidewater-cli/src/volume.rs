//! Which volume a path is on, and how much room it has: for the message of
//! a run that filled its disk.

use std::path::{Path, PathBuf};

/// The mount point in `mounts` (the text of `/proc/self/mounts`) that holds
/// `path` (absolute): the longest one that is a prefix of it.
pub fn mount_of(path: &Path, mounts: &str) -> Option<PathBuf> {
    mounts
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        // Mount points escape spaces as \040.
        .map(|point| PathBuf::from(point.replace("\\040", " ")))
        .filter(|point| path.starts_with(point))
        .max_by_key(|point| point.as_os_str().len())
}

/// Bytes an unprivileged process may still write on the volume of `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `stat` a valid, writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut stat) };
    (rc == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// The nearest existing folder at or above `place` (a local path, or a
/// `file://` URL; `None` for a URL of another scheme).
fn existing_local(place: &str) -> Option<PathBuf> {
    if place.contains("://") && !place.starts_with("file://") {
        return None;
    }
    let path = std::path::absolute(place.strip_prefix("file://").unwrap_or(place)).ok()?;
    path.ancestors().find(|p| p.is_dir()).map(Path::to_path_buf)
}

/// One line per volume that holds one of `places`: its mount point, the
/// places on it, and its free space; the fullest first.
pub fn describe(places: &[&str]) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut volumes: Vec<(PathBuf, Vec<String>, Option<u64>)> = Vec::new();
    for place in places {
        let Some(dir) = existing_local(place) else {
            continue;
        };
        let point = mount_of(&dir, &mounts).unwrap_or_else(|| PathBuf::from("/"));
        match volumes.iter_mut().find(|(p, _, _)| *p == point) {
            Some((_, on, _)) => on.push(place.to_string()),
            None => volumes.push((point, vec![place.to_string()], free_bytes(&dir))),
        }
    }
    volumes.sort_by_key(|(_, _, free)| free.unwrap_or(u64::MAX));
    volumes
        .into_iter()
        .map(|(point, on, free)| {
            let free = free.map_or_else(
                || "free space unknown".to_string(),
                |b| format!("{} free", bytesize::ByteSize(b)),
            );
            format!(
                "the volume mounted at {} holds {} ({free})",
                point.display(),
                on.join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
/dev/vda / ext4 rw,relatime 0 0
proc /proc proc rw 0 0
tmpfs /tmp tmpfs rw 0 0
/dev/vdb /mnt/big\\040disk xfs rw 0 0
/dev/vdc /mnt/big\\040disk/out ext4 rw 0 0
";

    #[test]
    fn a_path_is_on_the_longest_mount_point_above_it() {
        let cases = [
            ("/tmp/state", "/tmp"),
            ("/home/me/out", "/"),
            ("/mnt/big disk/state", "/mnt/big disk"),
            ("/mnt/big disk/out/part-0.parquet", "/mnt/big disk/out"),
            ("/mnt/big diskette", "/"),
        ];
        for (path, mount) in cases {
            assert_eq!(
                mount_of(Path::new(path), MOUNTS),
                Some(PathBuf::from(mount)),
                "{path}"
            );
        }
    }

    #[test]
    fn the_volumes_of_local_places_are_named_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("state"), dir.path().join("out"));
        let (a, b) = (a.display().to_string(), b.display().to_string());
        let lines = describe(&[&a, &b, "s3://bucket/out"]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains(&format!("holds {a}, {b} (")), "{lines:?}");
        assert!(lines[0].contains(" free)"), "{lines:?}");
    }
}
