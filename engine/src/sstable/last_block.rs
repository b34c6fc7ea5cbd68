//! The block a thread last loaded from a table, remembered per thread so
//! that its next seek in that table, when the key falls in the same block
//! (a reader going through keys in order: a 64 KiB block holds about 60
//! values of 1,000 bytes), skips the index search and the block-cache
//! lookup. Each point read opens a new iterator, so an iterator's own
//! current block does not carry over from one read to the next.
//!
//! The block is held weakly: a table deleted by a compaction, its blocks
//! evicted, is not kept (nor its file mapped) by a thread that read it
//! last and then went idle.

use super::block::Block;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

struct Last {
    table: u64,
    index: usize,
    block: Weak<Block>,
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

/// A number for a newly opened table, never given to another in this
/// process (file numbers repeat across stores and tests).
pub(crate) fn new_table_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The index of the block this thread last loaded from `table`, if it did
/// so last.
pub(crate) fn index(table: u64) -> Option<usize> {
    LAST.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|l| l.table == table)
            .map(|l| l.index)
    })
}

/// Block `index` of `table`, if it is the one this thread last loaded and
/// it is still alive (cached or in use).
pub(crate) fn get(table: u64, index: usize) -> Option<Arc<Block>> {
    LAST.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|l| l.table == table && l.index == index)
            .and_then(|l| l.block.upgrade())
    })
}

/// Remembers `block` as block `index` of `table`, loaded by this thread.
pub(crate) fn remember(table: u64, index: usize, block: &Arc<Block>) {
    LAST.with(|l| {
        *l.borrow_mut() = Some(Last {
            table,
            index,
            block: Arc::downgrade(block),
        });
    });
}
