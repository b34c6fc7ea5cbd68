//! The engine's tuning and what it reports about tablets.

use crate::data::DEFAULT_MAX_VALUE;
use std::time::Duration;

/// Tuning of the engine. Defaults suit production; tests shrink the sizes.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest cell value accepted (EFBIG above it in the mount).
    pub max_value_size: usize,
    /// A tablet's memtable is frozen and written out (minor compaction) past this size.
    pub memtable_bytes: usize,
    /// Bytes all of a tablet server's memtables (frozen ones included) may
    /// hold: past it, the largest are frozen and written out early
    /// (RocksDB's write buffer manager, HBase's global memstore limit).
    pub memtable_budget: u64,
    /// Old log files a tablet server keeps: past this many, the tablets
    /// whose unwritten entries keep the oldest ones are written out, so
    /// that the log (and a recovery's replay of it) stays bounded however
    /// little those tablets are written (HBase's `maxlogs`).
    pub log_max_files: usize,
    /// A memtable whose oldest entry is older than this is written out
    /// (zero: never), so that a quiet tablet's writes do not stay only in
    /// the log (HBase's periodic flush).
    pub memtable_max_age: Duration,
    /// A tablet splits when its SSTables pass this size.
    pub split_bytes: u64,
    /// Block cache capacity.
    pub block_cache_bytes: u64,
    /// Scan cache capacity.
    pub scan_cache_bytes: u64,
    /// The commit log rolls to a new file past this size.
    pub log_file_bytes: u64,
    /// A log append slower than this switches to the other log writer.
    pub slow_log_threshold: Duration,
    /// How long a group-commit leader waits for more writes before it logs
    /// its batch (zero: the next batch starts as soon as the previous one
    /// is logged). On an object store, where each batch is one PUT, a
    /// window trades latency for fewer, larger PUTs.
    pub log_batch_window: Duration,
    /// Where each log append is a request to a remote store (S3) and
    /// `log_batch_window` is zero: a leader waits only while others are writing
    /// too, at most a quarter of the recent PUT time and 1 ms, and stops
    /// once as many writes are queued as its last batch held (on by
    /// default: it cannot touch a local or chunk-layer log).
    pub log_batch_window_adaptive: bool,
    /// Where each log append is a request to a remote store: how many
    /// group-commit batches may be out at once (1 or 2, one per log lane;
    /// 0: two while the recent PUT time is at least 5 ms, else one).
    pub log_puts_in_flight: usize,
    /// Compaction output files are cut at about this size.
    pub sstable_target_bytes: u64,
    /// A locality group with more SSTables than this gets a merging compaction.
    pub merge_trigger: usize,
    /// Every this often, tablets with more than one SSTable per group get a major compaction.
    pub major_interval: Duration,
    /// Background compaction threads per tablet server.
    pub background_threads: usize,
    /// Adjacent tablets of a table both smaller than this are merged (0: never).
    pub merge_bytes: u64,
    /// Whether the master moves tablets to even out load (and splits hot
    /// ones, see `load_split_rate`).
    pub balance: bool,
    /// A tablet whose load (requests a second, plus a request for every
    /// 4 KiB they move) stays above this for `load_split_after` is split
    /// at the row that halves it, however small it is (0: never).
    pub load_split_rate: u64,
    /// How long a tablet's load must stay above `load_split_rate`.
    pub load_split_after: Duration,
    /// How long the two halves of any split (an operator's, a load or a
    /// size split) are kept from the master's merge of small tablets, as
    /// HBase's normalizer leaves young regions alone.
    pub split_cooldown: Duration,
    /// Tablet servers the daemon runs.
    pub tablet_servers: usize,
    /// The address other daemons dial to reach this daemon's tablet servers
    /// and master (written in their lock files); None when nothing dials in.
    pub advertise: Option<String>,
    /// Lock-delay of a tablet server's lock: how long after a server dies
    /// without unlocking before the master may declare it dead.
    pub server_lock_delay: Duration,
    /// How often the master checks servers, assignments and load.
    pub master_interval: Duration,
    /// How long a client retries a tablet that is moving or recovering
    /// before it gives up with `Unavailable`.
    pub retry_deadline: Duration,
    /// How long a deleted table is kept in the trash before the master
    /// collects it (zero: deleted at once, no trash).
    pub trash_period: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_value_size: DEFAULT_MAX_VALUE,
            memtable_bytes: 64 << 20,
            memtable_budget: 256 << 20,
            log_max_files: 16,
            memtable_max_age: Duration::from_secs(3600),
            split_bytes: 128 << 20,
            block_cache_bytes: 256 << 20,
            scan_cache_bytes: 32 << 20,
            log_file_bytes: 64 << 20,
            slow_log_threshold: Duration::from_millis(200),
            log_batch_window: Duration::ZERO,
            log_batch_window_adaptive: true,
            log_puts_in_flight: 0,
            sstable_target_bytes: 32 << 20,
            merge_trigger: 6,
            major_interval: Duration::from_secs(3600),
            background_threads: 2,
            merge_bytes: 16 << 20,
            balance: true,
            load_split_rate: 2000,
            load_split_after: Duration::from_secs(10),
            split_cooldown: Duration::from_secs(600),
            tablet_servers: 3,
            advertise: None,
            server_lock_delay: Duration::from_millis(500),
            master_interval: Duration::from_millis(100),
            retry_deadline: Duration::from_secs(60),
            trash_period: Duration::from_secs(86_400),
        }
    }
}

/// Where one tablet is and how big.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TabletInfo {
    /// The id the master and tablet servers know the tablet by.
    pub id: u64,
    /// The table it belongs to.
    pub table: String,
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// End row (exclusive); `None` = end of table.
    pub end: Option<Vec<u8>>,
    /// Bytes in its memtables.
    pub memtable_bytes: u64,
    /// Bytes of its SSTables.
    pub sstable_bytes: u64,
    /// How many SSTables it has.
    pub sstables: usize,
    /// The tablet server serving it ("" while unassigned).
    pub server: String,
}
