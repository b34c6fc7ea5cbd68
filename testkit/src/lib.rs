//! Test machinery shared by the workspace's crates: used by their tests (as
//! a dev-dependency) and by the test doubles gfs and chubby build behind
//! their `testing` features, never by a normal build.
//!
//! - [`disk`]: an in-memory disk whose unsynced writes and directory changes
//!   a power cut takes back (the model under `gfs::CrashStore` and
//!   `chubby::CrashDisk`);
//! - [`power`]: the power switch every crash model counts operations with,
//!   and the undo log a power cut of real files replays (`gfs::PowerCut`);
//! - [`rng`]: the seeded generator that draws torn writes;
//! - [`fuzz`]: case counts from the environment (`FUZZ_CASES`, `CRASH_POINTS`)
//!   and byte damage for fuzz targets;
//! - [`alloc`]: an allocator that records a thread's largest allocation;
//! - [`seaweed`]: a real S3 server (SeaweedFS) on loopback for a test;
//! - [`delay_proxy`]: a TCP proxy that makes a server look far away;
//! - [`etcd`]: a real etcd on loopback for a test;
//! - [`emulator`]: Google's Cloud Bigtable emulator on loopback, the oracle
//!   and benchmark peer of the gRPC API;
//! - [`machine`]: simulated machines (a network namespace and a CPU
//!   cgroup each) for the several-daemon tests and benchmark.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod alloc;
pub mod delay_proxy;
pub mod disk;
pub mod emulator;
pub mod etcd;
pub mod fuzz;
pub mod machine;
pub mod power;
pub mod rng;
pub mod seaweed;

/// Polls `cond` every 20 ms until it holds or `timeout` passes: how a test
/// waits for something to happen, never with a fixed sleep.
pub fn wait_until(timeout: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
