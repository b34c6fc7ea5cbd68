//! The peers the engine is compared with (feature `peers`): RocksDB, linked to
//! the system's librocksdb (see .ci/bench-deps.sh), and fjall, a pure-Rust LSM
//! tree. Both run the same [`kv_suite`] as the engine, with equal durability:
//! unsynced, each write reaches the OS before `put` returns (RocksDB's WAL
//! write; fjall's default per-insert journal flush); with `--sync`, each write
//! is fsynced (RocksDB `sync=true`, fjall `persist(SyncData)` after each insert).
//! Each gets a block cache of the engine's size (shared by its two stores),
//! so that random reads compare read paths rather than cache sizes.

use super::common::scan_should_stop;
use super::workloads::{kv_suite, KvResults, KvStore, Plan};
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Instant;

/// Counts entries from an iterator of results until it ends or the deadline passes.
pub fn count_until<T, E>(
    iter: impl Iterator<Item = std::result::Result<T, E>>,
    deadline: Instant,
) -> Result<u64>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let mut n = 0u64;
    for item in iter {
        item?;
        n += 1;
        if n & 255 == 0 && scan_should_stop(deadline) {
            break;
        }
    }
    Ok(n)
}

/// One RocksDB instance with default options (its 64 MiB memtable; no block
/// compression, as the crate is built without compression features) but the given block cache.
pub struct Rocks {
    db: rocksdb::DB,
    write: rocksdb::WriteOptions,
    unsynced: rocksdb::WriteOptions,
}

impl Rocks {
    pub fn open(dir: &Path, sync: bool, cache: &rocksdb::Cache) -> Result<Rocks> {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(cache);
        opts.set_block_based_table_factory(&table);
        // Background flush and compaction threads: the machine's cores, as the engine's.
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        opts.increase_parallelism(cores as i32);
        let db = rocksdb::DB::open(&opts, dir)
            .with_context(|| format!("opening RocksDB in {}", dir.display()))?;
        let mut write = rocksdb::WriteOptions::default();
        write.set_sync(sync);
        Ok(Rocks {
            db,
            write,
            unsynced: rocksdb::WriteOptions::default(),
        })
    }
}

impl KvStore for Rocks {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_opt(key, value, &self.write)?)
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get_pinned(key)?.map(|v| v.len()))
    }
    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64> {
        let mut read = rocksdb::ReadOptions::default();
        read.set_iterate_upper_bound(end.to_vec());
        let iter = self.db.iterator_opt(
            rocksdb::IteratorMode::From(start, rocksdb::Direction::Forward),
            read,
        );
        count_until(iter, deadline)
    }
    fn flush(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }
    fn put_unsynced(&self, key: &[u8], value: &[u8]) -> Option<Result<()>> {
        Some(
            self.db
                .put_opt(key, value, &self.unsynced)
                .map_err(Into::into),
        )
    }
    fn background_idle(&self) -> Result<bool> {
        let busy =
            |p: &str| -> Result<bool> { Ok(self.db.property_int_value(p)?.unwrap_or(0) > 0) };
        Ok(!busy("rocksdb.num-running-flushes")?
            && !busy("rocksdb.num-running-compactions")?
            && !busy("rocksdb.compaction-pending")?)
    }
    fn files(&self) -> Result<Option<usize>> {
        Ok(Some(self.db.live_files()?.len()))
    }
}

/// One partition of a fjall keyspace.
pub struct Fjall {
    keyspace: fjall::Keyspace,
    part: fjall::PartitionHandle,
    sync: bool,
}

impl Fjall {
    pub fn open(keyspace: &fjall::Keyspace, name: &str, sync: bool) -> Result<Fjall> {
        let part = keyspace
            .open_partition(name, fjall::PartitionCreateOptions::default())
            .with_context(|| format!("opening fjall partition {name}"))?;
        Ok(Fjall {
            keyspace: keyspace.clone(),
            part,
            sync,
        })
    }
}

impl KvStore for Fjall {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.part.insert(key, value)?;
        if self.sync {
            self.keyspace.persist(fjall::PersistMode::SyncData)?;
        }
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.part.get(key)?.map(|v| v.len()))
    }
    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64> {
        count_until(self.part.range(start.to_vec()..end.to_vec()), deadline)
    }
    fn flush(&self) -> Result<()> {
        Ok(self.part.rotate_memtable_and_wait()?)
    }
    fn put_unsynced(&self, key: &[u8], value: &[u8]) -> Option<Result<()>> {
        Some(self.part.insert(key, value).map_err(Into::into))
    }
    fn background_idle(&self) -> Result<bool> {
        Ok(self.keyspace.active_compactions() == 0)
    }
    fn files(&self) -> Result<Option<usize>> {
        Ok(Some(self.part.segment_count()))
    }
}

/// Runs the suite on RocksDB in `dir/rocksdb-{seq,rand}`; removes them after.
pub fn run_rocksdb(dir: &Path, sync: bool, cache_bytes: u64, plan: Plan) -> Result<KvResults> {
    let (seq_dir, rand_dir) = (dir.join("rocksdb-seq"), dir.join("rocksdb-rand"));
    let result = (|| {
        let cache = rocksdb::Cache::new_lru_cache(cache_bytes as usize)?;
        let seq = Rocks::open(&seq_dir, sync, &cache)?;
        let rand = Rocks::open(&rand_dir, sync, &cache)?;
        kv_suite(&seq, &rand, plan, &mut |_| {})
    })();
    let _ = std::fs::remove_dir_all(&seq_dir);
    let _ = std::fs::remove_dir_all(&rand_dir);
    result
}

/// Runs the suite on fjall in `dir/fjall` (partitions `seq` and `rand`); removes it after.
pub fn run_fjall(dir: &Path, sync: bool, cache_bytes: u64, plan: Plan) -> Result<KvResults> {
    let path = dir.join("fjall");
    let result = (|| {
        let keyspace = fjall::Config::new(&path)
            .cache_size(cache_bytes)
            .open()
            .with_context(|| format!("opening fjall in {}", path.display()))?;
        let seq = Fjall::open(&keyspace, "seq", sync)?;
        let rand = Fjall::open(&keyspace, "rand", sync)?;
        kv_suite(&seq, &rand, plan, &mut |_| {})
    })();
    let _ = std::fs::remove_dir_all(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::common::TempDir;
    use std::time::Duration;

    fn plan() -> Plan {
        Plan {
            n: 2000,
            threads: 2,
            time_cap: Duration::from_secs(20),
            min_read: Duration::ZERO,
        }
    }

    #[test]
    fn rocksdb_runs_the_suite() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "peer-rocks").unwrap();
        let r = run_rocksdb(dir.path(), false, 8 << 20, plan()).unwrap();
        assert_eq!(r.seq_read.ops, 2000);
        assert_eq!(r.scan.ops, 2000);
        assert!(!dir.path().join("rocksdb-seq").exists());
    }

    #[test]
    fn fjall_runs_the_suite() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "peer-fjall").unwrap();
        let r = run_fjall(dir.path(), false, 8 << 20, plan()).unwrap();
        assert_eq!(r.rand_read.ops, 2000);
        assert_eq!(r.scan.ops, 2000);
        assert!(!dir.path().join("fjall").exists());
    }
}
