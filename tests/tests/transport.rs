#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Both ways requests reach the daemon: FUSE over io_uring (a queue per CPU,
//! when the kernel offers it) and the `/dev/fuse` device (`-o uring=0`, or a
//! kernel without it). Each is driven the same way: concurrent writers and
//! readers on every CPU, and lock waits answered later from other threads
//! (a grant, and an interrupted wait), after which every CPU must still be
//! served.

use tests::Mount;

/// Whether the kernel offers FUSE over io_uring to new mounts.
fn uring_offered() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| v.trim() == "Y")
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Writes and reads back cells from a process pinned to each CPU.
fn every_cpu_serves(m: &Mount, round: &str) {
    for cpu in 0..cpus() {
        let out = m.ok(&format!(
            "mkdir -p t/{round}/f && taskset -c {cpu} sh -c \
             'echo {round}-{cpu} > t/{round}/f/c{cpu} && cat t/{round}/f/c{cpu}'"
        ));
        assert_eq!(out.trim(), format!("{round}-{cpu}"), "CPU {cpu}");
    }
}

/// Shell: runs the command after it until it succeeds, for at most a minute.
const WAIT: &str =
    "w() { i=0; until \"$@\" || [ $i -ge 6000 ]; do sleep 0.01; i=$((i + 1)); done; }; w";

fn exercise(m: &Mount) {
    m.table("t", "f\n");
    // Eight writers at once, then every value reads back.
    m.ok("for w in 0 1 2 3 4 5 6 7; do \
            (mkdir -p t/r$w/f && for i in $(seq 40); do echo v$w-$i > t/r$w/f/c$i || exit 1; done) & \
          done; wait");
    let bad = m.ok("for w in 0 1 2 3 4 5 6 7; do for i in $(seq 40); do \
                      [ \"$(cat t/r$w/f/c$i)\" = v$w-$i ] || echo t/r$w/f/c$i; \
                    done; done");
    assert_eq!(bad, "", "cells that did not read back");
    every_cpu_serves(m, "before");

    // A waiter is granted when the holder lets go (which it does once the
    // waiter is queued): the answer comes from the thread that waited, not
    // the one that read the request.
    m.ok(": > .chubby/l");
    let dir = m.data.with_file_name("marks");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.display();
    for round in 0..3 {
        let out = m.sh(&format!(
            "rm -f {dir}/held {dir}/go; \
             timeout 120 flock -x .chubby/l sh -c 'touch {dir}/held; \
               until [ -e {dir}/go ]; do sleep 0.01; done' & \
             {WAIT} [ -e {dir}/held ]; \
             ({WAIT} grep -q '^lock /l .*waiters \\[[0-9]' .chubby/.status; touch {dir}/go) & \
             timeout 60 flock -w 60 -x .chubby/l true; r=$?; wait; exit $r"
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "round {round}: the waiter was not granted"
        );
    }
    // A waiter gives up by itself when its alarm fires (the daemon notices
    // the pending signal and answers EINTR from the waiting thread).
    let out = m.sh(&format!(
        "rm -f {dir}/held {dir}/go; \
         timeout 120 flock -x .chubby/l sh -c 'touch {dir}/held; \
           until [ -e {dir}/go ]; do sleep 0.01; done' & \
         {WAIT} [ -e {dir}/held ]; \
         s=$(date +%s%N); timeout 60 flock -w 1 -x .chubby/l true; r=$?; e=$(date +%s%N); \
         touch {dir}/go; wait; echo $r $(( (e - s) / 1000000 ))"
    ));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut f = text.split_whitespace();
    let (code, ms): (i32, u64) = (
        f.next().unwrap().parse().unwrap(),
        f.next().unwrap().parse().unwrap(),
    );
    assert_eq!(code, 1, "flock -w 1 must give up by itself");
    assert!(ms >= 950, "gave up after {ms} ms");
    // Those threads have ended; every CPU's requests are still answered,
    // and no queue entry was lost on the way.
    every_cpu_serves(m, "after");
    let log = m.log_text();
    assert!(
        !log.contains("io_uring queue"),
        "the daemon lost io_uring queue entries:\n{}",
        tests::tail(&log, 20)
    );
}

#[test]
fn requests_through_the_device() {
    let m = Mount::with_options(&["uring=0"]);
    exercise(&m);
    assert_eq!(m.stat("fuse_uring_replies"), 0);
    assert_eq!(transport(&m), "/dev/fuse");
}

/// The transport `.bigtable/status` says the mount got.
fn transport(m: &Mount) -> String {
    let status = m.ok("cat .bigtable/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("fuse_transport="))
        .unwrap_or_else(|| panic!("no fuse_transport line in .bigtable/status:\n{status}"))
        .to_string()
}

#[test]
fn requests_through_io_uring_queues_when_offered() {
    let m = Mount::new();
    exercise(&m);
    let replies = m.stat("fuse_uring_replies");
    if uring_offered() {
        assert!(
            replies > 0,
            "the kernel offers io_uring, yet no reply went through it"
        );
        assert!(m.log_text().contains("FUSE over io_uring"));
        assert_eq!(transport(&m), "io_uring");
    } else {
        eprintln!("the kernel does not offer FUSE over io_uring: checked through /dev/fuse");
        assert_eq!(replies, 0);
        assert_eq!(transport(&m), "/dev/fuse");
    }
}
