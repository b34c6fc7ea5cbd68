#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Cloud Bigtable's official Python client's own system tests against the
//! daemon's gRPC API: `tests/system/data` (sync and async) and
//! `tests/system/v2_client` of `google-cloud-bigtable` [`VERSION`], unchanged,
//! from its source distribution, in emulator mode (`BIGTABLE_EMULATOR_HOST`),
//! as its `nox -s system_emulated` session runs them.
//!
//! The source distribution is downloaded once with pip and unpacked under
//! the target directory (`<target>/client-suite/`); the library it holds is
//! the one the tests import (`PYTHONPATH`), so tests and client are the same
//! version whatever else is installed. pytest and the suite's other
//! dependencies come from `tests/setup.sh`.
//!
//! Every test the suite does not skip by itself must pass; nothing is
//! deselected.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tests::{wait_until, Mount};

/// The client release whose tests run.
const VERSION: &str = "2.35.0";

/// The longest the whole suite may take (about 20 s when every test passes;
/// many tests retry a failure for up to two minutes).
const DEADLINE: Duration = Duration::from_secs(20 * 60);

/// Fails the test clearly unless the Python has what the suite imports.
fn check_python() {
    let imports = "import google.cloud.bigtable, pytest, pytest_asyncio, mock, test_utils";
    let out = Command::new(tests::python()).args(["-c", imports]).output();
    match out {
        Err(e) => panic!("python3 is needed for this test (apt-get install python3): {e}"),
        Ok(o) if !o.status.success() => panic!(
            "the client suite needs google-cloud-bigtable, pytest, pytest-asyncio, mock and \
             google-cloud-testutils (tests/setup.sh installs them):\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
}

/// The unpacked source distribution, downloaded and unpacked on first use.
fn suite_source() -> PathBuf {
    let cache = tests::bin_dir()
        .parent()
        .expect("the target directory")
        .join("client-suite");
    let dir = cache.join(format!("google_cloud_bigtable-{VERSION}"));
    if dir.join("tests/system").is_dir() {
        return dir;
    }
    std::fs::create_dir_all(&cache).unwrap();
    // Unpacked beside the cache and renamed into place, so that an
    // interrupted download never looks like a finished one.
    let work = tempfile::Builder::new()
        .prefix("download-")
        .tempdir_in(&cache)
        .unwrap();
    let out = Command::new(tests::python())
        .args([
            "-m",
            "pip",
            "download",
            "-q",
            "--no-binary",
            ":all:",
            "--no-deps",
        ])
        .arg(format!("google-cloud-bigtable=={VERSION}"))
        .arg("-d")
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip download of google-cloud-bigtable {VERSION} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = work
        .path()
        .join(format!("google_cloud_bigtable-{VERSION}.tar.gz"));
    let st = Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(work.path())
        .status()
        .unwrap();
    assert!(st.success(), "cannot unpack {}", archive.display());
    let unpacked = work.path().join(dir.file_name().unwrap());
    // Another test process may have won the race: theirs is as good.
    if std::fs::rename(&unpacked, &dir).is_err() {
        assert!(
            dir.join("tests/system").is_dir(),
            "cannot place {}",
            dir.display()
        );
    }
    dir
}

/// One test's outcome from pytest's JUnit XML.
#[derive(Debug)]
struct Outcome {
    /// `passed`, `skipped`, `failure` or `error`.
    kind: String,
    /// `tests.system.data.test_system_async.TestSystemAsync::test_x[table]`.
    test: String,
    message: String,
}

/// The outcomes in a JUnit XML file (read with Python's own parser).
fn outcomes(junit: &Path) -> Vec<Outcome> {
    let py = r#"
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).iter("testcase"):
    kind, msg = "passed", ""
    for ch in tc:
        if ch.tag in ("failure", "error", "skipped"):
            kind, msg = ch.tag, (ch.get("message") or "")
    msg = " ".join(msg.split())[:300]
    print(f"{kind}\t{tc.get('classname')}::{tc.get('name')}\t{msg}")
"#;
    let out = Command::new(tests::python())
        .args(["-c", py])
        .arg(junit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot read {}: {}",
        junit.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            Some(Outcome {
                kind: f.next()?.to_string(),
                test: f.next()?.to_string(),
                message: f.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// What one pytest run gave.
struct Run {
    all: Vec<Outcome>,
    /// pytest's output.
    text: String,
    status: Option<std::process::ExitStatus>,
    took: Duration,
}

/// Runs pytest in the suite's source against the daemon at `addr` (emulator
/// mode), with `args` (paths and options), within [`DEADLINE`].
fn pytest(src: &Path, addr: &str, args: &[&str]) -> Run {
    let work = tempfile::tempdir().unwrap();
    let junit = work.path().join("junit.xml");
    let output = work.path().join("pytest.out");
    let mut cmd = Command::new(tests::python());
    cmd.current_dir(src)
        .env("PYTHONPATH", src)
        .env("BIGTABLE_EMULATOR_HOST", addr)
        .env("PYTHONUNBUFFERED", "1")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(format!("--junitxml={}", junit.display()))
        .args(args);
    let log = std::fs::File::create(&output).unwrap();
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut status = None;
    let done = wait_until(DEADLINE, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !done {
        let _ = child.kill();
        let _ = child.wait();
    }
    let took = start.elapsed();
    let text = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(
        done,
        "the suite did not finish within {DEADLINE:?}:\n{}",
        tests::tail(&text, 60)
    );
    assert!(
        junit.is_file(),
        "pytest wrote no report ({:?}):\n{}",
        status,
        tests::tail(&text, 60)
    );
    Run {
        all: outcomes(&junit),
        text,
        status,
        took,
    }
}

#[test]
fn the_official_python_clients_system_tests_pass() {
    check_python();
    let src = suite_source();
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    let Run {
        all,
        text,
        status,
        took,
    } = pytest(
        &src,
        &m.grpc_addr(),
        &["tests/system/data", "tests/system/v2_client"],
    );
    let count = |k: &str| all.iter().filter(|o| o.kind == k).count();
    let (passed, skipped) = (count("passed"), count("skipped"));
    let bad: Vec<&Outcome> = all
        .iter()
        .filter(|o| o.kind == "failure" || o.kind == "error")
        .collect();
    eprintln!(
        "google-cloud-bigtable {VERSION} system tests: {passed} passed, {} failed, {skipped} \
         skipped by the suite, in {:.0?}",
        bad.len(),
        took
    );
    for o in all.iter().filter(|o| o.kind == "skipped") {
        eprintln!("  skipped {}: {}", o.test, o.message);
    }
    assert!(
        bad.is_empty(),
        "{} of the suite's tests failed:\n{}\n\npytest's output:\n{}\n\ndaemon log:\n{}",
        bad.len(),
        bad.iter()
            .map(|o| format!("{} {}: {}", o.kind, o.test, o.message))
            .collect::<Vec<_>>()
            .join("\n"),
        tests::tail(&text, 80),
        tests::tail(&m.log_text(), 40)
    );
    // A suite that collected little proves little: the 2.35.0 suite runs
    // about 190 tests in emulator mode, about 140 of which pass.
    assert!(
        passed >= 130,
        "only {passed} tests passed:\n{}",
        tests::tail(&text, 40)
    );
    // Every skip is the suite's own (emulator mode, missing credentials):
    // nothing here skips a test.
    assert!(status.is_some_and(|s| s.success()), "pytest: {status:?}");
}

/// The suite's backup test, which it skips in emulator mode
/// (`skip_on_emulator`), run from a copy of its file with that skip lifted:
/// a backup made, listed, its expiry updated, restored in its instance, and
/// restored into a second instance the test creates (instance admin).
#[test]
fn the_python_clients_backup_test_passes_with_its_emulator_skip_lifted() {
    check_python();
    let src = suite_source();
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    let from = src.join("tests/system/v2_client");
    // A sibling of v2_client (which the other test runs whole), with the
    // fixtures it imports; removed whatever happens.
    let dir = tempfile::Builder::new()
        .prefix("lifted_")
        .tempdir_in(src.join("tests/system"))
        .unwrap();
    for f in ["__init__.py", "_helpers.py", "conftest.py"] {
        std::fs::copy(from.join(f), dir.path().join(f)).unwrap();
    }
    let text = std::fs::read_to_string(from.join("test_table_admin.py")).unwrap();
    let test = text
        .find("def test_table_backup(")
        .expect("the suite has test_table_backup");
    let skip = "    skip_on_emulator,\n";
    let at = test
        + text[test..]
            .find(skip)
            .expect("test_table_backup skips on the emulator");
    let lifted = format!("{}{}", &text[..at], &text[at + skip.len()..]);
    std::fs::write(dir.path().join("test_table_backup.py"), lifted).unwrap();
    let file = dir.path().join("test_table_backup.py");
    let node = format!("{}::test_table_backup", file.display());
    let run = pytest(&src, &m.grpc_addr(), &[&node]);
    let passed: Vec<&Outcome> = run.all.iter().filter(|o| o.kind == "passed").collect();
    assert!(
        passed.len() == 1 && run.all.len() == 1,
        "test_table_backup did not pass: {:?}\n{}\n\ndaemon log:\n{}",
        run.all,
        tests::tail(&run.text, 80),
        tests::tail(&m.log_text(), 40)
    );
    assert!(
        run.status.is_some_and(|s| s.success()),
        "pytest: {:?}",
        run.status
    );
}
