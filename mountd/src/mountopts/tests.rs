//! Unit tests of the option parser, the option table and the command lines.
#![allow(clippy::unwrap_used)]

use super::{
    is_ignored, parse_daemon_args, parse_helper_args, parse_seconds, parse_size, Initial,
    MountConfig, DEFAULT_URING_DEPTH, OPTIONS,
};
use std::path::PathBuf;
use std::time::Duration;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Every option's declared default is what a fresh configuration shows.
#[test]
fn declared_defaults_are_the_defaults() {
    let c = MountConfig::new("/d".into(), "/m".into());
    for o in OPTIONS {
        let shown = (o.show)(&c);
        match o.default {
            Initial::Is(v) => {
                if let Some(s) = &shown {
                    assert_eq!(s, v, "default of {}", o.name);
                }
            }
            Initial::Off => assert_eq!(shown, None, "{} is off by default", o.name),
            Initial::Text(_) => {}
        }
    }
    // Options another option switches on show their defaults then.
    let mut on = MountConfig::new("/d".into(), "/m".into());
    on.apply_list("store=s3://bucket/p,lock=etcd://h:1")
        .unwrap();
    let status = on.status();
    for line in [
        "s3_region=us-east-1",
        "s3_timeout=30",
        "disk_cache=1g",
        "etcd_lease=10",
    ] {
        assert!(status.lines().any(|l| l == line), "{line} in {status}");
    }
    let names: Vec<&str> = OPTIONS.iter().map(|o| o.name).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "an option declared twice");
    assert!(names.iter().all(|n| !is_ignored(n)));
}

/// `.bigtable/mount` keeps its first lines, shows what was set, and
/// shows files holding secrets by their path only.
#[test]
fn status_lines() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    c.apply_list("sync,memtable=1m,cluster_listen=7100,attr_timeout=2")
        .unwrap();
    let status = c.status();
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(
        lines[..7],
        [
            "options=sync,memtable=1m,cluster_listen=7100,attr_timeout=2",
            "attr_timeout_ms=2000",
            "entry_timeout_ms=300000",
            "dir_timeout_ms=300000",
            "reader_wait_ms=1000",
            "sync=true",
            "max_value_size=67108864",
        ]
    );
    for want in [
        "memtable=1m",
        "attr_timeout=2",
        "entry_timeout=300",
        "cluster_listen=127.0.0.1:7100",
    ] {
        assert!(lines.contains(&want), "{want} in {status}");
    }
    assert_eq!(lines.iter().filter(|l| l.starts_with("sync=")).count(), 1);
    // Each option naming a secret's file shows the path given.
    let mut s = MountConfig::new("/d".into(), "/m".into());
    s.apply_list("store=s3://bucket/p,lock=etcd://h:1").unwrap();
    let secret = |n: &str| {
        [
            "_secret_file",
            "_key",
            "_token",
            "_tokens",
            "_credentials",
            "_user_file",
        ]
        .iter()
        .any(|end| n.ends_with(end))
    };
    let mut named = 0;
    for o in OPTIONS.iter().filter(|o| secret(o.name)) {
        assert_eq!(o.arg, "FILE", "{} names a file", o.name);
        let p = format!("/secret/{}", o.name);
        s.apply(&format!("{}={p}", o.name)).unwrap();
        assert_eq!((o.show)(&s), Some(p), "{} shows its path", o.name);
        named += 1;
    }
    let private: Vec<&str> = s.private_files().iter().map(|(k, _)| *k).collect();
    assert_eq!(private.len(), named, "{private:?}");
    assert!(private.iter().all(|k| secret(k)));
}

#[test]
fn lock_service_on_etcd() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert!(c.etcd_config().unwrap().is_none());
    c.apply_list("lock=etcd://a:1,b:2/p,etcd_lease=3,etcd_user_file=/u")
        .unwrap();
    let e = c.etcd_config().unwrap().unwrap();
    assert_eq!(e.endpoints, vec!["a:1", "b:2"]);
    assert_eq!(e.prefix, "/p");
    assert_eq!(e.lease_ttl, Duration::from_secs(3));
    assert_eq!(e.user_file, Some(PathBuf::from("/u")));
    assert!(c.apply("lock=zk://x").is_err());
    assert!(c.apply("etcd_lease=1").is_err());
    c.apply("etcd_cert=/c").unwrap();
    assert!(c.etcd_config().is_err(), "a certificate without its key");
    let mut d = MountConfig::new("/d".into(), "/m".into());
    d.apply("etcd_ca=/ca").unwrap();
    assert!(d.etcd_config().is_err(), "etcd_* without lock=etcd://");
    d.apply("lock=embedded").unwrap();
    assert!(d.etcd_config().unwrap().is_none());
}

#[test]
fn sizes_and_seconds() {
    assert_eq!(parse_size("64k").unwrap(), 65536);
    assert_eq!(parse_size("16M").unwrap(), 16 << 20);
    assert_eq!(parse_size("123").unwrap(), 123);
    assert!(parse_size("12x").is_err());
    assert!(parse_size("k").is_err());
    assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
    assert!(parse_seconds("-1").is_err());
}

#[test]
fn nomap_reads_a_local_store_without_mappings() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert!(!c.nomap);
    c.apply_list("store=local,nomap").unwrap();
    assert!(c.local_store && c.nomap);
}

#[test]
fn log_batch_window() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert!(c.engine_options().log_batch_window.is_zero());
    assert!(c.engine_options().log_batch_window_adaptive);
    c.apply("log_batch_window=2000").unwrap();
    assert_eq!(
        c.engine_options().log_batch_window,
        Duration::from_millis(2)
    );
    assert!(c.apply("log_batch_window=1000001").is_err());
    assert!(c.apply("log_batch_window=2ms").is_err());
    assert!(!c.engine_options().log_batch_window_adaptive);
    c.apply("log_batch_window=auto").unwrap();
    assert!(c.engine_options().log_batch_window_adaptive);
    c.apply("log_batch_window=0").unwrap();
    assert!(!c.engine_options().log_batch_window_adaptive);
}

#[test]
fn log_puts_in_flight() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert_eq!(c.engine_options().log_puts_in_flight, 0);
    c.apply("log_puts_in_flight=2").unwrap();
    assert_eq!(c.engine_options().log_puts_in_flight, 2);
    c.apply("log_puts_in_flight=auto").unwrap();
    assert_eq!(c.engine_options().log_puts_in_flight, 0);
    assert!(c.apply("log_puts_in_flight=3").is_err());
    assert!(c.apply("log_puts_in_flight=0").is_err());
}

#[test]
fn busy_poll_window() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert_eq!(c.busy_poll, fs::DEFAULT_BUSY_POLL);
    c.apply("busy_poll=0").unwrap();
    assert!(c.busy_poll.is_zero());
    c.apply("busy_poll=120").unwrap();
    assert_eq!(c.busy_poll, Duration::from_micros(120));
    assert!(c.apply("busy_poll=10001").is_err());
    assert!(c.apply("busy_poll=-1").is_err());
    assert!(c.apply("busy_poll").is_err());
}

#[test]
fn uring_queue_depth() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert_eq!(c.uring_depth, DEFAULT_URING_DEPTH);
    c.apply("uring=0").unwrap();
    assert_eq!(c.uring_depth, 0);
    c.apply("uring=128").unwrap();
    assert_eq!(c.uring_depth, 128);
    assert!(c.apply("uring=1025").is_err());
    assert!(c.apply("uring=many").is_err());
    assert!(c.apply("uring").is_err());
}

#[test]
fn grpc_instance() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert_eq!(c.instance, "default");
    c.apply("instance=prod-1").unwrap();
    assert_eq!(c.instance, "prod-1");
    assert!(c.apply("instance=a@b").is_err());
    assert!(c.apply("instance=").is_err());
}

#[test]
fn tls_and_private_file_options() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    c.apply_list("cluster_listen=0.0.0.0:7100,cluster_advertise=10.0.0.5:7100")
        .unwrap();
    c.apply_list("cluster_ca=/c/ca.pem,cluster_cert=/c/n.pem")
        .unwrap();
    assert!(c.cluster().unwrap_err().contains("go together"));
    c.apply("cluster_key=/c/n-key.pem").unwrap();
    // Mutual TLS without a secret is enough off loopback.
    let rpc = c.cluster().unwrap().unwrap();
    assert_eq!(rpc.tls.unwrap().key, PathBuf::from("/c/n-key.pem"));
    c.apply("grpc_cert=/g/c.pem").unwrap();
    assert!(c.grpc_tls().is_err());
    c.apply_list("grpc_key=/g/k.pem,grpc_client_ca=/g/ca.pem")
        .unwrap();
    assert!(c.grpc_tls().unwrap().unwrap().ca.is_some());
    c.apply_list("cluster_secret_file=/s,lock=etcd://h:1,etcd_user_file=/u")
        .unwrap();
    let named: Vec<&str> = c.private_files().iter().map(|(k, _)| *k).collect();
    assert_eq!(
        named,
        [
            "cluster_secret_file",
            "cluster_key",
            "grpc_key",
            "etcd_user_file"
        ]
    );
}

#[test]
fn cluster_options() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert_eq!(c.cluster().unwrap(), None);
    c.apply("cluster_listen=7100").unwrap();
    let rpc = c.cluster().unwrap().unwrap();
    assert_eq!(rpc.listen.to_string(), "127.0.0.1:7100");
    assert_eq!((rpc.advertise, rpc.secret_file), (None, None));
    // Alone on loopback without a secret: one of its own.
    assert!(rpc.own_secret);
    c.apply("cluster_listen=0.0.0.0:7100").unwrap();
    assert!(c.cluster().unwrap_err().contains("cluster_secret_file"));
    c.apply("cluster_secret_file=/etc/bt.secret").unwrap();
    assert!(c.cluster().unwrap_err().contains("cluster_advertise"));
    c.apply("cluster_advertise=10.0.0.5:7100").unwrap();
    assert!(c.cluster().unwrap().is_some());
    assert!(c.apply("cluster_advertise=7100").is_err());
    assert!(!c.cluster().unwrap().unwrap().own_secret);
    // Sharing an etcd on loopback: a secret, or trust said outright
    // (and never with allow_other).
    let mut l = MountConfig::new("/d".into(), "/m".into());
    l.apply_list("lock=etcd://h:1,cluster_listen=7100").unwrap();
    assert!(l.cluster().unwrap_err().contains("every local user"));
    l.apply("cluster_trust_loopback").unwrap();
    assert!(!l.cluster().unwrap().unwrap().own_secret);
    l.apply("allow_other").unwrap();
    assert!(l.cluster().unwrap_err().contains("allow_other"));
    l.allow_other = false;
    l.apply("cluster_secret_file=/s").unwrap();
    assert!(l
        .cluster()
        .unwrap_err()
        .contains("without cluster_secret_file"));
    let mut d = MountConfig::new("/d".into(), "/m".into());
    d.apply("cluster_dial_self").unwrap();
    assert!(d.cluster().is_err(), "dial_self without listen");
    let mut e = MountConfig::new("/d".into(), "/m".into());
    e.apply("tablet_servers=0").unwrap();
    e.apply("cluster_listen=0").unwrap();
    assert!(
        e.cluster().is_err(),
        "client-only without a shared lock service"
    );
}

#[test]
fn grpc_address() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert_eq!(c.grpc, None);
    c.apply("grpc=8086").unwrap();
    assert_eq!(c.grpc.unwrap().to_string(), "127.0.0.1:8086");
    c.apply("grpc=0.0.0.0:9000").unwrap();
    assert_eq!(c.grpc.unwrap().to_string(), "0.0.0.0:9000");
    assert!(c.apply("grpc=nope").is_err());
    assert!(c.apply("grpc").is_err());
}

#[test]
fn grpc_auth_options() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert!(c.check_grpc_auth().is_ok());
    c.apply("grpc=8086").unwrap();
    assert!(c.check_grpc_auth().unwrap_err().contains("grpc_tokens"));
    c.apply("grpc_trust_loopback").unwrap();
    assert!(c.check_grpc_auth().is_ok());
    c.apply("allow_other").unwrap();
    assert!(c.check_grpc_auth().unwrap_err().contains("allow_other"));
    c.grpc_trust_loopback = false;
    c.apply("grpc_tokens=/etc/bt-tokens").unwrap();
    assert!(c.check_grpc_auth().is_ok());
    assert!(c.apply("grpc_tokens").is_err());
}

#[test]
fn console_address() {
    let mut c = MountConfig::new("/d".into(), "/m".into());
    assert_eq!(c.http, None);
    c.apply("http=9090").unwrap();
    assert_eq!(c.http.unwrap().to_string(), "127.0.0.1:9090");
    c.apply("http=0.0.0.0:9091").unwrap();
    assert_eq!(c.http.unwrap().to_string(), "0.0.0.0:9091");
    assert!(c.apply("http=nope").is_err());
    assert!(c.apply("http").is_err());
}

#[test]
fn daemon_command_line() {
    let c = parse_daemon_args(&s(&[
        "/d",
        "/m",
        "-f",
        "-o",
        "allow_other,threads=3",
        "-oattr_timeout=2,sync,memtable=1m,merge=0",
    ]))
    .unwrap();
    assert!(c.foreground && c.allow_other && c.sync);
    assert_eq!(c.threads, Some(3));
    assert_eq!(c.attr_timeout, Duration::from_secs(2));
    assert_eq!(c.memtable_bytes, Some(1 << 20));
    assert_eq!(c.engine_options().memtable_bytes, 1 << 20);
    assert_eq!(c.engine_options().merge_bytes, 0);
    assert!(parse_daemon_args(&s(&["/d"])).is_err());
    assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "bogus"])).is_err());
    assert!(parse_daemon_args(&s(&["/d", "/m", "-x"])).is_err());
    assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "threads=0"])).is_err());
    let c = parse_daemon_args(&s(&[
        "/d",
        "/m",
        "-o",
        "scrub_rate=8m/s,scrub_interval=60,scrub_idle=0.5,repair_rate=0,repair_parallel=2,master_mirrors=/x:/y",
    ]))
    .unwrap();
    assert_eq!(c.scrub_rate, Some(8 << 20));
    assert_eq!(c.scrub_interval, Some(Duration::from_secs(60)));
    assert_eq!(c.scrub_idle, Some(Duration::from_millis(500)));
    assert_eq!((c.repair_rate, c.repair_parallel), (Some(0), Some(2)));
    assert_eq!(
        c.master_mirrors,
        vec![PathBuf::from("/x"), PathBuf::from("/y")]
    );
    assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "repair_parallel=0"])).is_err());
    assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "scrub_rate=fast"])).is_err());
}

#[test]
fn helper_drops_generic_options_and_flags() {
    let h = parse_helper_args(&s(&[
        "/var/lib/bt",
        "/mnt/bt",
        "-v",
        "-n",
        "-o",
        "rw,noauto,_netdev,nofail,user,x-systemd.automount,allow_other,log=debug",
    ]))
    .unwrap();
    assert_eq!(h.options, s(&["allow_other", "log=debug"]));
    assert!(!h.fake);
    assert!(parse_helper_args(&s(&["/a", "/b", "-f"])).unwrap().fake);
    assert!(parse_helper_args(&s(&["/a", "/b", "-o", "frob"])).is_err());
    let t = parse_helper_args(&s(&["/a", "/b", "-t", "bigtable", "-sv"])).unwrap();
    assert_eq!(t.mountpoint, "/b");
}
