//! What several test modules share: fixture paths and a simulator serving on its own runtime.

use std::path::{Path, PathBuf};

use agentx::sim::{self, SimConfig, SimHandle};

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// A simulator on its own runtime, serving while the test thread waits on the binary.
pub struct Sim {
    rt: tokio::runtime::Runtime,
    handle: Option<SimHandle>,
}

impl Sim {
    pub fn start(cfg: SimConfig) -> Sim {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.block_on(async { sim::spawn(cfg).unwrap() });
        Sim {
            rt,
            handle: Some(handle),
        }
    }

    pub fn url(&self) -> String {
        self.handle.as_ref().unwrap().url()
    }

    /// Chat completion requests received so far.
    pub fn requests(&self) -> u64 {
        self.handle.as_ref().unwrap().chat_requests()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
    }
}
