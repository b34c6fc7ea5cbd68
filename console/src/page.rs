//! `/`: the cluster at a glance — tablet servers with their tablets, load
//! and memtables; the master and its recent events; the chunk layer's
//! health, scrub and re-replication; compactions and recoveries running;
//! tables with their sizes. Refreshes itself every few seconds.

use crate::html::{bar, bytes, esc, frame, word, words};
use crate::Sources;
use engine::TabletInfo;
use fs::StatusFile;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

const REFRESH_SECS: u32 = 5;

fn key(k: &[u8]) -> String {
    esc(&String::from_utf8_lossy(k))
}

/// The tablets of the tables the viewer may read.
fn tablets(src: &Sources, readable: &BTreeSet<String>) -> Vec<TabletInfo> {
    let mut all = Vec::new();
    for t in src
        .bt
        .list_tables()
        .into_iter()
        .filter(|t| readable.contains(t))
    {
        all.extend(src.bt.tablets(&t).unwrap_or_default());
    }
    all
}

fn servers(src: &Sources, all: &[TabletInfo], o: &mut String) {
    let reports = src.bt.server_reports();
    let _ = write!(
        o,
        "<h2>Tablet servers ({})</h2><table id=\"servers\"><tr><th>server</th><th>state</th><th>tablets</th>\
         <th>memtables</th><th>SSTables</th><th>reads</th><th>writes</th><th>scans</th>\
         <th>compactions (minor / merging / major)</th><th>splits</th><th>stalls</th><th>tablets served</th></tr>",
        reports.len()
    );
    for r in &reports {
        let mut list = String::new();
        for t in all.iter().filter(|t| t.server == r.name) {
            let _ =
                write!(
                list,
                "<div data-tablet=\"{}\">{} [{}, {}) <span class=\"muted\">{} + {}</span></div>",
                t.id,
                esc(&t.table),
                if t.start.is_empty() { "−∞".to_string() } else { key(&t.start) },
                t.end.as_deref().map_or("∞".to_string(), key),
                bytes(t.memtable_bytes),
                bytes(t.sstable_bytes)
            );
        }
        let state = if r.state == "serving" { "ok" } else { "bad" };
        let _ = write!(
            o,
            "<tr data-server=\"{n}\"><td>{n}</td><td class=\"{state}\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{} / {} / {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{list}</td></tr>",
            r.state,
            r.tablets,
            bytes(r.memtable_bytes),
            bytes(r.sstable_bytes),
            r.reads,
            r.writes,
            r.scans,
            r.minor_compactions,
            r.merging_compactions,
            r.major_compactions,
            r.splits,
            r.stalls,
            n = esc(&r.name),
        );
    }
    o.push_str("</table>");
    // Background work now: compactions and log recoveries.
    o.push_str("<h2>Compactions and recoveries running</h2>");
    let running: Vec<(String, String)> = reports
        .iter()
        .flat_map(|r| r.activity.iter().map(|a| (r.name.clone(), a.clone())))
        .collect();
    if running.is_empty() {
        o.push_str("<p class=\"muted\">none</p>");
    } else {
        o.push_str("<table id=\"running\"><tr><th>server</th><th>work</th></tr>");
        for (s, a) in running {
            let _ = write!(o, "<tr><td>{}</td><td>{}</td></tr>", esc(&s), esc(&a));
        }
        o.push_str("</table>");
    }
}

/// The master; its events (which name row keys) only for a viewer who may
/// read every table.
fn master(src: &Sources, all_readable: bool, o: &mut String) {
    let text = String::from_utf8_lossy(&src.fs.status_text(StatusFile::Master)).into_owned();
    o.push_str("<h2>Master</h2><table id=\"master\">");
    let mut events = Vec::new();
    let mut header = false;
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("event=") {
            events.push(e.to_string());
        } else if let Some(d) = line.strip_prefix("dead_server=") {
            let _ = write!(
                o,
                "<tr><th>dead server</th><td class=\"bad\" colspan=\"20\">{}</td></tr>",
                esc(d)
            );
        } else {
            let w = words(line);
            if !header {
                o.push_str("<tr>");
                for (k, _) in &w {
                    let _ = write!(o, "<th>{}</th>", esc(&k.replace('_', " ")));
                }
                o.push_str("</tr>");
                header = true;
            }
            let class = if word(line, "state") == Some("active") {
                "ok"
            } else {
                "muted"
            };
            let _ = write!(o, "<tr class=\"{class}\">");
            for (_, v) in w {
                let _ = write!(o, "<td>{}</td>", esc(v));
            }
            o.push_str("</tr>");
        }
    }
    o.push_str("</table><h2>Recent events</h2>");
    if !all_readable {
        o.push_str("<p class=\"muted\">shown only to a viewer who may read every table</p>");
    } else if events.is_empty() {
        o.push_str("<p class=\"muted\">none</p>");
    } else {
        o.push_str("<ol id=\"events\" reversed>");
        for e in events.iter().rev() {
            let _ = write!(o, "<li>{}</li>", crate::html::event(e));
        }
        o.push_str("</ol>");
    }
}

fn storage(src: &Sources, o: &mut String) {
    let text = String::from_utf8_lossy(&src.fs.status_text(StatusFile::Status)).into_owned();
    o.push_str("<h2>Chunk layer and storage</h2><table id=\"storage\">");
    for line in text.lines() {
        let progress = if line.starts_with("gfs scrub:") {
            let n = |k| word(line, k).and_then(|v| v.parse().ok()).unwrap_or(0);
            format!("scrub pass: {}", bar(n("scanned"), n("total")))
        } else if line.starts_with("gfs repair:") {
            let n = |k| word(line, k).and_then(|v| v.parse().ok()).unwrap_or(0);
            format!(
                "re-replication round: {}",
                bar(n("round_done"), n("round_chunks"))
            )
        } else if line.starts_with("gfs copying:") {
            let n = |k| word(line, k).and_then(|v| v.parse().ok()).unwrap_or(0);
            format!("copy: {}", bar(n("copied_bytes"), n("chunk_bytes")))
        } else if line.starts_with("gfs") || line.starts_with("local") || line.starts_with("s3") {
            String::new()
        } else {
            continue;
        };
        let health = match word(line, "state") {
            Some("ok" | "healthy" | "idle" | "scanning") => "ok",
            Some(_) if line.starts_with("gfs:") || line.contains("chunkserver") => "bad",
            _ => "",
        };
        let _ = write!(
            o,
            "<tr><td class=\"{health}\"><code>{}</code></td><td>{progress}</td></tr>",
            esc(line)
        );
    }
    o.push_str("</table>");
}

fn tables(all: &[TabletInfo], o: &mut String) {
    let mut by: BTreeMap<&str, (usize, u64, u64)> = BTreeMap::new();
    for t in all {
        let e = by.entry(&t.table).or_default();
        e.0 += 1;
        e.1 += t.memtable_bytes;
        e.2 += t.sstable_bytes;
    }
    o.push_str(
        "<h2>Tables</h2><table id=\"tables\"><tr><th>table</th><th>tablets</th><th>memtables</th>\
         <th>SSTables</th><th>size</th></tr>",
    );
    for (name, (n, mem, sst)) in by {
        let _ = write!(
            o,
            "<tr data-table=\"{t}\"><td>{t}</td><td class=\"n\">{n}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            bytes(mem),
            bytes(sst),
            bytes(mem + sst),
            t = esc(name)
        );
    }
    o.push_str("</table>");
}

/// The page.
/// The page as a viewer who may read the tables in `readable` sees it.
pub fn render(src: &Sources, readable: &BTreeSet<String>) -> String {
    let all = tablets(src, readable);
    let all_readable = src.bt.list_tables().iter().all(|t| readable.contains(t));
    let mut o = String::new();
    servers(src, &all, &mut o);
    master(src, all_readable, &mut o);
    storage(src, &mut o);
    tables(&all, &mut o);
    frame("bigtable-fs console", REFRESH_SECS, &o)
}
