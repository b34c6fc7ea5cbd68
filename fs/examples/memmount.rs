//! Mounts the filesystem over the in-memory store (no engine, nothing kept):
//! `cargo run -p fs --features mock --example memmount -- MOUNTPOINT`, or
//! with bigtable-mountd's arguments (`DATA_DIR MOUNTPOINT -f -o ...`; the
//! data directory and options are ignored). Unmount with `umount MOUNTPOINT`.

use fs::fuser::{Config, MountOption, Session, SessionACL};
use fs::{Fs, FsOptions, FuseFs};
use std::sync::Arc;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let positional: Vec<String> = std::env::args()
        .skip(1)
        .scan(false, |skip, a| {
            let keep = !*skip && !a.starts_with('-');
            *skip = a == "-o";
            Some((keep, a))
        })
        .filter_map(|(keep, a)| keep.then_some(a))
        .collect();
    let Some(mnt) = positional.last().cloned() else {
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
