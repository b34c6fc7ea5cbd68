//! Errors of the object-store layer, and how they reach the file layer above.

use std::io;

/// What can go wrong talking to the object store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The options name no usable store (bad location, unreadable credentials).
    #[error("{0}")]
    Config(String),
    /// The store answered, and said no (missing bucket, wrong keys).
    #[error("{location}: {detail}")]
    Refused {
        /// `s3://bucket/prefix`.
        location: String,
        /// What the store said, in words.
        detail: String,
    },
    /// The store did not answer within the time limit.
    #[error("{location}: no answer within {secs} s: {detail}")]
    Unreachable {
        /// `s3://bucket/prefix`.
        location: String,
        /// The time limit.
        secs: u64,
        /// The last error seen.
        detail: String,
    },
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Maps an object-store error on `name` to the file layer's error: a missing
/// object is `NotFound`, a taken name `AlreadyExists`, anything else an I/O
/// error whose kind says whether the store was away (`TimedOut`).
pub(crate) fn to_gfs(name: &str, e: object_store::Error) -> gfs::Error {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => gfs::Error::NotFound(name.to_string()),
        E::AlreadyExists { .. } => gfs::Error::AlreadyExists(name.to_string()),
        E::Precondition { .. } => gfs::Error::Io {
            name: name.to_string(),
            source: io::Error::new(
                io::ErrorKind::PermissionDenied,
                "fenced: another daemon replaced this object (compare-and-swap failed)",
            ),
        },
        other => {
            let text = other.to_string();
            let kind = if is_timeout(&text) {
                io::ErrorKind::TimedOut
            } else {
                io::ErrorKind::Other
            };
            gfs::Error::Io {
                name: name.to_string(),
                source: io::Error::new(kind, format!("object store: {text}")),
            }
        }
    }
}

/// Whether an error's text says the store did not answer (as opposed to an
/// answer that refused the request).
pub(crate) fn is_timeout(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "timed out",
        "timeout",
        "connection refused",
        "connect",
        "retry",
        "dns error",
    ]
    .iter()
    .any(|w| t.contains(w))
}
