//! The limit beside each goal of `bigtable-bench goals`: what no software
//! passes on this machine, in the goal's own unit (a ratio), from figures
//! measured in the same run. A goal whose limit is below its target is out
//! of reach; one short of its target says how close it came to the limit.

use super::limits;
use super::workloads::Fig6;
use serde_json::{json, Value};
use std::path::Path;

/// Bytes one operation moves: a 1000-byte value and its 16-byte key.
const OP_BYTES: f64 = (super::common::VALUE_BYTES + 16) as f64;

/// Which way a figure has to go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    pub fn text(self) -> String {
        match self {
            Target::AtLeast(x) => format!(">= {x:.2}x"),
            Target::AtMost(x) => format!("<= {x:.2}x"),
        }
    }
}

/// A limit in the unit of a goal's figure, and what it was measured from.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub value: f64,
    pub what: String,
}

/// The machine's limits that no bench run measures itself, measured at the
/// start of `goals` (JSON, so that they land in its line).
pub fn machine(work: &Path, threads: usize) -> Value {
    let memory = limits::memory_bandwidth(threads);
    let memory_read = limits::memory_read_bandwidth(threads);
    // The disk's figures swing with the machine's other work: the best of
    // three (a miss is then never blamed on a probe run in a busy moment).
    let page_cache = limits::best_of(3, || limits::page_cache_write_bandwidth(work))
        .map_err(|e| eprintln!("warning: page cache bandwidth not measured: {e:#}"))
        .ok();
    let direct = limits::best_of(3, || limits::direct_write_bandwidth(work))
        .map_err(|e| eprintln!("warning: direct write bandwidth not measured: {e:#}"))
        .ok();
    let gbps = |b: Option<f64>| b.map_or("-".into(), |b| format!("{:.1} GB/s", b / 1e9));
    eprintln!(
        "limits: memory copies {:.1} GB/s, reads {:.1} GB/s ({threads} threads), page cache writes {}, direct writes {}",
        memory / 1e9,
        memory_read / 1e9,
        gbps(page_cache),
        gbps(direct)
    );
    json!({
        "memory_bytes_per_sec": memory.round(),
        "memory_read_bytes_per_sec": memory_read.round(),
        "page_cache_write_bytes_per_sec": page_cache.map(f64::round),
        "direct_write_bytes_per_sec": direct.map(f64::round),
    })
}

fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
}

fn is_write(w: Fig6) -> bool {
    matches!(w, Fig6::SeqWrite | Fig6::RandWrite)
}

/// Engine workload `w` against the better peer: the limit on our rate over
/// the peer's. Synced writes: the fsync rate times the workloads' mean
/// batch; other writes: the memory bus copying each value twice (log and
/// memtable); reads and scans: the memory bus reading each value once (a
/// store need copy none: ours hands out values that borrow the cached
/// block, and a scan that counts entries moves no value at all).
pub fn engine(run: &Value, machine: &Value, w: Fig6, synced: bool) -> Option<Limit> {
    let peer = ["rocksdb", "fjall"]
        .iter()
        .filter_map(|p| num(run, &["workloads", w.key(), p, "ops_per_sec"]))
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))?;
    let (rate, what) = if synced && is_write(w) {
        let probe = &run["group_commit"]["local"];
        let fsync = num(probe, &["fsync_per_sec"])?;
        let batch = num(probe, &["workload_mean_batch"]).filter(|b| *b > 0.0)?;
        (
            fsync * batch,
            format!("fsync {fsync:.0}/s x batch {batch:.1}"),
        )
    } else if is_write(w) {
        let bw = num(machine, &["memory_bytes_per_sec"])?;
        (
            bw / (2.0 * OP_BYTES),
            format!("memory copies {:.1} GB/s, 2 copies", bw / 1e9),
        )
    } else {
        let bw = num(machine, &["memory_read_bytes_per_sec"])
            .or_else(|| num(machine, &["memory_bytes_per_sec"]))?;
        (
            bw / OP_BYTES,
            format!("memory reads {:.1} GB/s, each value read once", bw / 1e9),
        )
    };
    ratio_limit(rate, peer, what)
}

fn ratio_limit(rate: f64, base: f64, what: String) -> Option<Limit> {
    (base > 0.0 && rate > 0.0).then(|| Limit {
        value: rate / base,
        what: format!("{what}: {rate:.0}/s"),
    })
}

/// Three replicas over one copy: the least it can cost is the local run
/// plus, for each write, two more copies of what the local run wrote to
/// the store per write while the workload ran: its log bytes into the page
/// cache (logs stay buffered) and its SSTable bytes, flushes and the
/// compactions that ran meanwhile, to the disk around the page cache where
/// the machine takes `O_DIRECT` (the chunk layer's direct replicas), else
/// into the page cache too. A run that did not count its bytes is taken to
/// have written each value once to each.
pub fn replicas(run: &Value, machine: &Value, w: Fig6) -> Option<Limit> {
    let at = |k: &[&str]| num(run, &[&["workloads", w.key()], k].concat());
    let local = at(&["ops_per_sec"])?;
    let cache = num(machine, &["page_cache_write_bytes_per_sec"]).filter(|b| *b > 0.0)?;
    let direct = num(machine, &["direct_write_bytes_per_sec"]).filter(|b| *b > 0.0);
    let data = direct.unwrap_or(cache);
    let log = at(&["written_per_op", "log"]).unwrap_or(OP_BYTES);
    let sstables = at(&["written_per_op", "sstables"]).unwrap_or(OP_BYTES);
    let extra = 2.0 * local * (log / cache + sstables / data);
    let bytes = format!("{log:.0} B of log and {sstables:.0} B of SSTables a write");
    Some(Limit {
        value: 1.0 + extra,
        what: match direct {
            Some(d) => format!(
                "+2 copies of {bytes}: logs at {:.1} GB/s, SSTables direct at {:.1} GB/s",
                cache / 1e9,
                d / 1e9
            ),
            None => format!("+2 page-cache copies of {bytes} at {:.1} GB/s", cache / 1e9),
        },
    })
}

/// A mount workload against `base` ("bindfs" or "paper"): the lower of
/// the workload on tmpfs plus one FUSE round trip per request its caller
/// waited for, and the run itself with the daemon's own code free (the
/// kernel's part of each request and the callers' left: see
/// `cpu::CpuUse::without_daemon_code`), where the run measured it.
pub fn mount(run: &Value, w: Fig6, base: &str) -> Option<Limit> {
    let at = |k: &[&str]| num(run, &[&["workloads", w.key()], k].concat());
    let trips = at(&["limit"])
        .zip(at(&["fuse_waited_per_file"]).or_else(|| at(&["fuse_requests_per_file"])));
    let trips = trips.map(|(l, r)| (l, format!("tmpfs + {r:.1} waited round trips")));
    let code_free = at(&["cpu_us_per_file", "without_daemon_code"])
        .map(|l| (l, "this run with the daemon's own code free".to_string()));
    let (limit, what) = [trips, code_free]
        .into_iter()
        .flatten()
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    let base = match base {
        "paper" => w.paper(),
        _ => num(run, &["passthrough", w.key(), "ops_per_sec"])?,
    };
    ratio_limit(limit, base, what)
}

/// Warm re-read over the cold read: the re-read's limit over the cold rate.
pub fn warm_over_cold(run: &Value) -> Option<Limit> {
    let limit = num(run, &["reread_limit"])?;
    let requests = num(run, &["reread_waited_per_file"])
        .or_else(|| num(run, &["reread_requests_per_file"]))?;
    let cold = num(run, &["workloads", "seq_read", "ops_per_sec"])?;
    ratio_limit(
        limit,
        cold,
        format!("tmpfs + {requests:.1} waited round trips"),
    )
}

/// A walk against bindfs: the lowest of the walk on tmpfs plus a round trip
/// per request, the walk with the daemon's own code free, and the walking
/// programs' own CPU on our mount (the kernel's work on our replies
/// included: what is left with a daemon that answers in no time).
pub fn walk(w: &Value) -> Option<Limit> {
    let trips = num(w, &["limit_speedup"]).zip(num(w, &["requests_per_cell"]));
    let trips = trips.map(|(l, r)| (l, format!("tmpfs + {r:.2} round trips/cell")));
    let code_free = num(w, &["code_free_speedup"])
        .map(|l| (l, "this walk with the daemon's own code free".to_string()));
    let walker = num(w, &["walker_floor_speedup"]).map(|l| {
        let what = "this walk's own CPU on our mount (its programs and the kernel's work for them)";
        (l, what.to_string())
    });
    // A candidate the walk itself passed is, by that measurement, no bound
    // on it (at 100,000 rows our listing's kernel side costs less than
    // tmpfs's own `getdents`): the lowest of the rest.
    let passed = num(w, &["speedup"]);
    let (value, what) = [trips, code_free, walker]
        .into_iter()
        .flatten()
        .filter(|(l, _)| passed.is_none_or(|m| *l >= m))
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    Some(Limit { value, what })
}

/// How a walk's `key` seconds per cell grew from `small` (`rows.0` rows)
/// to `large` (`rows.1`).
pub fn per_cell_growth(small: &Value, large: &Value, rows: (f64, f64), key: &str) -> Option<f64> {
    let (a, b) = (num(small, &[key])? / rows.0, num(large, &[key])? / rows.1);
    (a > 0.0).then(|| b / a)
}

/// A walk's cost per cell at `large` rows over its cost at `small`: the
/// least that growth can be is its limit's (the walk on tmpfs plus a round
/// trip per request: the kernel's own walk grows too, with more dentries
/// and inodes to make), unless the walk grew less (then that is no bound on
/// it, and none is given). Bindfs's growth in the same run is said beside it.
pub fn walk_growth(small: &Value, large: &Value, rows: (f64, f64)) -> Option<Limit> {
    let value = per_cell_growth(small, large, rows, "limit_secs")?;
    if per_cell_growth(small, large, rows, "secs").is_some_and(|g| g < value) {
        return None;
    }
    let bindfs = per_cell_growth(small, large, rows, "bindfs_secs")
        .map_or("-".into(), |g| format!("{g:.2}x"));
    Some(Limit {
        value,
        what: format!("tmpfs + round trips per cell (bindfs grew {bindfs})"),
    })
}

/// How a figure stands against its target and limit.
pub fn verdict(target: Target, value: Option<f64>, limit: Option<&Limit>) -> String {
    let Some(v) = value else {
        return "not measured".into();
    };
    // How close the figure is to the limit: a rate's share of the limit's,
    // a cost's the other way round.
    let share = limit.map(|l| match target {
        Target::AtLeast(_) => v / l.value,
        Target::AtMost(_) => l.value / v,
    });
    let met = match target {
        Target::AtLeast(t) => v >= t,
        Target::AtMost(t) => v <= t,
    };
    let reachable = limit.map(|l| match target {
        Target::AtLeast(t) => l.value >= t,
        Target::AtMost(t) => l.value <= t,
    });
    let pct = |s: f64| format!("{:.0}% of the limit", 100.0 * s);
    match (met, reachable, share) {
        (true, _, Some(s)) => format!("yes, {}", pct(s)),
        (true, _, None) => "yes".into(),
        (false, Some(false), _) => "no: out of reach, the limit is below the goal".into(),
        (false, _, Some(s)) => format!("no: short of goal, {}", pct(s)),
        (false, _, None) => "no: short of goal, no limit measured".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(value: f64) -> Limit {
        Limit {
            value,
            what: String::new(),
        }
    }

    #[test]
    fn a_verdict_says_how_close_and_whether_in_reach() {
        let (rate, cost) = (Target::AtLeast(1.0), Target::AtMost(1.5));
        let out_of_reach = "no: out of reach, the limit is below the goal";
        let cases = [
            (rate, None, None, "not measured"),
            (rate, Some(1.5), Some(3.0), "yes, 50% of the limit"),
            (
                rate,
                Some(0.6),
                Some(2.0),
                "no: short of goal, 30% of the limit",
            ),
            (rate, Some(0.6), Some(0.8), out_of_reach),
            (
                rate,
                Some(0.6),
                None,
                "no: short of goal, no limit measured",
            ),
            // A cost: the limit is the least it can be.
            (
                cost,
                Some(2.0),
                Some(1.2),
                "no: short of goal, 60% of the limit",
            ),
            (cost, Some(2.0), Some(1.6), out_of_reach),
        ];
        for (target, value, l, expect) in cases {
            assert_eq!(verdict(target, value, l.map(limit).as_ref()), expect);
        }
    }

    #[test]
    fn a_walk_s_limit_is_the_lowest_of_round_trips_free_code_and_the_walkers_cpu() {
        let w = json!({"limit_speedup": 2.5, "requests_per_cell": 5.0});
        let l = walk(&w).unwrap();
        assert_eq!(l.value, 2.5);
        assert!(l.what.contains("5.00 round trips/cell"), "{l:?}");
        let mut free = w.clone();
        free["code_free_speedup"] = json!(1.8);
        let l = walk(&free).unwrap();
        assert_eq!(l.value, 1.8);
        assert!(l.what.contains("own code free"), "{l:?}");
        free["code_free_speedup"] = json!(3.0);
        assert_eq!(walk(&free).unwrap().value, 2.5);
        free["walker_floor_speedup"] = json!(0.97);
        let l = walk(&free).unwrap();
        assert_eq!(l.value, 0.97);
        assert!(l.what.contains("own CPU on our mount"), "{l:?}");
        // A walk faster than a candidate shows it is no bound: the next.
        free["speedup"] = json!(1.2);
        assert_eq!(walk(&free).unwrap().value, 2.5);
        free["speedup"] = json!(4.0);
        assert_eq!(walk(&free), None);
        assert_eq!(walk(&json!({})), None);
    }

    #[test]
    fn limits_come_from_the_runs_figures() {
        let machine = json!({"memory_bytes_per_sec": 10_160_000_000.0,
                             "page_cache_write_bytes_per_sec": 1_016_000_000.0});
        let run = json!({
            "workloads": {"seq_write": {"ops_per_sec": 100_000.0,
                "rocksdb": {"ops_per_sec": 50_000.0}, "fjall": {"ops_per_sec": 80_000.0}}},
            "group_commit": {"local": {"fsync_per_sec": 1000.0, "workload_mean_batch": 4.0}},
        });
        // Unsynced: 10.16 GB/s over 2 x 1016 bytes = 5M/s, over fjall's 80k.
        let l = engine(&run, &machine, Fig6::SeqWrite, false).unwrap();
        assert!((l.value - 62.5).abs() < 1e-9, "{l:?}");
        // Synced: 1000 fsyncs x 4 = 4000/s over 80k.
        let l = engine(&run, &machine, Fig6::SeqWrite, true).unwrap();
        assert!((l.value - 0.05).abs() < 1e-9, "{l:?}");
        // No peer: no limit.
        assert_eq!(engine(&run, &machine, Fig6::Scan, false), None);
        // Reads: the memory bus reading each value once, 20.32 GB/s over
        // 1016 bytes = 20M/s, over fjall's 4M.
        let mut reads = run.clone();
        reads["workloads"]["scan"] = json!({"ops_per_sec": 10_000_000.0,
            "fjall": {"ops_per_sec": 4_000_000.0}});
        let mut m = machine.clone();
        m["memory_read_bytes_per_sec"] = json!(20_320_000_000.0);
        let l = engine(&reads, &m, Fig6::Scan, false).unwrap();
        assert!((l.value - 5.0).abs() < 1e-9, "{l:?}");
        assert!(l.what.contains("read once"), "{l:?}");
        // 100k writes/s of 1016 bytes at 1.016 GB/s: 0.1 s a second per
        // copy, four copies (two of the log, two of the flushed data).
        let l = replicas(&run, &machine, Fig6::SeqWrite).unwrap();
        assert!((l.value - 1.4).abs() < 1e-9, "{l:?}");
        // The data's two copies written direct at 0.508 GB/s: 0.2 s each.
        let mut direct = machine.clone();
        direct["direct_write_bytes_per_sec"] = json!(508_000_000.0);
        let l = replicas(&run, &direct, Fig6::SeqWrite).unwrap();
        assert!((l.value - 1.6).abs() < 1e-9, "{l:?}");
        // What the run counted it wrote, where it did: 1016 bytes of log
        // and three times that of SSTables (flushed, then compacted
        // twice) a write: 0.1 s and 0.6 s a second per copy.
        let mut counted = run.clone();
        counted["workloads"]["seq_write"]["written_per_op"] =
            json!({"log": 1016.0, "sstables": 3048.0});
        let l = replicas(&counted, &direct, Fig6::SeqWrite).unwrap();
        assert!((l.value - 2.4).abs() < 1e-9, "{l:?}");
        assert!(l.what.contains("3048 B of SSTables"), "{l:?}");
        let mount_run = json!({
            "workloads": {"scan": {"limit": 20_000.0, "fuse_requests_per_file": 4.0}},
            "passthrough": {"scan": {"ops_per_sec": 5_000.0}},
            "reread_limit": 30_000.0, "reread_requests_per_file": 2.0,
        });
        assert_eq!(mount(&mount_run, Fig6::Scan, "bindfs").unwrap().value, 4.0);
        // The run with the daemon's code free, where lower, is the limit.
        let mut code = mount_run.clone();
        code["workloads"]["scan"]["cpu_us_per_file"] = json!({"without_daemon_code": 15_000.0});
        let l = mount(&code, Fig6::Scan, "bindfs").unwrap();
        assert_eq!(l.value, 3.0);
        assert!(l.what.contains("daemon's own code free"), "{l:?}");
        code["workloads"]["scan"]["cpu_us_per_file"] = json!({"without_daemon_code": 25_000.0});
        assert_eq!(mount(&code, Fig6::Scan, "bindfs").unwrap().value, 4.0);
        assert_eq!(mount(&mount_run, Fig6::SeqWrite, "bindfs"), None);
        // No cold read measured: no limit for the ratio.
        assert_eq!(warm_over_cold(&mount_run), None);
        // The limit's cost per cell grows from 1 us to 0.9 us: 0.9x.
        let small = json!({"limit_secs": 0.01, "bindfs_secs": 0.02});
        let large = json!({"limit_secs": 0.09, "bindfs_secs": 0.25});
        let l = walk_growth(&small, &large, (10_000.0, 100_000.0)).unwrap();
        assert!((l.value - 0.9).abs() < 1e-9, "{l:?}");
        assert!(l.what.contains("bindfs grew 1.25x"), "{l:?}");
        assert_eq!(walk_growth(&small, &json!({}), (1.0, 10.0)), None);
        // A walk that grew less than that limit: it is no bound on it.
        let (mut small, mut large) = (small, large);
        small["secs"] = json!(0.01);
        large["secs"] = json!(0.08);
        assert_eq!(walk_growth(&small, &large, (10_000.0, 100_000.0)), None);
        large["secs"] = json!(0.1);
        assert!(walk_growth(&small, &large, (10_000.0, 100_000.0)).is_some());
    }
}
