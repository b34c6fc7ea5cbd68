//! Files: cells and versions (whole values committed on close), `.schema`,
//! `.mutate`, `.scan/<query>` and the status files; unlink, truncate,
//! rename, permissions and extended attributes: one submodule per concern,
//! each a set of functions over a [`crate::ctx::Ctx`].

pub(crate) mod attrs;
pub(crate) mod batch;
pub(crate) mod changes;
pub(crate) mod commit;
pub(crate) mod control;
pub(crate) mod io;
pub(crate) mod lost_cells;
pub(crate) mod open;
pub(crate) mod rename;
pub(crate) mod scan;
pub(crate) mod schema_write;
pub(crate) mod undelete;
pub(crate) mod xattrs;

/// Largest `.schema` text accepted.
const MAX_SCHEMA_TEXT: usize = 1 << 20;

pub(crate) fn acc_writable(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}
