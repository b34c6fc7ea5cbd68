//! A cell's value as reads return it: bytes of its own, or a range of the
//! decompressed SSTable block it was read from, shared with the block cache.
//!
//! Why share: a cached point read or a scan otherwise copies every value out
//! of its block (a tenth of a cached read, a fifth of a scanned cell). The
//! price: a value kept alive keeps its whole block in memory, as a pinned
//! slice does in other engines; [`Value::into_vec`] copies it out when it is
//! kept long.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Bytes a [`Value`] may hold a range of: a decompressed SSTable block
/// (implemented beside the block, so that values name no SSTable type).
pub(crate) trait Backing: Send + Sync {
    /// All the bytes; a value holds `start..end` of them.
    fn bytes(&self) -> &[u8];
}

/// The bytes of a cell (see the module comment). Reads as `&[u8]`; cheap to
/// clone (a block's range is reference-counted).
#[derive(Clone)]
pub struct Value(Repr);

#[derive(Clone)]
enum Repr {
    Owned(Vec<u8>),
    /// `block`'s entry bytes `start..end` (inside the block: see [`Value::of_block`]).
    Block {
        block: Arc<dyn Backing>,
        start: u32,
        end: u32,
    },
}

impl Value {
    /// An empty value.
    pub const fn new() -> Value {
        Value(Repr::Owned(Vec::new()))
    }

    /// Bytes `start..end` of `block`'s data; the caller has checked the range
    /// (a block's entry values are, when parsed). Blocks are below 4 GiB.
    pub(crate) fn of_block<B: Backing + 'static>(
        block: &Arc<B>,
        start: usize,
        end: usize,
    ) -> Value {
        match (u32::try_from(start), u32::try_from(end)) {
            (Ok(start), Ok(end)) if start <= end => Value(Repr::Block {
                block: Arc::clone(block) as Arc<dyn Backing>,
                start,
                end,
            }),
            _ => Value::new(),
        }
    }

    /// The bytes as a vector of their own: no copy when the value already
    /// owns them.
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Owned(v) => v,
            Repr::Block { .. } => self.to_vec(),
        }
    }

    /// The bytes, made owned (copied out of a block) to be changed in place.
    pub fn make_mut(&mut self) -> &mut Vec<u8> {
        if let Repr::Block { .. } = self.0 {
            self.0 = Repr::Owned(self.to_vec());
        }
        match &mut self.0 {
            Repr::Owned(v) => v,
            // Made owned just above.
            Repr::Block { .. } => unreachable!("value made owned"),
        }
    }
}

impl Default for Value {
    fn default() -> Value {
        Value::new()
    }
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v,
            Repr::Block { block, start, end } => block
                .bytes()
                .get(*start as usize..*end as usize)
                .unwrap_or(&[]),
        }
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::borrow::Borrow<[u8]> for Value {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value(Repr::Owned(v))
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Value {
        Value(Repr::Owned(v.to_vec()))
    }
}

impl<const N: usize> From<&[u8; N]> for Value {
    fn from(v: &[u8; N]) -> Value {
        Value(Repr::Owned(v.to_vec()))
    }
}

impl From<Value> for Vec<u8> {
    fn from(v: Value) -> Vec<u8> {
        v.into_vec()
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        **self == **other
    }
}

impl Eq for Value {}

impl PartialEq<[u8]> for Value {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[u8]> for Value {
    fn eq(&self, other: &&[u8]) -> bool {
        **self == **other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Value {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Value {
    fn eq(&self, other: &&[u8; N]) -> bool {
        **self == other[..]
    }
}

impl PartialEq<Vec<u8>> for Value {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == other[..]
    }
}

impl PartialEq<Value> for Vec<u8> {
    fn eq(&self, other: &Value) -> bool {
        self[..] == **other
    }
}

impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

/// Serialized exactly as a `Vec<u8>` is, so messages that carry cells keep
/// their form.
impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::byte_string::serialize(self, s)
    }
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Value, D::Error> {
        crate::byte_string::deserialize(d).map(Value::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sstable::Block;

    fn block(data: &[u8]) -> Arc<Block> {
        // Entries area `data` (never parsed here), one restart at 0.
        let mut d = data.to_vec();
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&1u32.to_le_bytes());
        Arc::new(Block::new(d, 1, 0).unwrap())
    }

    #[test]
    fn a_block_range_reads_as_its_bytes() {
        let b = block(b"");
        assert_eq!(Value::of_block(&b, 0, 4), [0u8, 0, 0, 0]);
        let v = Value::of_block(&b, 4, 8);
        assert_eq!(v, 1u32.to_le_bytes());
        assert_eq!(v.clone().into_vec(), 1u32.to_le_bytes().to_vec());
        assert_eq!(v, Value::from(1u32.to_le_bytes().to_vec()));
        // Out of the block, or reversed: empty, never a panic.
        assert!(Value::of_block(&b, 4, 100).is_empty());
        assert!(Value::of_block(&b, 8, 4).is_empty());
    }

    #[test]
    fn make_mut_copies_out_of_the_block() {
        let b = block(b"");
        let mut v = Value::of_block(&b, 0, 4);
        v.make_mut().push(9);
        assert_eq!(v, [0u8, 0, 0, 0, 9]);
        assert_eq!(b.bytes().len(), 8, "the block is untouched");
    }

    #[test]
    fn serialized_as_a_vector() {
        let b = block(b"");
        let v = Value::of_block(&b, 2, 6);
        let as_vec = bincode::serialize(&v.to_vec()).unwrap();
        assert_eq!(bincode::serialize(&v).unwrap(), as_vec);
        let back: Value = bincode::deserialize(&as_vec).unwrap();
        assert_eq!(back, v);
    }
}
