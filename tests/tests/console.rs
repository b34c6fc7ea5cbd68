#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The operator's console (`-o http=`): `/metrics` read by a Prometheus
//! text-format parser, and `/` and `/keyviz` loaded by a real browser
//! (headless Chromium) after a skewed workload.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tests::{http_get, Mount};

fn scrape(addr: &str) -> prometheus_parse::Scrape {
    let (code, body) = http_get(addr, "/metrics");
    assert_eq!(code, 200, "{body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// The sum of `name`'s samples whose labels include `labels`.
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name)
        .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .map(|x| match &x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

/// Every metric docs/console.md lists (except the store-specific ones,
/// named `bigtable_s3_…` and `bigtable_local_…`, which a daemon on the
/// chunk cluster does not have).
fn documented_metrics() -> Vec<String> {
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/console.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let mut names: Vec<String> = text
        .split('`')
        .filter(|w| {
            w.starts_with("bigtable_") && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .filter(|w| !w.starts_with("bigtable_s3_") && !w.starts_with("bigtable_local_"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    assert!(
        names.len() > 50,
        "docs/console.md lists {} metrics",
        names.len()
    );
    names
}

#[test]
fn metrics_list_every_documented_figure_and_counters_move() {
    // `sync`: every close commits through the group commit (whose figures
    // and wait are among those checked).
    let m = Mount::with_options(&["http=127.0.0.1:0", "sync"]);
    let addr = m.console_addr();
    m.table("m", "f\n");
    let before = scrape(&addr);
    m.ok("for i in $(seq 1 20); do mkdir -p m/row$i/f && echo value$i > m/row$i/f/q; done");
    m.ok("for i in $(seq 1 20); do cat m/row$i/f/q; done >/dev/null");
    m.ok("ls m >/dev/null");
    let after = scrape(&addr);

    // Every documented metric is there, as samples or (a histogram of
    // something not done yet, such as gRPC calls) as a declared family.
    let present = |n: &str| {
        after.docs.contains_key(n)
            || after
                .samples
                .iter()
                .any(|s| s.metric == n || s.metric.strip_suffix("_count") == Some(n))
    };
    let missing: Vec<String> = documented_metrics()
        .into_iter()
        .filter(|n| !present(n))
        .collect();
    assert!(missing.is_empty(), "documented but not served: {missing:?}");

    // Counters moved with the writes and reads through the mount.
    for (name, labels) in [
        ("bigtable_fs_writes_total", vec![]),
        ("bigtable_fs_commits_total", vec![]),
        ("bigtable_server_writes_total", vec![]),
        ("bigtable_server_reads_total", vec![]),
        ("bigtable_group_commit_items_total", vec![]),
        (
            "bigtable_fuse_operations_total",
            vec![("operation", "write")],
        ),
        (
            "bigtable_fuse_request_duration_seconds_count",
            vec![("operation", "mkdir")],
        ),
        (
            "bigtable_commit_duration_seconds_count",
            vec![("operation", "log_write")],
        ),
        (
            "bigtable_commit_duration_seconds_count",
            vec![("operation", "wait")],
        ),
        (
            "bigtable_chunk_request_duration_seconds_count",
            vec![("operation", "append")],
        ),
    ] {
        let (b, a) = (value(&before, name, &labels), value(&after, name, &labels));
        assert!(
            a >= b + 20.0,
            "{name}{labels:?}: {b} before 20 writes, {a} after"
        );
    }
    // Gauges: the table's tablets and its memtable bytes.
    assert!(value(&after, "bigtable_tablet_memtable_bytes", &[("table", "m")]) > 0.0);
    assert_eq!(
        value(&after, "bigtable_master_state", &[("state", "active")]),
        1.0
    );
    // What .bigtable/servers says, /metrics says.
    let servers = m.ok("cat .bigtable/servers");
    let name = servers
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches("server=");
    assert!(
        value(&after, "bigtable_server_tablets", &[("server", name)]) >= 1.0,
        "{servers}"
    );
    assert_eq!(http_get(&addr, "/nope").0, 404);
}

/// Headless Chromium, or a failure that says how to get it.
fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|f| f.is_file())
        });
        if let Some(f) = found {
            return f;
        }
    }
    panic!("this test needs Chromium (tests/setup.sh installs Debian's `chromium`)");
}

/// Runs the browser on `url` with `args`; returns its stdout. Killed (by
/// its pid) if it takes more than two minutes.
fn browse(profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let exited = tests::wait_until(Duration::from_secs(120), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("chromium took over two minutes on {url}");
    }
    reader.join().unwrap()
}

/// The attributes of each `<rect class="cell" ...>` of the rendered heatmap.
fn heatmap_cells(dom: &str) -> Vec<HashMap<String, String>> {
    dom.split("<rect class=\"cell\"")
        .skip(1)
        .map(|tag| {
            let tag = tag.split('>').next().unwrap_or("");
            tag.split("\" ")
                .filter_map(|a| {
                    let (k, v) = a.trim().split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect()
        })
        .collect()
}

/// Where the browser's screenshots go (kept as test artifacts).
fn artifacts() -> PathBuf {
    let d = tests::bin_dir().join("console-artifacts");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_browser_sees_the_servers_and_the_hot_band_of_a_skewed_workload() {
    let m = Mount::with_options(&["http=127.0.0.1:0"]);
    let addr = m.console_addr();
    m.table("skew", "f\n");
    // 100 rows written once each, then one row (row042) 300 times more.
    m.ok("for i in $(seq -w 0 99); do mkdir -p skew/row0$i/f && echo x > skew/row0$i/f/q; done");
    m.ok("for i in $(seq 1 300); do echo $i > skew/row042/f/q; done");
    let profile = tempfile::tempdir().unwrap();

    // The status page: every tablet server by name, the table listed.
    let dom = browse(profile.path(), &["--dump-dom"], &format!("http://{addr}/"));
    let servers = m.ok("cat .bigtable/servers");
    let names: Vec<&str> = servers
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.strip_prefix("server="))
        .collect();
    assert!(!names.is_empty(), "{servers}");
    for n in &names {
        assert!(
            dom.contains(&format!("data-server=\"{n}\"")),
            "{n} not on the page:\n{dom}"
        );
    }
    assert!(dom.contains("data-table=\"skew\""), "{dom}");
    assert!(dom.contains("href=\"/keyviz\""));

    // The heatmap: the brightest cell of the table is the hot row's range,
    // and it stands out from every other range.
    let url = format!("http://{addr}/keyviz");
    let dom = browse(profile.path(), &["--dump-dom"], &url);
    let cells: Vec<_> = heatmap_cells(&dom)
        .into_iter()
        .filter(|c| c.get("data-table").map(String::as_str) == Some("skew"))
        .collect();
    assert!(cells.len() >= 4, "too few ranges drawn:\n{dom}");
    let heat = |c: &HashMap<String, String>| -> u64 {
        ["data-reads", "data-writes"]
            .iter()
            .map(|k| c.get(*k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0))
            .sum()
    };
    // Each range's accesses over all columns (the workload may straddle two).
    let mut ranges: HashMap<(String, String), u64> = HashMap::new();
    for c in &cells {
        *ranges
            .entry((c["data-start"].clone(), c["data-end"].clone()))
            .or_default() += heat(c);
    }
    let ((start, end), hot) = ranges.iter().max_by_key(|(_, h)| **h).unwrap();
    assert!(
        start.as_str() <= "row042" && (end.is_empty() || "row042" < end.as_str()),
        "the hottest range is [{start}, {end}), not row042's: {ranges:?}"
    );
    let second = ranges
        .iter()
        .filter(|(r, _)| r.0 != *start)
        .map(|(_, h)| *h)
        .max()
        .unwrap_or(0);
    assert!(
        *hot >= 300 && *hot > 3 * second,
        "{hot} vs {second}: {ranges:?}"
    );
    // The row keys label the ranges.
    assert!(
        dom.contains(">row042<") || dom.contains(&format!(">{start}<")),
        "{dom}"
    );

    // Screenshots, kept as artifacts.
    let dir = artifacts();
    for (page, file) in [("/", "status.png"), ("/keyviz", "keyviz.png")] {
        let path = dir.join(file);
        let _ = std::fs::remove_file(&path);
        browse(
            profile.path(),
            &[
                "--window-size=1280,1000",
                &format!("--screenshot={}", path.display()),
            ],
            &format!("http://{addr}{page}"),
        );
        let png = std::fs::read(&path).unwrap_or_default();
        assert!(
            png.starts_with(b"\x89PNG"),
            "no screenshot of {page} at {}",
            path.display()
        );
    }

    // The numbers behind the image, and the image itself.
    let (code, json) = http_get(&addr, "/keyviz.json");
    assert_eq!(code, 200);
    assert!(
        json.contains("\"table\":\"skew\"") && json.contains("\"writes\""),
        "{json}"
    );
    let (code, svg) = http_get(&addr, "/keyviz.svg");
    assert_eq!(code, 200);
    assert!(
        svg.starts_with("<svg") && svg.contains("data-table=\"skew\""),
        "{svg}"
    );
}
