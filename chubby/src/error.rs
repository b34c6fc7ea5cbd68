//! Typed errors of the lock service. Each variant maps to one errno so that
//! the FUSE layer can answer a request without inspecting messages.

use std::io;

/// Errors returned by the lock service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No node at the path (ENOENT).
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// A node already has the name (EEXIST).
    #[error("already exists: {0}")]
    Exists(String),
    /// A directory to remove or replace has entries (ENOTEMPTY).
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// A path component or the target is a file where a directory is needed (ENOTDIR).
    #[error("not a directory: {0}")]
    NotDir(String),
    /// A file operation was asked of a directory (EISDIR).
    #[error("is a directory: {0}")]
    IsDir(String),
    /// The mode bits refuse the caller (EACCES).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The operation needs ownership or root (POSIX EPERM, e.g. chmod by a non-owner).
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// File contents over [`crate::MAX_CONTENTS`] (EFBIG).
    #[error("contents are {size} bytes; the limit is {max}")]
    TooLarge {
        /// Bytes offered.
        size: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// A malformed name or path: empty, `.` or `..`, with '/' or NUL, or not absolute (EINVAL).
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name or path.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A user's nodes or bytes in the cell over the cell's quota (EDQUOT).
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A name over 255 bytes or a path over 4096 (ENAMETOOLONG).
    #[error("name too long: {0}")]
    NameTooLong(String),
    /// An argument out of range or not allowed here (EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Unknown or closed session or handle, or a handle lacking the access asked for.
    #[error("bad handle: {0}")]
    BadHandle(String),
    /// `try_lock` could not take the lock at once (EWOULDBLOCK).
    #[error("lock is held or in lock-delay")]
    WouldBlock,
    /// A lock wait was cancelled by its caller (EINTR).
    #[error("interrupted while waiting for a lock")]
    Interrupted,
    /// A lock wait reached its deadline (ETIMEDOUT).
    #[error("timed out waiting for a lock")]
    TimedOut,
    /// The cell's log or snapshot could not be read or written.
    #[error("i/o error on {context}: {source}")]
    Io {
        /// What was being done, and to which file.
        context: String,
        /// The underlying error, whose errno is passed on.
        #[source]
        source: io::Error,
    },
    /// The log or a snapshot on disk does not decode (EIO).
    #[error("corruption: {0}")]
    Corruption(String),
}

/// Results of the lock service.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corruption(what: impl Into<String>) -> Self {
        Error::Corruption(what.into())
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument(what.into())
    }

    /// The errno a filesystem should answer with for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_) => libc::ENOENT,
            Error::Exists(_) => libc::EEXIST,
            Error::NotEmpty(_) => libc::ENOTEMPTY,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::IsDir(_) => libc::EISDIR,
            Error::PermissionDenied(_) => libc::EACCES,
            Error::NotPermitted(_) => libc::EPERM,
            Error::TooLarge { .. } => libc::EFBIG,
            Error::QuotaExceeded(_) => libc::EDQUOT,
            Error::InvalidName { .. } | Error::InvalidArgument(_) => libc::EINVAL,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::BadHandle(_) => libc::EBADF,
            Error::WouldBlock => libc::EWOULDBLOCK,
            Error::Interrupted => libc::EINTR,
            Error::TimedOut => libc::ETIMEDOUT,
            // A disk error keeps its own errno (ENOSPC is worth telling apart).
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Corruption(_) => libc::EIO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        assert_eq!(Error::NotFound("/a".into()).errno(), libc::ENOENT);
        assert_eq!(Error::WouldBlock.errno(), libc::EAGAIN);
        assert_eq!(Error::TooLarge { size: 1, max: 0 }.errno(), libc::EFBIG);
        assert_eq!(Error::NotPermitted("x".into()).errno(), libc::EPERM);
        let nospc = Error::io("wal", io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(nospc.errno(), libc::ENOSPC);
        let other = Error::io("wal", io::Error::other("boom"));
        assert_eq!(other.errno(), libc::EIO);
    }
}
