//! Machines on one machine, for tests and the cluster benchmark: each
//! [`Machine`] is a network namespace joined by a veth pair to a bridge on
//! the host ([`Network`], a private /24 no interface or route of the host
//! uses), and a CPU cgroup with an optional quota. A process started with
//! [`Machine::enter`] joins both before it runs, so traffic between
//! machines crosses a real network stack and each machine's CPU is its
//! own; the rest (an S3 server, etcd, the test itself) stays on the host,
//! reaching the machines at their addresses and reached at
//! [`Network::host_ip`].
//!
//! Only the network namespace is entered (not a mount namespace, as
//! `ip netns exec` would): a FUSE mount made inside is seen by the host.
//! Needs root, `ip` (iproute2), and cgroup v1's `cpu` (and `cpuacct`)
//! hierarchies or cgroup v2. Everything made is removed on drop, also
//! after a failure.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// cgroup v1's CPU hierarchies, and v2's single one.
const V1_CPU: &str = "/sys/fs/cgroup/cpu";
const V1_CPUACCT: &str = "/sys/fs/cgroup/cpuacct";
const V2_ROOT: &str = "/sys/fs/cgroup";
/// The quota period.
const PERIOD_US: u64 = 100_000;

/// Runs `ip ARGS`, failing with its message.
fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// `ip ARGS`'s output (empty if it fails).
fn ip_out(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default()
}

/// The bridge the machines hang on, with the host's address on it.
pub struct Network {
    bridge: String,
    /// The first three octets of the /24, e.g. `10.213.7`.
    prefix: String,
    /// The host's address on the bridge: servers the machines must reach
    /// listen there.
    pub host_ip: String,
    tag: String,
}

impl Network {
    /// Makes a bridge on a private /24 (10.200.0.0–10.249.255.0) that
    /// no address or route of the host falls in.
    pub fn create() -> io::Result<Network> {
        let used = ip_out(&["-4", "-o", "addr"]) + &ip_out(&["-4", "route"]);
        let pid = std::process::id();
        let tag = format!("{:x}", pid % 0xfffff);
        let bridge = format!("btb{tag}");
        let mut seed = u64::from(pid).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for _ in 0..64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let prefix = format!("10.{}.{}", 200 + seed % 50, (seed >> 8) % 256);
            if used.contains(&format!("{prefix}.")) {
                continue;
            }
            let net = Network {
                host_ip: format!("{prefix}.1"),
                prefix,
                bridge: bridge.clone(),
                tag: tag.clone(),
            };
            // Made before anything can fail, so that drop removes it.
            ip(&["link", "add", &net.bridge, "type", "bridge"])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/24", net.host_ip),
                "dev",
                &net.bridge,
            ])?;
            ip(&["link", "set", &net.bridge, "up"])?;
            return Ok(net);
        }
        Err(io::Error::other("no free private /24 for the machines"))
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// One simulated machine: a network namespace and a CPU cgroup.
pub struct Machine {
    /// Its address on the network.
    pub ip: String,
    netns: String,
    veth: String,
    /// The cgroup directories it joins (v1: cpu and cpuacct; v2: one).
    cgroups: Vec<PathBuf>,
    /// Where its CPU time is read: (file, whether v2's `cpu.stat`).
    usage: (PathBuf, bool),
}

impl Machine {
    /// Machine `index` (0 to 200) of `net`, with `cpus` cores of CPU time
    /// (None: no quota).
    pub fn create(net: &Network, index: u8, cpus: Option<f64>) -> io::Result<Machine> {
        if index > 200 {
            return Err(io::Error::other("at most 201 machines"));
        }
        let name = format!("bt{}m{index}", net.tag);
        let mut m = Machine {
            ip: format!("{}.{}", net.prefix, 10 + u16::from(index)),
            netns: name.clone(),
            veth: format!("{name}h"),
            cgroups: Vec::new(),
            usage: (PathBuf::new(), false),
        };
        // Each step is undone by drop from here on.
        ip(&["netns", "add", &m.netns])?;
        let inner = format!("{name}n");
        ip(&[
            "link", "add", &m.veth, "type", "veth", "peer", "name", &inner,
        ])?;
        ip(&["link", "set", &inner, "netns", &m.netns])?;
        ip(&["link", "set", &m.veth, "master", &net.bridge])?;
        ip(&["link", "set", &m.veth, "up"])?;
        let in_ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", m.netns.as_str(), "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        in_ns(&["addr", "add", &format!("{}/24", m.ip), "dev", &inner])?;
        in_ns(&["link", "set", &inner, "up"])?;
        in_ns(&["link", "set", "lo", "up"])?;
        m.make_cgroup(&name, cpus)?;
        Ok(m)
    }

    fn make_cgroup(&mut self, name: &str, cpus: Option<f64>) -> io::Result<()> {
        let quota = cpus.map(|c| ((c * PERIOD_US as f64) as u64).max(1000));
        if Path::new(V2_ROOT).join("cgroup.controllers").exists() {
            // v2: the cpu controller must be on for the root's children.
            let _ = fs::write(Path::new(V2_ROOT).join("cgroup.subtree_control"), "+cpu");
            let dir = Path::new(V2_ROOT).join(name);
            fs::create_dir(&dir)?;
            self.cgroups.push(dir.clone());
            if let Some(q) = quota {
                fs::write(dir.join("cpu.max"), format!("{q} {PERIOD_US}"))?;
            }
            self.usage = (dir.join("cpu.stat"), true);
            return Ok(());
        }
        let cpu = Path::new(V1_CPU).join(name);
        fs::create_dir(&cpu)?;
        self.cgroups.push(cpu.clone());
        if let Some(q) = quota {
            fs::write(cpu.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
            fs::write(cpu.join("cpu.cfs_quota_us"), q.to_string())?;
        }
        if cpu.join("cpuacct.usage").exists() {
            self.usage = (cpu.join("cpuacct.usage"), false);
        } else {
            let acct = Path::new(V1_CPUACCT).join(name);
            fs::create_dir(&acct)?;
            self.cgroups.push(acct.clone());
            self.usage = (acct.join("cpuacct.usage"), false);
        }
        Ok(())
    }

    /// Makes `cmd` start its process in this machine: it joins the
    /// cgroups and the network namespace between fork and exec.
    pub fn enter(&self, cmd: &mut Command) -> io::Result<()> {
        let ns = fs::File::open(Path::new("/var/run/netns").join(&self.netns))?;
        let procs: Vec<CString> = self
            .cgroups
            .iter()
            .map(|d| CString::new(d.join("cgroup.procs").as_os_str().as_encoded_bytes()))
            .collect::<Result<_, _>>()
            .map_err(io::Error::other)?;
        // SAFETY: between fork and exec the closure only calls
        // async-signal-safe functions (open, write, close, setns) on
        // memory made before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                for p in &procs {
                    let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // "0": the writing process itself.
                    let n = libc::write(fd, b"0\n".as_ptr().cast(), 2);
                    libc::close(fd);
                    if n < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// CPU time its processes have used.
    pub fn cpu_used(&self) -> Duration {
        let text = fs::read_to_string(&self.usage.0).unwrap_or_default();
        if self.usage.1 {
            let us = text
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            Duration::from_micros(us)
        } else {
            Duration::from_nanos(text.trim().parse().unwrap_or(0))
        }
    }

    /// The processes in it now.
    pub fn pids(&self) -> Vec<i32> {
        self.cgroups
            .first()
            .and_then(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        // Whatever still runs in it was started in it by this run.
        for pid in self.pids() {
            // SAFETY: kill has no memory effects.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let _ = crate::wait_until(Duration::from_secs(10), || self.pids().is_empty());
        for d in self.cgroups.iter().rev() {
            let _ = fs::remove_dir(d);
        }
        // Deleting the namespace deletes the veth end inside it, and so
        // the pair; the host end is deleted too in case it was not moved.
        let _ = ip(&["netns", "del", &self.netns]);
        let _ = ip(&["link", "del", &self.veth]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs only as root with `ip` and bash present (the suite's
    /// machine); says so and passes elsewhere.
    fn can_make_machines() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        root && Command::new("ip").arg("-V").output().is_ok() && Path::new("/bin/bash").exists()
    }

    #[test]
    fn a_machine_has_its_own_network_and_cgroup_reaches_the_host_and_is_removed() {
        if !can_make_machines() {
            eprintln!("skipped: needs root, ip and bash");
            return;
        }
        let net = Network::create().unwrap();
        let a = Machine::create(&net, 0, Some(0.5)).unwrap();
        let b = Machine::create(&net, 1, None).unwrap();
        // A listener on the host's bridge address, reached from machine a.
        let l = std::net::TcpListener::bind((net.host_ip.as_str(), 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        // bash, for /dev/tcp: a connection from machine a to the host.
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(format!(
            "exec 3<>/dev/tcp/{}/{port} && cat /proc/self/cgroup /proc/net/dev",
            net.host_ip
        ));
        a.enter(&mut cmd).unwrap();
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            seen.contains(&format!("/{}", a.netns)),
            "its cgroup: {seen}"
        );
        assert!(
            seen.contains(&format!("{}n:", a.netns)),
            "its own network: {seen}"
        );
        assert!(!seen.contains(&format!("{}n:", b.netns)), "not b's: {seen}");
        assert!(l.accept().is_ok());
        assert!(a.cpu_used() > Duration::ZERO);
        let (ns, dirs) = (a.netns.clone(), a.cgroups.clone());
        drop((a, b));
        assert!(!ip_out(&["netns", "list"]).contains(&ns));
        assert!(dirs.iter().all(|d| !d.exists()));
        let bridge = net.bridge.clone();
        drop(net);
        assert!(!ip_out(&["-o", "link"]).contains(&bridge));
    }
}
