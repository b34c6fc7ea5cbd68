//! Errors as they cross between daemons: every variant a tablet server or
//! master can answer keeps its meaning (a retryable one stays retryable), so
//! a client behaves the same whether the server is in its process or not.

use crate::Error;
use serde::{Deserialize, Serialize};

/// An [`Error`] in a form that can be sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum WireError {
    TableNotFound(String),
    TableExists(String),
    UnknownFamily {
        table: String,
        family: String,
    },
    FamilyNotEmpty(String),
    InvalidArgument(String),
    RowKeyTooLong(usize),
    ValueTooLarge {
        size: usize,
        limit: usize,
    },
    BadRegex {
        pattern: String,
        reason: String,
    },
    BadSchema {
        line: usize,
        reason: String,
    },
    BadFilter(String),
    BadGcRule(String),
    BadBatchEntry {
        index: usize,
        source: Box<WireError>,
    },
    NotACounter(usize),
    Corruption(String),
    Lock(String),
    ShuttingDown,
    NotServing {
        server: String,
        tablet: u64,
    },
    Unavailable(String),
    /// The store failed under the remote server (its message).
    Store(String),
    FilterTooLarge(String),
    DeletionProtected {
        table: String,
        what: String,
    },
    // After the others, so that the variants before keep their numbers on
    // the wire.
    SnapshotNotFound(String),
    SnapshotExists(String),
    OutcomeUnknown(String),
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> WireError {
        match e {
            Error::TableNotFound(s) => WireError::TableNotFound(s.clone()),
            Error::TableExists(s) => WireError::TableExists(s.clone()),
            Error::SnapshotNotFound(s) => WireError::SnapshotNotFound(s.clone()),
            Error::SnapshotExists(s) => WireError::SnapshotExists(s.clone()),
            Error::UnknownFamily { table, family } => WireError::UnknownFamily {
                table: table.clone(),
                family: family.clone(),
            },
            Error::FamilyNotEmpty(s) => WireError::FamilyNotEmpty(s.clone()),
            Error::InvalidArgument(s) => WireError::InvalidArgument(s.clone()),
            Error::RowKeyTooLong(n) => WireError::RowKeyTooLong(*n),
            Error::ValueTooLarge { size, limit } => WireError::ValueTooLarge {
                size: *size,
                limit: *limit,
            },
            Error::BadRegex { pattern, reason } => WireError::BadRegex {
                pattern: pattern.clone(),
                reason: reason.clone(),
            },
            Error::BadSchema { line, reason } => WireError::BadSchema {
                line: *line,
                reason: reason.clone(),
            },
            Error::BadFilter(s) => WireError::BadFilter(s.clone()),
            Error::BadGcRule(s) => WireError::BadGcRule(s.clone()),
            Error::BadBatchEntry { index, source } => WireError::BadBatchEntry {
                index: *index,
                source: Box::new(WireError::from(&**source)),
            },
            Error::NotACounter(n) => WireError::NotACounter(*n),
            Error::Corruption(s) => WireError::Corruption(s.clone()),
            Error::Lock(s) => WireError::Lock(s.clone()),
            Error::ShuttingDown => WireError::ShuttingDown,
            Error::NotServing { server, tablet } => WireError::NotServing {
                server: server.clone(),
                tablet: *tablet,
            },
            Error::Unavailable(s) => WireError::Unavailable(s.clone()),
            Error::OutcomeUnknown(s) => WireError::OutcomeUnknown(s.clone()),
            Error::FilterTooLarge(s) => WireError::FilterTooLarge(s.clone()),
            Error::DeletionProtected { table, what } => WireError::DeletionProtected {
                table: table.clone(),
                what: what.clone(),
            },
            Error::Fs(e) => WireError::Store(e.to_string()),
            Error::Shared(e) => WireError::from(&**e),
        }
    }
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Error {
        match e {
            WireError::TableNotFound(s) => Error::TableNotFound(s),
            WireError::TableExists(s) => Error::TableExists(s),
            WireError::SnapshotNotFound(s) => Error::SnapshotNotFound(s),
            WireError::SnapshotExists(s) => Error::SnapshotExists(s),
            WireError::UnknownFamily { table, family } => Error::UnknownFamily { table, family },
            WireError::FamilyNotEmpty(s) => Error::FamilyNotEmpty(s),
            WireError::InvalidArgument(s) => Error::InvalidArgument(s),
            WireError::RowKeyTooLong(n) => Error::RowKeyTooLong(n),
            WireError::ValueTooLarge { size, limit } => Error::ValueTooLarge { size, limit },
            WireError::BadRegex { pattern, reason } => Error::BadRegex { pattern, reason },
            WireError::BadSchema { line, reason } => Error::BadSchema { line, reason },
            WireError::BadFilter(s) => Error::BadFilter(s),
            WireError::BadGcRule(s) => Error::BadGcRule(s),
            WireError::BadBatchEntry { index, source } => Error::BadBatchEntry {
                index,
                source: Box::new(Error::from(*source)),
            },
            WireError::NotACounter(n) => Error::NotACounter(n),
            WireError::Corruption(s) => Error::Corruption(s),
            WireError::Lock(s) => Error::Lock(s),
            WireError::ShuttingDown => Error::ShuttingDown,
            WireError::NotServing { server, tablet } => Error::NotServing { server, tablet },
            WireError::Unavailable(s) => Error::Unavailable(s),
            WireError::OutcomeUnknown(s) => Error::OutcomeUnknown(s),
            WireError::FilterTooLarge(s) => Error::FilterTooLarge(s),
            WireError::DeletionProtected { table, what } => {
                Error::DeletionProtected { table, what }
            }
            WireError::Store(s) => Error::Fs(gfs::Error::Io {
                name: "a remote tablet server's store".into(),
                source: std::io::Error::other(s),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_errors_stay_retryable() {
        let e = Error::NotServing {
            server: "ts0".into(),
            tablet: 7,
        };
        let back = Error::from(WireError::from(&e));
        assert!(matches!(back, Error::NotServing { ref server, tablet: 7 } if server == "ts0"));
        let e = Error::Shared(std::sync::Arc::new(Error::Unavailable("x".into())));
        assert!(matches!(
            Error::from(WireError::from(&e)),
            Error::Unavailable(_)
        ));
    }
}
