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
use crate::mutate::{format_results, BatchError, BatchParser, Line, Op, Txn};
use crate::names::{parse_lenient, parse_version_name, KeyName};
use crate::node::{Key, Name, Node, View, MUTATE, SCHEMA, VERSIONS};
use crate::offsets::{slice_at, write_at};
use crate::open_files::handles::{CellHandle, Handle, MutateHandle, ScanHandle, SchemaHandle};
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
