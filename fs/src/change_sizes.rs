//! The size a `.changes/<query>` file shows: the end of what its furthest
//! open reader has fetched, plus the lines of the changes known beyond it.
//! `tail -f` reads as many bytes as the size grew past what it read (and
//! takes a smaller size for a truncation), so the size must follow the
//! readers. One entry per file with open handles; dropped with its last.

use engine::changes::Position;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Per inode: open handles, bytes read to, and the stream position there.
#[derive(Default)]
struct Entry {
    handles: u32,
    produced: u64,
    pos: Option<Position>,
}

static FILES: Mutex<Option<HashMap<u64, Entry>>> = Mutex::new(None);

/// A handle of `ino` opened.
pub fn open(ino: u64) {
    let mut g = FILES.lock();
    g.get_or_insert_with(HashMap::new)
        .entry(ino)
        .or_default()
        .handles += 1;
}

/// A handle of `ino` closed.
pub fn close(ino: u64) {
    let mut g = FILES.lock();
    if let Some(m) = g.as_mut() {
        if let Some(e) = m.get_mut(&ino) {
            e.handles = e.handles.saturating_sub(1);
            if e.handles == 0 {
                m.remove(&ino);
            }
        }
    }
}

/// A reader of `ino` has fetched to byte `end`, where the stream is at `pos`.
pub fn advance(ino: u64, end: u64, pos: Position) {
    let mut g = FILES.lock();
    if let Some(e) = g.as_mut().and_then(|m| m.get_mut(&ino)) {
        if end >= e.produced {
            e.produced = end;
            e.pos = Some(pos);
        }
    }
}

/// (bytes fetched to, the stream position there) of `ino`'s furthest reader.
pub fn furthest(ino: u64) -> (u64, Option<Position>) {
    let g = FILES.lock();
    g.as_ref()
        .and_then(|m| m.get(&ino))
        .map_or((0, None), |e| (e.produced, e.pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_furthest_reader_counts_until_the_last_close() {
        let p = Position { ts: 5, skip: 1 };
        open(7);
        open(7);
        advance(7, 100, p);
        advance(7, 50, Position::default());
        assert_eq!(furthest(7), (100, Some(p)));
        close(7);
        assert_eq!(furthest(7).0, 100);
        close(7);
        assert_eq!(furthest(7), (0, None));
    }
}
