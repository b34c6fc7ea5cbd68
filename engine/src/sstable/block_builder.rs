//! Builds one block: LevelDB's prefix-compressed entries with restart points.
//!
//! Each entry is `varint shared | varint non_shared | varint value_len |
//! key[shared..] | value`, where `shared` is the length of the prefix it shares
//! with the previous key. Every `restart_interval` entries, or sooner once the
//! entries since the last restart span `restart_bytes`, the prefix is reset
//! (`shared == 0`) and the entry's offset is recorded; the block ends with the
//! restart offsets (u32 LE each) and their count (u32 LE), so a reader can
//! binary-search the restarts and then scan at most one interval.

use super::format::put_varint64;

pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    /// Entries since the last restart.
    counter: usize,
    restart_interval: usize,
    restart_bytes: usize,
    entries: usize,
    last_key: Vec<u8>,
    finished: bool,
}

impl BlockBuilder {
    /// A builder placing a restart point every `restart_interval` entries,
    /// or sooner once the entries since the last one span `restart_bytes`.
    pub fn new(restart_interval: usize, restart_bytes: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            restart_interval: restart_interval.max(1),
            restart_bytes,
            entries: 0,
            last_key: Vec::new(),
            finished: false,
        }
    }

    /// Appends an entry. The caller guarantees ascending keys and that the
    /// block stays far below 4 GiB (offsets are u32).
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        debug_assert!(!self.finished);
        let mut shared = 0;
        let since_restart = self.buf.len() - self.restarts.last().map_or(0, |&r| r as usize);
        let restart = self.entries > 0
            && (self.counter >= self.restart_interval || since_restart >= self.restart_bytes);
        if !restart {
            shared = self
                .last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count();
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        }
        let non_shared = key.len() - shared;
        put_varint64(&mut self.buf, shared as u64);
        put_varint64(&mut self.buf, non_shared as u64);
        put_varint64(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&key[shared..]);
        self.counter += 1;
        self.entries += 1;
    }

    /// Size of the block if it were finished now.
    pub fn size_estimate(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Appends the restart array and returns the block contents. Calling it
    /// again returns the same bytes.
    pub fn finish(&mut self) -> &[u8] {
        if !self.finished {
            for r in &self.restarts {
                self.buf.extend_from_slice(&r.to_le_bytes());
            }
            self.buf
                .extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
            self.finished = true;
        }
        &self.buf
    }

    /// Empties the builder for the next block, keeping its allocations.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.entries = 0;
        self.last_key.clear();
        self.finished = false;
    }
}
