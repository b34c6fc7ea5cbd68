//! Memory a virtual machine's host has taken back.
//!
//! A guest with virtio-balloon free page reporting (Firecracker and most
//! cloud hypervisors) tells the host which of its pages are free, and the
//! host drops them; the first write to such a page later waits for the host
//! to back it again. Measured on the 2-core VMs this project runs on
//! (`page_reporting_order` 9, up to 1 GiB left unreported): writing 1 GiB
//! of new page cache took 0.25 s where the guest had used the memory before
//! and 2.6-4.0 s where it had not (about 13 µs a 4 KiB page), and the
//! engine's unsynced fills of a run wrote twice as fast as its later ones,
//! on both stores, until reporting was held off (then every round the same).
//!
//! A bench run deletes and rewrites gigabytes, so whichever store next grows
//! the page cache past what the run freed pays the host's faults: noise that
//! follows the order of the workloads, not the store. A server in use keeps
//! its memory full of page cache and rarely frees any. So a bench run
//! holds reporting off (restored when it ends, also on error or Ctrl-C; a
//! `kill -9` leaves it off, which only keeps free memory in the guest),
//! touches the memory it will use first, and says what touching it cost:
//! the figure for a page the host must back.

use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The kernel's free page reporting: blocks of at least this buddy order
/// are reported to the host.
const REPORTING_ORDER: &str = "/sys/module/page_reporting/parameters/page_reporting_order";

/// Memory touched in one mapping.
const PIECE: usize = 1 << 30;

/// Memory never touched: what the system needs meanwhile.
const SPARE: u64 = 3 << 30;

/// Free page reporting held off until dropped.
pub struct Held {
    param: PathBuf,
    was: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Err(e) = fs::write(&self.param, &self.was) {
            eprintln!(
                "warning: cannot restore {} to {}: {e}",
                self.param.display(),
                self.was.trim()
            );
        }
    }
}

/// `MemAvailable` and `MemTotal` of /proc/meminfo, in bytes.
pub fn meminfo() -> Option<(u64, u64)> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

/// One order past the largest free block the buddy allocator has (the
/// columns of /proc/buddyinfo): no free block is ever that large.
fn order_past_largest() -> Option<usize> {
    orders_in(&fs::read_to_string("/proc/buddyinfo").ok()?)
}

/// How many orders a /proc/buddyinfo text has columns for (the largest
/// order plus one).
fn orders_in(buddyinfo: &str) -> Option<usize> {
    buddyinfo
        .lines()
        .filter_map(|line| {
            // `Node 0, zone Normal` and then one count per order.
            let words: Vec<&str> = line.split_whitespace().collect();
            let zone = words.iter().position(|w| *w == "zone")?;
            let counts = words.get(zone + 2..)?;
            let all_counts = counts.iter().all(|c| c.parse::<u64>().is_ok());
            (all_counts && !counts.is_empty()).then_some(counts.len())
        })
        .max()
}

/// Holds free page reporting off (None where the kernel has none or this
/// process may not change it, said on stderr).
fn hold(param: &Path) -> Option<Held> {
    let was = fs::read_to_string(param).ok()?;
    let order = order_past_largest()?;
    if was.trim().parse::<usize>().is_ok_and(|o| o >= order) {
        // Another run holds it (or the machine reports nothing): restoring
        // this value after would leave reporting off for good.
        eprintln!(
            "memory: free page reporting already off (order {})",
            was.trim()
        );
        return None;
    }
    match fs::write(param, format!("{order}\n")) {
        Ok(()) => Some(Held {
            param: param.to_path_buf(),
            was,
        }),
        Err(e) => {
            eprintln!(
                "warning: free page reporting stays on ({}: {e}); figures may follow the order of the workloads",
                param.display()
            );
            None
        }
    }
}

/// An anonymous mapping, every page of it written once.
struct Touched {
    at: *mut libc::c_void,
    len: usize,
}

impl Touched {
    fn new(len: usize) -> Option<Touched> {
        // SAFETY: a new private anonymous mapping where the kernel chooses;
        // no memory of this process is touched but the mapping's own.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        (at != libc::MAP_FAILED).then_some(Touched { at, len })
    }
}

impl Drop for Touched {
    fn drop(&mut self) {
        // SAFETY: `at` and `len` are exactly the mapping `new` made, and
        // nothing refers into it.
        unsafe { libc::munmap(self.at, self.len) };
    }
}

/// Holds reporting off, then touches `bytes` of memory (all of it mapped
/// at once, so every page is a different one) and frees it. Returns the
/// hold and what it did, as JSON; prints a line saying so.
pub fn hold_and_warm(bytes: u64) -> (Option<Held>, Value) {
    let held = hold(Path::new(REPORTING_ORDER));
    let mut pieces = Vec::new();
    let mut secs = Vec::new();
    let start = Instant::now();
    for _ in 0..bytes.div_ceil(PIECE as u64) {
        if super::common::interrupted() {
            break;
        }
        let t = Instant::now();
        let Some(piece) = Touched::new(PIECE) else {
            break;
        };
        secs.push(t.elapsed().as_secs_f64());
        pieces.push(piece);
    }
    let gib = pieces.len();
    drop(pieces);
    let total = start.elapsed().as_secs_f64();
    let slowest = secs.iter().copied().fold(0.0, f64::max);
    let fastest = secs.iter().copied().fold(f64::INFINITY, f64::min);
    let reporting = match (&held, Path::new(REPORTING_ORDER).exists()) {
        (Some(h), _) => format!(
            "free page reporting held off for the run (order {} restored after)",
            h.was.trim()
        ),
        (None, true) => "free page reporting not held by this run".to_string(),
        (None, false) => "no free page reporting".to_string(),
    };
    if gib > 0 {
        eprintln!(
            "memory: {reporting}; touched {gib} GiB first in {total:.1} s ({slowest:.2} s the slowest GiB, {fastest:.2} s the fastest: a page the host must back costs the difference)"
        );
    } else {
        eprintln!("memory: {reporting}");
    }
    let line = json!({
        "reporting_held": held.is_some(),
        "touched_gib": gib,
        "touch_secs": super::common::round3(total),
        "slowest_gib_secs": (gib > 0).then(|| super::common::round3(slowest)),
        "fastest_gib_secs": (gib > 0).then(|| super::common::round3(fastest)),
    });
    (held, line)
}

/// What a run touches first: three quarters of the memory, leaving
/// [`SPARE`] of what is available.
pub fn auto_bytes() -> u64 {
    meminfo().map_or(0, |(available, total)| {
        available.saturating_sub(SPARE).min(total / 4 * 3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_held_is_past_every_free_block() {
        // Orders 0 to 10 (x86-64): eleven columns, so order 11 is held.
        let info = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n\
                    Node 0, zone   Normal  12291  11913  10213   8100   5774   4123   3293   2376   1516    942   2531 \n";
        assert_eq!(orders_in(info), Some(11));
        assert_eq!(orders_in("no zones here"), None);
    }

    #[test]
    fn a_touched_mapping_is_written() {
        let t = Touched::new(1 << 20).expect("a mapping of 1 MiB");
        // SAFETY: the mapping is 1 MiB long, readable and written (zeros).
        let first = unsafe { *(t.at as *const u8) };
        assert_eq!(first, 0);
    }

    #[test]
    fn the_memory_is_read_from_meminfo() {
        let (available, total) = meminfo().expect("/proc/meminfo");
        assert!(available > 0 && available <= total, "{available} {total}");
    }
}
