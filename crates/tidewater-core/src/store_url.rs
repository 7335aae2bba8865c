//! Opens an object store from what a user types: a local folder or a URL.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use url::Url;

use crate::error::{Error, Result};

/// An object store and the path prefix inside it.
#[derive(Debug, Clone)]
pub struct StoreLocation {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// Where inside the store everything lives.
    pub prefix: Path,
    /// What the user typed, for messages.
    pub display: String,
}

/// Opens `location`: a local folder (created when missing), `file://`, or
/// `memory://` (a fresh in-process store, for tests).
///
/// Other schemes (`s3://`, ...) come with the connectors that enable them.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let loc = tidewater_core::open_location(dir.path().to_str().unwrap()).unwrap();
/// assert_eq!(loc.prefix.as_ref(), "");
/// ```
pub fn open_location(location: &str) -> Result<StoreLocation> {
    if location.trim().is_empty() {
        return Err(Error::InvalidPipeline(
            "an empty storage location was given: pass a folder path or a URL such as file:///data"
                .into(),
        ));
    }
    let display = location.to_string();
    match Url::parse(location) {
        Ok(url) if url.scheme() == "memory" => Ok(StoreLocation {
            store: Arc::new(InMemory::new()),
            prefix: Path::from(url.path().trim_matches('/')),
            display,
        }),
        Ok(url) if url.scheme() == "file" => {
            let path = url.to_file_path().map_err(|()| {
                Error::InvalidPipeline(format!("'{location}' is not a valid file:// URL"))
            })?;
            local_folder(&path, display)
        }
        // A single letter is a Windows drive, not a scheme.
        Ok(url) if url.scheme().len() > 1 => Err(Error::InvalidPipeline(format!(
            "storage URL scheme '{}' in '{location}' is not supported by this build: \
             use a local folder, file://, or memory://",
            url.scheme()
        ))),
        _ => local_folder(std::path::Path::new(location), display),
    }
}

fn local_folder(path: &std::path::Path, display: String) -> Result<StoreLocation> {
    std::fs::create_dir_all(path).map_err(|e| Error::External {
        message: format!(
            "cannot create folder '{}': {e}; check the path and its permissions",
            path.display()
        ),
        retryable: false,
    })?;
    // fsync makes a completed checkpoint (and a committed output file) survive
    // a power loss, not only a killed process.
    let store = LocalFileSystem::new_with_prefix(path)
        .map_err(|e| Error::storage("open folder", path.display(), e))?
        .with_fsync(true);
    Ok(StoreLocation {
        store: Arc::new(store),
        prefix: Path::default(),
        display,
    })
}
