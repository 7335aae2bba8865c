//! The folders a deleted checkpoint leaves in a local state folder.
//!
//! An object store has no folders, but a local one does: deleting a
//! checkpoint's files leaves `chk-N/` and its operators' folders behind,
//! empty. Listing the state (which retention does after every checkpoint)
//! walks every one of them, so at one checkpoint a second a job that ran
//! for an hour walked 14,400 empty folders each time (~150 ms of CPU,
//! measured), and the cost kept growing with the job's age. Retention
//! removes a checkpoint's folders with its files, and a run sweeps the ones
//! a crash (or an older build) left behind when it starts.

use std::io;
use std::path::Path;

/// Removes `dir` and the folders under it, deepest first, where they hold
/// no file. Returns whether `dir` is gone (a missing `dir` counts as gone).
/// A folder that a file is written into meanwhile is left in place.
pub(crate) fn remove_empty_tree(dir: &Path) -> io::Result<bool> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e),
    };
    let mut empty = true;
    for entry in entries {
        let entry = entry?;
        if !(entry.file_type()?.is_dir() && remove_empty_tree(&entry.path())?) {
            empty = false;
        }
    }
    if !empty {
        return Ok(false);
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes every empty checkpoint folder tree (a child of `job_root` whose
/// name `is_checkpoint` accepts) and returns how many went. A missing
/// `job_root` has none.
pub(crate) fn sweep(job_root: &Path, is_checkpoint: impl Fn(&str) -> bool) -> io::Result<usize> {
    let entries = match std::fs::read_dir(job_root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if entry.file_type()?.is_dir()
            && name.to_str().is_some_and(&is_checkpoint)
            && remove_empty_tree(&entry.path())?
        {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }

    #[test]
    fn an_empty_tree_goes_and_one_with_a_file_stays_whole_where_it_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("chk-1");
        std::fs::create_dir_all(empty.join("aggregate")).unwrap();
        std::fs::create_dir_all(empty.join("source/deeper")).unwrap();
        assert!(remove_empty_tree(&empty).unwrap());
        assert!(!empty.exists());

        let kept = dir.path().join("chk-2");
        touch(&kept.join("aggregate/0.arrow"));
        std::fs::create_dir_all(kept.join("source")).unwrap();
        assert!(!remove_empty_tree(&kept).unwrap());
        assert!(kept.join("aggregate/0.arrow").exists());
        assert!(!kept.join("source").exists(), "its empty part goes");

        assert!(remove_empty_tree(&dir.path().join("missing")).unwrap());
    }

    #[test]
    fn a_sweep_takes_only_empty_checkpoint_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in ["chk-1/aggregate", "chk-2/aggregate", "_epochs", "other"] {
            std::fs::create_dir_all(root.join(name)).unwrap();
        }
        touch(&root.join("chk-3/_MANIFEST.json"));
        let removed = sweep(root, |name| name.starts_with("chk-")).unwrap();
        assert_eq!(removed, 2);
        let mut left: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["_epochs", "chk-3", "other"]);
        assert_eq!(sweep(&root.join("missing"), |_| true).unwrap(), 0);
    }
}
