//! Files: cells and versions (whole values committed on close), `.schema`,
//! `.mutate`, `.scan/<query>` and the status files; unlink, truncate,
//! rename, permissions and extended attributes: one submodule per concern,
//! each an `impl Ctx` block.

mod attrs;
mod batch;
mod commit;
mod control;
mod io;
mod open;
mod rename;
mod scan;
mod schema_write;
mod xattrs;

use crate::ctx::Ctx;
use crate::handles::{CellHandle, Handle, MutateHandle, ScanHandle, SchemaHandle};
use crate::mutate::{format_results, BatchError, BatchParser, Line, Op, Txn};
use crate::names::{parse_lenient, parse_version_name, KeyName};
use crate::node::{Key, Name, Node, View, MUTATE, SCHEMA, VERSIONS};
use crate::options::{Entry, FsResult, Stats};
use crate::perms::{Caller, R, W};
use engine::schema::TableSchema;
use engine::{Mutation, RowMutation, RowOp, RowTxn, TimeRange};
use fuser::{Errno, FileAttr};
use std::time::Duration;

/// Largest `.schema` text accepted.
const MAX_SCHEMA_TEXT: usize = 1 << 20;

pub use crate::reply::{Opened, SetAttr};

pub(crate) fn acc_writable(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

/// Copies `data` into `buf` at `offset`, zero-filling a gap.
fn write_at(buf: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset..end].copy_from_slice(data);
}

fn slice_at(data: &[u8], offset: u64, size: u32) -> Vec<u8> {
    let start = (offset as usize).min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    data[start..end].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_at_fills_gaps() {
        let mut b = b"abc".to_vec();
        write_at(&mut b, 5, b"xy");
        assert_eq!(b, b"abc\0\0xy");
        write_at(&mut b, 1, b"Z");
        assert_eq!(b, b"aZc\0\0xy");
        assert_eq!(slice_at(&b, 5, 10), b"xy");
        assert_eq!(slice_at(&b, 50, 10), b"");
    }
}
