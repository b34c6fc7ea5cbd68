//! `.scan/<query>`: the result of a scan, streamed as it is read.

use crate::ctx::Ctx;
use crate::open_files::handles::ScanHandle;
use crate::options::FsResult;

pub(super) fn read_scan(cx: &Ctx, s: &mut ScanHandle, offset: u64, size: u32) -> FsResult<Vec<u8>> {
    let what = format!("scan of {}", s.table);
    if offset < s.start {
        // Read backwards: start over.
        s.stream = None;
        s.buf.clear();
        s.start = 0;
        s.done = false;
    }
    // Drop what lies before this read (readers go forward).
    let skip = ((offset - s.start) as usize).min(s.buf.len());
    s.buf.drain(..skip);
    s.start += skip as u64;
    let want_end = offset + size as u64;
    while !s.done && s.start + (s.buf.len() as u64) < want_end {
        if s.stream.is_none() {
            s.stream = Some(
                cx.data
                    .store()
                    .scan(&s.table, s.query.spec.clone())
                    .map_err(|e| cx.data.fail(&what, &e))?,
            );
        }
        let Some(stream) = s.stream.as_mut() else {
            break;
        };
        match stream.next_row().map_err(|e| cx.data.fail(&what, &e))? {
            None => s.done = true,
            Some((_, cells)) => {
                for c in cells {
                    if s.readable.as_ref().is_some_and(|r| !r.contains(&c.family)) {
                        continue;
                    }
                    let counter = s.aggregates.contains(&c.family)
                        || s.query
                            .counters
                            .as_ref()
                            .is_some_and(|m| m.matches(&c.family, &c.qualifier));
                    crate::output::write_cell_as(s.query.format, &c, counter, &mut s.buf);
                }
                // Skip output wholly before the read offset.
                if s.start < offset {
                    let skip = ((offset - s.start) as usize).min(s.buf.len());
                    s.buf.drain(..skip);
                    s.start += skip as u64;
                }
            }
        }
    }
    let from = (offset.saturating_sub(s.start) as usize).min(s.buf.len());
    let to = (from + size as usize).min(s.buf.len());
    Ok(s.buf[from..to].to_vec())
}
