//! Typed errors of the lock service. Each variant maps to one errno so that
//! the FUSE layer can answer a request without inspecting messages.

use std::io;

/// Errors returned by the lock service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such file or directory: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    Exists(String),
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    #[error("not a directory: {0}")]
    NotDir(String),
    #[error("is a directory: {0}")]
    IsDir(String),
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The operation needs ownership or root (POSIX EPERM, e.g. chmod by a non-owner).
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    #[error("contents are {size} bytes; the limit is {max}")]
    TooLarge { size: usize, max: usize },
    #[error("invalid name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("name too long: {0}")]
    NameTooLong(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Unknown or closed session or handle, or a handle lacking the access asked for.
    #[error("bad handle: {0}")]
    BadHandle(String),
    #[error("lock is held or in lock-delay")]
    WouldBlock,
    #[error("interrupted while waiting for a lock")]
    Interrupted,
    #[error("timed out waiting for a lock")]
    TimedOut,
    #[error("i/o error on {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("corruption: {0}")]
    Corruption(String),
}

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
