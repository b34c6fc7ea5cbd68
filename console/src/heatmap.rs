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

/// What a cell's brightness shows (`?metric=` of `/keyviz` and `/keyviz.svg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Reads and writes.
    Accesses,
    Reads,
    Writes,
    /// Bytes written.
    Bytes,
}

impl Metric {
    const ALL: [Metric; 4] = [
        Metric::Accesses,
        Metric::Reads,
        Metric::Writes,
        Metric::Bytes,
    ];

    fn name(self) -> &'static str {
        match self {
            Metric::Accesses => "accesses",
            Metric::Reads => "reads",
            Metric::Writes => "writes",
            Metric::Bytes => "bytes",
        }
    }

    /// The metric a query string asks for (reads and writes by default).
    pub fn from_query(q: &str) -> Metric {
        let asked = q.split('&').find_map(|kv| kv.strip_prefix("metric="));
        Metric::ALL
            .into_iter()
            .find(|m| Some(m.name()) == asked)
            .unwrap_or(Metric::Accesses)
    }

    fn of(self, c: &Counts) -> u64 {
        match self {
            Metric::Accesses => c.reads + c.writes,
            Metric::Reads => c.reads,
            Metric::Writes => c.writes,
            Metric::Bytes => c.bytes,
        }
    }
}

/// The heatmap as one SVG image.
pub fn svg(h: &Heatmap, metric: Metric) -> String {
    let heat = |c: &Counts| metric.of(c);
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
         <text x=\"{LABEL_W}\" y=\"{y2}\" font-size=\"11\" fill=\"#555\">time → ({} s a column, {} columns; brighter: more {})</text>",
        hhmm(first),
        LABEL_W + cell_w * ncols,
        hhmm(last),
        h.column_secs,
        h.columns.len(),
        metric.name(),
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
pub fn page(h: &Heatmap, metric: Metric) -> String {
    let choice: Vec<String> = Metric::ALL
        .iter()
        .map(|m| {
            if *m == metric {
                format!("<b>{}</b>", m.name())
            } else {
                format!("<a href=\"/keyviz?metric={0}\">{0}</a>", m.name())
            }
        })
        .collect();
    let body = format!(
        "<h2>Key visualizer</h2><p>Each table's row-key ranges down, time across; brighter cells \
         had more {} (hover for reads, writes and bytes written). Show: {}. \
         Download: <a href=\"/keyviz.svg?metric={}\" download>SVG</a> · \
         <a href=\"/keyviz.json\" download>JSON</a></p>{}",
        metric.name(),
        choice.join(" · "),
        metric.name(),
        svg(h, metric)
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

#[cfg(test)]
mod tests {
    use super::*;
    use engine::keyviz::TableMap;

    fn map() -> Heatmap {
        let c = |reads, writes, bytes| Counts {
            reads,
            writes,
            bytes,
        };
        Heatmap {
            column_secs: 60,
            columns: vec![0, 60],
            tables: vec![TableMap {
                table: "t".into(),
                starts: vec![b"".to_vec(), b"k5".to_vec()],
                cells: vec![
                    vec![c(9, 0, 0), c(1, 0, 0)],
                    vec![c(0, 2, 5000), c(0, 0, 0)],
                ],
            }],
        }
    }

    fn fill_of(svg: &str, start: &str, col: u64) -> String {
        let at = svg
            .split("<rect class=\"cell\"")
            .find(|r| {
                r.contains(&format!("data-start=\"{start}\""))
                    && r.contains(&format!("data-col=\"{col}\""))
            })
            .unwrap_or_default();
        at.split("fill=\"")
            .nth(1)
            .unwrap_or("")
            .chars()
            .take(7)
            .collect()
    }

    #[test]
    fn the_brightest_cell_follows_the_metric_asked_for() {
        let h = map();
        let hot = color(1, 1);
        let by_reads = svg(&h, Metric::from_query("metric=reads"));
        assert_eq!(fill_of(&by_reads, "", 0), hot);
        assert_ne!(fill_of(&by_reads, "k5", 0), hot);
        let by_bytes = svg(&h, Metric::from_query("x=1&metric=bytes"));
        assert_eq!(fill_of(&by_bytes, "k5", 0), hot);
        assert_eq!(fill_of(&by_bytes, "", 0), color(0, 1));
        // The first range is labelled, and ends where the next begins.
        assert!(by_bytes.contains(">(first row)<"));
        assert!(by_bytes.contains("data-start=\"\" data-end=\"k5\""));
        assert_eq!(Metric::from_query(""), Metric::Accesses);
    }

    /// Characters XML 1.0 does not allow, even as references.
    fn xml_forbidden(c: char) -> bool {
        (c.is_control() && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{FFFE}' || c == '\u{FFFF}'
    }

    #[test]
    fn svg_is_valid_xml_whatever_the_keys_hold() {
        let mut h = map();
        h.tables[0].starts[1] = b"k\x00\x01\x1b[31m\x7f<&\xff\"'".to_vec();
        h.tables[0].table = "t\x02".into();
        let out = svg(&h, Metric::Accesses);
        assert!(!out.chars().any(xml_forbidden), "{out:?}");
        assert!(
            out.contains("k\\x00\\x01\\x1b[31m\\x7f&lt;&amp;\u{FFFD}&quot;&#39;"),
            "{out}"
        );
        assert!(!page(&h, Metric::Accesses).chars().any(xml_forbidden));
    }

    #[test]
    fn json_holds_every_count() {
        let j: serde_json::Value = serde_json::from_str(&json(&map())).unwrap_or_default();
        assert_eq!(j["tables"][0]["reads"][0][0], 9);
        assert_eq!(j["tables"][0]["bytes"][1][0], 5000);
        assert_eq!(j["tables"][0]["ranges"][0]["end"], "k5");
        assert_eq!(j["columns"][1], 60);
    }
}
