//! `.mutate`: batches written line by line, checked, and committed as
//! one transaction per row on close.

use super::*;

impl Ctx {
    /// Parses written batch text; a bad line fails this write.
    pub(super) fn feed_batch(&self, m: &mut MutateHandle, data: &[u8]) -> FsResult<()> {
        if let Some((code, _)) = &m.failed {
            return Err(*code);
        }
        let what = format!("{}/{MUTATE}", m.table);
        let lines = match m.parser.feed(data) {
            Ok(l) => l.to_vec(),
            Err(e) => return Err(self.batch_failed(m, Errno::EINVAL, e.to_string(), &what)),
        };
        if lines.is_empty() {
            return Ok(());
        }
        let schema = self.data.schema(&m.table)?;
        for l in &lines {
            if let Err((code, why)) = self.check_op(&schema, &m.caller, &l.op) {
                return Err(self.batch_failed(m, code, format!("line {}: {why}", l.line), &what));
            }
        }
        Ok(())
    }

    /// Schema and permission checks of one batch line.
    pub(super) fn check_op(
        &self,
        schema: &TableSchema,
        caller: &Caller,
        op: &Op,
    ) -> Result<(), (Errno, String)> {
        let want = if op.reads() { R } else { 0 } | if op.writes() { W } else { 0 };
        let families: Vec<&engine::schema::FamilySchema> = match op.family() {
            Some(f) => vec![schema
                .families
                .get(f)
                .ok_or_else(|| (Errno::ENOENT, format!("no column family {f:?} in table")))?],
            None => schema.families.values().collect(),
        };
        for f in families {
            if !caller.may(f.owner, f.group, f.mode, want) {
                return Err((
                    Errno::EACCES,
                    format!("permission denied on family {}", f.name),
                ));
            }
        }
        if op.row().len() > engine::MAX_ROW_KEY {
            return Err((
                Errno::ENAMETOOLONG,
                format!(
                    "row key is {} bytes; the limit is {}",
                    op.row().len(),
                    engine::MAX_ROW_KEY
                ),
            ));
        }
        if let Op::Set { qualifier, .. }
        | Op::Delete { qualifier, .. }
        | Op::DeleteVersions { qualifier, .. }
        | Op::Increment { qualifier, .. }
        | Op::Append { qualifier, .. }
        | Op::Guard { qualifier, .. } = op
        {
            if qualifier.len() > engine::MAX_QUALIFIER {
                return Err((
                    Errno::ENAMETOOLONG,
                    format!(
                        "qualifier is {} bytes; the limit is {}",
                        qualifier.len(),
                        engine::MAX_QUALIFIER
                    ),
                ));
            }
        }
        if let Op::Set { value, .. } | Op::Append { value, .. } = op {
            if value.len() > self.opts.max_value_size {
                return Err((
                    Errno::EFBIG,
                    format!(
                        "value is {} bytes; the limit is {}",
                        value.len(),
                        self.opts.max_value_size
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn batch_failed(
        &self,
        m: &mut MutateHandle,
        code: Errno,
        why: String,
        what: &str,
    ) -> Errno {
        log::info!("{what}: {why}");
        Stats::add(&self.data.stats.errors, 1);
        m.results
            .extend_from_slice(format!("error {why}\n").as_bytes());
        m.failed = Some((code, why));
        code
    }

    /// Validates and applies the written batch.
    pub(super) fn commit_batch(&self, m: &mut MutateHandle) -> FsResult<()> {
        let what = format!("{}/{MUTATE}", m.table);
        let lines = match m.parser.finish() {
            Ok(l) => l,
            Err(e) => return Err(self.batch_failed(m, Errno::EINVAL, e.to_string(), &what)),
        };
        if lines.is_empty() {
            return Ok(());
        }
        let schema = self.data.schema(&m.table)?;
        // The last line (without newline) was not checked by write.
        if let Some(l) = lines.last() {
            if let Err((code, why)) = self.check_op(&schema, &m.caller, &l.op) {
                return Err(self.batch_failed(m, code, format!("line {}: {why}", l.line), &what));
            }
        }
        let touched: Vec<Touched> = lines
            .iter()
            .map(|l| {
                let q = match &l.op {
                    Op::Set { qualifier, .. }
                    | Op::Delete { qualifier, .. }
                    | Op::DeleteVersions { qualifier, .. }
                    | Op::Increment { qualifier, .. }
                    | Op::Append { qualifier, .. } => Some(qualifier.clone()),
                    _ => None,
                };
                (l.op.row().to_vec(), l.op.family().map(str::to_string), q)
            })
            .collect();
        let txns =
            group(lines).map_err(|e| self.batch_failed(m, Errno::EINVAL, e.to_string(), &what))?;
        let raw: Vec<RowTxn> = txns.iter().map(|t| t.txn.clone()).collect();
        let outcomes = match self
            .data
            .store
            .apply_txns(&m.table, &raw, self.write_options())
        {
            Ok(o) => o,
            Err(e) => {
                let line = match &e {
                    engine::Error::BadBatchEntry { index, .. } => {
                        txns.get(*index).map(|t| t.first_line)
                    }
                    _ => None,
                };
                let code = crate::errno::errno(&e);
                let why = match line {
                    Some(l) => format!("line {l}: {e}"),
                    None => e.to_string(),
                };
                return Err(self.batch_failed(m, code, why, &what));
            }
        };
        Stats::add(&self.data.stats.batches, 1);
        Stats::add(&self.data.stats.batch_rows, raw.len() as u64);
        m.results
            .extend_from_slice(&format_results(&txns, &outcomes));
        // Tell the kernel what changed under it.
        for (row, family, qualifier) in touched {
            match (family, qualifier) {
                (Some(f), Some(q)) => {
                    let cell = Node::Cell {
                        table: m.table.clone(),
                        view: View::Now,
                        row: row.clone(),
                        family: f.clone(),
                        qualifier: q,
                    };
                    self.invalidate(&cell);
                    self.data.pending.data_written(&m.table, &row, &f);
                }
                (family, _) => self.invalidate_row(&m.table, &row, family.as_deref()),
            }
            if self.inodes.is_known(&Node::Row {
                table: m.table.clone(),
                view: View::Now,
                row: row.clone(),
            }) {
                self.invalidate_row(&m.table, &row, None);
            }
        }
        Ok(())
    }
}
