//! The tablet server answering the protocol in this process: each request
//! is a call on the server itself.

use super::TabletServer;
use crate::data::{Cell, RowMutation};
use crate::group_commit::GroupCommitStats;
use crate::metadata::{TableDef, TabletMeta};
use crate::options::TabletInfo;
use crate::protocol::{CellSource, ScanPart, ServedTablet, ServerReport, TabletService};
use crate::read::CellReader;
use crate::scan::ScanSpec;
use crate::txn::{RowTxn, TxnOutcome};
use crate::Result;
use chubby::Sequencer;

impl CellSource for CellReader {
    fn next_cell(&mut self) -> Result<Option<Cell>> {
        CellReader::next_cell(self)
    }
}

impl TabletService for TabletServer {
    fn name(&self) -> &str {
        &self.name
    }
    fn is_serving(&self) -> bool {
        TabletServer::is_serving(self)
    }
    fn apply(
        &self,
        tablet: u64,
        ms: &[RowMutation],
        sync: bool,
        fence: Option<&Sequencer>,
    ) -> Result<()> {
        TabletServer::apply(self, tablet, ms, sync, fence)
    }
    fn apply_txns(&self, tablet: u64, txns: &[RowTxn], sync: bool) -> Result<Vec<TxnOutcome>> {
        TabletServer::apply_txns(self, tablet, txns, sync)
    }
    fn read_row(&self, tablet: u64, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        TabletServer::read_row(self, tablet, row, spec)
    }
    fn read_column(
        &self,
        tablet: u64,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        max_versions: Option<u32>,
    ) -> Result<Vec<Cell>> {
        TabletServer::read_column(self, tablet, row, family, qualifier, max_versions)
    }
    fn scan_part(&self, tablet: u64, spec: &ScanSpec) -> Result<ScanPart> {
        let (reader, end) = TabletServer::scan_part(self, tablet, spec)?;
        Ok((Box::new(reader), end))
    }
    fn load(&self, meta: TabletMeta) -> Result<()> {
        TabletServer::load(self, meta)
    }
    fn unload(&self, id: u64) -> Result<TabletMeta> {
        TabletServer::unload(self, id)
    }
    fn drop_tablet(&self, id: u64) -> Result<()> {
        TabletServer::drop_tablet(self, id);
        Ok(())
    }
    fn learn_table(&self, def: &TableDef) -> Result<()> {
        self.env.catalog.put(def);
        Ok(())
    }
    fn fence(&self) {
        TabletServer::fence(self)
    }
    fn tablet_ids(&self) -> Result<Vec<u64>> {
        Ok(TabletServer::tablet_ids(self))
    }
    fn served(&self) -> Result<Vec<ServedTablet>> {
        Ok(self
            .served_tablets()
            .iter()
            .map(|x| {
                let t = &x.tablet;
                let v = t.version();
                ServedTablet {
                    id: t.id,
                    table_id: t.table_id,
                    start: t.start.clone(),
                    end: t.end.clone(),
                    bytes: t.sstable_bytes(&v) + v.mem.approximate_bytes() as u64,
                    requests: x.requests.get(),
                    clean: !t.has_foreign_files(&v),
                    files: v.files.iter().map(|f| f.meta.number).collect(),
                }
            })
            .collect())
    }
    fn files_in_flight(&self) -> Result<Vec<u64>> {
        Ok(self.env.numbers.in_flight().into_iter().collect())
    }
    fn report(&self) -> Result<ServerReport> {
        Ok(TabletServer::report(self))
    }
    fn tablet_infos(&self) -> Result<Vec<TabletInfo>> {
        Ok(TabletServer::tablet_infos(self))
    }
    fn tablet_requests(&self, id: u64) -> Result<u64> {
        Ok(TabletServer::tablet_requests(self, id))
    }
    fn sync(&self) -> Result<()> {
        TabletServer::sync(self)
    }
    fn flush(&self, table: Option<u64>) -> Result<()> {
        TabletServer::flush(self, table)
    }
    fn compact(&self, table: u64, major: bool) -> Result<()> {
        TabletServer::compact(self, table, major)
    }
    fn split_now(&self, table: u64) -> Result<()> {
        TabletServer::split_now(self, table)
    }
    fn split_at_rows(&self, table: u64, rows: &[Vec<u8>]) -> Result<()> {
        TabletServer::split_at_rows(self, table, rows)
    }
    fn group_commit_stats(&self) -> Result<GroupCommitStats> {
        Ok(TabletServer::group_commit_stats(self))
    }
    fn commit_line(&self) -> Result<String> {
        Ok(TabletServer::commit_line(self))
    }
    fn kill(&self) -> Result<()> {
        TabletServer::kill(self);
        Ok(())
    }
}
