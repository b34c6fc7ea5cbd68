#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The daemon's Cloud Bigtable gRPC API (`-o grpc=...`) driven by the
//! official Python client, with the same data read and written through the
//! mount.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use tests::{wait_until, Mount};

/// The address the daemon logged for its gRPC listener.
fn grpc_addr(m: &Mount) -> String {
    let mut addr = None;
    let found = wait_until(Duration::from_secs(30), || {
        addr = m.log_text().lines().find_map(|l| {
            l.split("serving the Bigtable v2 gRPC API on ")
                .nth(1)
                .map(|a| a.trim().to_string())
        });
        addr.is_some()
    });
    assert!(found, "no gRPC listener in the log:\n{}", m.log_text());
    addr.unwrap()
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/bigtable_client.py")
}

#[test]
fn python_client_and_the_mount_share_the_data() {
    let have = Command::new(tests::python())
        .args(["-c", "import google.cloud.bigtable"])
        .output();
    match have {
        Err(e) => panic!("python3 is needed for this test (apt-get install python3): {e}"),
        Ok(o) if !o.status.success() => panic!(
            "the Python package google-cloud-bigtable is needed for this test \
             (tests/setup.sh installs it):\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
    // Port 0: the daemon picks a free port and logs it.
    let m = Mount::with_options(&["grpc=127.0.0.1:0"]);
    let addr = grpc_addr(&m);
    // Written through the mount, read by the Python client.
    m.table("fromfs", "f\n");
    m.ok("mkdir -p fromfs/written-by-cat/f && echo 'hello from the mount' > fromfs/written-by-cat/f/q");
    let out = Command::new(tests::python())
        .arg(script())
        .env("BIGTABLE_EMULATOR_HOST", &addr)
        .env("PYTHONUNBUFFERED", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python client failed:\nstdout:\n{}\nstderr:\n{}\ndaemon log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        tests::tail(&m.log_text(), 40)
    );
    // Written by the Python client, read through the mount.
    assert_eq!(
        m.ok("cat pytable/from-python/cf/greeting"),
        "hello from python"
    );
    assert_eq!(m.ok("cat 'pytable/user#03/cf/name'"), "name 3");
    assert_eq!(m.ok("cat 'pytable/user#01/cf/visited'"), "yes");
    assert_eq!(m.ok("cat pytable/counter/cf/log"), "abab");
    assert_eq!(
        m.ok("od -An -tx1 pytable/counter/stats/hits")
            .split_whitespace()
            .collect::<String>(),
        "000000000000000a"
    );
    assert!(m.ok("ls pytable").lines().all(|l| l != "user#09"));
    let schema = m.ok("cat pytable/.schema");
    assert!(
        schema.contains("cf ") && schema.contains("max_versions=2"),
        "{schema}"
    );
    assert!(!m.path("scratch").exists());
}

#[test]
fn grpc_writes_reach_the_kernels_caches_of_the_mount_at_once() {
    // Every cache lifetime far longer than the test: only the daemon's
    // invalidations can make the mount show a gRPC write.
    let m = Mount::with_options(&[
        "grpc=127.0.0.1:0",
        "dir_timeout=3600",
        "entry_timeout=3600",
        "attr_timeout=3600",
    ]);
    let addr = grpc_addr(&m);
    m.table("t", "f\n");
    m.ok("for r in a b; do mkdir -p t/$r/f && printf one > t/$r/f/q; done");
    // The kernel learns the listing, the names, the sizes and the pages.
    assert_eq!(m.ok("ls t | tr '\\n' ' '"), "a b ");
    assert_eq!(m.ok("cat t/a/f/q t/a/f/q t/b/f/q"), "oneoneone");
    assert_eq!(m.ok("ls t/a/f"), "q\n");
    let py = r#"
from google.cloud import bigtable
t = bigtable.Client(project="p", admin=True).instance("i").table("t")
r = t.direct_row(b"a"); r.set_cell("f", b"q", b"a longer value"); r.set_cell("f", b"n", b"new"); r.commit()
r = t.direct_row(b"c"); r.set_cell("f", b"q", b"row c"); r.commit()
r = t.direct_row(b"b"); r.delete(); r.commit()
"#;
    let out = Command::new(tests::python())
        .args(["-c", py])
        .env("BIGTABLE_EMULATOR_HOST", &addr)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(m.ok("cat t/a/f/q"), "a longer value");
    assert_eq!(m.ok("ls t/a/f | tr '\\n' ' '"), "n q ");
    assert_eq!(m.ok("ls t | tr '\\n' ' '"), "a c ");
    assert_eq!(m.ok("cat t/c/f/q"), "row c");
    m.fails("cat t/b/f/q");
}

#[test]
fn python_client_adds_to_aggregate_families() {
    // As the client's own system tests make and use them (Int64 Sum family
    // made by the admin client, AddToCell by raw request and by the data
    // client); the mount shows the type and the number.
    let m = Mount::with_options(&["grpc=127.0.0.1:0"]);
    let addr = grpc_addr(&m);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/aggregate_client.py");
    let out = Command::new(tests::python())
        .arg(script)
        .env("BIGTABLE_EMULATOR_HOST", &addr)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python client failed:\nstdout:\n{}\nstderr:\n{}\ndaemon log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        tests::tail(&m.log_text(), 40)
    );
    let schema = m.ok("cat aggpy/.schema");
    assert!(
        schema
            .lines()
            .any(|l| l.starts_with("agg ") && l.ends_with(" type=int64_sum")),
        "{schema}"
    );
    assert_eq!(
        m.ok("getfattr -n user.bigtable.counter --only-values aggpy/add_to_cell/agg/q"),
        "-42"
    );
    m.mutate("aggpy", b"add add_to_cell agg:q 50\n");
    assert_eq!(
        m.ok("getfattr -n user.bigtable.counter --only-values aggpy/add_to_cell/agg/q"),
        "8"
    );
}
