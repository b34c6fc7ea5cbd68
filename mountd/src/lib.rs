//! Shared code of the bigtable binaries.

/// jemalloc serves every allocation of the daemon and the bench. Against
/// glibc's malloc, its per-thread caches take the allocations above 1 KiB
/// (a log record, a block's buffer) without a lock shared between threads,
/// and blocks freed on another thread than the one that read them go back
/// to their arena: unsynced writes through the engine ran 35–45% faster,
/// and glibc had to be held to one arena per CPU to stop block-cache churn
/// from faulting in fresh pages. `fs::memory::give_back` asks it to return
/// free pages after bursts.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub mod access;
pub mod certs;
pub mod daemon;
pub mod fusemount;
pub mod logfile;
pub mod mountopts;
pub mod private;
