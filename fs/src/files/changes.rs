//! `.changes/<query>`: a table's change stream (docs/changes.md), read as
//! lines from the query's position. A read past what is known fetches the
//! next changes; when there are none yet it returns what it has (at the
//! end, nothing: EOF for now), and a later read at that offset goes on, so
//! `tail -f` follows the table. With `until=` in the past, a read waits
//! (a few seconds at most) for the stream to reach it, so `cat` ends there.

use crate::ctx::Ctx;
use crate::open_files::handles::{ChangesHandle, Handle};
use crate::options::FsResult;
use crate::perms::{Caller, R};
use crate::reply::Opened;
use engine::changes::ChangeQuery;
use fuser::Errno;
use std::time::{Duration, Instant};

/// Changes fetched at once (the engine reads at most this many per call).
const BATCH: usize = 256;
/// Output kept ahead of the reader at most: a fetch stops once past it.
const MAX_BUFFER: usize = 4 << 20;
/// Output kept before a read's offset, for readers that go back a little.
const KEEP_BEHIND: u64 = 1 << 20;
/// How long one read waits for a stream whose `until=` has passed.
const UNTIL_WAIT: Duration = Duration::from_secs(5);

/// Opens the stream: the caller must be able to read every family (a
/// change holds all of a row's families), or the `family=` it names.
pub(super) fn open_changes(
    cx: &Ctx,
    caller: &Caller,
    ino: u64,
    table: &str,
    query: &[u8],
    what: &str,
) -> FsResult<Opened> {
    let name = crate::change_query::parse(query)
        .map_err(|why| cx.data.refuse(&what, Errno::EINVAL, &why))?;
    let schema = cx.data.schema(table)?;
    let caller = caller.clone().with_groups();
    if !caller.may(schema.owner, schema.group, schema.mode, R) {
        return Err(cx
            .data
            .refuse(&what, Errno::EACCES, "the table is not readable"));
    }
    for f in schema.families.values() {
        if name.family.as_ref().is_some_and(|n| n != &f.name) {
            continue;
        }
        if !caller.may(f.owner, f.group, f.mode, R) {
            return Err(cx.data.refuse(
                &what,
                Errno::EACCES,
                &format!(
                    "family {} is not readable (name family= to read others)",
                    f.name
                ),
            ));
        }
    }
    if let Some(f) = &name.family {
        if !schema.families.contains_key(f) {
            return Err(cx
                .data
                .refuse(&what, Errno::ENOENT, &format!("no column family {f:?}")));
        }
    }
    crate::change_sizes::open(ino);
    let mut h = ChangesHandle {
        ino,
        table: table.to_string(),
        pos: name.query.after,
        name,
        buf: Vec::new(),
        start: 0,
        done: false,
    };
    // The first fetch now: a bad or expired token fails the open.
    fetch(cx, &mut h, false)?;
    let fh = cx.open.handles().insert(Handle::Changes(h));
    Ok(Opened {
        fh,
        direct_io: true,
        ..Default::default()
    })
}

/// Appends the next changes to the buffer; false if there were none.
fn fetch(cx: &Ctx, h: &mut ChangesHandle, wait: bool) -> FsResult<bool> {
    let what = format!("changes of {}", h.table);
    let deadline = Instant::now() + UNTIL_WAIT;
    loop {
        let q = ChangeQuery {
            after: h.pos,
            max_records: BATCH,
            ..h.name.query.clone()
        };
        let b = cx
            .data
            .store()
            .read_changes(&h.table, &q)
            .map_err(|e| cx.data.fail(&what, &e))?;
        crate::change_lines::write_batch(&b.records, h.pos, h.name.family.as_deref(), &mut h.buf);
        let got = !b.records.is_empty();
        h.pos = b.next;
        h.done = b.done;
        // Wait only for an `until=` that has passed: the watermark reaches
        // it within a commit's time.
        let until_passed = h
            .name
            .query
            .until
            .is_some_and(|u| u <= engine::now_micros());
        if got || h.done || !wait || !until_passed || Instant::now() >= deadline {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn read_changes(
    cx: &Ctx,
    h: &mut ChangesHandle,
    offset: u64,
    size: u32,
) -> FsResult<Vec<u8>> {
    if offset < h.start {
        // Only the last KEEP_BEHIND bytes before a read are kept.
        return Err(Errno::ESPIPE);
    }
    // Keep some output behind the read: `tail` reads its last lines
    // backwards, block by block.
    let skip = (offset.saturating_sub(KEEP_BEHIND)
        - h.start.min(offset.saturating_sub(KEEP_BEHIND))) as usize;
    let skip = skip.min(h.buf.len());
    h.buf.drain(..skip);
    h.start += skip as u64;
    let want_end = offset + size as u64;
    while !h.done && h.start + (h.buf.len() as u64) < want_end && h.buf.len() < MAX_BUFFER {
        let wait = h.buf.is_empty();
        if !fetch(cx, h, wait)? {
            break;
        }
    }
    let from = (offset.saturating_sub(h.start) as usize).min(h.buf.len());
    let to = (from + size as usize).min(h.buf.len());
    // The file's size follows the end of what this reader has fetched.
    crate::change_sizes::advance(h.ino, h.start + h.buf.len() as u64, h.pos);
    Ok(h.buf[from..to].to_vec())
}
