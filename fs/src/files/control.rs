//! `.bigtable/control`: operator commands, one a line, run as each line is
//! complete (and the rest at close). An unknown command fails the `write`
//! (or `close`) with EINVAL, a failing one with its error's errno (ENOENT,
//! EEXIST, EPERM, ...), and a logged reason.

use crate::ctx::Ctx;
use crate::node::Node;
use crate::options::FsResult;
use fuser::Errno;

/// Runs the complete lines in `buf` (all of it when `all`), leaving an
/// unfinished line behind.
pub(super) fn run_control(cx: &Ctx, buf: &mut Vec<u8>, all: bool) -> FsResult<()> {
    let end = if all {
        buf.len()
    } else {
        match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => return Ok(()),
        }
    };
    let text: Vec<u8> = buf.drain(..end).collect();
    let text = String::from_utf8_lossy(&text);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        log::info!(".bigtable/control: {line}");
        let restored = restored_name(cx, line);
        let undeleting = super::undelete::entry(cx, line);
        if let Err(e) = cx.data.store().control(line) {
            let what = format!(".bigtable/control: {line:?}");
            // The errno of what went wrong (ENOENT, EEXIST, EPERM for a
            // protected table, EAGAIN, ...); EIO only for a failure of the
            // store itself.
            return Err(match e.root() {
                engine::Error::InvalidArgument(_) => {
                    cx.data.refuse(&what, Errno::EINVAL, &e.to_string())
                }
                _ => cx.data.fail(&what, &e),
            });
        }
        if let Some(name) = restored {
            // The kernel may hold the root's listing, or "no such name".
            cx.kernel.invalidate(&Node::Root);
            cx.kernel
                .invalidate_entry(&Node::Root, name.clone().into_bytes());
            if let Some(e) = undeleting {
                super::undelete::restore_emptied(cx, &e, &name);
            }
        }
    }
    Ok(())
}

/// The table an `undelete <id> [<name>]` line brings back, if it is one.
fn restored_name(cx: &Ctx, line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["undelete", _, name] => Some(name.to_string()),
        ["undelete", id] => cx
            .data
            .store()
            .trash()
            .ok()?
            .into_iter()
            .find(|(e, _)| e.id.to_string() == *id)
            .map(|(e, _)| e.name),
        _ => None,
    }
}
