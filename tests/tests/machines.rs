#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Three daemons, each on its own simulated machine (its own network
//! namespace on a bridge, its own CPU cgroup with half a core:
//! `testkit::machine`), serve one table on one SeaweedFS bucket and one
//! etcd that stay on the host. A hot range that every mount writes is
//! split by load and its halves end up on different daemons.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::etcd::Etcd;
use testkit::machine::{Machine, Network};
use testkit::seaweed::Seaweed;
use tests::{wait_until, Mount};

/// How long the hot range may take to be split and spread: the master
/// needs `load_split_after` (2 s) of heat, a split, a round to rate the
/// halves and a move; the rest is slack for a loaded 2-core machine.
const SPREAD_WITHIN: Duration = Duration::from_secs(120);

/// `.bigtable/tablets` rows of `table` as (start, end, server); the
/// table's first start is `%`, its last end `-`.
fn tablets_of(m: &Mount, table: &str) -> Vec<(String, String, String)> {
    m.ok("cat .bigtable/tablets")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&table) && f.len() >= 5).then(|| {
                (
                    f[2].to_string(),
                    f[3].to_string(),
                    f[f.len() - 1].to_string(),
                )
            })
        })
        .collect()
}

/// The servers holding a part of rows `h000`..`h999` of `t`.
fn hot_servers(m: &Mount) -> BTreeSet<String> {
    tablets_of(m, "t")
        .into_iter()
        .filter(|(start, end, _)| start.as_str() < "h999" && (end == "-" || end.as_str() > "h000"))
        .map(|(_, _, server)| server)
        .collect()
}

fn serving(m: &Mount) -> usize {
    m.ok("cat .bigtable/servers")
        .lines()
        .filter(|l| l.contains(" state=serving"))
        .count()
}

fn write_cell(mnt: &Path, row: &str, value: &str) -> std::io::Result<()> {
    let dir = mnt.join("t").join(row).join("cf");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("q"), value)
}

#[test]
fn a_hot_range_on_three_machines_is_split_and_its_halves_served_by_different_daemons() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making network namespaces and cgroups needs root");
        return;
    }
    let net = Network::create().unwrap();
    let machines: Vec<Arc<Machine>> = (0..3)
        .map(|i| Arc::new(Machine::create(&net, i, Some(0.5)).unwrap()))
        .collect();
    let weed = Seaweed::start_on("machines", &net.host_ip);
    let etcd = Arc::new(Etcd::start_on(&net.host_ip));
    let secret = weed.data_dir().join("cluster-secret");
    std::fs::write(&secret, "a-secret-of-more-than-sixteen-bytes\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let creds = weed.credentials_file();
    let mounts: Vec<Mount> = machines
        .iter()
        .map(|m| {
            let opts = [
                format!("store=s3://{}/bt", weed.bucket),
                format!("s3_endpoint={}", weed.endpoint),
                format!("s3_credentials={}", creds.display()),
                "tablet_servers=1".to_string(),
                "merge=0".to_string(),
                // Internal RPC on the machine's own address: calls between
                // daemons cross the bridge.
                format!("cluster_listen={}:0", m.ip),
                format!("cluster_secret_file={}", secret.display()),
                "load_split=20".to_string(),
                "load_split_after=2".to_string(),
            ];
            let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
            Mount::on_etcd_in(etcd.clone(), "/bt", &opts, Some(m.clone()))
        })
        .collect();
    for m in &mounts {
        assert!(
            wait_until(Duration::from_secs(90), || serving(m) == 3),
            "{}",
            m.ok("cat .bigtable/servers")
        );
    }
    mounts[0].table("t", "cf\n");
    assert_eq!(tablets_of(&mounts[0], "t").len(), 1);
    for m in &mounts {
        assert!(
            wait_until(Duration::from_secs(30), || m.path("t").is_dir()),
            "table t not listed in {}",
            m.mnt.display()
        );
    }
    // Every mount writes random rows of the hot range, two threads each.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = mounts
        .iter()
        .flat_map(|m| [m.mnt.clone(), m.mnt.clone()])
        .enumerate()
        .map(|(k, mnt)| {
            let (stop, written) = (stop.clone(), written.clone());
            std::thread::spawn(move || {
                let mut rng = testkit::rng::SplitMix64::new(k as u64 + 1);
                let mut errors = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.up_to(999);
                    match write_cell(&mnt, &format!("h{i:03}"), &format!("v{i}")) {
                        Ok(()) => {
                            written.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                errors
            })
        })
        .collect();
    let spread = wait_until(SPREAD_WITHIN, || hot_servers(&mounts[0]).len() >= 2);
    stop.store(true, Ordering::Relaxed);
    let errors: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        spread,
        "after {} writes the hot range is on {:?}; tablets {:?}; masters:\n{}",
        written.load(Ordering::Relaxed),
        hot_servers(&mounts[0]),
        tablets_of(&mounts[0], "t"),
        mounts
            .iter()
            .map(|m| m.ok("cat .bigtable/master"))
            .collect::<String>()
    );
    assert!(
        errors.is_empty(),
        "writes failed: {:?}",
        &errors[..errors.len().min(5)]
    );
    // The table was one small tablet: the split was for its load.
    assert!(tablets_of(&mounts[0], "t").len() >= 2);
    let masters: String = mounts
        .iter()
        .map(|m| m.ok("cat .bigtable/master"))
        .collect();
    assert!(masters.contains("for its load"), "{masters}");
    // What one machine's mount wrote reads back through another's.
    let row = (0..1000)
        .map(|i| format!("h{i:03}"))
        .find(|r| mounts[0].path(&format!("t/{r}/cf/q")).exists())
        .expect("some hot row written");
    let want = format!(
        "v{}",
        row[1..].trim_start_matches('0').parse::<u64>().unwrap_or(0)
    );
    assert_eq!(mounts[1].ok(&format!("cat t/{row}/cf/q")), want);
    // Each daemon's machine did the work it was given.
    for m in &machines {
        assert!(m.cpu_used() > Duration::ZERO);
    }
    drop(mounts);
    drop(machines);
}
