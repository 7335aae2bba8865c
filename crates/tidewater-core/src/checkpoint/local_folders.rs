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
//!
//! More things a local folder does its own way, to cost less per
//! checkpoint: which folders to sync before a manifest is written
//! ([`changed_by`]), and listing the checkpoints ([`list`]) and the epochs
//! ([`file_names`]).

use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use crate::ids::CheckpointId;

/// The entries of `dir`, or `None` when it is missing (a checkpoint
/// deleted meanwhile, or a job that never wrote one).
fn read_dir_if_present(dir: &Path) -> io::Result<Option<std::fs::ReadDir>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(Some(entries)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The folders whose entries a checkpoint's new blobs changed, relative to
/// the checkpoint's own folder and deepest first: each blob's folder and
/// every folder above it, ending with `""`, the checkpoint's folder, whose
/// own entry in the job's folder is the caller's to add. `blob_paths` are
/// the `/`-separated paths of the blobs written in this checkpoint (not of
/// those an incremental chain lists from earlier ones).
///
/// ```text
/// ["aggregate/0.arrow", "aggregate/1.arrow", "source/0.arrow"]
///     -> ["aggregate", "source", ""]
/// ```
pub(crate) fn changed_by<'a>(blob_paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut folders = BTreeSet::new();
    for path in blob_paths {
        let mut folder = path;
        while let Some((parent, _)) = folder.rsplit_once('/') {
            folders.insert(parent);
            folder = parent;
        }
        folders.insert("");
    }
    let mut folders: Vec<String> = folders.into_iter().map(str::to_string).collect();
    // Deepest first, so that each folder is synced before the one holding it.
    folders.sort_by_key(|f| {
        let depth = if f.is_empty() {
            0
        } else {
            f.matches('/').count() + 1
        };
        std::cmp::Reverse(depth)
    });
    folders
}

/// Ids of every checkpoint with a manifest (`manifest` directly in its
/// folder) and of every checkpoint folder holding a file, both ascending:
/// what listing the local object store finds, without reading the
/// metadata of each file it holds. Children of `job_root` whose names
/// `parse` gives no id are not checkpoints. Temporaries of the object
/// store's own writes (`name#digits`) are not files, as for the store.
pub(crate) fn list(
    job_root: &Path,
    manifest: &str,
    parse: impl Fn(&str) -> Option<CheckpointId>,
) -> io::Result<(Vec<CheckpointId>, Vec<CheckpointId>)> {
    let mut complete = Vec::new();
    let mut folders = Vec::new();
    let Some(entries) = read_dir_if_present(job_root)? else {
        return Ok((complete, folders));
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(&parse) else {
            continue;
        };
        // A file where a checkpoint's folder should be is listed as the
        // store lists it: a folder without a manifest.
        let (has_manifest, has_file) = match entry.file_type()?.is_dir() {
            true => look_into(&entry.path(), Some(manifest))?,
            false => (false, !is_staged_upload(&name.to_string_lossy())),
        };
        if has_file {
            folders.push(id);
        }
        if has_manifest {
            complete.push(id);
        }
    }
    complete.sort_unstable();
    folders.sort_unstable();
    Ok((complete, folders))
}

/// The names of the files directly in `dir`, as the local object store
/// lists them (its own temporaries left out); none when `dir` is missing.
pub(crate) fn file_names(dir: &Path) -> io::Result<Vec<String>> {
    let Some(entries) = read_dir_if_present(dir)? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type()?.is_dir() && !is_staged_upload(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// Whether `dir` holds a file named `manifest` directly, and whether its
/// tree holds any file. A folder removed meanwhile holds neither.
fn look_into(dir: &Path, manifest: Option<&str>) -> io::Result<(bool, bool)> {
    let Some(entries) = read_dir_if_present(dir)? else {
        return Ok((false, false));
    };
    let (mut has_manifest, mut has_file) = (false, false);
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if entry.file_type()?.is_dir() {
            if !has_file {
                has_file = look_into(&entry.path(), None)?.1;
            }
        } else if !is_staged_upload(&name.to_string_lossy()) {
            has_file = true;
            has_manifest |= manifest.is_some_and(|m| name == m);
        }
        if has_file && (has_manifest || manifest.is_none()) {
            break;
        }
    }
    Ok((has_manifest, has_file))
}

/// A temporary of the local object store's own writes, `name#digits`,
/// which it does not list.
fn is_staged_upload(name: &str) -> bool {
    match name.split_once('#') {
        Some((_, suffix)) => !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Removes `dir` and the folders under it, deepest first, where they hold
/// no file. Returns whether `dir` is gone (a missing `dir` counts as gone).
/// A folder that a file is written into meanwhile is left in place.
pub(crate) fn remove_empty_tree(dir: &Path) -> io::Result<bool> {
    let Some(entries) = read_dir_if_present(dir)? else {
        return Ok(true);
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
    let Some(entries) = read_dir_if_present(job_root)? else {
        return Ok(0);
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
    fn the_folders_to_sync_are_those_of_the_new_blobs_deepest_first() {
        for (paths, expected) in [
            (vec![], vec![]),
            (vec!["aggregate/0.arrow"], vec!["aggregate", ""]),
            (
                vec!["source/1.arrow", "aggregate/0.arrow", "source/0.arrow"],
                vec!["aggregate", "source", ""],
            ),
            (vec!["a/b/0.arrow", "c/0.arrow"], vec!["a/b", "a", "c", ""]),
            (vec!["top.arrow"], vec![""]),
        ] {
            assert_eq!(changed_by(paths.iter().copied()), expected, "{paths:?}");
        }
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
