//! The iterator every sorted source of internal keys implements: memtables,
//! SSTable blocks and tables, and the merge of several of them.

use crate::value::Value;
use crate::Result;

/// A cursor over internal key/value pairs in ascending key order.
///
/// Positioning calls report I/O or checksum failures as errors; after an error
/// the iterator is not valid.
pub trait InternalIterator: Send {
    /// Positions at the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Positions at the first entry whose key is >= `target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Moves to the next entry. Requires `valid()`.
    fn next(&mut self) -> Result<()>;
    /// Whether the iterator is at an entry.
    fn valid(&self) -> bool;
    /// The current key. Requires `valid()`.
    fn key(&self) -> &[u8];
    /// The current value. Requires `valid()`.
    fn value(&self) -> &[u8];
    /// The current value to keep: an SSTable block's iterator shares the
    /// block instead of copying (see [`Value`]). Requires `valid()`.
    fn shared_value(&self) -> Value {
        Value::from(self.value())
    }
}

impl<I: InternalIterator + ?Sized> InternalIterator for Box<I> {
    fn seek_to_first(&mut self) -> Result<()> {
        (**self).seek_to_first()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek(target)
    }
    fn next(&mut self) -> Result<()> {
        (**self).next()
    }
    fn valid(&self) -> bool {
        (**self).valid()
    }
    fn key(&self) -> &[u8] {
        (**self).key()
    }
    fn value(&self) -> &[u8] {
        (**self).value()
    }
    fn shared_value(&self) -> Value {
        (**self).shared_value()
    }
}

/// An iterator over a sorted in-memory vector (tests, in-memory tables).
pub struct VecIterator {
    entries: std::sync::Arc<Vec<(Vec<u8>, Vec<u8>)>>,
    pos: usize,
}

impl VecIterator {
    /// `entries` must be sorted by key.
    pub fn new(entries: std::sync::Arc<Vec<(Vec<u8>, Vec<u8>)>>) -> Self {
        let pos = entries.len();
        VecIterator { entries, pos }
    }
}

impl InternalIterator for VecIterator {
    fn seek_to_first(&mut self) -> Result<()> {
        self.pos = 0;
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.pos = self.entries.partition_point(|(k, _)| k.as_slice() < target);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.pos += 1;
        Ok(())
    }
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn key(&self) -> &[u8] {
        &self.entries[self.pos].0
    }
    fn value(&self) -> &[u8] {
        &self.entries[self.pos].1
    }
}

/// Every entry from `it`'s position on (the tests' way to compare an
/// iterator with a model).
#[cfg(test)]
pub(crate) fn drain(it: &mut dyn InternalIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next().unwrap();
    }
    out
}

/// An iterator whose every positioning fails (the tests of error paths).
#[cfg(test)]
pub(crate) struct Failing;

#[cfg(test)]
impl InternalIterator for Failing {
    fn seek_to_first(&mut self) -> Result<()> {
        Err(crate::Error::corruption("boom"))
    }
    fn seek(&mut self, _: &[u8]) -> Result<()> {
        Err(crate::Error::corruption("boom"))
    }
    fn next(&mut self) -> Result<()> {
        Ok(())
    }
    fn valid(&self) -> bool {
        false
    }
    fn key(&self) -> &[u8] {
        &[]
    }
    fn value(&self) -> &[u8] {
        &[]
    }
}
