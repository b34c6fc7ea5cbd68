//! What a snapshot and a backup cost as a table grows (docs/benchmarks.md,
//! "Snapshots and backups"): for each size, a table on a local store is
//! loaded, flushed and compacted; then a snapshot is taken, copied to a
//! backup store in another directory, the table grows by 1% and a second
//! snapshot and backup are made (incremental), and a clone is made. All in
//! one process and one run, so the ratios between sizes hold on a shared
//! machine where the absolute figures do not.

use super::common::TempDir;
use anyhow::{Context, Result};
use engine::backup::Source;
use engine::schema::{FamilySchema, TableSchema};
use engine::{Bigtable, Options, RowMutation, WriteOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct SnapshotArgs {
    /// Table sizes in rows.
    pub rows: Vec<u64>,
    pub work_base: PathBuf,
}

/// One size's figures.
struct Figures {
    rows: u64,
    load: Duration,
    snapshot: Duration,
    files: usize,
    bytes: u64,
    backup: Duration,
    incremental: Duration,
    incremental_files: u64,
    incremental_bytes: u64,
    clone: Duration,
}

fn load(bt: &Bigtable, from: u64, to: u64) -> Result<()> {
    let value = vec![b'v'; 100];
    let mut batch = Vec::with_capacity(1000);
    for i in from..to {
        // Spread, so that every tablet takes writes.
        let row = format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut v = value.clone();
        v.extend_from_slice(i.to_string().as_bytes());
        batch.push(RowMutation::new(row).set("f", "q", v));
        if batch.len() == 1000 || i + 1 == to {
            bt.apply_batch("t", &batch, WriteOptions::default())?;
            batch.clear();
        }
    }
    Ok(())
}

fn timed<T>(f: impl FnOnce() -> engine::Result<T>) -> Result<(T, Duration)> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed()))
}

fn run_size(args: &SnapshotArgs, rows: u64) -> Result<Figures> {
    let dir = TempDir::new_in(&args.work_base, "bigtable-bench-snapshot")?;
    let files: Arc<dyn gfs::FileStore> = Arc::new(gfs::LocalStore::open(dir.path().join("files"))?);
    let offsite: Arc<dyn gfs::FileStore> =
        Arc::new(gfs::LocalStore::open(dir.path().join("backups"))?);
    let bt = Bigtable::open(files, Options::default())?;
    bt.add_backup_store("offsite", offsite)?;
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))?;
    let started = Instant::now();
    load(&bt, 0, rows)?;
    bt.flush()?;
    bt.compact("t", true)?;
    let load_time = started.elapsed();
    let (info, snapshot) = timed(|| bt.take_snapshot("t", "one"))?;
    let (_, backup) = timed(|| bt.copy_backup(Source::Snapshot, "t", "one", "offsite"))?;
    load(&bt, rows, rows + rows / 100)?;
    bt.flush()?;
    bt.take_snapshot("t", "two")?;
    let (_, incremental) = timed(|| bt.copy_backup(Source::Snapshot, "t", "two", "offsite"))?;
    let job = bt.backup_jobs().pop().context("no copy recorded")?;
    use std::sync::atomic::Ordering::Relaxed;
    let copied = job.bytes_done.load(Relaxed) - job.bytes_skipped.load(Relaxed);
    let (_, clone) = timed(|| bt.clone_snapshot("t", "two", "c"))?;
    let incremental_files = {
        let two = bt.backup_record("offsite", "t", "two")?;
        let one = bt.backup_record("offsite", "t", "one")?;
        two.files
            .iter()
            .filter(|f| !one.files.iter().any(|g| g.key == f.key))
            .count() as u64
    };
    bt.close()?;
    Ok(Figures {
        rows,
        load: load_time,
        snapshot,
        files: info.files,
        bytes: info.bytes,
        backup,
        incremental,
        incremental_files,
        incremental_bytes: copied,
        clone,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

pub fn run(args: &SnapshotArgs) -> Result<()> {
    println!(
        "| rows | load s | files | MB | snapshot ms | backup ms | backup MB/s | +1% rows: files, MB copied | incremental backup ms | clone ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &rows in &args.rows {
        let f = run_size(args, rows.max(1))?;
        let mb = f.bytes as f64 / 1e6;
        println!(
            "| {} | {:.1} | {} | {:.1} | {} | {} | {:.0} | {}, {:.2} | {} | {} |",
            f.rows,
            f.load.as_secs_f64(),
            f.files,
            mb,
            ms(f.snapshot),
            ms(f.backup),
            mb / f.backup.as_secs_f64().max(1e-9),
            f.incremental_files,
            f.incremental_bytes as f64 / 1e6,
            ms(f.incremental),
            ms(f.clone),
        );
    }
    Ok(())
}
