//! The power-cut hooks of the I/O layer when no model can be installed
//! (built without the `testing` feature, which brings `power.rs`): every
//! write, sync and namespace change is done the ordinary way.

use crate::requests::Chain;
use std::fs::File;
use std::io;
use std::path::Path;

pub(crate) fn covers(_file: &File) -> bool {
    false
}

pub(crate) fn write(
    _file: &File,
    _offset: u64,
    _bufs: &[&[u8]],
    _sync: bool,
) -> Option<io::Result<()>> {
    None
}

pub(crate) fn sync(_file: &File, _data_only: bool) -> Option<io::Result<()>> {
    None
}

pub(crate) fn run_chains(_chains: &[Chain<'_>]) -> Option<Vec<io::Result<()>>> {
    None
}

pub(crate) fn namespace(_path: &Path) -> io::Result<()> {
    Ok(())
}

pub(crate) fn created(_path: &Path) {}
