//! Health of the cluster, as numbers ([`ClusterHealth`]) and as the status
//! lines shown in the mount's `.bigtable/` directory.

use super::repair::endangered;
pub use super::scrub::ScrubHealth;
use super::server::Health;
use super::Inner;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// One chunkserver's state.
#[derive(Clone, Debug)]
pub struct ServerHealth {
    /// Its index in [`crate::ClusterOptions::chunkserver_dirs`].
    pub id: usize,
    /// Its directory.
    pub dir: PathBuf,
    /// "healthy", "full: why" or "failed: why".
    pub state: String,
    /// Chunk replicas it holds.
    pub replicas: usize,
    /// Bytes in those replicas.
    pub bytes: u64,
    /// Free space on its disk (`None`: statvfs failed).
    pub free_bytes: Option<u64>,
    /// Replica reads so far.
    pub reads: u64,
    /// Bytes read so far.
    pub read_bytes: u64,
    /// Replica writes so far.
    pub writes: u64,
    /// Bytes written so far.
    pub write_bytes: u64,
    /// Reads that failed.
    pub read_errors: u64,
    /// Writes that failed.
    pub write_errors: u64,
    /// Corrupt replicas found on this server (by reads or scrubs).
    pub corrupt: u64,
}

/// The cluster's state.
#[derive(Clone, Debug)]
pub struct ClusterHealth {
    /// Each chunkserver, in order.
    pub servers: Vec<ServerHealth>,
    /// Replicas per chunk wanted.
    pub replication: usize,
    /// Files in the namespace (deleted ones awaiting collection not counted).
    pub files: usize,
    /// Chunks the master tracks, deleted files' included until purged.
    pub chunks: usize,
    /// Chunks with fewer live replicas than the replication factor.
    pub under_replicated: usize,
    /// Chunks with no live replica at all.
    pub lost: usize,
    /// Chunks waiting for re-replication in the current pass.
    pub repair_queue: u64,
    /// The chunks being copied now: (handle, bytes copied, bytes to copy).
    pub repairing: Vec<(u64, u64, u64)>,
    /// Chunks in the current (or last) re-replication round, and how many
    /// of them are done.
    pub repair_round: (u64, u64),
    /// Replicas reported bad and not yet dropped.
    pub pending_reports: usize,
    /// Chunks re-replicated since start.
    pub repaired: u64,
    /// Bytes copied by re-replication since start.
    pub repair_bytes: u64,
    /// Re-replications that failed (retried in a later round).
    pub repair_failures: u64,
    /// Corrupt replicas found, by reads, scans and scrubs.
    pub corruptions_detected: u64,
    /// Replicas deleted for holding an old version of their chunk.
    pub stale_replicas_deleted: u64,
    /// Replicas deleted that belong to no chunk the master knows.
    pub orphans_deleted: u64,
    /// Replicas taken out of their chunk's locations (failed or bad).
    pub replicas_dropped: u64,
    /// Deleted files reclaimed after their delay.
    pub files_purged: u64,
    /// Chunk versions raised so that replicas that missed a write show as stale.
    pub version_bumps: u64,
    /// Reads that failed on one replica and went on to another.
    pub read_retries: u64,
    /// Writes that lost a replica and went on with the others.
    pub write_failovers: u64,
    /// The background scrub's progress.
    pub scrub: ScrubHealth,
}

impl ClusterHealth {
    /// "ok", "degraded" (a server down or full, or chunks under-replicated)
    /// or "critical" (some chunk has no live replica).
    pub fn state(&self) -> &'static str {
        if self.lost > 0 {
            "critical"
        } else if self.under_replicated > 0
            || self.pending_reports > 0
            || self.servers.iter().any(|s| s.state != "healthy")
        {
            "degraded"
        } else {
            "ok"
        }
    }
}

pub(crate) fn health(inner: &Inner) -> ClusterHealth {
    let (todo, lost) = endangered(inner);
    let (files, chunks) = {
        let st = inner.master.state.lock();
        (st.names.len(), st.chunks.len())
    };
    let c = &inner.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let servers = inner
        .servers
        .iter()
        .map(|s| {
            let st = &s.gate.stats;
            ServerHealth {
                id: s.id,
                dir: s.dir.clone(),
                state: match s.health() {
                    _ if s.gate.is_offline() => "failed: offline".to_string(),
                    Health::Healthy => "healthy".to_string(),
                    Health::Full(w) => format!("full: {w}"),
                    Health::Failed(w) => format!("failed: {w}"),
                },
                replicas: s.replica_count(),
                bytes: s.bytes(),
                free_bytes: s.free(),
                reads: get(&st.reads),
                read_bytes: get(&st.read_bytes),
                writes: get(&st.writes),
                write_bytes: get(&st.write_bytes),
                read_errors: get(&st.read_errors),
                write_errors: get(&st.write_errors),
                corrupt: get(&st.corrupt),
            }
        })
        .collect();
    let (repairing, repair_round) = {
        let p = inner.repairs.copying();
        (
            p.active.iter().map(|(h, (d, t))| (*h, *d, *t)).collect(),
            (p.round_done, p.round_chunks),
        )
    };
    ClusterHealth {
        servers,
        replication: inner.replication,
        files,
        chunks,
        under_replicated: todo.len(),
        lost,
        repair_queue: get(&c.repair_queue),
        repairing,
        repair_round,
        pending_reports: inner.repairs.pending_reports(),
        repaired: get(&c.repaired),
        repair_bytes: get(&c.repair_bytes),
        repair_failures: get(&c.repair_failures),
        corruptions_detected: get(&c.corruptions),
        stale_replicas_deleted: get(&c.stale_deleted),
        orphans_deleted: get(&c.orphans_deleted),
        replicas_dropped: get(&c.replicas_dropped),
        files_purged: get(&c.files_purged),
        version_bumps: get(&c.version_bumps),
        read_retries: get(&c.read_retries),
        write_failovers: get(&c.write_failovers),
        scrub: inner.scrub.progress(),
    }
}

pub(crate) fn status_lines(inner: &Inner) -> Vec<String> {
    let h = health(inner);
    let up = h.servers.iter().filter(|s| s.state == "healthy").count();
    let (lsn, log_bytes, generation) = inner.master.log_position();
    let rec = &inner.master.recovery;
    let mut out = vec![
        format!(
            "gfs: state={} chunkservers={up}/{} replication={} chunk_size={} files={} chunks={} under_replicated={} lost={} io={}",
            h.state(),
            h.servers.len(),
            h.replication,
            inner.opts.chunk_size,
            h.files,
            h.chunks,
            h.under_replicated,
            h.lost,
            inner.io.mode()
        ),
        format!(
            "gfs master: dir={} copies={} copies_ok={} generation={generation} log_records={lsn} log_bytes={log_bytes} recovered_from_checkpoint={} recovered_from_copy={} copies_recreated={} replayed_records={} torn_tail_bytes={}",
            inner.opts.master_dir.display(),
            inner.master.mirrors.copies.len(),
            inner.master.mirrors.live(),
            rec.checkpoint,
            rec.from_copy,
            rec.recreated,
            rec.replayed,
            rec.torn_bytes
        ),
    ];
    out.extend(inner.master.mirrors.status_lines());
    for s in &h.servers {
        let free = s
            .free_bytes
            .map_or_else(|| "?".to_string(), |f| f.to_string());
        out.push(format!(
            "gfs chunkserver {}: dir={} state={} replicas={} bytes={} free={free} reads={} read_bytes={} writes={} write_bytes={} read_errors={} write_errors={} corrupt={}",
            s.id,
            s.dir.display(),
            s.state.replace(' ', "_"),
            s.replicas,
            s.bytes,
            s.reads,
            s.read_bytes,
            s.writes,
            s.write_bytes,
            s.read_errors,
            s.write_errors,
            s.corrupt
        ));
    }
    let io = inner.io.stats();
    let copying = if h.repairing.is_empty() {
        "-".to_string()
    } else {
        let hs: Vec<String> = h
            .repairing
            .iter()
            .map(|c| format!("{:016x}", c.0))
            .collect();
        hs.join(",")
    };
    out.push(format!(
        "gfs repair: queue={} copying={copying} round_done={} round_chunks={} parallel={} rate={} pending_reports={} repaired={} copied_bytes={} failures={} corruptions_detected={} stale_deleted={} orphans_deleted={} dropped={} purged_files={} version_bumps={} read_retries={} write_failovers={}",
        h.repair_queue,
        h.repair_round.0,
        h.repair_round.1,
        inner.opts.repair_parallel.max(1),
        inner.repairs.rate(),
        h.pending_reports,
        h.repaired,
        h.repair_bytes,
        h.repair_failures,
        h.corruptions_detected,
        h.stale_replicas_deleted,
        h.orphans_deleted,
        h.replicas_dropped,
        h.files_purged,
        h.version_bumps,
        h.read_retries,
        h.write_failovers
    ));
    for (c, done, total) in &h.repairing {
        out.push(format!(
            "gfs copying: chunk={c:016x} copied_bytes={done} chunk_bytes={total}"
        ));
    }
    let s = &h.scrub;
    out.push(format!(
        "gfs scrub: state={} rate={} pass={} scanned={} total={} pass_bytes={} corruptions={} repaired={} last_pass_end={} last_pass_secs={:.3} last_pass_bytes={}",
        s.state,
        inner.scrub.rate(),
        s.pass,
        s.scanned,
        s.total,
        s.bytes,
        s.corruptions,
        s.repaired,
        s.last_pass_end.map_or_else(|| "-".to_string(), utc),
        s.last_pass_secs,
        s.last_pass_bytes
    ));
    out.push(format!(
        "gfs io: mode={} open_replica_files={} uring_batches={} uring_ops={} syscall_ops={}",
        inner.io.mode(),
        inner.servers.first().map_or(0, |s| s.gate.fds.open_count()),
        io.uring_batches,
        io.uring_ops,
        io.syscall_ops
    ));
    out
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc(1_795_470_245), "2026-11-23T21:44:05Z");
    }
}
