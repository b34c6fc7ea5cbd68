//! Typed errors of the engine. Every malformed input maps to a variant that
//! says what was wrong; nothing is applied when one is returned.

/// Errors returned by the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No table of that name.
    #[error("table not found: {0}")]
    TableNotFound(String),
    /// A table of that name exists already.
    #[error("table already exists: {0}")]
    TableExists(String),
    /// No snapshot of that name (`table/name`).
    #[error("snapshot not found: {0}")]
    SnapshotNotFound(String),
    /// A snapshot of that name exists already (`table/name`).
    #[error("snapshot already exists: {0}")]
    SnapshotExists(String),
    /// A mutation or read names a family the table's schema does not have.
    #[error("unknown column family {family:?} in table {table}")]
    UnknownFamily {
        /// The table the mutation or read named.
        table: String,
        /// The family its schema lacks.
        family: String,
    },
    /// A schema change would drop a family that still has cells.
    #[error("column family {0:?} still holds data")]
    FamilyNotEmpty(String),
    /// The table has deletion protection: deleting it or dropping a family
    /// is refused until it is turned off.
    #[error("table {table} has deletion protection: {what} is refused (turn it off first)")]
    DeletionProtected {
        /// The protected table.
        table: String,
        /// What was refused.
        what: String,
    },
    /// A request that is malformed in itself (names, ranges, limits).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A row key above [`crate::MAX_ROW_KEY`] bytes.
    #[error("row key is {0} bytes; the limit is 65536")]
    RowKeyTooLong(usize),
    /// A cell value above the configured limit.
    #[error("value is {size} bytes; the limit is {limit}")]
    ValueTooLarge {
        /// Bytes of the value.
        size: usize,
        /// The configured limit ([`crate::Options`]).
        limit: usize,
    },
    /// A column or filter regex that does not compile.
    #[error("invalid regex {pattern:?}: {reason}")]
    BadRegex {
        /// The pattern as given.
        pattern: String,
        /// Why it was refused (the regex compiler's message).
        reason: String,
    },
    /// `.schema` text or a schema change that is refused.
    #[error("invalid schema, line {line}: {reason}")]
    BadSchema {
        /// 1-based line of the `.schema` text (0: the schema as a whole).
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A row filter that is malformed or too large.
    #[error("invalid row filter: {0}")]
    BadFilter(String),
    /// A row filter whose evaluation or compilation goes over its limits
    /// ([`crate::filter::FilterLimits`]).
    #[error("row filter too costly: {0}")]
    FilterTooLarge(String),
    /// A garbage-collection rule that is malformed or too deep.
    #[error("invalid garbage-collection rule: {0}")]
    BadGcRule(String),
    /// One entry of a batch was refused (nothing of the batch is applied).
    #[error("batch entry {index}: {source}")]
    BadBatchEntry {
        /// Position of the entry in the batch.
        index: usize,
        /// Why it was refused.
        #[source]
        source: Box<Error>,
    },
    /// An increment of a cell whose value is not 8 bytes.
    #[error("cell is not a 64-bit big-endian counter ({0} bytes)")]
    NotACounter(usize),
    /// Stored data that fails its checks (checksums, framing, decoding).
    #[error("corruption: {0}")]
    Corruption(String),
    /// The lock service refused or failed a call.
    #[error("lock service: {0}")]
    Lock(String),
    /// The engine is closing and takes no more work.
    #[error("engine is shutting down")]
    ShuttingDown,
    /// The tablet server does not serve that tablet (any more): it moved,
    /// split, or the server lost its lock. Clients look the tablet up again.
    #[error("tablet server {server} does not serve tablet {tablet}")]
    NotServing {
        /// The server asked.
        server: String,
        /// The tablet it was asked about.
        tablet: u64,
    },
    /// No tablet server could serve the request before the retry deadline.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A write reached a server that failed before answering: it may or
    /// may not have been applied. Not retried (a second try could apply
    /// it twice: two versions of a cell, two change records).
    #[error("the outcome of a write is unknown: {0}")]
    OutcomeUnknown(String),
    /// The file store failed.
    #[error(transparent)]
    Fs(#[from] gfs::Error),
    /// One failure delivered to several callers (e.g. every item of a failed
    /// group commit); [`Error::root`] gives the underlying error.
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

/// The engine's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error with `table` named in an `UnknownFamily` that names none
    /// (mutation checks, which see only the schema, leave it to the caller).
    pub fn in_table(self, table: &str) -> Error {
        match self {
            Error::UnknownFamily { table: t, family } if t.is_empty() => Error::UnknownFamily {
                table: table.to_string(),
                family,
            },
            Error::BadBatchEntry { index, source } => Error::BadBatchEntry {
                index,
                source: Box::new(source.in_table(table)),
            },
            other => other,
        }
    }

    /// Whether a request named a family its table's schema lacks (itself
    /// or in a batch entry).
    pub fn is_unknown_family(&self) -> bool {
        match self {
            Error::UnknownFamily { .. } => true,
            Error::BadBatchEntry { source, .. } => source.is_unknown_family(),
            _ => false,
        }
    }

    /// An [`Error::Corruption`] saying what failed its checks.
    pub fn corruption(what: impl Into<String>) -> Self {
        Error::Corruption(what.into())
    }
    /// An [`Error::InvalidArgument`] saying what was wrong.
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
