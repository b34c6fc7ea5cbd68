//! Workers for requests that wait on the commit log.
//!
//! A FUSE thread that handles `close` waits in the commit until the log
//! write lands; meanwhile it reads no requests. So fsyncs, and closes
//! beyond the one a FUSE thread may commit itself while another stays free
//! (an unsynced commit is quicker than a hand-off), run here instead: the few
//! FUSE threads stay free to read, and many fsyncs in flight share one group
//! commit. The kernel sends
//! a file's RELEASE only after its FLUSH is answered, so running them on
//! different workers keeps their order.

use crossbeam_channel::{Receiver, Sender};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of worker threads fed by a channel.
pub struct Pool {
    tx: Option<Sender<Job>>,
}

impl Pool {
    /// Starts `n` commit workers; with none, jobs run on the caller's thread.
    pub fn new(n: usize) -> Pool {
        Pool::named("bt-commit", n)
    }

    /// Starts `n` workers named `name-<i>`; with none, jobs run on the
    /// caller's thread.
    pub fn named(name: &str, n: usize) -> Pool {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let mut started = 0;
        for i in 0..n {
            let rx: Receiver<Job> = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => log::error!("cannot start worker {name}-{i}: {e}"),
            }
        }
        Pool {
            // With no worker, jobs run on the caller's thread.
            tx: (started > 0).then_some(tx),
        }
    }

    /// Runs `job` on a worker (or here, if there is none).
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        match &self.tx {
            Some(tx) => {
                if let Err(e) = tx.send(Box::new(job)) {
                    (e.into_inner())();
                }
            }
            None => job(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn without_workers_jobs_run_inline() {
        let pool = Pool::new(0);
        let here = std::thread::current().id();
        let ran = Arc::new(std::sync::Mutex::new(None));
        let r = ran.clone();
        pool.run(move || *r.lock().unwrap() = Some(std::thread::current().id()));
        assert_eq!(*ran.lock().unwrap(), Some(here));
    }

    #[test]
    fn runs_every_job() {
        let pool = Pool::new(3);
        let n = Arc::new(AtomicUsize::new(0));
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        for _ in 0..50 {
            let (n, done_tx) = (n.clone(), done_tx.clone());
            pool.run(move || {
                n.fetch_add(1, Ordering::SeqCst);
                let _ = done_tx.send(());
            });
        }
        for _ in 0..50 {
            done_rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .unwrap();
        }
        assert_eq!(n.load(Ordering::SeqCst), 50);
    }
}
