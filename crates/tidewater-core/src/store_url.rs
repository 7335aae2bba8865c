//! Opens an object store from what a user types: a local folder or a URL.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use url::Url;

use crate::error::{Error, Result};

/// An object store and the path prefix inside it.
#[derive(Clone)]
pub struct StoreLocation {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// The same store's resumable multipart-upload API, where it has one
    /// (S3, GCS, Azure, memory): an upload started by one process can be
    /// continued and completed by another.
    pub multipart: Option<Arc<dyn MultipartStore>>,
    /// The folder, when the store is a local one: the local store hides the
    /// temporary files a killed write leaves (`name#N`), so cleaning them up
    /// needs the file system itself.
    pub local_folder: Option<std::path::PathBuf>,
    /// Where inside the store everything lives.
    pub prefix: Path,
    /// What the user typed, for messages.
    pub display: String,
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLocation")
            .field("store", &self.store)
            .field("multipart", &self.multipart.is_some())
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Opens `location`: a local folder (created when missing), `file://`,
/// `memory://` (a fresh in-process store, for tests), or, with the `cloud`
/// feature, `s3://bucket/prefix`, `gs://bucket/prefix` and
/// `az://container/prefix`.
///
/// Cloud credentials and endpoints come from the environment, as the
/// providers' own tools read them: `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT` (an S3-compatible
/// server), `AWS_ALLOW_HTTP=true` (a server without TLS);
/// `GOOGLE_SERVICE_ACCOUNT`; `AZURE_STORAGE_ACCOUNT_NAME`,
/// `AZURE_STORAGE_ACCOUNT_KEY`.
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
        Ok(url) if url.scheme() == "memory" => {
            let store = Arc::new(InMemory::new());
            Ok(StoreLocation {
                store: store.clone(),
                multipart: Some(store),
                local_folder: None,
                prefix: Path::from(url.path().trim_matches('/')),
                display,
            })
        }
        Ok(url) if url.scheme() == "file" => {
            let path = url.to_file_path().map_err(|()| {
                Error::InvalidPipeline(format!("'{location}' is not a valid file:// URL"))
            })?;
            local_folder(&path, display)
        }
        // A single letter is a Windows drive, not a scheme.
        Ok(url) if url.scheme().len() > 1 => cloud::open(&url, display),
        _ => local_folder(std::path::Path::new(location), display),
    }
}

/// The file that a local folder store keeps under `folder` for an object
/// path given as its segments (each segment is one directory level).
///
/// ```
/// let file = tidewater_core::local_file(std::path::Path::new("/state"), "job/chk-1/a.arrow".split('/'));
/// assert_eq!(file, std::path::Path::new("/state/job/chk-1/a.arrow"));
/// ```
pub fn local_file(
    folder: &std::path::Path,
    segments: impl IntoIterator<Item = impl AsRef<str>>,
) -> std::path::PathBuf {
    segments
        .into_iter()
        .fold(folder.to_path_buf(), |dir, segment| {
            dir.join(segment.as_ref())
        })
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
        multipart: None,
        local_folder: Some(path.to_path_buf()),
        prefix: Path::default(),
        display,
    })
}

#[cfg(feature = "cloud")]
mod cloud {
    use std::sync::Arc;

    use object_store::aws::AmazonS3Builder;
    use object_store::azure::MicrosoftAzureBuilder;
    use object_store::gcp::GoogleCloudStorageBuilder;
    use object_store::multipart::MultipartStore;
    use object_store::{ObjectStore, ObjectStoreScheme};
    use url::Url;

    use super::{StoreLocation, unsupported};
    use crate::error::{Error, NO_CREDENTIALS, Result};

    type Both = (Arc<dyn ObjectStore>, Arc<dyn MultipartStore>);

    /// A built store, as both of the interfaces tidewater uses.
    fn both<S: ObjectStore + MultipartStore>(
        built: object_store::Result<S>,
    ) -> object_store::Result<Both> {
        built.map(|store| {
            let store = Arc::new(store);
            (store.clone() as _, store as _)
        })
    }

    /// Whether the environment names a source of S3 credentials other than
    /// the cloud instance-metadata endpoint.
    pub(super) fn s3_credentials_configured(var: impl Fn(&str) -> Option<String>) -> bool {
        let set = |name: &str| var(name).is_some_and(|v| !v.is_empty());
        (set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"))
            || set("AWS_WEB_IDENTITY_TOKEN_FILE")
            || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
            || set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            || var("AWS_SKIP_SIGNATURE").is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// Whether the instance-metadata lookup is turned off
    /// (`AWS_EC2_METADATA_DISABLED=true`, as the AWS tools spell it).
    pub(super) fn metadata_lookup_disabled(var: impl Fn(&str) -> Option<String>) -> bool {
        var("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// Opens an `s3://`, `gs://` or `az://` URL with credentials from the environment.
    pub(super) fn open(url: &Url, display: String) -> Result<StoreLocation> {
        let (scheme, prefix) = ObjectStoreScheme::parse(url).map_err(|_| unsupported(url))?;
        let url_text = url.as_str();
        let built = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                if !s3_credentials_configured(|name| std::env::var(name).ok())
                    && metadata_lookup_disabled(|name| std::env::var(name).ok())
                {
                    return Err(Error::InvalidConfig(format!(
                        "cannot open '{display}': no S3 credentials were found. {NO_CREDENTIALS}"
                    )));
                }
                both(AmazonS3Builder::from_env().with_url(url_text).build())
            }
            ObjectStoreScheme::GoogleCloudStorage => both(
                GoogleCloudStorageBuilder::from_env()
                    .with_url(url_text)
                    .build(),
            ),
            ObjectStoreScheme::MicrosoftAzure => {
                both(MicrosoftAzureBuilder::from_env().with_url(url_text).build())
            }
            _ => return Err(unsupported(url)),
        };
        let (store, multipart) = built.map_err(|e| {
            Error::InvalidPipeline(format!(
                "cannot open '{display}': {e}; check the URL and the credentials in the environment \
                 (docs/connectors/parquet.md lists the variables)"
            ))
        })?;
        Ok(StoreLocation {
            store,
            multipart: Some(multipart),
            local_folder: None,
            prefix,
            display,
        })
    }
}

#[cfg(not(feature = "cloud"))]
mod cloud {
    use url::Url;

    use super::{StoreLocation, unsupported};
    use crate::error::Result;

    pub(super) fn open(url: &Url, _display: String) -> Result<StoreLocation> {
        Err(unsupported(url))
    }
}

fn unsupported(url: &Url) -> Error {
    let cloud = if cfg!(feature = "cloud") {
        ", s3://, gs://, az://"
    } else {
        " (s3://, gs:// and az:// need the `cloud` feature)"
    };
    Error::InvalidPipeline(format!(
        "storage URL scheme '{}' in '{url}' is not supported: use a local folder, file://, memory://{cloud}",
        url.scheme()
    ))
}

#[cfg(all(test, feature = "cloud"))]
mod tests {
    use super::cloud::{metadata_lookup_disabled, s3_credentials_configured};

    #[test]
    fn where_s3_credentials_come_from() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        // (environment, credentials configured)
        let cases: &[(&'static [(&'static str, &'static str)], bool)] = &[
            (&[], false),
            (&[("AWS_ACCESS_KEY_ID", "a")], false),
            (
                &[("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b")],
                true,
            ),
            (
                &[("AWS_ACCESS_KEY_ID", ""), ("AWS_SECRET_ACCESS_KEY", "b")],
                false,
            ),
            (&[("AWS_WEB_IDENTITY_TOKEN_FILE", "/t")], true),
            (&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/x")], true),
            (&[("AWS_SKIP_SIGNATURE", "true")], true),
            (&[("AWS_SKIP_SIGNATURE", "false")], false),
        ];
        for (pairs, want) in cases {
            assert_eq!(s3_credentials_configured(env(pairs)), *want, "{pairs:?}");
        }
        assert!(metadata_lookup_disabled(env(&[(
            "AWS_EC2_METADATA_DISABLED",
            "TRUE"
        )])));
        assert!(!metadata_lookup_disabled(env(&[(
            "AWS_EC2_METADATA_DISABLED",
            "false"
        )])));
        assert!(!metadata_lookup_disabled(env(&[])));
    }
}

/// `url` without its password, for messages and logs:
/// `postgres://user:***@host/db`.
///
/// ```
/// assert_eq!(
///     tidewater_core::redact_url("postgres://me:secret@db:5432/x"),
///     "postgres://me:***@db:5432/x"
/// );
/// assert_eq!(tidewater_core::redact_url("sqlite:///tmp/j.sqlite"), "sqlite:///tmp/j.sqlite");
/// ```
pub fn redact_url(url: &str) -> String {
    match url.split_once('@') {
        Some((head, tail)) => match head.rsplit_once(':') {
            Some((user, _)) if user.contains("//") => format!("{user}:***@{tail}"),
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}
