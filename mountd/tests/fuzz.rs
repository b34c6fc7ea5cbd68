//! Property-based fuzzing of the mount option parsers: `-o` lists, sizes,
//! seconds, and the daemon's and mount(8) helper's command lines. Each must
//! return an error or a configuration, never panic, and a configuration they
//! accept must turn into engine options without panicking.
//!
//! `FUZZ_CASES=n` runs n cases per target (CI default: 512).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mountd::mountopts::{
    parse_daemon_args, parse_helper_args, parse_seconds, parse_size, MountConfig,
};
use proptest::prelude::*;
use std::path::PathBuf;
use testkit::fuzz::config;

/// One `-o` option, grammar-shaped or arbitrary.
fn option() -> impl Strategy<Value = String> {
    prop_oneof![
        "(threads|commit_workers|attr_timeout|entry_timeout|log|memtable|split|cache|scan_cache|max_value|compaction_threads|store|chunkservers|replication|chunk_size|x-[a-z]{0,4}|[a-z_]{1,10})=[-+0-9a-zA-Z.:/eE]{0,24}",
        "(allow_other|sync|ro|rw|nosuid|suid|nodev|dev|noexec|exec|noatime|defaults|auto|noauto|user|[a-z]{1,8})",
        "[ -~]{0,30}",
    ]
}

fn check(cfg: &MountConfig) {
    let _ = cfg.thread_count();
    let _ = cfg.engine_options();
    let _ = cfg.status();
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn option_lists(opts in prop::collection::vec(option(), 0..6)) {
        let mut cfg = MountConfig::new(PathBuf::from("/d"), PathBuf::from("/m"));
        if cfg.apply_list(&opts.join(",")).is_ok() {
            check(&cfg);
        }
    }

    #[test]
    fn sizes_and_seconds(s in prop_oneof![
        "[ -~]{0,24}",
        "[0-9]{0,22}[kKmMgGtTxé]?",
        "-?[0-9]{0,6}(\\.[0-9]{0,6})?(e[+-]?[0-9]{1,4})?|NaN|inf|-inf",
    ]) {
        let _ = parse_size(&s);
        if let Ok(d) = parse_seconds(&s) {
            prop_assert!(d.as_secs() <= 86400);
        }
    }

    #[test]
    fn sizes_with_units(n in any::<u64>(), unit in 0usize..5) {
        let (suffix, mult) = [("", 1u64), ("k", 1 << 10), ("M", 1 << 20), ("g", 1 << 30), ("T", 1 << 40)][unit];
        let got = parse_size(&format!("{n}{suffix}"));
        match n.checked_mul(mult) {
            Some(v) => prop_assert_eq!(got, Ok(v)),
            None => prop_assert!(got.is_err()),
        }
    }

    #[test]
    fn command_lines(args in prop::collection::vec(prop_oneof![
        Just("-o".to_string()),
        Just("-f".to_string()),
        Just("-t".to_string()),
        Just("-N".to_string()),
        "-[a-z]{1,3}",
        "-o[a-z_=0-9,]{0,20}",
        "/[a-z]{0,6}",
        option(),
        "[ -~]{0,12}",
    ], 0..7)) {
        if let Ok(cfg) = parse_daemon_args(&args) {
            check(&cfg);
        }
        if let Ok(call) = parse_helper_args(&args) {
            // What the helper passes on, the daemon accepts.
            let mut cfg = MountConfig::new(PathBuf::from(&call.data_dir), PathBuf::from(&call.mountpoint));
            for o in &call.options {
                prop_assert!(cfg.apply(o).is_ok(), "helper kept {o:?} but the daemon refuses it");
            }
            check(&cfg);
        }
    }
}
