//! `undelete` in `.bigtable/control` of a table that `rm -r` emptied before
//! its `rmdir`: the trash gives it back empty, so it is restored from the
//! removal snapshot of the streak that emptied it (`removal_guard.rs`),
//! and `rm -r TABLE` then `undelete` is the whole round trip.

use crate::ctx::Ctx;
use crate::removal_guard::{PREFIX, QUIET};
use engine::{ScanSpec, TrashEntry};

/// The trash entry an `undelete <id> [<name>]` line names, if any.
pub(super) fn entry(cx: &Ctx, line: &str) -> Option<TrashEntry> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (["undelete", id] | ["undelete", id, _]) = words.as_slice() else {
        return None;
    };
    cx.data
        .store()
        .trash()
        .ok()?
        .into_iter()
        .map(|(e, _)| e)
        .find(|e| e.id.to_string() == *id)
}

/// After `undelete` brought `e` back as `name`: if it came back empty,
/// restores it from the removal snapshot of the streak that emptied it,
/// the newest one of the table's id that expires when its trash entry
/// would (`rmdir TABLE` set it so) or was taken at most [`QUIET`] before
/// the deletion. Failures are logged: the undelete itself is done.
pub(super) fn restore_emptied(cx: &Ctx, e: &TrashEntry, name: &str) {
    let store = cx.data.store();
    let spec = ScanSpec {
        row_limit: Some(1),
        max_versions: Some(1),
        ..Default::default()
    };
    match store.scan(name, spec).and_then(|mut rows| rows.next_row()) {
        Ok(None) => {}
        Ok(Some(_)) => return,
        Err(err) => {
            log::warn!("undelete of {name}: not read: {err}");
            return;
        }
    }
    let Some(snap) = streak_snapshot(cx, e) else {
        return;
    };
    if name != e.name {
        // A snapshot is restored in place only (snapshots are kept by
        // table name).
        log::info!(
            "undelete of {} as {name}: it came back empty; its removal snapshot is {}/{snap} \
             (`clone {} {snap} NEW` makes a table of it)",
            e.name,
            e.name,
            e.name
        );
        return;
    }
    match store.control(&format!("restore {name} {snap}")) {
        Ok(()) => {
            cx.kernel.invalidate_table(name, None);
            log::info!(
                "undelete of {name}: it came back empty, restored from its removal snapshot {snap}"
            );
        }
        Err(err) => log::warn!("undelete of {name}: restore of {snap} failed: {err}"),
    }
}

/// The removal snapshot of the streak that emptied trashed table `e`.
fn streak_snapshot(cx: &Ctx, e: &TrashEntry) -> Option<String> {
    let store = cx.data.store();
    let quiet = QUIET.as_micros() as u64;
    let kept_until = e.deleted_at + store.trash_period().as_micros() as u64;
    let snaps = match store.snapshots(&e.name) {
        Ok(s) => s,
        Err(err) => {
            log::warn!("undelete of {}: snapshots not listed: {err}", e.name);
            return None;
        }
    };
    snaps
        .into_iter()
        .filter(|(s, taken)| s.starts_with(PREFIX) && *taken <= e.deleted_at)
        .filter_map(|(s, _)| store.snapshot_manifest(&e.name, &s).ok())
        .filter(|m| {
            m.table_id == e.id
                && (m.taken_micros + quiet >= e.deleted_at
                    || m.expire_micros.is_some_and(|x| x + quiet >= kept_until))
        })
        .max_by_key(|m| m.taken_micros)
        .map(|m| m.name)
}
