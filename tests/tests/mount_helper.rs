#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `mount -t bigtable` through the mount.bigtable helper, and `umount`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tests::{bin, mount_type, unmount, wait_until};

/// Makes sure mount(8) finds a helper: the installed one, or for the length
/// of the test a link to the freshly built one.
struct Helper {
    created: Option<PathBuf>,
}

impl Helper {
    fn ensure() -> Helper {
        let installed = ["/sbin/mount.bigtable", "/usr/sbin/mount.bigtable"]
            .iter()
            .any(|p| Path::new(p).exists());
        if installed {
            return Helper { created: None };
        }
        let link = PathBuf::from("/sbin/mount.bigtable");
        std::os::unix::fs::symlink(bin("mount-bigtable"), &link).unwrap();
        Helper {
            created: Some(link),
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(p) = &self.created {
            let _ = fs::remove_file(p);
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[test]
fn mount_t_bigtable_daemonizes_and_umount_stops_it() {
    let _helper = Helper::ensure();
    let dir = tempfile::tempdir().unwrap();
    let (data, mnt) = (dir.path().join("data"), dir.path().join("mnt"));
    fs::create_dir(&mnt).unwrap();
    let pidfile = dir.path().join("pid");
    let log = dir.path().join("log");
    struct Cleanup(PathBuf, PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            unmount(&self.0);
            if let Ok(p) = fs::read_to_string(&self.1) {
                if let Ok(pid) = p.trim().parse::<i32>() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
    let _cleanup = Cleanup(mnt.clone(), pidfile.clone());
    // mount(8) passes -o rw and the generic options; the helper drops them.
    let out = Command::new("mount")
        .args(["-t", "bigtable", "-o"])
        .arg(format!(
            "rw,noauto,_netdev,nofail,x-test=1,memtable=4m,cache=8m,pidfile={},logfile={}",
            pidfile.display(),
            log.display()
        ))
        .arg(&data)
        .arg(&mnt)
        .env("BIGTABLE_MOUNTD", bin("bigtable-mountd"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount failed: {}{}\nlog: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        fs::read_to_string(&log).unwrap_or_default()
    );
    // mount returned: the filesystem is live right away.
    assert_eq!(mount_type(&mnt).as_deref(), Some("fuse.bigtable"));
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    assert!(mounts
        .lines()
        .any(|l| l.contains(mnt.to_str().unwrap()) && l.contains("fuse.bigtable")));
    fs::create_dir(mnt.join("t")).unwrap();
    fs::write(mnt.join("t/.schema"), "f\n").unwrap();
    fs::create_dir_all(mnt.join("t/r/f")).unwrap();
    fs::write(mnt.join("t/r/f/q"), "v").unwrap();
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(pid_alive(pid));
    // umount stops the daemon cleanly.
    let st = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(st.success());
    assert!(
        wait_until(Duration::from_secs(30), || !pid_alive(pid)),
        "the daemon did not exit after umount"
    );
    assert!(fs::read_to_string(&log)
        .unwrap()
        .contains("closing the store"));
    // And the data is there on the next mount.
    let out = Command::new("mount")
        .args(["-t", "bigtable", "-o"])
        .arg(format!(
            "pidfile={},logfile={}",
            pidfile.display(),
            log.display()
        ))
        .arg(&data)
        .arg(&mnt)
        .env("BIGTABLE_MOUNTD", bin("bigtable-mountd"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read_to_string(mnt.join("t/r/f/q")).unwrap(), "v");
    // SIGTERM also stops it cleanly and unmounts.
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(30), || !pid_alive(pid)));
    assert!(mount_type(&mnt).is_none());
}

#[test]
fn helper_rejects_unknown_options_and_fake_mounts_do_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("mount-bigtable"))
        .arg(dir.path())
        .arg(dir.path())
        .args(["-o", "definitely_not_an_option"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option"));
    let out = Command::new(bin("mount-bigtable"))
        .arg(dir.path())
        .arg(dir.path())
        .arg("-f")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(mount_type(dir.path()).is_none());
}
