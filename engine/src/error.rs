//! Typed errors of the engine. Every malformed input maps to a variant that
//! says what was wrong; nothing is applied when one is returned.

/// Errors returned by the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("table not found: {0}")]
    TableNotFound(String),
    #[error("table already exists: {0}")]
    TableExists(String),
    #[error("unknown column family {family:?} in table {table}")]
    UnknownFamily { table: String, family: String },
    #[error("column family {0:?} still holds data")]
    FamilyNotEmpty(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("row key is {0} bytes; the limit is 65536")]
    RowKeyTooLong(usize),
    #[error("value is {size} bytes; the limit is {limit}")]
    ValueTooLarge { size: usize, limit: usize },
    #[error("invalid regex {pattern:?}: {reason}")]
    BadRegex { pattern: String, reason: String },
    #[error("invalid schema, line {line}: {reason}")]
    BadSchema { line: usize, reason: String },
    #[error("invalid row filter: {0}")]
    BadFilter(String),
    #[error("invalid garbage-collection rule: {0}")]
    BadGcRule(String),
    #[error("batch entry {index}: {source}")]
    BadBatchEntry {
        index: usize,
        #[source]
        source: Box<Error>,
    },
    #[error("cell is not a 64-bit big-endian counter ({0} bytes)")]
    NotACounter(usize),
    #[error("counter overflow")]
    CounterOverflow,
    #[error("corruption: {0}")]
    Corruption(String),
    #[error("lock service: {0}")]
    Lock(String),
    #[error("engine is shutting down")]
    ShuttingDown,
    /// The tablet server does not serve that tablet (any more): it moved,
    /// split, or the server lost its lock. Clients look the tablet up again.
    #[error("tablet server {server} does not serve tablet {tablet}")]
    NotServing { server: String, tablet: u64 },
    /// No tablet server could serve the request before the retry deadline.
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Fs(#[from] gfs::Error),
    /// One failure delivered to several callers (e.g. every item of a failed
    /// group commit); [`Error::root`] gives the underlying error.
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn corruption(what: impl Into<String>) -> Self {
        Error::Corruption(what.into())
    }
    pub fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument(what.into())
    }
    /// The error itself, or the one a [`Error::Shared`] wraps (for matching
    /// on the cause, e.g. to pick an errno).
    pub fn root(&self) -> &Error {
        match self {
            Error::Shared(inner) => inner.root(),
            other => other,
        }
    }
}
