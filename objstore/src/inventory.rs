//! What a prefix holds, read without taking it over (opening an
//! [`crate::S3Store`] would fence its owner): for operators, and for
//! checks that no object was ever overwritten.

use crate::client::Client;
use crate::config::S3Config;
use crate::error::{Error, Result};
use object_store::path::Path;

/// One object under a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    /// The full key, prefix included.
    pub key: String,
    /// The store's entity tag: a new one whenever the object is written.
    pub etag: Option<String>,
    /// Bytes.
    pub size: u64,
}

/// Every object under `cfg`'s prefix, in key order.
pub fn inventory(cfg: &S3Config) -> Result<Vec<StoredObject>> {
    let client = Client::connect(cfg)?;
    let listed = client
        .list(&Path::from(cfg.prefix.as_str()))
        .map_err(|e| Error::Refused {
            location: cfg.location(),
            detail: format!("listing: {e}"),
        })?;
    Ok(listed
        .into_iter()
        .map(|m| StoredObject {
            key: m.location.to_string(),
            etag: m.e_tag,
            size: m.size,
        })
        .collect())
}
