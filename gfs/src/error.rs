use std::io;

/// Errors of the file layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("file not found: {0}")]
    NotFound(String),
    #[error("file already exists: {0}")]
    AlreadyExists(String),
    #[error("invalid file name {0:?}: {1}")]
    InvalidName(String, &'static str),
    #[error(
        "short read of {name} at offset {offset}: wanted {wanted} bytes, file has {available}"
    )]
    ShortRead {
        name: String,
        offset: u64,
        wanted: usize,
        available: u64,
    },
    #[error("corruption in {name}: {detail}")]
    Corruption { name: String, detail: String },
    #[error("I/O error on {name}: {source}")]
    Io {
        name: String,
        #[source]
        source: io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(name: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            name: name.into(),
            source,
        }
    }
}
