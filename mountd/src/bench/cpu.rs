//! Where a workload's CPU time went: the daemon's (user and system, from
//! its `.bigtable/stats`), the callers' (this process) and every CPU's busy
//! time (`/proc/stat`). A mount's figure short of its limit then says
//! whether the CPUs were full, and whose work filled them.

/// CPU seconds (user + system) process `pid` has used, from /proc/PID/stat.
pub fn cpu_secs(pid: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces): utime and stime
    // are the 12th and 13th.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / ticks_per_sec()
}

fn ticks_per_sec() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100)
        .max(1) as f64
}

/// Seconds every CPU of the machine spent busy (user, nice, system, irq,
/// softirq; not idle, I/O wait or time the hypervisor took), from the
/// `cpu` line of /proc/stat.
pub fn busy_secs() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    busy_ticks(&text) as f64 / ticks_per_sec()
}

fn busy_ticks(stat: &str) -> u64 {
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    [0, 1, 2, 5, 6].iter().filter_map(|&i| f.get(i)).sum()
}

/// The CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// CPU time, in microseconds, as counted at one moment or over a workload.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUse {
    pub daemon_user_us: u64,
    pub daemon_system_us: u64,
    /// This process: the callers of the workload.
    pub callers_us: u64,
    /// Every CPU of the machine.
    pub busy_us: u64,
    /// The daemon's time running requests (`fuse_handling_us`).
    pub handling_us: u64,
}

impl CpuUse {
    /// Now, with the daemon's figures from its `.bigtable/stats` text.
    pub fn now(stats: &str) -> CpuUse {
        let get = |k: &str| super::limits::stat(stats, k).unwrap_or(0);
        CpuUse {
            daemon_user_us: get("cpu_user_us"),
            daemon_system_us: get("cpu_system_us"),
            callers_us: (cpu_secs("self") * 1e6) as u64,
            busy_us: (busy_secs() * 1e6) as u64,
            handling_us: get("fuse_handling_us"),
        }
    }

    pub fn since(self, before: CpuUse) -> CpuUse {
        CpuUse {
            daemon_user_us: self.daemon_user_us.saturating_sub(before.daemon_user_us),
            daemon_system_us: self
                .daemon_system_us
                .saturating_sub(before.daemon_system_us),
            callers_us: self.callers_us.saturating_sub(before.callers_us),
            busy_us: self.busy_us.saturating_sub(before.busy_us),
            handling_us: self.handling_us.saturating_sub(before.handling_us),
        }
    }

    /// The share of `cpus` CPUs busy over `secs`.
    pub fn busy_share(&self, secs: f64, cpus: usize) -> f64 {
        if secs <= 0.0 {
            return 0.0;
        }
        self.busy_us as f64 / 1e6 / (secs * cpus as f64)
    }

    /// The rate `ops` in `secs` by `callers` would reach if the daemon's
    /// own code cost nothing and the rest (the kernel's part of each
    /// request, the callers' system calls) stayed as it was. One caller
    /// waits through every request: its time per file less the daemon's
    /// handling time per file. Where the CPUs were full (at least 90%
    /// busy), the CPU left once the daemon's user time is taken out. None
    /// otherwise: several callers' waits overlap, and no CPU bound holds.
    pub fn without_daemon_code(
        &self,
        ops: u64,
        secs: f64,
        callers: usize,
        cpus: usize,
    ) -> Option<f64> {
        if ops == 0 || secs <= 0.0 {
            return None;
        }
        let rate = ops as f64 / secs;
        if callers == 1 {
            let rest = secs - self.handling_us as f64 / 1e6;
            return (rest > 0.0).then(|| ops as f64 / rest);
        }
        let rest = self.busy_us.checked_sub(self.daemon_user_us)?;
        (self.busy_share(secs, cpus) >= 0.9 && rest > 0)
            .then(|| rate * self.busy_us as f64 / rest as f64)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn own_cpu_time_is_read() {
        let t = cpu_secs("self");
        assert!(t >= 0.0);
        // Spin until the clock ticks over (10 ms a tick), however loaded.
        let deadline = Instant::now() + Duration::from_secs(20);
        while cpu_secs("self") <= t {
            assert!(Instant::now() < deadline, "no CPU time counted: {t}");
            std::hint::black_box(0u64);
        }
        assert_eq!(cpu_secs("0"), 0.0);
        assert!(busy_secs() > 0.0);
    }

    #[test]
    fn busy_time_leaves_out_idle_iowait_and_steal() {
        let stat = "cpu  100 2 30 5000 40 6 7 800 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n";
        assert_eq!(busy_ticks(stat), 100 + 2 + 30 + 6 + 7);
        assert_eq!(busy_ticks("intr 5\n"), 0);
    }

    #[test]
    fn a_workload_s_use_and_its_bound_without_the_daemon_s_code() {
        let stats = "fuse_requests=9\ncpu_user_us=250\ncpu_system_us=40\nfuse_handling_us=7\n";
        let now = CpuUse::now(stats);
        assert_eq!((now.daemon_user_us, now.daemon_system_us), (250, 40));
        assert_eq!(now.handling_us, 7);
        let used = CpuUse {
            daemon_user_us: 500_000,
            daemon_system_us: 300_000,
            callers_us: 900_000,
            busy_us: 2_000_000,
            handling_us: 250_000,
        };
        assert_eq!(used.since(used), CpuUse::default());
        // Four callers, two CPUs full for a second: a quarter was the
        // daemon's code.
        let bound = used.without_daemon_code(1000, 1.0, 4, 2).unwrap();
        assert!((bound - 1333.3).abs() < 0.1, "{bound}");
        // Half busy: waits set the rate, no bound.
        assert_eq!(used.without_daemon_code(2000, 2.0, 4, 2), None);
        // One caller: a second less the daemon's quarter of it.
        let bound = used.without_daemon_code(1000, 1.0, 1, 2).unwrap();
        assert!((bound - 1333.3).abs() < 0.1, "{bound}");
    }
}
