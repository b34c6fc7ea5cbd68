//! METADATA: the table of tablet locations (paper §5.1).
//!
//! METADATA is a Bigtable table like any other (id 0), served by tablet
//! servers. Its first tablet, the *root tablet*, covers the rows that
//! describe METADATA's other tablets and never splits; its own descriptor
//! (SSTables and redo point) lives in the file `meta/root` and its location
//! in the lock-service file `/bigtable/root-tablet`. Three levels, as in the
//! paper: root → METADATA tablets → user tablets. The row format is in
//! `docs/formats/engine.md`.

mod codec;
mod repair;
mod root;
mod row;

pub use codec::{Redo, SstMeta, TabletMeta};
pub use repair::effective_tablets;
pub use root::RootStore;
pub use row::*;
