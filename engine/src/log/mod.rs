//! The tablet server's commit log (paper sections 5.3 and 6).
//!
//! One log per tablet server, shared by all its tablets: a record names its
//! table and carries internal keys with sequence numbers, so the mutations of
//! many tablets are co-mingled in one stream and one append (one fsync)
//! commits a whole group of them.
//!
//! - [`format`]: block framing with checksums (LevelDB's log format);
//! - [`record`]: the logical record, one row mutation;
//! - [`writer`] / [`reader`]: one file, framing and verified reading;
//! - [`commit_log`]: numbered files in a directory, rolling, two lanes with
//!   a switch away from a slow one, replay and deletion of obsolete files;
//! - `replay`: merging files back into sequence order (the tests read logs
//!   back this way; recovery sorts them instead, see `crate::recovery`).

mod commit_log;
mod format;
mod reader;
mod record;
#[cfg(test)]
mod replay;
mod writer;

pub use commit_log::{CommitLog, CommitLogOptions, CommitLogStats};
pub use reader::LogReader;
pub use record::{Encoded, LogRecord};
pub use writer::LogWriter;

use crate::Result;
use gfs::FileStore;

/// Name of log file `number` in `dir`: `<dir>/000042.log`.
pub fn log_file_name(dir: &str, number: u64) -> String {
    if dir.is_empty() {
        format!("{number:06}.log")
    } else {
        format!("{dir}/{number:06}.log")
    }
}

/// The number of a log file directly in `dir`, or `None` for other names.
pub fn parse_log_file_name(dir: &str, name: &str) -> Option<u64> {
    let rest = if dir.is_empty() {
        name
    } else {
        name.strip_prefix(dir)?.strip_prefix('/')?
    };
    let stem = rest.strip_suffix(".log")?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// The log files directly in `dir`, as (number, name), oldest first.
pub fn list_logs(store: &dyn FileStore, dir: &str) -> Result<Vec<(u64, String)>> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut out: Vec<(u64, String)> = store
        .list(&prefix)?
        .into_iter()
        .filter_map(|n| parse_log_file_name(dir, &n).map(|num| (num, n)))
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(log_file_name("srv/log", 42), "srv/log/000042.log");
        assert_eq!(
            parse_log_file_name("srv/log", "srv/log/000042.log"),
            Some(42)
        );
        assert_eq!(
            parse_log_file_name("srv/log", "srv/log/1234567.log"),
            Some(1234567)
        );
        assert_eq!(parse_log_file_name("srv/log", "srv/log/x/000042.log"), None);
        assert_eq!(parse_log_file_name("srv/log", "srv/logs/000042.log"), None);
        assert_eq!(parse_log_file_name("srv/log", "srv/log/.log"), None);
        assert_eq!(parse_log_file_name("srv/log", "srv/log/00a.log"), None);
        assert_eq!(parse_log_file_name("", "000007.log"), Some(7));
    }
}
