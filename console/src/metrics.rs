//! `/metrics`: every figure of `.bigtable/status`, `servers`, `master`,
//! `stats` and `tablets`, read from the files' own text (so the two never
//! disagree), named by the Prometheus conventions, plus the latency
//! histograms of [`telemetry`].
//!
//! A status line is `[subject words] key=value ...`: the subject's words
//! name the metric (`gfs chunkserver 0:` gives `bigtable_gfs_chunkserver_…`
//! with `id="0"`), numbers are samples, and a few keys (`server`, `master`)
//! are labels. Counters end in `_total`; [`GAUGES`] lists what goes up and
//! down.

use crate::Sources;
use fs::StatusFile;
use std::collections::BTreeMap;
use telemetry::prometheus::{CounterVec, Encoder, GaugeVec, Opts, Registry, TextEncoder};

/// Figures that go up and down, by their name after `bigtable_`; every
/// other number of the status files is a counter.
pub const GAUGES: &[&str] = &[
    "tables",
    "tablet_servers",
    "cached_locations",
    "block_cache_bytes",
    "block_cache_capacity",
    "block_cache_entries",
    "scan_cache_bytes",
    "scan_cache_capacity",
    "scan_cache_entries",
    "group_commit_max_batch",
    "log_active_lane",
    "log_files",
    "local_files",
    "local_bytes",
    "gfs_chunkservers",
    "gfs_replication",
    "gfs_chunk_size",
    "gfs_files",
    "gfs_chunks",
    "gfs_under_replicated",
    "gfs_lost",
    "gfs_master_copies",
    "gfs_master_copies_ok",
    "gfs_master_generation",
    "gfs_master_log_records",
    "gfs_master_log_bytes",
    "gfs_chunkserver_replicas",
    "gfs_chunkserver_bytes",
    "gfs_chunkserver_free",
    "gfs_repair_queue",
    "gfs_repair_round_done",
    "gfs_repair_round_chunks",
    "gfs_repair_parallel",
    "gfs_repair_rate",
    "gfs_repair_pending_reports",
    "gfs_copying_copied_bytes",
    "gfs_copying_chunk_bytes",
    "gfs_scrub_rate",
    "gfs_scrub_pass",
    "gfs_scrub_scanned",
    "gfs_scrub_total",
    "gfs_scrub_pass_bytes",
    "gfs_scrub_last_pass_seconds",
    "gfs_scrub_last_pass_bytes",
    "gfs_io_open_replica_files",
    "s3_latency_us_p50",
    "s3_latency_us_p99",
    "s3_latency_us_p999",
    "s3_disk_cache_bytes",
    "s3_disk_cache_limit",
    "s3_disk_cache_hit_rate",
    "s3_owner_epoch",
    "s3_owner_fenced",
    "server_tablets",
    "server_memtable_bytes",
    "server_sstable_bytes",
    "server_last_seq",
    "server_clock_raise_max_us",
    "master_ready",
    "master_live_servers",
    "master_pending_assignments",
    "fs_inodes",
    "fs_open_handles",
    "fs_pending_dirs",
    "fs_kept_listing_bytes",
    "fs_rss_bytes",
];

/// Keys whose value is a word: each gives a gauge at 1 labelled with it.
const STATES: &[&str] = &["state", "mode", "io", "fuse_transport", "lock_backend"];

/// The `stats` lines that are not one FUSE operation's count.
const FUSE_TOTALS: &[&str] = &[
    "fuse_requests",
    "fuse_forgets",
    "fuse_uring_replies",
    "fuse_handling_us",
];

/// One sample: metric name (after `bigtable_`, before `_total`), labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

fn ident(w: &str) -> bool {
    w.starts_with(|c: char| c.is_ascii_alphabetic())
        && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn number(v: &str) -> Option<f64> {
    match v {
        "true" => return Some(1.0),
        "false" => return Some(0.0),
        _ => {}
    }
    // `chunkservers=3/3`: the first figure (the second is its own metric's total).
    v.split('/').next()?.parse().ok()
}

/// The samples of one status line; `label_keys` are the keys whose values
/// label every sample of the line, `prefix` starts every name.
pub fn parse_line(line: &str, prefix: &str, label_keys: &[&str]) -> Vec<Sample> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let first_kv = words
        .iter()
        .position(|w| w.contains('='))
        .unwrap_or(words.len());
    let mut parts: Vec<String> = Vec::new();
    if !prefix.is_empty() {
        parts.push(prefix.to_string());
    }
    let mut labels = Vec::new();
    for w in &words[..first_kv] {
        let w = w.trim_end_matches(':');
        if ident(w) {
            parts.push(w.to_ascii_lowercase());
        } else if !w.is_empty() {
            labels.push(("id".to_string(), w.to_string()));
        }
    }
    let mut kvs = Vec::new();
    for w in &words[first_kv..] {
        let Some((k, v)) = w.split_once('=') else {
            continue;
        };
        if label_keys.contains(&k) {
            labels.push((k.to_string(), v.to_string()));
        } else {
            kvs.push((k, v));
        }
    }
    let stem = parts.join("_");
    let name = |k: &str| {
        let k = k
            .strip_suffix("_secs")
            .map_or(k.to_string(), |b| format!("{b}_seconds"));
        if stem.is_empty() {
            k
        } else {
            format!("{stem}_{k}")
        }
    };
    let mut out = Vec::new();
    for (k, v) in kvs {
        if !ident(k) {
            continue;
        }
        if STATES.contains(&k) {
            // What state: a gauge at 1 with the state as its label.
            let mut l = labels.clone();
            l.push((k.to_string(), v.to_string()));
            out.push(Sample {
                name: name(k),
                labels: l,
                value: 1.0,
            });
        } else if let Some(x) = number(v) {
            out.push(Sample {
                name: name(k),
                labels: labels.clone(),
                value: x,
            });
        }
    }
    out
}

/// Every sample the status files give.
pub fn samples(src: &Sources) -> Vec<Sample> {
    let text = |f: StatusFile| String::from_utf8_lossy(&src.fs.status_text(f)).into_owned();
    let mut out = Vec::new();
    for line in text(StatusFile::Status).lines() {
        out.extend(parse_line(line, "", &["server"]));
    }
    for line in text(StatusFile::Servers).lines() {
        out.extend(parse_line(line, "server", &["server"]));
    }
    for line in text(StatusFile::Master).lines() {
        // `event=...` and `dead_server=...` lines are words, not figures.
        if line.starts_with("master=") {
            out.extend(parse_line(line, "master", &["master"]));
        }
    }
    for line in text(StatusFile::Stats).lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let Some(x) = number(v) else { continue };
        let op = k
            .strip_prefix("fuse_")
            .filter(|_| !FUSE_TOTALS.contains(&k));
        out.push(match op {
            Some(op) => Sample {
                name: "fuse_operations".into(),
                labels: vec![("operation".into(), op.into())],
                value: x,
            },
            None => Sample {
                name: format!("fs_{k}"),
                labels: Vec::new(),
                value: x,
            },
        });
    }
    for line in text(StatusFile::Tablets)
        .lines()
        .filter(|l| !l.starts_with('#'))
    {
        // table id start end memtable_bytes sstable_bytes sstables server
        let w: Vec<&str> = line.split_whitespace().collect();
        let [table, id, _, _, mem, sst, files, server] = w[..] else {
            continue;
        };
        let labels = vec![
            ("table".to_string(), table.to_string()),
            ("tablet".to_string(), id.to_string()),
            ("server".to_string(), server.to_string()),
        ];
        for (name, v) in [
            ("tablet_memtable_bytes", mem),
            ("tablet_sstable_bytes", sst),
            ("tablet_sstables", files),
        ] {
            if let Some(x) = number(v) {
                out.push(Sample {
                    name: name.into(),
                    labels: labels.clone(),
                    value: x,
                });
            }
        }
    }
    out
}

/// Whether a figure is a gauge (else a counter).
pub fn is_gauge(name: &str) -> bool {
    GAUGES.contains(&name)
        || name.starts_with("tablet_")
        || name.ends_with("_state")
        || name.ends_with("_mode")
        || name.ends_with("_io")
        || name.ends_with("_transport")
        || name.ends_with("_backend")
}

/// The full metric name of a figure.
pub fn metric_name(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if is_gauge(&name) || name.ends_with("_total") {
        format!("bigtable_{name}")
    } else {
        format!("bigtable_{name}_total")
    }
}

/// `/metrics`.
pub fn render(src: &Sources) -> String {
    // Grouped by metric, every sample of one with the same label names.
    let mut by: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for s in samples(src) {
        by.entry(s.name.clone()).or_default().push(s);
    }
    let reg = Registry::new();
    for (name, ss) in &by {
        let mut keys: Vec<&str> = ss
            .iter()
            .flat_map(|s| s.labels.iter().map(|(k, _)| k.as_str()))
            .collect();
        keys.sort();
        keys.dedup();
        let values = |s: &Sample| -> Vec<String> {
            keys.iter()
                .map(|k| {
                    s.labels
                        .iter()
                        .find(|(lk, _)| lk == k)
                        .map_or(String::new(), |(_, v)| v.clone())
                })
                .collect()
        };
        let full = metric_name(name);
        let help = format!("{name}, as .bigtable/ shows it");
        if is_gauge(name) {
            let Ok(g) = GaugeVec::new(Opts::new(full, help), &keys) else {
                continue;
            };
            for s in ss {
                let v = values(s);
                let v: Vec<&str> = v.iter().map(String::as_str).collect();
                if let Ok(m) = g.get_metric_with_label_values(&v) {
                    m.set(s.value);
                }
            }
            let _ = reg.register(Box::new(g));
        } else {
            let Ok(c) = CounterVec::new(Opts::new(full, help), &keys) else {
                continue;
            };
            for s in ss {
                let v = values(s);
                let v: Vec<&str> = v.iter().map(String::as_str).collect();
                if let Ok(m) = c.get_metric_with_label_values(&v) {
                    m.inc_by(s.value.max(0.0));
                }
            }
            let _ = reg.register(Box::new(c));
        }
    }
    let mut fams = reg.gather();
    fams.extend(telemetry::gather());
    let mut out = Vec::new();
    for f in fams {
        if f.get_metric().is_empty() {
            // Declared though nothing was measured yet.
            out.extend_from_slice(
                format!("# HELP {0} {1}\n# TYPE {0} histogram\n", f.name(), f.help()).as_bytes(),
            );
        } else if let Err(e) = TextEncoder::new().encode(&[f], &mut out) {
            log::debug!("console: encoding a metric: {e}");
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_status_line_names_its_figures_from_its_subject() {
        let s = parse_line(
            "gfs chunkserver 0: dir=/d state=healthy replicas=4 bytes=100 reads=7",
            "",
            &[],
        );
        let names: Vec<String> = s.iter().map(|s| metric_name(&s.name)).collect();
        assert_eq!(
            names,
            [
                "bigtable_gfs_chunkserver_state",
                "bigtable_gfs_chunkserver_replicas",
                "bigtable_gfs_chunkserver_bytes",
                "bigtable_gfs_chunkserver_reads_total"
            ]
        );
        assert!(s.iter().all(|s| s.labels[0] == ("id".into(), "0".into())));
        assert_eq!(s[1].value, 4.0);
    }

    #[test]
    fn labels_come_from_label_keys() {
        let s = parse_line("server=ts-1 tablets=3 writes=10", "server", &["server"]);
        assert_eq!(s.len(), 2);
        assert_eq!(metric_name(&s[0].name), "bigtable_server_tablets");
        assert_eq!(metric_name(&s[1].name), "bigtable_server_writes_total");
        assert_eq!(s[1].labels, vec![("server".into(), "ts-1".into())]);
    }
}
