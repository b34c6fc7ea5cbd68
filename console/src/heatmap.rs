//! `/keyviz`: the key visualizer's heatmap — each table's key ranges down,
//! time across, brighter where more rows were read and written — as an
//! SVG inside a page, as a downloadable SVG and as JSON. Every cell carries
//! its table, key range, column and counts as `data-` attributes.

use crate::html::{esc, frame};
use engine::keyviz::{Counts, Heatmap};
use std::fmt::Write;

/// Key ranges drawn per table, at most.
pub const ROWS: usize = 48;
const REFRESH_SECS: u32 = 30;
const LABEL_W: usize = 220;
const CELL_H: usize = 14;
const PLOT_W: usize = 720;

fn key(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}

/// Cold to hot: dark blue, red, yellow (as Cloud Bigtable's).
fn color(v: u64, max: u64) -> String {
    if v == 0 || max == 0 {
        return "#141446".into();
    }
    // Square root: a range with a hundredth of the hottest's accesses
    // stays dark, one with a quarter is half way.
    let t = (v as f64 / max as f64).sqrt();
    let lerp = |a: f64, b: f64, x: f64| (a + (b - a) * x).round() as u8;
    let (r, g, b) = if t < 0.5 {
        let x = t * 2.0;
        (
            lerp(40.0, 220.0, x),
            lerp(20.0, 40.0, x),
            lerp(110.0, 60.0, x),
        )
    } else {
        let x = (t - 0.5) * 2.0;
        (
            lerp(220.0, 255.0, x),
            lerp(40.0, 235.0, x),
            lerp(60.0, 90.0, x),
        )
    };
    format!("#{r:02x}{g:02x}{b:02x}")
}

fn heat(c: &Counts) -> u64 {
    c.reads + c.writes
}

/// The heatmap as one SVG image.
pub fn svg(h: &Heatmap) -> String {
    let ncols = h.columns.len().max(1);
    // The plot keeps its width: columns are narrow when there are many.
    let cell_w = (PLOT_W / ncols).max(2);
    let width = LABEL_W + cell_w * ncols + 20;
    let mut body = String::new();
    let mut y = 10;
    for t in &h.tables {
        let max = t.cells.iter().flatten().map(heat).max().unwrap_or(0);
        let _ = write!(
            body,
            "<text x=\"4\" y=\"{}\" font-weight=\"bold\" font-size=\"13\">{}</text>",
            y + 12,
            esc(&t.table)
        );
        y += 18;
        let _ = write!(body, "<g data-table-map=\"{}\">", esc(&t.table));
        for (ri, row) in t.cells.iter().enumerate() {
            let start = key(&t.starts[ri]);
            let end = t.starts.get(ri + 1).map(|k| key(k)).unwrap_or_default();
            let _ = write!(
                body,
                "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\" font-family=\"monospace\">{}</text>",
                LABEL_W - 6,
                y + CELL_H - 3,
                if start.is_empty() { "(first row)".to_string() } else { esc(&start) }
            );
            for (ci, c) in row.iter().enumerate() {
                let col = h.columns.get(ci).copied().unwrap_or(0);
                let _ = write!(
                    body,
                    "<rect class=\"cell\" x=\"{}\" y=\"{y}\" width=\"{cell_w}\" height=\"{CELL_H}\" fill=\"{}\" \
                     data-table=\"{}\" data-start=\"{}\" data-end=\"{}\" data-col=\"{col}\" data-reads=\"{}\" \
                     data-writes=\"{}\" data-bytes=\"{}\"><title>{} [{}, {}) at {col}: {} reads, {} writes, {} bytes</title></rect>",
                    LABEL_W + ci * cell_w,
                    color(heat(c), max),
                    esc(&t.table),
                    esc(&start),
                    esc(&end),
                    c.reads,
                    c.writes,
                    c.bytes,
                    esc(&t.table),
                    esc(&start),
                    esc(&end),
                    c.reads,
                    c.writes,
                    c.bytes
                );
            }
            y += CELL_H;
        }
        body.push_str("</g>");
        y += 10;
    }
    if h.tables.is_empty() {
        let _ = write!(body, "<text x=\"4\" y=\"24\">no reads or writes yet</text>");
        y += 30;
    }
    let hhmm = |t: u64| format!("{:02}:{:02} UTC", t / 3600 % 24, t / 60 % 60);
    let (first, last) = (
        h.columns.first().copied().unwrap_or(0),
        h.columns.last().copied().unwrap_or(0) + h.column_secs,
    );
    let _ = write!(
        body,
        "<text x=\"{LABEL_W}\" y=\"{y1}\" font-size=\"11\" fill=\"#555\">{}</text>\
         <text x=\"{}\" y=\"{y1}\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">{}</text>\
         <text x=\"{LABEL_W}\" y=\"{y2}\" font-size=\"11\" fill=\"#555\">time → ({} s a column, {} columns; reads + writes, brighter is more)</text>",
        hhmm(first),
        LABEL_W + cell_w * ncols,
        hhmm(last),
        h.column_secs,
        h.columns.len(),
        y1 = y + 12,
        y2 = y + 26,
    );
    y += 14;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"heatmap\" width=\"{width}\" height=\"{}\" \
         font-family=\"sans-serif\"><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>{body}</svg>",
        y + 20
    )
}

/// The page around the SVG.
pub fn page(h: &Heatmap) -> String {
    let body = format!(
        "<h2>Key visualizer</h2><p>Each table's row-key ranges down, time across; brighter cells \
         were read and written more (hover for reads, writes and bytes). \
         Download: <a href=\"/keyviz.svg\" download>SVG</a> · <a href=\"/keyviz.json\" download>JSON</a></p>{}",
        svg(h)
    );
    frame("bigtable-fs key visualizer", REFRESH_SECS, &body)
}

/// The numbers behind the heatmap.
pub fn json(h: &Heatmap) -> String {
    let tables: Vec<serde_json::Value> = h
        .tables
        .iter()
        .map(|t| {
            let ranges: Vec<serde_json::Value> = (0..t.starts.len())
                .map(|i| {
                    serde_json::json!({
                        "start": key(&t.starts[i]),
                        "end": t.starts.get(i + 1).map(|k| key(k)),
                    })
                })
                .collect();
            let of = |f: fn(&Counts) -> u64| -> Vec<Vec<u64>> {
                t.cells.iter().map(|r| r.iter().map(f).collect()).collect()
            };
            serde_json::json!({
                "table": t.table,
                "ranges": ranges,
                "reads": of(|c| c.reads),
                "writes": of(|c| c.writes),
                "bytes": of(|c| c.bytes),
            })
        })
        .collect();
    serde_json::json!({
        "column_secs": h.column_secs,
        "columns": h.columns,
        "tables": tables,
    })
    .to_string()
}
