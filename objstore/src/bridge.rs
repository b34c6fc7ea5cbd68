//! The engine calls the file layer from ordinary threads, some of which may
//! themselves run inside a tokio runtime (the gRPC server's). Requests go to
//! this crate's own runtime and the caller waits on a channel, which works
//! from any thread, where `block_on` would panic inside a runtime.

use std::future::Future;

/// A small runtime of its own for the object store's requests.
pub(crate) struct Bridge {
    rt: tokio::runtime::Runtime,
}

impl Bridge {
    pub(crate) fn new() -> std::io::Result<Bridge> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("objstore")
            .enable_all()
            .build()?;
        Ok(Bridge { rt })
    }

    /// Runs `f` on the store's runtime and waits for its result.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        f: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.rt.spawn(async move {
            let _ = tx.send(f.await);
        });
        // A closed channel means the runtime is shutting down.
        rx.recv().ok()
    }
}
