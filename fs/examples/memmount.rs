//! Mounts the filesystem over the in-memory store (no engine, nothing kept):
//! `cargo run -p fs --features mock --example memmount -- MOUNTPOINT`.
//! Unmount with `umount MOUNTPOINT`.

use fs::fuser::{Config, MountOption, Session, SessionACL};
use fs::{Fs, FsOptions, FuseFs};
use std::sync::Arc;

fn main() {
    let Some(mnt) = std::env::args().nth(1) else {
        eprintln!("usage: memmount MOUNTPOINT");
        std::process::exit(2);
    };
    let fs = Arc::new(Fs::new(
        Arc::new(fs::mock::MockStore::default()),
        FsOptions::default(),
    ));
    let mut c = Config::default();
    c.n_threads = Some(4);
    c.acl = SessionACL::All;
    c.mount_options = vec![
        MountOption::FSName("memory".into()),
        MountOption::Subtype("bigtable".into()),
        MountOption::DefaultPermissions,
    ];
    let session = match Session::new(FuseFs::new(fs.clone()), &mnt, &c) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("memmount: {e}");
            std::process::exit(1);
        }
    };
    fs.start_notifier(session.notifier());
    eprintln!("memmount: mounted on {mnt}");
    if let Err(e) = session.run() {
        eprintln!("memmount: {e}");
    }
}
