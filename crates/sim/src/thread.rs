//! The simulator on a thread of its own: [`SimThread`] runs a server on a dedicated thread with a
//! current-thread tokio runtime, so a client in the same process (the demo run, the benches) shares
//! no runtime workers with it, and the server's CPU time is exactly that thread's.

use std::net::SocketAddr;

use tokio::sync::{mpsc, oneshot};

use super::{spawn, SimConfig, SimError};

/// A running simulator on its own thread. Dropping it stops the server and joins the thread.
pub struct SimThread {
    addr: SocketAddr,
    model: String,
    block_size: u32,
    cpu_tx: mpsc::UnboundedSender<std::sync::mpsc::Sender<Option<f64>>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SimThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimThread")
            .field("addr", &self.addr)
            .finish()
    }
}

impl SimThread {
    /// Starts a server for `config` on a new thread named `agentx-sim` and waits until it listens.
    pub fn start(config: SimConfig) -> Result<SimThread, SimError> {
        let model = config.model.clone();
        let block_size = config.block_size;
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (cpu_tx, mut cpu_rx) = mpsc::unbounded_channel::<std::sync::mpsc::Sender<_>>();
        let thread = std::thread::Builder::new()
            .name("agentx-sim".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = addr_tx.send(Err(SimError::Thread(e.to_string())));
                        return;
                    }
                };
                rt.block_on(async move {
                    let handle = match spawn(config) {
                        Ok(handle) => handle,
                        Err(e) => {
                            let _ = addr_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = addr_tx.send(Ok(handle.addr()));
                    let serve_cpu = async {
                        while let Some(reply) = cpu_rx.recv().await {
                            let _ = reply.send(this_thread_cpu_seconds());
                        }
                    };
                    tokio::select! {
                        _ = stop_rx => {}
                        () = serve_cpu => {}
                    }
                    handle.shutdown().await;
                });
            })
            .map_err(|e| SimError::Thread(e.to_string()))?;
        let addr = addr_rx
            .recv()
            .map_err(|_| SimError::Thread("it ended before the server listened".into()))??;
        Ok(SimThread {
            addr,
            model,
            block_size,
            cpu_tx,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The model name the server answers to.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Tokens per block of its prefix cache.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// CPU seconds the server's thread has run so far (from `/proc/thread-self/schedstat`); `None`
    /// where the system does not say.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.cpu_tx.send(tx).ok()?;
        rx.recv().ok()?
    }
}

impl Drop for SimThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The calling thread's time on a CPU, user and system: the first field of its schedstat, in ns.
fn this_thread_cpu_seconds() -> Option<f64> {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let cpu_ns: u64 = schedstat.split_whitespace().next()?.parse().ok()?;
    Some(cpu_ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_http_and_counts_its_cpu() {
        let sim = SimThread::start(SimConfig::max()).unwrap();
        let c0 = sim.cpu_seconds();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let status = rt.block_on(async {
            let stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
            let (mut tx, conn) = hyper::client::conn::http1::handshake::<
                _,
                http_body_util::Empty<bytes::Bytes>,
            >(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
            tokio::spawn(conn);
            let req = hyper::Request::get("/health")
                .header("host", "sim")
                .body(http_body_util::Empty::new())
                .unwrap();
            tx.send_request(req).await.unwrap().status()
        });
        assert_eq!(status, 200);
        let c1 = sim.cpu_seconds();
        if let (Some(a), Some(b)) = (c0, c1) {
            assert!(b > a, "the server thread ran: {a} -> {b}");
        }
        assert!(sim.url().starts_with("http://127.0.0.1:"));
    }
}
