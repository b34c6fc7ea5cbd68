//! `bigtable-bench cluster --machines`: each daemon on a simulated machine
//! of its own (`testkit::machine`: a network namespace on a bridge and a
//! CPU cgroup with `--cpus-per-machine` cores), while SeaweedFS, etcd and
//! the bench stay on the host, listening on the bridge. Built with the
//! feature `bench-s3` (the launchers' crate); root only.

use anyhow::Result;
use std::process::Command;
use std::time::Duration;

/// The host's side: the bridge the machines hang on.
pub struct Net {
    #[cfg(feature = "bench-s3")]
    net: testkit::machine::Network,
}

/// One machine.
pub struct Machine {
    #[cfg(feature = "bench-s3")]
    m: testkit::machine::Machine,
}

impl Net {
    /// Makes the bridge on a free private /24.
    #[cfg(feature = "bench-s3")]
    pub fn create() -> Result<Net> {
        Ok(Net {
            net: testkit::machine::Network::create()
                .map_err(|e| anyhow::anyhow!("making the machines' network (root only): {e}"))?,
        })
    }

    #[cfg(not(feature = "bench-s3"))]
    pub fn create() -> Result<Net> {
        anyhow::bail!(
            "--machines needs the bench built with the launchers: \
             cargo build --release -p mountd --features bench-s3"
        )
    }

    /// The host's address on the bridge (where SeaweedFS and etcd listen).
    pub fn host_ip(&self) -> String {
        #[cfg(feature = "bench-s3")]
        return self.net.host_ip.clone();
        #[cfg(not(feature = "bench-s3"))]
        String::new()
    }

    /// Machine `index`, with `cpus` cores (None: no quota).
    pub fn machine(&self, index: u8, cpus: Option<f64>) -> Result<Machine> {
        #[cfg(feature = "bench-s3")]
        return Ok(Machine {
            m: testkit::machine::Machine::create(&self.net, index, cpus)
                .map_err(|e| anyhow::anyhow!("making machine {index}: {e}"))?,
        });
        #[cfg(not(feature = "bench-s3"))]
        {
            let _ = (index, cpus);
            anyhow::bail!("no machines in this build")
        }
    }
}

impl Machine {
    /// Its address.
    pub fn ip(&self) -> String {
        #[cfg(feature = "bench-s3")]
        return self.m.ip.clone();
        #[cfg(not(feature = "bench-s3"))]
        String::new()
    }

    /// Makes `cmd` start in the machine.
    pub fn enter(&self, cmd: &mut Command) -> Result<()> {
        #[cfg(feature = "bench-s3")]
        self.m.enter(cmd)?;
        let _ = cmd;
        Ok(())
    }

    /// CPU time its processes have used.
    pub fn cpu_used(&self) -> Duration {
        #[cfg(feature = "bench-s3")]
        return self.m.cpu_used();
        #[cfg(not(feature = "bench-s3"))]
        Duration::ZERO
    }
}
