//! `agentx-host capture`: a recording reverse proxy in front of an inference endpoint (OpenAI
//! chat, Anthropic Messages, OpenAI Responses). Requests go upstream as they came and replies come
//! back frame by frame as they arrive; each recorded request leaves a journal line
//! ([`journal`]) when its reply ends, and the corpus ([`corpus`]) is built from the journal: a
//! weka `traces.jsonl` whose block ids come from the real token stream, chained so equal prefixes
//! share ids, with sessions and subagents from the agents' own headers ([`session`]). No text is
//! stored unless asked.
//!
//! Layers: [`wire`] reads requests, [`reply`] reads replies as they pass, [`session`] places a
//! request in its session, [`proxy`] forwards and taps, [`journal`] and [`corpus`] write.

#![forbid(unsafe_code)]

pub mod corpus;
pub mod journal;
mod proxy;
pub mod reply;
pub mod session;
pub mod wire;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentx_tokens::TokenCounter;
use hyper::Uri;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{mpsc, watch};

/// What a capture runs with.
#[derive(Clone)]
pub struct CaptureConfig {
    /// Where it listens (port 0: any free port).
    pub listen: SocketAddr,
    /// The endpoint requests go to (`http://host:port`, optionally with a base path).
    pub upstream: Uri,
    /// The capture's directory (journal, corpus, manifest).
    pub dir: PathBuf,
    /// Tokens per hash block.
    pub block_size: u32,
    /// What counts and keys tokens.
    pub counter: TokenCounter,
    /// The tokenizer as the manifest names it.
    pub tokenizer_name: String,
    /// Keep the request and reply text (beside the corpus, never in it).
    pub keep_text: bool,
}

/// The settings a capture records at its start (`capture_settings.json`), so that the corpus of a
/// killed capture is built as the capture would have built it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CaptureSettings {
    /// The upstream's scheme, host and port.
    pub upstream: String,
    /// Tokens per hash block.
    pub block_size: u32,
    /// What counted and keyed the tokens.
    pub tokenizer: String,
    /// Whether text is kept.
    pub keep_text: bool,
}

/// The settings' file name in a capture directory.
pub const SETTINGS_FILE: &str = "capture_settings.json";

impl CaptureSettings {
    /// The settings of `config`.
    pub fn of(config: &CaptureConfig) -> CaptureSettings {
        CaptureSettings {
            upstream: upstream_name(&config.upstream),
            block_size: config.block_size,
            tokenizer: config.tokenizer_name.clone(),
            keep_text: config.keep_text,
        }
    }

    /// The settings a capture in `dir` recorded.
    pub fn read(dir: &Path) -> Result<CaptureSettings, CaptureError> {
        let path = dir.join(SETTINGS_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| CaptureError::NotACapture {
            path: path.clone(),
            reason: source.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|error| CaptureError::NotACapture {
            path,
            reason: error.to_string(),
        })
    }

    fn write(&self, dir: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_vec_pretty(self)?;
        text.push(b'\n');
        std::fs::write(dir.join(SETTINGS_FILE), text)
    }
}

/// Why a capture could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}; pass another --listen address")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The capture directory or a file in it could not be written.
    #[error("cannot write the capture in {dir}: {source}")]
    Write {
        /// The directory.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A directory without a capture's settings.
    #[error("{path}: {reason}; name a directory `agentx-host capture` wrote (it holds capture_settings.json and capture.jsonl)")]
    NotACapture {
        /// The settings file looked for.
        path: PathBuf,
        /// Why it could not be read.
        reason: String,
    },
    /// The journal could not be read back.
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
}

/// A running capture.
pub struct Capture {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
    config: CaptureConfig,
}

impl Capture {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets the replies in flight end, and writes the corpus from the journal.
    pub async fn finish(self) -> Result<corpus::CaptureManifest, CaptureError> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        // Every line sent so far is written; a connection still open past the grace keeps its
        // sender, so the writer is waited for only that long.
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.writer).await;
        build_corpus(&self.config.dir, &CaptureSettings::of(&self.config))
    }
}

/// The manifest's name of an upstream: its scheme, host and port only.
fn upstream_name(upstream: &Uri) -> String {
    format!(
        "{}://{}",
        upstream.scheme_str().unwrap_or("http"),
        upstream
            .authority()
            .map_or("", |a| a.as_str().rsplit('@').next().unwrap_or(""))
    )
}

/// Writes the corpus of the capture in `dir` from its journal (also for a killed capture).
pub fn build_corpus(
    dir: &Path,
    settings: &CaptureSettings,
) -> Result<corpus::CaptureManifest, CaptureError> {
    let (requests, torn) = journal::read(dir)?;
    let options = corpus::CorpusOptions {
        block_size: settings.block_size,
        upstream: &settings.upstream,
        tokenizer: &settings.tokenizer,
        keep_text: settings.keep_text,
    };
    corpus::write(dir, &requests, torn, &options).map_err(|source| CaptureError::Write {
        dir: dir.to_owned(),
        source,
    })
}

/// Starts a capture on the current tokio runtime: creates its directory and journal, binds, and
/// serves until [`Capture::finish`].
pub async fn start(config: CaptureConfig) -> Result<Capture, CaptureError> {
    let write_error = |source| CaptureError::Write {
        dir: config.dir.clone(),
        source,
    };
    std::fs::create_dir_all(&config.dir).map_err(write_error)?;
    CaptureSettings::of(&config)
        .write(&config.dir)
        .map_err(write_error)?;
    let mut journal = journal::JournalWriter::open(&config.dir).map_err(write_error)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| CaptureError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| CaptureError::Bind {
        addr: config.listen,
        source,
    })?;
    let (lines, mut received) = mpsc::unbounded_channel();
    let writer = tokio::spawn(async move {
        while let Some(line) = received.recv().await {
            if let Err(error) = journal.append(&line) {
                tracing::error!("the capture journal could not be written: {error}");
            }
        }
    });
    let proxy = Arc::new(proxy::Proxy::new(config.clone(), lines));
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(serve(listener, proxy, stopped));
    Ok(Capture {
        addr,
        stop,
        task,
        writer,
        config,
    })
}

/// Accepts connections until told to stop, then lets them finish.
async fn serve(
    listener: tokio::net::TcpListener,
    proxy: Arc<proxy::Proxy>,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    loop {
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let proxy = proxy.clone();
                let service = hyper::service::service_fn(move |request| {
                    proxy::handle(proxy.clone(), request)
                });
                let connection = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    let _ = connection.await;
                });
            }
        }
    }
    drop(listener);
    drop(proxy);
    // A client that holds a reply open past the grace gives up its connection.
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {}
    }
}

/// How long a stopping capture waits for the replies in flight.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
