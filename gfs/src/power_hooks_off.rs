//! The power-cut hooks of the namespace when no model can be installed
//! (built without the `testing` feature, which brings `power.rs`): every
//! namespace change is done the ordinary way. Such a build has no power-cut
//! decorator in its I/O path at all (see `io.rs`).

use std::fs::File;
use std::io;
use std::path::Path;

pub(crate) fn covers(_file: &File) -> bool {
    false
}

pub(crate) fn covers_path(_path: &Path) -> bool {
    false
}

pub(crate) fn namespace(_path: &Path) -> io::Result<()> {
    Ok(())
}

pub(crate) fn created(_path: &Path) {}
