//! The one place where engine errors become errno values.
//!
//! The match is exhaustive: a variant added to the engine's error type does
//! not compile until it is given an errno here.

use fuser::Errno;

/// The errno a failed engine call is reported with.
pub fn errno(e: &engine::Error) -> Errno {
    use engine::Error as E;
    match e {
        E::TableNotFound(_) => Errno::ENOENT,
        E::TableExists(_) => Errno::EEXIST,
        E::SnapshotNotFound(_) => Errno::ENOENT,
        E::SnapshotExists(_) => Errno::EEXIST,
        E::UnknownFamily { .. } => Errno::ENOENT,
        E::FamilyNotEmpty(_) => Errno::ENOTEMPTY,
        E::DeletionProtected { .. } => Errno::EPERM,
        E::InvalidArgument(_) => Errno::EINVAL,
        E::RowKeyTooLong(_) => Errno::ENAMETOOLONG,
        E::ValueTooLarge { .. } => Errno::EFBIG,
        E::BadRegex { .. } | E::BadFilter(_) => Errno::EINVAL,
        // A filter whose evaluation would grow without bound: the scan is
        // refused, as an argument list too long is.
        E::FilterTooLarge(_) => Errno::E2BIG,
        E::BadSchema { .. } => Errno::EINVAL,
        E::BadGcRule(_) => Errno::EINVAL,
        E::BadBatchEntry { source, .. } => errno(source),
        E::NotACounter(_) => Errno::EINVAL,
        E::Corruption(_) => Errno::EIO,
        E::ShuttingDown => Errno::from_i32(libc::ESHUTDOWN),
        E::Lock(_) => Errno::EIO,
        // The write may or may not have been applied: an I/O error, as a
        // disk that failed mid-write gives.
        E::OutcomeUnknown(_) => Errno::EIO,
        // The client retries these until its deadline; what is left is
        // "try again later" (a tablet still moving or recovering).
        E::NotServing { .. } | E::Unavailable(_) => Errno::EAGAIN,
        E::Fs(_) => storage_errno(e),
        E::Shared(inner) => errno(inner),
    }
}

/// A storage failure: out of space, quota or a read-only or unreadable
/// data directory is said precisely; anything else is EIO. The OS error is
/// found on the error's source chain, so this needs no storage-layer types.
fn storage_errno(e: &engine::Error) -> Errno {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return match io.raw_os_error() {
                Some(code @ (libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EACCES)) => {
                    Errno::from_i32(code)
                }
                _ => Errno::EIO,
            };
        }
        cause = c.source();
    }
    Errno::EIO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precise_errnos() {
        use engine::Error as E;
        assert_eq!(errno(&E::TableNotFound("t".into())), Errno::ENOENT);
        assert_eq!(
            errno(&E::UnknownFamily {
                table: "t".into(),
                family: "f".into()
            }),
            Errno::ENOENT
        );
        assert_eq!(errno(&E::FamilyNotEmpty("f".into())), Errno::ENOTEMPTY);
        assert_eq!(errno(&E::ValueTooLarge { size: 2, limit: 1 }), Errno::EFBIG);
        assert_eq!(errno(&E::RowKeyTooLong(70000)), Errno::ENAMETOOLONG);
        assert_eq!(
            errno(&E::BadSchema {
                line: 1,
                reason: "x".into()
            }),
            Errno::EINVAL
        );
        let nested = E::BadBatchEntry {
            index: 3,
            source: Box::new(E::ValueTooLarge { size: 2, limit: 1 }),
        };
        assert_eq!(errno(&nested), Errno::EFBIG);
        assert_eq!(errno(&E::Corruption("x".into())), Errno::EIO);
        let full = E::Fs(gfs::Error::Io {
            name: "x".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        });
        assert_eq!(errno(&full), Errno::from_i32(libc::ENOSPC));
        let shared = E::Shared(std::sync::Arc::new(E::ValueTooLarge { size: 2, limit: 1 }));
        assert_eq!(errno(&shared), Errno::EFBIG);
    }
}
