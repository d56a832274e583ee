//! `agentx-host capture`: the recording reverse proxy ([`crate::capture`]) in the foreground until
//! Ctrl-C or SIGTERM, then the corpus from its journal; `--finalize DIR` builds the corpus of a
//! capture that was killed, from the journal and settings it left.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;

use crate::capture::corpus::{CaptureManifest, CORPUS_FILE, MANIFEST_FILE};
use crate::capture::{CaptureConfig, CaptureSettings};
use crate::dataset::tokens::TokenCounter;

/// Arguments of `agentx-host capture`.
#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The endpoint to forward to: the server's base URL (`http://host:port`, or https), as a
    /// client would name it without the API path.
    #[arg(long, value_name = "URL", required_unless_present = "finalize")]
    pub upstream: Option<String>,
    /// The address agents connect to (point their base URL here).
    #[arg(long, default_value = "127.0.0.1:8089", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// The capture's directory: the journal (capture.jsonl), the corpus (traces.jsonl) and its
    /// manifest [default: captures/capture-<UTC time>].
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Count and key tokens with this tokenizer (a tokenizer.json, a directory holding one, or a
    /// cached Hugging Face model id) [default: one token per whitespace-separated word].
    #[arg(long, value_name = "SPEC")]
    pub tokenizer: Option<String>,
    /// Tokens per hash block (the public corpora's 64).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub block_size: u32,
    /// Keep the request bodies and reply text, in capture_text.jsonl beside the corpus (never in
    /// it). Off by default: the corpus holds counts, times and block ids only, and is shareable.
    #[arg(long)]
    pub keep_text: bool,
    /// Build the corpus of a capture directory from its journal (a capture that was killed), and
    /// serve nothing.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["upstream", "output"])]
    pub finalize: Option<PathBuf>,
}

/// Runs the capture (or finalizes one) and prints what the corpus holds.
pub fn main(args: &CaptureArgs) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.finalize {
        let settings = CaptureSettings::read(dir)?;
        let manifest = crate::capture::build_corpus(dir, &settings)?;
        print_manifest(dir, &manifest);
        return Ok(ExitCode::SUCCESS);
    }
    let Some(upstream) = &args.upstream else {
        bail!("--upstream URL is required: the endpoint the capture forwards to");
    };
    let upstream: hyper::Uri = upstream
        .parse()
        .ok()
        .filter(|uri: &hyper::Uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some()
        })
        .with_context(|| {
            format!("--upstream {upstream}: not an http(s) URL; give the server's base URL, e.g. http://127.0.0.1:8000")
        })?;
    let (counter, tokenizer_name) = match &args.tokenizer {
        None => (TokenCounter::Words, "words".to_string()),
        Some(spec) => {
            let source = crate::dataset::tokens::resolve_tokenizer(spec)
                .with_context(|| format!("--tokenizer {spec}"))?;
            let counter = source
                .counter()
                .with_context(|| format!("--tokenizer {spec}"))?;
            (counter, source.describe())
        }
    };
    let dir = args.output.clone().unwrap_or_else(|| {
        PathBuf::from("captures").join(format!(
            "capture-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        ))
    });
    let config = CaptureConfig {
        listen: args.listen,
        upstream,
        dir: dir.clone(),
        block_size: args.block_size,
        counter,
        tokenizer_name,
        keep_text: args.keep_text,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let shown = dir.clone();
    let manifest = runtime.block_on(async move {
        let capture = crate::capture::start(config.clone()).await?;
        errln!(
            "agentx-host capture: listening on http://{}, forwarding to {}; recording into {} \
             (Ctrl-C ends the capture and writes the corpus)",
            capture.addr(),
            config.upstream,
            dir.display()
        );
        until_signal().await;
        errln!("agentx-host capture: stopping; letting replies in flight end");
        anyhow::Ok(capture.finish().await?)
    })?;
    print_manifest(&shown, &manifest);
    Ok(ExitCode::SUCCESS)
}

/// Waits for Ctrl-C or SIGTERM.
async fn until_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn print_manifest(dir: &std::path::Path, manifest: &CaptureManifest) {
    outln!(
        "captured {} requests: {} traces, {} streams, {} requests in the corpus, {} broken",
        manifest.requests,
        manifest.traces,
        manifest.streams,
        manifest.corpus_requests,
        manifest.broken.len()
    );
    for (how, count) in &manifest.identified_by {
        outln!("  sessions by {how:<22} {count} requests");
    }
    outln!(
        "corpus {} (sha256 {}), manifest {}",
        dir.join(CORPUS_FILE).display(),
        manifest.corpus_sha256,
        dir.join(MANIFEST_FILE).display()
    );
}
