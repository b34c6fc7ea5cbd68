//! `.schema` errors a shell sees: a complete bad line fails the `write`
//! that completes it, and a truncation that would drop a family holding
//! data fails the `close` (flush), before anything is applied.

use crate::ctx::Ctx;
use crate::node::SCHEMA;
use crate::open_files::handles::SchemaHandle;
use crate::options::FsResult;
use crate::perms::{Caller, W};
use engine::schema::TableSchema;
use engine::ScanSpec;
use fuser::Errno;

/// Makes `new` table `table`'s schema; the families it `dropped` lose
/// their empty directories in this mount.
pub(super) fn set_schema(
    cx: &Ctx,
    table: &str,
    new: TableSchema,
    dropped: &[String],
    what: &dyn std::fmt::Display,
) -> FsResult<()> {
    cx.data
        .store()
        .set_schema(table, new)
        .map_err(|e| cx.data.fail(what, &e))?;
    for f in dropped {
        cx.data.pending().drop_family(table, f);
    }
    if !dropped.is_empty() {
        log::info!("{what}: dropped families {dropped:?}");
    }
    Ok(())
}

/// Checks the complete lines written so far against the current schema
/// (as the close would apply them). On error the handle fails: later
/// writes and the close return the error and nothing is applied.
pub(super) fn check_schema_write(cx: &Ctx, s: &mut SchemaHandle) -> FsResult<()> {
    if let Some(e) = s.failed {
        return Err(e);
    }
    let from = if s.append_mode {
        s.base_len.min(s.data.len())
    } else {
        0
    };
    let Some(nl) = s.data[from..].iter().rposition(|&b| b == b'\n') else {
        return Ok(());
    };
    let what = format!("write {}/{SCHEMA}", s.table);
    let cur = cx.data.schema(&s.table)?;
    let text = &s.data[from..from + nl + 1];
    let new = match crate::schema_file::apply(&cur, text, !s.append_mode) {
        Ok((new, _)) => new,
        Err(e) => {
            let code = cx.data.fail(&what, &e);
            s.failed = Some(code);
            s.dirty = false;
            return Err(code);
        }
    };
    // Families the text has not reached yet are not dropped until close.
    if let Err(code) = check_schema_change(cx, &s.caller, &cur, &new, &what, false) {
        s.failed = Some(code);
        s.dirty = false;
        return Err(code);
    }
    Ok(())
}

/// Whether `caller` may make `new` of table `table`'s schema `cur`:
/// the table's owner (or root) may change anything; anyone else needs
/// write permission on every family whose settings change or that is
/// dropped (a `max_age=1ms` wipes a family as surely as deleting its
/// cells), and may not change a family's owner, group or mode.
pub(super) fn check_schema_change(
    cx: &Ctx,
    caller: &Caller,
    cur: &TableSchema,
    new: &TableSchema,
    what: &dyn std::fmt::Display,
    drops: bool,
) -> FsResult<()> {
    if caller.is_root() || caller.uid == cur.owner {
        return Ok(());
    }
    if cur.deletion_protection != new.deletion_protection {
        return Err(cx.data.refuse(
            what,
            Errno::EPERM,
            "only the table's owner may change its deletion protection",
        ));
    }
    if cur.change_retention != new.change_retention {
        return Err(cx.data.refuse(
            what,
            Errno::EPERM,
            "only the table's owner may change its change log's retention",
        ));
    }
    if crate::schema_file::changes_permissions(cur, new) {
        return Err(cx.data.refuse(
            what,
            Errno::EPERM,
            "only the table's owner may change a family's owner, group or mode",
        ));
    }
    for f in crate::schema_file::changed_families(cur, new) {
        if !drops && !new.families.contains_key(&f.name) {
            continue;
        }
        if !caller.may(f.owner, f.group, f.mode, W) {
            return Err(cx.data.refuse(
                what,
                Errno::EACCES,
                &format!(
                    "changing family {:?} needs write permission on it (or owning the table)",
                    f.name
                ),
            ));
        }
    }
    Ok(())
}

/// For a truncated `.schema` closed without writes: whether applying
/// the empty text would fail because a dropped family holds data. The
/// text is only checked here (a shell's `>` redirection closes a copy
/// of the descriptor before the command writes); the last close applies it.
pub(super) fn check_schema_truncation(cx: &Ctx, s: &SchemaHandle) -> FsResult<()> {
    let what = format!("truncate {}/{SCHEMA}", s.table);
    let cur = cx.data.schema(&s.table)?;
    let (new, dropped) = crate::schema_file::apply(&cur, &s.data, !s.append_mode)
        .map_err(|e| cx.data.fail(&what, &e))?;
    cur.check_change(&s.table, &new)
        .map_err(|e| cx.data.fail(&what, &e))?;
    for family in dropped {
        let spec = ScanSpec {
            families: Some(vec![family.clone()]),
            max_versions: Some(1),
            cell_limit: Some(1),
            ..Default::default()
        };
        let mut rows = cx
            .data
            .store()
            .scan(&s.table, spec)
            .map_err(|e| cx.data.fail(&what, &e))?;
        if rows
            .next_row()
            .map_err(|e| cx.data.fail(&what, &e))?
            .is_some()
        {
            return Err(cx.data.fail(&what, &engine::Error::FamilyNotEmpty(family)));
        }
    }
    Ok(())
}
