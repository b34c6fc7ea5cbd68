#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The daemon's Cloud Bigtable gRPC API (`-o grpc=...`) driven by the
//! official Python client, with the same data read and written through the
//! mount.

use std::path::PathBuf;
use std::process::Command;
use tests::Mount;

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
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    let addr = m.grpc_addr();
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
        "grpc_trust_loopback",
        "dir_timeout=3600",
        "entry_timeout=3600",
        "attr_timeout=3600",
    ]);
    let addr = m.grpc_addr();
    m.table("t", "f\n");
    m.ok("for r in a b; do mkdir -p t/$r/f && printf one > t/$r/f/q; done");
    // The kernel learns the listing, the names, the sizes and the pages.
    assert_eq!(m.ok("ls t | tr '\\n' ' '"), "a b ");
    assert_eq!(m.ok("cat t/a/f/q t/a/f/q t/b/f/q"), "oneoneone");
    assert_eq!(m.ok("ls t/a/f"), "q\n");
    let py = r#"
from google.cloud import bigtable
t = bigtable.Client(project="p", admin=True).instance("default").table("t")
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

/// Runs a Python snippet with the client against the daemon; its stdout.
fn python(addr: &str, code: &str) -> String {
    let out = Command::new(tests::python())
        .args(["-c", code])
        .env("BIGTABLE_EMULATOR_HOST", addr)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn instances_keep_their_tables_apart_and_the_mount_shows_them() {
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback", "instance=main"]);
    let addr = m.grpc_addr();
    // A table made in the mount is the default instance's; one named
    // INSTANCE@TABLE is another instance's.
    m.table("frommount", "f\n");
    m.table("other@mounted", "f\n");
    let out = python(
        &addr,
        r#"
from google.cloud import bigtable
c = bigtable.Client(project="p", admin=True)
for i in ("main", "other"):
    t = c.instance(i).table("t")
    t.create(column_families={"f": None})
    r = t.direct_row(b"r"); r.set_cell("f", b"q", f"in {i}".encode()); r.commit()
for i in ("main", "other", "third"):
    print(i, sorted(t.table_id for t in c.instance(i).list_tables()))
print(c.instance("third").table("t").exists())
"#,
    );
    assert_eq!(
        out,
        "main ['frommount', 't']\nother ['mounted', 't']\nthird []\nFalse\n"
    );
    assert_eq!(m.ok("cat t/r/f/q"), "in main");
    assert_eq!(m.ok("cat other@t/r/f/q"), "in other");
    assert_eq!(
        m.ok("ls | tr '\\n' ' '"),
        "frommount other@mounted other@t t "
    );
}

#[test]
fn increments_wrap_and_regexes_take_raw_bytes_through_grpc_and_the_mount() {
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    let addr = m.grpc_addr();
    m.table("t", "f\n");
    let out = python(
        &addr,
        r#"
from google.cloud.bigtable.data import BigtableDataClient, SetCell, ReadRowsQuery
from google.cloud.bigtable.data.read_modify_write_rules import IncrementRule
from google.cloud.bigtable.data import row_filters as rf
with BigtableDataClient(project="p") as c, c.get_table("default", "t") as t:
    t.mutate_row(b"n", SetCell("f", b"c", (2**63 - 1).to_bytes(8, "big", signed=True)))
    r = t.read_modify_write_row(b"n", IncrementRule("f", b"c", 2))
    print(int.from_bytes(r.cells[0].value, "big", signed=True))
    t.mutate_row(b"v", SetCell("f", b"q", b"\xff\x00\xaa"))
    t.mutate_row(b"w", SetCell("f", b"q", b"\n"))
    rows = t.read_rows(ReadRowsQuery(row_filter=rf.LiteralValueFilter(b"\xff\x00\xaa")))
    print([r.row_key for r in rows])
    rows = t.read_rows(ReadRowsQuery(row_filter=rf.ValueRegexFilter(b"\\C")))
    print([r.row_key for r in rows])
"#,
    );
    assert_eq!(
        out,
        format!("{}\n[b'v']\n[b'w']\n", i64::MIN + 1),
        "MAX + 2 is MIN + 1; a raw-byte literal and \\C match"
    );
    // The mount's counters wrap too, and its filters take raw bytes (%XX).
    m.mutate("t", b"increment n f:c -3\n");
    assert_eq!(
        m.ok("getfattr -n user.bigtable.counter --only-values t/n/f/c"),
        (i64::MAX - 1).to_string()
    );
    assert_eq!(m.ok("cut -f1 't/.scan/filter=value(%FF%00%AA)'"), "v\n");
    assert_eq!(m.ok("cut -f1 't/.scan/filter=value(\\C)'"), "w\n");
}

#[test]
fn requests_are_checked_as_cloud_bigtable_checks_them() {
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    let addr = m.grpc_addr();
    m.table("t", "f\n");
    let out = python(
        &addr,
        r#"
from google.api_core import exceptions as e
from google.cloud.bigtable.data import BigtableDataClient, SetCell
with BigtableDataClient(project="p") as c, c.get_table("default", "t") as t:
    def outcome(f):
        try:
            f()
            return "ok"
        except e.GoogleAPICallError as x:
            return f"{type(x).__name__}: {x.message}"
        except Exception as x:
            return f"{type(x).__name__}"
    print(outcome(lambda: t.mutate_row(b"k" * 4096, SetCell("f", b"q", b"v", timestamp_micros=5000))))
    print(outcome(lambda: t.mutate_row(b"k" * 4097, SetCell("f", b"q", b"v"))))
    print(outcome(lambda: t.mutate_row(b"r", SetCell("f", b"q", b"v", timestamp_micros=1234))))
    print(outcome(lambda: t.read_row(b"")))
    print(outcome(lambda: t.mutate_row(b"r", SetCell("nope", b"q", b"v"))))
"#,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "ok", "{out}");
    assert!(
        lines[1].starts_with("InvalidArgument: Row keys must be at most 4096 bytes"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("InvalidArgument: Timestamp granularity mismatch"),
        "{out}"
    );
    assert!(
        lines[3].starts_with("InvalidArgument: Row keys must be non-empty"),
        "{out}"
    );
    assert!(
        lines[4].starts_with("NotFound") && lines[4].contains("table t"),
        "{out}"
    );
    // Nothing of the refused requests was written.
    assert_eq!(m.ok("ls t | wc -l").trim(), "1");
}

#[test]
fn python_client_adds_to_aggregate_families() {
    // As the client's own system tests make and use them (Int64 Sum family
    // made by the admin client, AddToCell by raw request and by the data
    // client); the mount shows the type and the number.
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    let addr = m.grpc_addr();
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
