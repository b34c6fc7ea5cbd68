//! How the file layer's names become object keys under the store's prefix.
//!
//! - `PREFIX/files/NAME`: a file written once (an SSTable, a descriptor);
//! - `PREFIX/logs/NAME/SEQ`: one append to a log, `SEQ` 16 decimal digits,
//!   each created with put-if-absent; segment 0 is empty, written when the
//!   log is created; any other empty segment is a seal written by a daemon
//!   that took the prefix over;
//! - `PREFIX/OWNER`: which daemon owns the prefix, and its epoch (when one
//!   daemon owns it);
//! - `PREFIX/seals/DIR`: the logs in directory `DIR` are sealed (their
//!   server died and is being recovered; when several daemons share the
//!   prefix): no new log may start there.

use object_store::path::Path;

/// Digits of a log segment's sequence number.
const SEQ_DIGITS: usize = 16;

/// The key layout of one store.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys {
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        }
    }

    pub(crate) fn owner(&self) -> Path {
        Path::from(format!("{}OWNER", self.prefix))
    }

    /// The mark that the logs of directory `dir` are sealed.
    pub(crate) fn seal(&self, dir: &str) -> Path {
        Path::from(format!("{}seals/{dir}", self.prefix))
    }

    pub(crate) fn file(&self, name: &str) -> Path {
        Path::from(format!("{}files/{name}", self.prefix))
    }

    pub(crate) fn segment(&self, name: &str, seq: u64) -> Path {
        Path::from(format!(
            "{}logs/{name}/{seq:0w$}",
            self.prefix,
            w = SEQ_DIGITS
        ))
    }

    /// The directory holding a log's segments.
    pub(crate) fn log_dir(&self, name: &str) -> Path {
        Path::from(format!("{}logs/{name}", self.prefix))
    }

    /// The deepest whole directory that holds every file (or log) whose
    /// name starts with `prefix`: object listings go by whole path segments.
    pub(crate) fn files_dir_for(&self, prefix: &str) -> Path {
        Path::from(format!("{}files/{}", self.prefix, parent(prefix)))
    }

    pub(crate) fn logs_dir_for(&self, prefix: &str) -> Path {
        Path::from(format!("{}logs/{}", self.prefix, parent(prefix)))
    }

    /// The file name of a `files/` key.
    pub(crate) fn file_name<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(&self.prefix)?.strip_prefix("files/")
    }

    /// The log name and sequence number of a `logs/` key.
    pub(crate) fn segment_of<'a>(&self, key: &'a str) -> Option<(&'a str, u64)> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix("logs/")?;
        let (name, seq) = rest.rsplit_once('/')?;
        if seq.len() != SEQ_DIGITS {
            return None;
        }
        Some((name, seq.parse().ok()?))
    }
}

/// `a/b/c` -> `a/b`; `abc` -> ``.
pub(crate) fn parent(prefix: &str) -> &str {
    prefix.rsplit_once('/').map_or("", |(d, _)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let k = Keys::new("tables/prod");
        assert_eq!(
            k.file("sst/000001.sst").as_ref(),
            "tables/prod/files/sst/000001.sst"
        );
        let seg = k.segment("logs/ts-0/000002.log", 7);
        assert_eq!(
            seg.as_ref(),
            "tables/prod/logs/logs/ts-0/000002.log/0000000000000007"
        );
        assert_eq!(
            k.segment_of(seg.as_ref()),
            Some(("logs/ts-0/000002.log", 7))
        );
        assert_eq!(
            k.file_name("tables/prod/files/sst/000001.sst"),
            Some("sst/000001.sst")
        );
        assert_eq!(
            k.files_dir_for("sst/0001").as_ref(),
            "tables/prod/files/sst"
        );
        assert_eq!(k.files_dir_for("x").as_ref(), "tables/prod/files");
        assert_eq!(Keys::new("").owner().as_ref(), "OWNER");
        assert_eq!(k.seal("logs/ts-0").as_ref(), "tables/prod/seals/logs/ts-0");
    }
}
