//! Engine errors as the API's status codes.

use engine::Error;
use tonic::{Code, Status};

/// The status code the API uses for an engine error.
pub fn code(e: &Error) -> Code {
    match e.root() {
        Error::TableNotFound(_) => Code::NotFound,
        Error::TableExists(_) | Error::SnapshotExists(_) => Code::AlreadyExists,
        Error::SnapshotNotFound(_) => Code::NotFound,
        Error::UnknownFamily { .. } => Code::NotFound,
        Error::FamilyNotEmpty(_) | Error::DeletionProtected { .. } => Code::FailedPrecondition,
        Error::InvalidArgument(_)
        | Error::RowKeyTooLong(_)
        | Error::ValueTooLarge { .. }
        | Error::BadRegex { .. }
        | Error::BadSchema { .. }
        | Error::BadFilter(_)
        | Error::BadGcRule(_)
        | Error::NotACounter(_) => Code::InvalidArgument,
        Error::BadBatchEntry { source, .. } => code(source),
        Error::ShuttingDown | Error::Unavailable(_) | Error::NotServing { .. } => Code::Unavailable,
        // Not Unavailable: clients retry that, and a retry could apply the
        // write twice.
        Error::OutcomeUnknown(_) => Code::Unknown,
        // One row's filter output over its bound: the caller's request
        // costs too much, as Cloud Bigtable says of oversized responses.
        Error::FilterTooLarge(_) => Code::ResourceExhausted,
        _ => Code::Internal,
    }
}

/// An engine error as a status with its message.
pub fn from_engine(e: Error) -> Status {
    let inner = match e.root() {
        Error::BadBatchEntry { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    Status::new(code(&e), inner)
}

/// A status as the `google.rpc.Status` message of per-entry results.
pub fn to_rpc(s: &Status) -> googleapis_tonic_google_rpc::google::rpc::Status {
    googleapis_tonic_google_rpc::google::rpc::Status {
        code: s.code() as i32,
        message: s.message().to_string(),
        details: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(code(&Error::TableNotFound("t".into())), Code::NotFound);
        assert_eq!(code(&Error::TableExists("t".into())), Code::AlreadyExists);
        let wrapped = Error::BadBatchEntry {
            index: 2,
            source: Box::new(Error::RowKeyTooLong(70000)),
        };
        assert_eq!(code(&wrapped), Code::InvalidArgument);
        assert_eq!(from_engine(wrapped).code(), Code::InvalidArgument);
    }
}
