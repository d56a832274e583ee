//! `agentx-host sim` in the foreground: the server on a runtime of its own, its banner, and a
//! clean shutdown on SIGINT or SIGTERM.

use agentx_record::errln;
use std::process::ExitCode;

use super::config::{SimConfig, Timing};

/// Run the server `config` describes in the foreground until interrupted (Ctrl-C or SIGTERM).
pub fn serve_foreground(config: SimConfig) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        let signals = Signals::register();
        let handle = match super::spawn(config) {
            Ok(h) => h,
            Err(e) => {
                errln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let config = handle.config();
        let timing = match &config.timing {
            Timing::Instant => "no delays".to_string(),
            Timing::Fixed { ttft, itl } => format!(
                "fixed ttft {} ms, itl {} ms",
                ttft.as_secs_f64() * 1e3,
                itl.as_secs_f64() * 1e3
            ),
            Timing::Modeled(m) => format!(
                "modelled: prefill {} tok/s, itl {} ms + {} ms/seq, speed x{}",
                m.prefill_tokens_per_s,
                m.itl_base.as_secs_f64() * 1e3,
                m.itl_per_seq.as_secs_f64() * 1e3,
                m.speed
            ),
        };
        errln!(
            "agentx-host sim: serving model `{}` at {} ({} engine(s), max-num-seqs {}, \
             max-model-len {}, cache {} tokens, {timing})",
            config.model,
            handle.url(),
            config.engines,
            config.max_num_seqs,
            config.max_model_len,
            config.cache_capacity_tokens
        );
        signals.wait().await;
        errln!("agentx-host sim: shutting down");
        handle.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Interrupt signals (SIGINT, SIGTERM), registered before the URL is announced so a supervisor
/// that signals as soon as it reads the URL is never lost.
struct Signals {
    #[cfg(unix)]
    streams: Vec<tokio::signal::unix::Signal>,
}

impl Signals {
    fn register() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                streams: [SignalKind::interrupt(), SignalKind::terminate()]
                    .into_iter()
                    .filter_map(|k| signal(k).ok())
                    .collect(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    async fn wait(self) {
        #[cfg(unix)]
        {
            let mut streams = self.streams;
            if let [int, term] = streams.as_mut_slice() {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                return;
            }
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
