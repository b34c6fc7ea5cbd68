//! `.schema` errors a shell sees: a complete bad line fails the `write`
//! that completes it, and a truncation that would drop a family holding
//! data fails the `close` (flush), before anything is applied.

use super::*;
use engine::ScanSpec;

impl Ctx {
    /// Checks the complete lines written so far against the current schema
    /// (as the close would apply them). On error the handle fails: later
    /// writes and the close return the error and nothing is applied.
    pub(super) fn check_schema_write(&self, s: &mut SchemaHandle) -> FsResult<()> {
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
        let cur = self.data.schema(&s.table)?;
        let text = &s.data[from..from + nl + 1];
        if let Err(e) = crate::schema_file::apply(&cur, text, !s.append_mode) {
            let code = self.data.fail(&what, &e);
            s.failed = Some(code);
            s.dirty = false;
            return Err(code);
        }
        Ok(())
    }

    /// For a truncated `.schema` closed without writes: whether applying
    /// the empty text would fail because a dropped family holds data. The
    /// text is only checked here (a shell's `>` redirection closes a copy
    /// of the descriptor before the command writes); the last close applies it.
    pub(super) fn check_schema_truncation(&self, s: &SchemaHandle) -> FsResult<()> {
        let what = format!("truncate {}/{SCHEMA}", s.table);
        let cur = self.data.schema(&s.table)?;
        let (_, dropped) = crate::schema_file::apply(&cur, &s.data, !s.append_mode)
            .map_err(|e| self.data.fail(&what, &e))?;
        for family in dropped {
            let spec = ScanSpec {
                families: Some(vec![family.clone()]),
                max_versions: Some(1),
                cell_limit: Some(1),
                ..Default::default()
            };
            let mut rows = self
                .data
                .store
                .scan(&s.table, spec)
                .map_err(|e| self.data.fail(&what, &e))?;
            if rows
                .next_row()
                .map_err(|e| self.data.fail(&what, &e))?
                .is_some()
            {
                return Err(self
                    .data
                    .fail(&what, &engine::Error::FamilyNotEmpty(family)));
            }
        }
        Ok(())
    }
}
