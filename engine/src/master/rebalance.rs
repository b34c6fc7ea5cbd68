//! The master's balancing round (paper §5.4, with load as Cloud Bigtable
//! and HBase measure it): read every live server's tablets and loads, take
//! the one action `balance.rs` chooses (split a hot tablet, move load,
//! even out counts), and merge small cool neighbours.

use super::balance::{next_action, next_merge, Action, ServerLoad, TabletLoad};
use super::load::LoadConfig;
use super::Master;
use crate::metadata::METADATA_ID;
use crate::protocol::TabletService;
use crate::Result;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

impl Master {
    fn load_config(&self) -> LoadConfig {
        LoadConfig {
            split_rate: self.env.opts.load_split_rate,
            split_after: self.env.opts.load_split_after,
            split_cooldown: self.env.opts.split_cooldown,
        }
    }

    /// The live servers and their tablets' loads.
    fn loads(&self) -> Vec<(Arc<dyn TabletService>, ServerLoad)> {
        let cfg = self.load_config();
        let live = self.live();
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for name in live {
            let Some(s) = self.env.server(&name) else {
                continue;
            };
            let Ok(served) = s.served() else {
                continue;
            };
            seen.extend(served.iter().map(|t| t.id));
            let tablets = self.state.lock().load.observe(Instant::now(), served, &cfg);
            out.push((s, ServerLoad { name, tablets }));
        }
        self.state.lock().load.retain(&seen);
        out
    }

    /// One balancing round: at most one split or move.
    pub(super) fn balance(&self) -> Result<()> {
        let _ops = self.ops.lock();
        let loads = self.loads();
        let servers: Vec<ServerLoad> = loads.iter().map(|(_, l)| l.clone()).collect();
        match next_action(&servers) {
            Some(Action::Split {
                server,
                tablet,
                table,
                row,
            }) => {
                let Some((s, _)) = loads.iter().find(|(_, l)| l.name == server) else {
                    return Ok(());
                };
                if self.is_held(tablet) {
                    return Ok(());
                }
                s.split_at_rows(table, std::slice::from_ref(&row))?;
                self.state
                    .lock()
                    .load
                    .split(table, row.clone(), Instant::now());
                self.note(format!(
                    "split hot tablet {tablet} on {server} at {} for its load",
                    row.escape_ascii()
                ));
            }
            Some(Action::Move((id, from, to))) => {
                self.move_one(id, &from, &to)?;
                self.state.lock().load.moved(id, Instant::now());
            }
            None => {}
        }
        Ok(())
    }

    /// Merges one pair of small, cool neighbouring tablets, if there is one.
    pub(super) fn merge_small(&self) -> Result<()> {
        let _ops = self.ops.lock();
        let limit = self.env.opts.merge_bytes;
        if limit == 0 {
            return Ok(());
        }
        let mut by_table: BTreeMap<u64, Vec<(TabletLoad, String)>> = BTreeMap::new();
        for (s, l) in self.loads() {
            for t in l.tablets {
                if t.table != METADATA_ID {
                    by_table
                        .entry(t.table)
                        .or_default()
                        .push((t, s.name().to_string()));
                }
            }
        }
        let now = Instant::now();
        for (table, mut ts) in by_table {
            ts.sort_by(|a, b| a.0.start.cmp(&b.0.start));
            let loads: Vec<TabletLoad> = ts.iter().map(|(t, _)| t.clone()).collect();
            let pick = {
                let st = self.state.lock();
                next_merge(&loads, limit, self.env.opts.load_split_rate, |row| {
                    st.load
                        .split_recently(table, row, now, self.env.opts.split_cooldown)
                })
            };
            if let Some(i) = pick {
                let (a, sa) = &ts[i];
                let (b, sb) = &ts[i + 1];
                return self.merge(a.id, sa, b.id, sb);
            }
        }
        Ok(())
    }
}
