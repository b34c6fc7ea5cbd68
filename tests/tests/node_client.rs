#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The official Node.js client of Cloud Bigtable (`@google-cloud/bigtable`,
//! the version `tests/setup.sh` pins, in `target/node`) against a daemon's
//! gRPC API: `tests/node/client.js` makes admin and data calls as the
//! client's own system tests do and asserts each result.

use std::path::PathBuf;
use std::process::Command;
use tests::Mount;

/// The `node_modules` holding the client: `BIGTABLE_NODE_MODULES`, else the
/// one `tests/setup.sh` installs beside the build (`target/node`).
fn node_modules() -> PathBuf {
    std::env::var_os("BIGTABLE_NODE_MODULES").map_or_else(
        || tests::bin_dir().with_file_name("node").join("node_modules"),
        PathBuf::from,
    )
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node/client.js")
}

#[test]
fn node_client_admin_and_data_calls_work_unchanged() {
    let modules = node_modules();
    match Command::new("node").arg("--version").output() {
        Err(e) => panic!("node is needed for this test (tests/setup.sh installs nodejs): {e}"),
        Ok(o) => assert!(o.status.success(), "node --version failed"),
    }
    assert!(
        modules.join("@google-cloud/bigtable").is_dir(),
        "the Node.js client is not in {} (tests/setup.sh installs it there)",
        modules.display()
    );
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    let out = Command::new("node")
        .arg(script())
        .env("BIGTABLE_EMULATOR_HOST", m.grpc_addr())
        .env("NODE_PATH", &modules)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all steps passed"),
        "the Node.js client failed:\nstdout:\n{stdout}\nstderr:\n{}\ndaemon log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        tests::tail(&m.log_text(), 40)
    );
    // What the client left: its tables are gone, from the mount too.
    assert!(!m.path("nodetable").exists());
    assert!(!m.path("nodeother").exists());
}
