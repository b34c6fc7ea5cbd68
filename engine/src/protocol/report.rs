//! What a tablet server reports to the master and to status files.

/// A tablet server's figures, for the master's balancing and for status.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerReport {
    /// The server's name.
    pub name: String,
    /// `serving`, `dead` or `stopped`.
    pub state: String,
    /// Tablets served.
    pub tablets: usize,
    /// Bytes in its memtables.
    pub memtable_bytes: u64,
    /// Bytes of its tablets' SSTables.
    pub sstable_bytes: u64,
    /// Reads, writes and scans served since start.
    pub requests: u64,
    /// Writes applied.
    pub writes: u64,
    /// Point reads served.
    pub reads: u64,
    /// Scan parts served.
    pub scans: u64,
    /// Memtables written out.
    pub minor_compactions: u64,
    /// Merging compactions done.
    pub merging_compactions: u64,
    /// Major compactions done.
    pub major_compactions: u64,
    /// Bytes appended to its commit log.
    #[serde(default)]
    pub log_bytes: u64,
    /// Bytes of SSTables its minor compactions wrote.
    #[serde(default)]
    pub flushed_bytes: u64,
    /// Bytes of SSTables its merging and major compactions wrote.
    #[serde(default)]
    pub compacted_bytes: u64,
    /// Tablets split.
    pub splits: u64,
    /// Writes that waited for a memtable to be written out.
    pub stalls: u64,
    /// Memtables written out early because the server's memtables passed
    /// `memtable_budget`.
    #[serde(default)]
    pub memory_flushes: u64,
    /// ... because its log kept more than `log_max_files` old files.
    #[serde(default)]
    pub log_flushes: u64,
    /// ... because their first entry was older than `memtable_max_age`.
    #[serde(default)]
    pub age_flushes: u64,
    /// Tablets loaded.
    pub loads: u64,
    /// Tablets unloaded.
    pub unloads: u64,
    /// Bytes of dead servers' sorted logs read while loading tablets.
    pub recovery_bytes_read: u64,
    /// Log entries redone while loading tablets.
    pub recovered_entries: u64,
    /// The newest sequence number its log assigned.
    pub last_seq: u64,
    /// Tablet loads that raised the clock to the tablet's newest timestamp.
    #[serde(default)]
    pub clock_raised: u64,
    /// The largest such raise, in microseconds.
    #[serde(default)]
    pub clock_raise_max_us: u64,
    /// What the background threads are doing now.
    pub activity: Vec<String>,
}

impl ServerReport {
    /// The report as one `key=value` line.
    pub fn line(&self) -> String {
        format!(
            "server={} state={} tablets={} memtable_bytes={} sstable_bytes={} requests={} \
             writes={} reads={} scans={} minor_compactions={} merging_compactions={} \
             major_compactions={} log_bytes={} flushed_bytes={} compacted_bytes={} splits={} stalls={} memory_flushes={} log_flushes={} \
             age_flushes={} loads={} unloads={} \
             recovery_bytes_read={} recovered_entries={} last_seq={} clock_raised={} \
             clock_raise_max_us={}",
            self.name,
            self.state,
            self.tablets,
            self.memtable_bytes,
            self.sstable_bytes,
            self.requests,
            self.writes,
            self.reads,
            self.scans,
            self.minor_compactions,
            self.merging_compactions,
            self.major_compactions,
            self.log_bytes,
            self.flushed_bytes,
            self.compacted_bytes,
            self.splits,
            self.stalls,
            self.memory_flushes,
            self.log_flushes,
            self.age_flushes,
            self.loads,
            self.unloads,
            self.recovery_bytes_read,
            self.recovered_entries,
            self.last_seq,
            self.clock_raised,
            self.clock_raise_max_us
        )
    }
}

/// One tablet a server serves, as the master balances and collects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServedTablet {
    /// The tablet's id.
    pub id: u64,
    /// Its table's id.
    pub table_id: u64,
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// End row (exclusive); None at the table's end.
    pub end: Option<Vec<u8>>,
    /// SSTable and memtable bytes.
    pub bytes: u64,
    /// Requests served since it was loaded.
    pub requests: u64,
    /// Whether every file it reads is its own (not shared with a split sibling).
    pub clean: bool,
    /// The numbers of the SSTables it reads.
    pub files: Vec<u64>,
    /// Bytes its requests wrote and read since it was loaded.
    pub traffic_bytes: u64,
    /// The row that halves its recent load, from a sample of the rows its
    /// requests touched (None: too few, or one row holds most of them).
    pub load_split: Option<Vec<u8>>,
}
