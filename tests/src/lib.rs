//! End-to-end test support: a real mount of `bigtable-mountd` on a temporary
//! directory, driven with real programs.
//!
//! The binaries are taken from the target directory the tests were built in
//! (`target/<profile>/bigtable-mountd`, next to `deps/`), so build them first:
//! `cargo build -p mountd --bins` (CI does). `BIGTABLE_BIN_DIR` overrides the
//! directory and `BIGTABLE_MOUNTD` the daemon itself.
//!
//! [`Mount`] unmounts and kills/reaps its daemon when dropped, also when the
//! test panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The directory holding the built binaries.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BIGTABLE_BIN_DIR") {
        return PathBuf::from(d);
    }
    // target/<profile>/deps/<test binary>
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    deps.parent().unwrap().to_path_buf()
}

/// A built binary; fails the test clearly if it is missing.
pub fn bin(name: &str) -> PathBuf {
    if name == "bigtable-mountd" {
        if let Some(p) = std::env::var_os("BIGTABLE_MOUNTD") {
            return PathBuf::from(p);
        }
    }
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} is missing: build the binaries first with `cargo build -p mountd --bins`",
        p.display()
    );
    p
}

/// The Python that has the test's Python packages: `BIGTABLE_PYTHON`, else
/// the virtual environment `tests/setup.sh` makes beside the build when the
/// system Python refuses pip (`target/python`), else `python3`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("BIGTABLE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = bin_dir().with_file_name("python").join("bin/python3");
    if venv.is_file() {
        return venv;
    }
    PathBuf::from("python3")
}

pub use testkit::wait_until;

/// Makes the kernel drop its unused inodes, and with them its copies of
/// directory listings (`echo 2 > /proc/sys/vm/drop_caches`); false if not
/// root. What memory pressure does to an idle mount, on demand.
pub fn drop_kernel_caches() -> bool {
    fs::write("/proc/sys/vm/drop_caches", "2\n").is_ok()
}

/// GET `path` from the HTTP server at `addr`: (status code, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

/// Writes `data` to `path` (an existing file, or a new one) and closes it,
/// with close's error: a cell's value and a `.mutate` batch are committed
/// on close, and `std::fs::write` ignores close's errors.
pub fn write_and_close(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    std::io::Write::write_all(&mut f, data)?;
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    // SAFETY: `fd` was just taken from the file, which no longer owns it;
    // it is closed once, here.
    if unsafe { libc::close(fd) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The wall clock in microseconds since 1970 (commit timestamps' unit).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// The filesystem type mounted at `path`, from /proc/self/mountinfo.
pub fn mount_type(path: &Path) -> Option<String> {
    let want = path.to_str()?;
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        (f.get(4) == Some(&want)).then(|| f.get(sep + 1).map(|s| s.to_string()))?
    })
}

/// Unmounts `path` (lazily if busy; through fusermount3 when not root);
/// true if nothing is mounted there after.
pub fn unmount(path: &Path) -> bool {
    use nix::mount::{umount2, MntFlags};
    if mount_type(path).is_none() {
        return true;
    }
    if umount2(path, MntFlags::empty()).is_err() && umount2(path, MntFlags::MNT_DETACH).is_err() {
        // Not root: the FUSE helper unmounts what the user mounted.
        for tool in ["fusermount3", "fusermount"] {
            let done = Command::new(tool)
                .args(["-u", "-z"])
                .arg(path)
                .status()
                .is_ok_and(|s| s.success());
            if done {
                break;
            }
        }
    }
    mount_type(path).is_none()
}

/// Resident memory of a process in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/PID/status` figure in kB (0 if the process is gone).
fn status_kib(pid: u32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The kernel's record of a process's highest resident memory (VmHWM) in
/// KiB: every spike counts, however brief, where sampling could miss one.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// Starts the kernel's peak-memory record of a process afresh from its
/// current RSS (writing 5 to `clear_refs`; root or the process's owner).
pub fn reset_peak_rss(pid: u32) {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// A mounted store in its own temporary directory.
pub struct Mount {
    _dir: tempfile::TempDir,
    pub data: PathBuf,
    pub mnt: PathBuf,
    pub log: PathBuf,
    options: Vec<String>,
    child: Option<Child>,
    /// The etcd the lock service is on (`lock=etcd://…`), if any: it
    /// outlives the daemon (fields drop after `Drop::drop` stopped it).
    pub etcd: Option<std::sync::Arc<testkit::etcd::Etcd>>,
    /// The simulated machine the daemon runs in, if any (it outlives the
    /// daemon too).
    machine: Option<std::sync::Arc<testkit::machine::Machine>>,
}

impl Mount {
    /// Mounts a fresh store with small engine sizes.
    pub fn new() -> Mount {
        Mount::with_options(&[])
    }

    /// Mounts with extra `-o` options.
    pub fn with_options(extra: &[&str]) -> Mount {
        Mount::in_machine(extra, None)
    }

    /// Mounts with extra `-o` options, the daemon in `machine` (its own
    /// network namespace and CPU cgroup) if one is given.
    pub fn in_machine(
        extra: &[&str],
        machine: Option<std::sync::Arc<testkit::machine::Machine>>,
    ) -> Mount {
        let dir = tempfile::Builder::new()
            .prefix("bt-e2e-")
            .tempdir()
            .unwrap();
        // Other users (EACCES tests) must reach the mountpoint.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.path().join("data");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let log = dir.path().join("mountd.log");
        let mut options: Vec<String> = [
            "allow_other",
            "memtable=4m",
            "cache=8m",
            "scan_cache=2m",
            "log=info",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        options.extend(extra.iter().map(|s| s.to_string()));
        // The daemon refuses to trust loopback when every user may use the
        // mount: such a mount is the mounting user's alone.
        if extra.contains(&"grpc_trust_loopback") || extra.contains(&"cluster_trust_loopback") {
            options.retain(|o| o != "allow_other");
        }
        let mut m = Mount {
            _dir: dir,
            data,
            mnt,
            log,
            options,
            child: None,
            etcd: None,
            machine,
        };
        m.start();
        m
    }

    /// Mounts with the lock service on `etcd` under `prefix`, with a short
    /// session lease (2 s) so that a dead daemon's locks free up quickly.
    pub fn on_etcd(
        etcd: std::sync::Arc<testkit::etcd::Etcd>,
        prefix: &str,
        extra: &[&str],
    ) -> Mount {
        Mount::on_etcd_in(etcd, prefix, extra, None)
    }

    /// The same, the daemon in `machine` if one is given.
    pub fn on_etcd_in(
        etcd: std::sync::Arc<testkit::etcd::Etcd>,
        prefix: &str,
        extra: &[&str],
        machine: Option<std::sync::Arc<testkit::machine::Machine>>,
    ) -> Mount {
        let lock = format!("lock=etcd://{}{prefix}", etcd.endpoint);
        let mut opts = vec![lock.as_str(), "etcd_lease=2"];
        opts.extend_from_slice(extra);
        let mut m = Mount::in_machine(&opts, machine);
        m.etcd = Some(etcd);
        m
    }

    /// Mounts with the lock service on a fresh etcd of its own.
    pub fn with_etcd(extra: &[&str]) -> Mount {
        Mount::on_etcd(
            std::sync::Arc::new(testkit::etcd::Etcd::start()),
            "/bt",
            extra,
        )
    }

    /// Starts the daemon in the foreground and waits until the mount is live.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(bin("bigtable-mountd"));
        cmd.arg(&self.data)
            .arg(&self.mnt)
            .arg("-f")
            .arg("-o")
            .arg(self.options.join(","))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(m) = &self.machine {
            m.enter(&mut cmd).unwrap();
        }
        let mut child = cmd.spawn().unwrap();
        let mnt = self.mnt.clone();
        let mut exited = None;
        let up = wait_until(Duration::from_secs(60), || {
            if let Ok(Some(st)) = child.try_wait() {
                exited = Some(st);
                return true;
            }
            mount_type(&mnt).is_some_and(|t| t.starts_with("fuse")) && fs::metadata(&mnt).is_ok()
        });
        if let Some(st) = exited {
            panic!(
                "bigtable-mountd exited ({st}) before mounting; log:\n{}",
                self.log_text()
            );
        }
        if !up {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the mount did not come up within 60 s; log:\n{}",
                self.log_text()
            );
        }
        self.child = Some(child);
    }

    /// Unmounts and waits for the daemon to exit by itself (a clean stop).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        assert!(unmount(&self.mnt), "cannot unmount {}", self.mnt.display());
        let mut status = None;
        let clean = wait_until(Duration::from_secs(30), || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        if !clean {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "bigtable-mountd did not exit after umount; log:\n{}",
                self.log_text()
            );
        }
        let st = status.unwrap();
        assert!(
            st.success(),
            "bigtable-mountd exited with {st}; log:\n{}",
            self.log_text()
        );
    }

    /// Kills the daemon with SIGKILL and cleans up the dead mount.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        unmount(&self.mnt);
    }

    /// Stops cleanly and mounts the same data again.
    pub fn remount(&mut self) {
        self.stop();
        self.start();
    }

    /// Unmounts and starts a new daemon on the same data at once, without
    /// waiting for the old one to exit (as `umount; mount` in a script);
    /// then checks that the old one exited cleanly.
    pub fn remount_at_once(&mut self) {
        let Some(mut old) = self.child.take() else {
            return self.start();
        };
        assert!(unmount(&self.mnt), "cannot unmount {}", self.mnt.display());
        self.start();
        let mut status = None;
        let gone = wait_until(Duration::from_secs(30), || {
            status = old.try_wait().unwrap();
            status.is_some()
        });
        if !gone {
            let _ = old.kill();
            let _ = old.wait();
        }
        assert!(
            status.is_some_and(|s| s.success()),
            "the old daemon did not exit cleanly ({status:?}); log:\n{}",
            self.log_text()
        );
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// A path inside the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel.trim_start_matches('/'))
    }

    /// The counter `name` of `.bigtable/stats`.
    pub fn stat(&self, name: &str) -> u64 {
        let text = fs::read_to_string(self.path(".bigtable/stats")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in .bigtable/stats:\n{text}"))
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The console's address (`-o http=…`; served over HTTP or, with
    /// `http_cert`, HTTPS), as the daemon logged it.
    pub fn console_addr(&self) -> String {
        let mut addr = None;
        let found = wait_until(Duration::from_secs(30), || {
            addr = self.log_text().lines().find_map(|l| {
                l.split("serving the console")
                    .nth(1)
                    .and_then(|r| r.split("://").nth(1))
                    .map(|a| a.trim().trim_end_matches('/').to_string())
            });
            addr.is_some()
        });
        assert!(found, "no console in the log:\n{}", self.log_text());
        addr.unwrap()
    }

    /// The address of the gRPC listener (`-o grpc=…`), as the daemon logged it.
    pub fn grpc_addr(&self) -> String {
        self.logged_addr("serving the Bigtable v2 gRPC API on ")
    }

    /// The address of the cluster's internal RPC (`-o cluster_listen=…`),
    /// as the daemon logged it.
    pub fn rpc_addr(&self) -> String {
        self.logged_addr("serving the cluster's internal RPC on ")
    }

    /// What follows `marker` on the first log line that has it (waiting
    /// up to 30 s for the line).
    fn logged_addr(&self, marker: &str) -> String {
        let mut addr = None;
        let found = wait_until(Duration::from_secs(30), || {
            addr = self
                .log_text()
                .lines()
                .find_map(|l| l.split(marker).nth(1).map(|a| a.trim().to_string()));
            addr.is_some()
        });
        assert!(found, "no {marker:?} in the log:\n{}", self.log_text());
        addr.unwrap_or_default()
    }

    /// Runs an operator command through `.bigtable/control`.
    pub fn control(&self, command: &str) {
        self.ok(&format!("echo '{command}' > .bigtable/control"));
    }

    /// `.bigtable/tablets` rows of `table` as (start row, server).
    pub fn tablets(&self, table: &str) -> Vec<(String, String)> {
        self.ok("cat .bigtable/tablets")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.first() == Some(&table)).then(|| (f[2].to_string(), f[f.len() - 1].to_string()))
            })
            .collect()
    }

    /// Runs `sh -c script` in the mount directory.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&self.mnt)
            .output()
            .unwrap()
    }

    /// Runs a script that must succeed; returns its stdout.
    pub fn ok(&self, script: &str) -> String {
        let o = self.sh(script);
        // The daemon log's tail is printed when the panic drops the mount.
        assert!(
            o.status.success(),
            "`{script}` failed ({}):\nstdout: {}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs a script that must fail; returns its stderr.
    pub fn fails(&self, script: &str) -> String {
        let o = self.sh(script);
        assert!(
            !o.status.success(),
            "`{script}` succeeded but should have failed:\nstdout: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// Runs a script as user nobody (65534), without supplementary groups.
    pub fn sh_as_nobody(&self, script: &str) -> Output {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                script,
            ])
            .current_dir(&self.mnt)
            .output()
            .unwrap()
    }

    /// (server name, `addr=`) of each serving line of `.bigtable/servers`.
    pub fn servers(&self) -> Vec<(String, String)> {
        self.ok("cat .bigtable/servers")
            .lines()
            .filter(|l| l.contains(" state=serving "))
            .map(|l| {
                let word = |k: &str| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix(k))
                        .unwrap_or_default()
                        .to_string()
                };
                (word("server="), word("addr="))
            })
            .collect()
    }

    /// Creates a table with the given `.schema` text.
    pub fn table(&self, name: &str, schema: &str) {
        fs::create_dir(self.path(name)).unwrap();
        fs::write(self.path(&format!("{name}/.schema")), schema).unwrap();
    }

    /// Writes a `.mutate` batch to a table.
    pub fn mutate(&self, table: &str, batch: &[u8]) {
        fs::write(self.path(&format!("{table}/.mutate")), batch).unwrap();
    }
}

/// A program whose output goes to a file (a `tail -f`, a stream reader),
/// killed when dropped; the file is removed then.
pub struct Background {
    child: Child,
    out: PathBuf,
}

impl Background {
    /// Starts `cmd` with its stdout into `out` (stderr into `out.err`).
    pub fn spawn(mut cmd: Command, out: PathBuf) -> Background {
        let file = fs::File::create(&out).unwrap();
        let err = fs::File::create(out.with_extension("err")).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap();
        Background { child, out }
    }

    /// `tail ARGS -s 0.2 REL` in the mount directory.
    pub fn tail_f(m: &Mount, args: &[&str], rel: &str, out: PathBuf) -> Background {
        let mut cmd = Command::new("tail");
        cmd.args(args)
            .args(["-s", "0.2", rel])
            .current_dir(m.path(""));
        Background::spawn(cmd, out)
    }

    /// What it wrote so far.
    pub fn text(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// What it wrote to stderr so far.
    pub fn errors(&self) -> String {
        fs::read_to_string(self.out.with_extension("err")).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.out);
        let _ = fs::remove_file(self.out.with_extension("err"));
    }
}

impl Default for Mount {
    fn default() -> Self {
        Mount::new()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // A failing test's temporary directory goes with it: say what the
        // daemon logged last, which is often the reason.
        if std::thread::panicking() {
            eprintln!(
                "--- last lines of the daemon log ({}) ---\n{}",
                self.log.display(),
                tail(&self.log_text(), 60)
            );
        }
        if let Some(mut child) = self.child.take() {
            unmount(&self.mnt);
            let done = wait_until(Duration::from_secs(10), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !done {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        unmount(&self.mnt);
    }
}

/// A cluster secret in a private file (the daemon refuses one others can
/// read), for daemons that share an etcd; `option` is the mount option
/// naming it. The file goes with the value.
pub struct ClusterSecret {
    _dir: tempfile::TempDir,
    /// `cluster_secret_file=PATH`.
    pub option: String,
}

/// A fresh [`ClusterSecret`].
pub fn cluster_secret() -> ClusterSecret {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cluster-secret");
    std::fs::write(&f, format!("secret-{:032x}\n", rand::random::<u128>())).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    ClusterSecret {
        option: format!("cluster_secret_file={}", f.display()),
        _dir: dir,
    }
}

/// The last `n` lines of a text.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The errno of an I/O error (0 if none).
pub fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Encodes bytes as a `.mutate` field (`%XX` for %, whitespace, control bytes, DEL).
pub fn field(bytes: &[u8]) -> Vec<u8> {
    if bytes.is_empty() {
        return b"%".to_vec();
    }
    let mut out = Vec::new();
    for &b in bytes {
        if b == b'%' || b == b' ' || b < 0x20 || b == 0x7F {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
    out
}

/// The filename a key is listed under (`%`, `/`, NUL and a leading `.` escaped).
pub fn key_name(key: &[u8]) -> Vec<u8> {
    if key.is_empty() {
        return b"%".to_vec();
    }
    let mut out = Vec::new();
    for (i, &b) in key.iter().enumerate() {
        if b == b'%' || b == b'/' || b == 0 || (i == 0 && b == b'.') {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
    out
}

/// A `flock -x` on a file, held by a process group of its own until
/// [`LockHolder::kill`] or drop.
pub struct LockHolder {
    child: Child,
    _scratch: tempfile::TempDir,
}

impl LockHolder {
    /// Starts `flock -x lock` in `dir` and returns once it holds the lock:
    /// `flock` runs its command only then, and the command leaves a file.
    /// (A probe that finds the lock busy proves nothing: it is busy while
    /// the holder still waits, and a holder killed waiting leaves no
    /// lock-delay behind.)
    pub fn take(dir: &Path, lock: &str) -> LockHolder {
        let scratch = tempfile::tempdir().unwrap();
        let held = scratch.path().join("held");
        let child = Command::new("flock")
            .args(["-x", lock, "sh", "-c", "touch \"$0\" && exec sleep 600"])
            .arg(&held)
            .current_dir(dir)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        // Built first: a holder that never takes the lock is killed too.
        let holder = LockHolder {
            child,
            _scratch: scratch,
        };
        assert!(
            wait_until(Duration::from_secs(10), || held.exists()),
            "the holder never took {lock}"
        );
        holder
    }

    /// Kills the holder's process group (a holder that dies: its lock is
    /// released by the kernel as for any dead process).
    pub fn kill(&mut self) {
        // SAFETY: signalling the holder's own process group.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}
