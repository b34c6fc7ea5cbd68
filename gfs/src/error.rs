use std::io;

/// Errors of the file layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No file has the name.
    #[error("file not found: {0}")]
    NotFound(String),
    /// A file with the name exists already (creates never overwrite).
    #[error("file already exists: {0}")]
    AlreadyExists(String),
    /// The name is not a valid store name: the name, and why.
    #[error("invalid file name {0:?}: {1}")]
    InvalidName(String, &'static str),
    /// A read asked for bytes past the end of the file.
    #[error(
        "short read of {name} at offset {offset}: wanted {wanted} bytes, file has {available}"
    )]
    ShortRead {
        /// The file read.
        name: String,
        /// Where the read started.
        offset: u64,
        /// Bytes asked for.
        wanted: usize,
        /// The file's length.
        available: u64,
    },
    /// Stored bytes fail their checksum or do not decode.
    #[error("corruption in {name}: {detail}")]
    Corruption {
        /// The file (or the master's log or checkpoint) affected.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// An operation on the disk failed (in a cluster: on every replica tried).
    #[error("I/O error on {name}: {source}")]
    Io {
        /// The file, or what was being done.
        name: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Results of the file layer.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(name: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            name: name.into(),
            source,
        }
    }
}
