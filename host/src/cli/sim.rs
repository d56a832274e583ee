//! The `agentx-host sim` flags: their syntax, and the simulator configuration they describe.
//!
//! Flags only override the chosen preset: every value left unset keeps the preset's. Syntax is
//! checked by clap; combinations and ranges by `SimArgs::to_config` and
//! [`SimConfig::validate`], each error naming the flag.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use crate::sim::{
    Eviction, GpuModel, MetricNames, Preset, Router, SimConfig, Timing, MAX_GPU_WATTS,
};

/// `--speed`: a time factor or `max` (no delays).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Speed {
    Factor(f64),
    Max,
}

fn parse_speed(text: &str) -> Result<Speed, String> {
    if text == "max" {
        return Ok(Speed::Max);
    }
    match text.parse::<f64>() {
        Ok(factor) if factor.is_finite() && factor > 0.0 => Ok(Speed::Factor(factor)),
        _ => Err(format!(
            "`{text}` is not a speed; use a positive factor such as 2 (twice as fast) or `max`"
        )),
    }
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(fraction) if (0.0..=1.0).contains(&fraction) => Ok(fraction),
        _ => Err(format!(
            "`{text}` is not a fraction; use a number from 0 to 1 such as 0.05"
        )),
    }
}

fn parse_ms(text: &str) -> Result<Duration, String> {
    // `try_from_secs_f64`: a huge value is an error, not a panic.
    match text
        .parse::<f64>()
        .map(|ms| (ms, Duration::try_from_secs_f64(ms / 1e3)))
    {
        Ok((ms, Ok(duration))) if ms >= 0.0 => Ok(duration),
        _ => Err(format!(
            "`{text}` is not a duration; use milliseconds such as 50 or 0.5"
        )),
    }
}

/// `--gpu-power IDLE,PER_SEQ`: two numbers of watts.
fn parse_gpu_power(text: &str) -> Result<(f64, f64), String> {
    let watts: Vec<Option<f64>> = text
        .split(',')
        .map(|part| {
            part.trim()
                .parse::<f64>()
                .ok()
                .filter(|w| w.is_finite() && (0.0..=MAX_GPU_WATTS).contains(w))
        })
        .collect();
    match watts[..] {
        [Some(idle), Some(per_seq)] => Ok((idle, per_seq)),
        _ => Err(format!(
            "`{text}` is not IDLE,PER_SEQ: give two numbers of watts from 0 to {MAX_GPU_WATTS}, \
             such as 100,50 (100 W idle, 50 W more per running request)"
        )),
    }
}

/// Run a simulated OpenAI-compatible inference server (vLLM-like) in the foreground.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: IpAddr,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub(crate) port: u16,
    /// Starting profile: h200 (a ~30B model on one H200), cpu-small (a small model on a CPU) or
    /// max (no delays).
    #[arg(long, default_value = "h200", value_parser = |s: &str| s.parse::<Preset>())]
    pub(crate) preset: Preset,
    /// Time factor of the modelled timing (2 = twice as fast), or `max` for no delays at all.
    #[arg(long, value_parser = parse_speed)]
    pub(crate) speed: Option<Speed>,
    /// Fixed time to first token in ms, counted from the request's arrival: every request, no
    /// queueing or cache effects.
    #[arg(long, value_parser = parse_ms)]
    pub(crate) ttft_ms: Option<Duration>,
    /// Fixed inter-token latency in ms (with or without --ttft-ms).
    #[arg(long, value_parser = parse_ms)]
    pub(crate) itl_ms: Option<Duration>,
    /// Model name served by /v1/models and echoed when a request names none.
    #[arg(long, alias = "model")]
    pub(crate) served_model_name: Option<String>,
    /// Answer requests for any other model name with vLLM's 404.
    #[arg(long)]
    pub(crate) strict_model: bool,
    /// Context length (prompt plus requested output tokens).
    #[arg(long)]
    pub(crate) max_model_len: Option<u64>,
    /// Tokens per prefix-cache block.
    #[arg(long)]
    pub(crate) block_size: Option<u32>,
    /// Prefix-cache and KV capacity per engine, in tokens (0 disables prefix caching).
    #[arg(long)]
    pub(crate) cache_tokens: Option<u64>,
    /// Sequences running at once per engine; more requests wait in a queue.
    #[arg(long)]
    pub(crate) max_num_seqs: Option<u32>,
    /// Data-parallel engines behind the port, each with its own `engine` metrics label.
    #[arg(long)]
    pub(crate) engines: Option<u32>,
    /// Which engine runs each request: any-header (the first session header agentx or the harness
    /// sends, X-Correlation-ID included, pins a stream), session (only --router-header pins a
    /// session, and a child session starts on its parent's engine; requests without the header go
    /// round-robin and are counted), round-robin (headers ignored) or least-loaded (the fewest
    /// requests running and waiting).
    #[arg(long, default_value = "any-header", value_name = "ROUTER", value_parser = |s: &str| s.parse::<Router>())]
    pub(crate) router: Router,
    /// The session header --router session keys on [default: x-dynamo-session-id].
    #[arg(long, value_name = "NAME")]
    pub(crate) router_header: Option<String>,
    /// The header naming a session's parent session, for --router session [default:
    /// x-dynamo-parent-session-id].
    #[arg(long, value_name = "NAME")]
    pub(crate) router_parent_header: Option<String>,
    /// Prefix-cache policy: tail-first (least recently used first, a prompt's tail before its head;
    /// --cache-tokens also bounds the KV that admission waits for) or lru (the cache model's
    /// definition of the same eviction, with admission bounded by max(--cache-tokens, max_num_seqs ×
    /// max_model_len), so a small cache does not reorder admission).
    #[arg(long, default_value = "tail-first", value_name = "POLICY", value_parser = |s: &str| s.parse::<Eviction>())]
    pub(crate) eviction: Eviction,
    /// Prefill throughput in tokens per second (modelled timing).
    #[arg(long)]
    pub(crate) prefill_tps: Option<f64>,
    /// Decode step time with one running sequence, in ms (modelled timing).
    #[arg(long, value_parser = parse_ms)]
    pub(crate) itl_base_ms: Option<Duration>,
    /// Extra decode step time per additional running sequence, in ms (modelled timing).
    #[arg(long, value_parser = parse_ms)]
    pub(crate) itl_per_seq_ms: Option<Duration>,
    /// Typical output length when `ignore_eos` is not set (outputs stop in [n/2, 3n/2]).
    #[arg(long)]
    pub(crate) output_tokens: Option<u32>,
    /// Tokens per streamed content chunk.
    #[arg(long)]
    pub(crate) tokens_per_chunk: Option<u32>,
    /// Reasoning tokens streamed before the content of every streamed reply (chat's
    /// `delta.reasoning_content`, an Anthropic `thinking` block, a Responses `reasoning` item),
    /// reported in the usage; they count toward `max_tokens`.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) reasoning_tokens: u32,
    /// Fraction of streamed replies that end with one tool call (chosen by --fault-seed and the
    /// request): the first tool of the request's `tools`, else `read_file`, its arguments streamed
    /// in pieces.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) tool_call_rate: f64,
    /// Seed of the generated text.
    #[arg(long = "random-seed", alias = "seed", value_name = "SEED")]
    pub(crate) seed: Option<u64>,
    /// Largest accepted request body in bytes (larger ones get 413).
    #[arg(long)]
    pub(crate) max_body_bytes: Option<usize>,
    /// Count prompt tokens exactly with this Hugging Face tokenizer.json (default: one token per
    /// word, as agentx's tokenizer-free prompt synthesis writes them).
    #[arg(long, value_name = "TOKENIZER_JSON")]
    pub(crate) tokenizer: Option<std::path::PathBuf>,
    /// Seed of every injected fault.
    #[arg(long, default_value_t = 0)]
    pub(crate) fault_seed: u64,
    /// Fraction of requests answered 500 or 503.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) fail_rate: f64,
    /// Fraction of responses whose connection is cut mid-stream.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) reset_rate: f64,
    /// Length of an injected stream stall, in ms.
    #[arg(long, value_parser = parse_ms)]
    pub(crate) stall_ms: Option<Duration>,
    /// Fraction of streams that stall once for --stall-ms.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) stall_rate: f64,
    /// Fraction of streams carrying one malformed SSE event.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) malformed_rate: f64,
    /// Fraction of streams that end cleanly mid-answer without the API's end marker (`data:
    /// [DONE]`, `message_stop`, `response.completed`).
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) truncate_rate: f64,
    /// Fraction of streams that end mid-answer with the API's error event (an `{"error"}` chunk,
    /// Anthropic's `error`, the Responses API's `response.failed`).
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) stream_error_rate: f64,
    /// Fraction of tool calls (--tool-call-rate) whose arguments are not valid JSON (the object
    /// never closes).
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub(crate) malformed_tool_call_rate: f64,
    /// Stop accepting connections after this many chat completion requests.
    #[arg(long)]
    pub(crate) stop_after: Option<u64>,
    /// The engine dies at this chat request (1 = the first): it closes every connection, cutting
    /// the streams in flight, and refuses new ones for the rest of its life (a crashed engine).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) die_at_request: Option<u64>,
    /// Close a connection that has been idle this many seconds (30, hyper's default; uvicorn, under
    /// vLLM, closes after 5 s, llama.cpp after 5 s).
    #[arg(
        long = "http-keepalive-timeout",
        alias = "keep-alive-timeout",
        value_name = "SECONDS"
    )]
    pub(crate) keep_alive_timeout: Option<f64>,
    /// Close a connection after this many requests on it (llama.cpp: 100).
    #[arg(long, value_name = "N")]
    pub(crate) keep_alive_max: Option<u32>,
    /// Announce the two above in a `Keep-Alive: timeout=T, max=N` header on every response, as
    /// llama.cpp does (vLLM announces nothing).
    #[arg(long)]
    pub(crate) keep_alive_header: bool,
    /// Write one JSON line per chat completion request to FILE as it arrives: its arrival time,
    /// identity and routing headers, model, token limits, stream options, prompt tokens as counted
    /// here, each message's role and tokens, the cache-bust marker and a digest of the messages
    /// (bench/differential.sh compares two clients' logs).
    #[arg(long, value_name = "FILE")]
    pub(crate) record_requests: Option<std::path::PathBuf>,
    /// Hold a streamed answer's headers until its first token is due and send the two together,
    /// so the `x-agentx-sim-response-start-ns` stamp is when the first token actually went out
    /// (the simulator's own timer and scheduling delays on its side of the stamp). By default,
    /// as vLLM does, headers go out once the request is admitted.
    #[arg(long)]
    pub(crate) headers_at_first_token: bool,
    /// Whose Prometheus names `/metrics` speaks: vllm, sglang, trtllm or atom. The counters are
    /// the same simulated prompt, generated and cached tokens, requests and KV usage, under each
    /// engine's own names, labels and `_total` spellings.
    #[arg(long, default_value = "vllm", value_name = "FAMILY", value_parser = |s: &str| s.parse::<MetricNames>())]
    pub(crate) metric_names: MetricNames,
    /// Give each engine a simulated GPU drawing IDLE watts plus PER_SEQ watts per running request
    /// (e.g. 100,50), served as NVIDIA's dcgm-exporter serves it at /dcgm/metrics (for
    /// `--gpu-telemetry http://HOST:PORT/dcgm`).
    #[arg(long, value_name = "IDLE,PER_SEQ", value_parser = parse_gpu_power)]
    pub(crate) gpu_power: Option<(f64, f64)>,
    /// Leave the GPUs' energy counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) off /dcgm/metrics, as
    /// an exporter without it, so a reader integrates the power.
    #[arg(long, requires = "gpu_power")]
    pub(crate) no_energy_counter: bool,
}

impl SimArgs {
    /// The configuration these flags describe.
    pub(crate) fn to_config(&self) -> Result<SimConfig, String> {
        let mut config = SimConfig::preset(self.preset);
        config.listen = SocketAddr::new(self.host, self.port);
        if let Some(model) = &self.served_model_name {
            config.model.clone_from(model);
        }
        config.strict_model = self.strict_model;
        config.record_requests.clone_from(&self.record_requests);
        if let Some(path) = &self.tokenizer {
            config.tokenizer = crate::dataset::tokens::TokenCounter::from_file(path)
                .map_err(|e| format!("--tokenizer: {e}"))?;
        }
        macro_rules! set {
            ($($flag:ident => $field:ident),*) => {$(
                if let Some(value) = self.$flag { config.$field = value; }
            )*};
        }
        set!(max_model_len => max_model_len, block_size => block_size,
             cache_tokens => cache_capacity_tokens, max_num_seqs => max_num_seqs, engines => engines, output_tokens => natural_output_tokens,
             tokens_per_chunk => tokens_per_chunk, seed => seed, max_body_bytes => max_body_bytes);

        let modeled_flags = self.prefill_tps.is_some()
            || self.itl_base_ms.is_some()
            || self.itl_per_seq_ms.is_some();
        if self.ttft_ms.is_some() || self.itl_ms.is_some() {
            if self.speed.is_some() || modeled_flags {
                return Err(
                    "--ttft-ms/--itl-ms set fixed timing and cannot be combined with \
                            --speed, --prefill-tps, --itl-base-ms or --itl-per-seq-ms"
                        .into(),
                );
            }
            config.timing = Timing::Fixed {
                ttft: self.ttft_ms.unwrap_or_default(),
                itl: self.itl_ms.unwrap_or_default(),
            };
        } else if self.speed == Some(Speed::Max) {
            if modeled_flags {
                return Err(
                    "--speed max removes all delays; drop --prefill-tps, --itl-base-ms \
                            and --itl-per-seq-ms or use a numeric --speed"
                        .into(),
                );
            }
            config.timing = Timing::Instant;
        } else if let Timing::Modeled(modeled) = &mut config.timing {
            if let Some(Speed::Factor(factor)) = self.speed {
                modeled.speed = factor;
            }
            if let Some(tps) = self.prefill_tps {
                modeled.prefill_tokens_per_s = tps;
            }
            if let Some(base) = self.itl_base_ms {
                modeled.itl_base = base;
            }
            if let Some(per_seq) = self.itl_per_seq_ms {
                modeled.itl_per_seq = per_seq;
            }
        } else if self.speed.is_some() || modeled_flags {
            return Err(
                "--speed, --prefill-tps, --itl-base-ms and --itl-per-seq-ms need a timed preset \
                 (--preset h200 or cpu-small); --preset max has no delays to scale"
                    .into(),
            );
        }

        config.router = self.router;
        config.eviction = self.eviction;
        for (flag, value, field) in [
            (
                "--router-header",
                &self.router_header,
                &mut config.router_header,
            ),
            (
                "--router-parent-header",
                &self.router_parent_header,
                &mut config.router_parent_header,
            ),
        ] {
            if let Some(name) = value {
                if self.router != Router::Session {
                    return Err(format!(
                        "{flag} only takes effect with --router session (the router is {}); \
                         add --router session or drop {flag}",
                        self.router.name()
                    ));
                }
                field.clone_from(name);
            }
        }

        config.faults.seed = self.fault_seed;
        config.faults.fail_rate = self.fail_rate;
        config.faults.reset_rate = self.reset_rate;
        config.faults.stall_rate = self.stall_rate;
        config.faults.malformed_rate = self.malformed_rate;
        config.faults.truncate_rate = self.truncate_rate;
        config.faults.stream_error_rate = self.stream_error_rate;
        config.faults.malformed_tool_call_rate = self.malformed_tool_call_rate;
        config.replies.reasoning_tokens = self.reasoning_tokens;
        config.replies.tool_call_rate = self.tool_call_rate;
        config.faults.stop_after = self.stop_after;
        config.faults.die_at = self.die_at_request;
        if let Some(seconds) = self.keep_alive_timeout {
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(format!(
                    "--keep-alive-timeout {seconds} is not a positive number of seconds, e.g. 5"
                ));
            }
            config.keep_alive.idle = Duration::try_from_secs_f64(seconds).map_err(|_| {
                format!("--keep-alive-timeout {seconds} is too large; use seconds such as 5")
            })?;
        }
        if let Some(max) = self.keep_alive_max {
            if max == 0 {
                return Err("--keep-alive-max 0: a connection serves at least one request".into());
            }
            config.keep_alive.max = Some(max);
        }
        config.keep_alive.header = self.keep_alive_header;
        config.headers_at_first_token = self.headers_at_first_token;
        config.metric_names = self.metric_names;
        config.gpu = self.gpu_power.map(|(idle_w, per_running_w)| GpuModel {
            idle_w,
            per_running_w,
            energy_counter: !self.no_energy_counter,
        });
        if let Some(stall) = self.stall_ms {
            config.faults.stall = stall;
        } else if self.stall_rate > 0.0 {
            return Err("--stall-rate needs --stall-ms, the length of each stall".into());
        }
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// `agentx-host sim`: the server these flags describe, in the foreground until interrupted.
pub(crate) fn main(args: &SimArgs) -> ExitCode {
    match args.to_config() {
        Ok(config) => crate::sim::serve_foreground(config),
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: SimArgs,
    }

    fn cfg(args: &[&str]) -> Result<SimConfig, String> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        T::try_parse_from(v)
            .map_err(|e| e.to_string())?
            .a
            .to_config()
    }

    #[test]
    fn huge_or_bad_durations_are_errors_not_panics() {
        for args in [
            &["--ttft-ms", "1e300"][..],
            &["--itl-ms", "-1"],
            &["--keep-alive-timeout", "1e300"],
            &["--keep-alive-timeout", "0"],
            &["--keep-alive-max", "0"],
        ] {
            assert!(cfg(args).is_err(), "{args:?}");
        }
        let c = cfg(&[
            "--keep-alive-timeout",
            "1.5",
            "--keep-alive-max",
            "7",
            "--keep-alive-header",
        ])
        .unwrap();
        assert_eq!(c.keep_alive.idle, Duration::from_millis(1500));
        assert_eq!(c.keep_alive.max, Some(7));
        assert!(c.keep_alive.header);
    }

    #[test]
    fn flags_override_the_preset() {
        let c = cfg(&["--preset", "cpu-small", "--engines", "2", "--speed", "4"]).unwrap();
        assert_eq!(c.engines, 2);
        assert_eq!(c.max_num_seqs, 8);
        let Timing::Modeled(m) = c.timing else {
            panic!()
        };
        assert_eq!(m.speed, 4.0);
        let c = cfg(&["--ttft-ms", "50", "--itl-ms", "10"]).unwrap();
        assert_eq!(
            c.timing,
            Timing::Fixed {
                ttft: Duration::from_millis(50),
                itl: Duration::from_millis(10)
            }
        );
        assert_eq!(cfg(&["--speed", "max"]).unwrap().timing, Timing::Instant);
        assert_eq!(cfg(&[]).unwrap().metric_names, MetricNames::Vllm);
        assert_eq!(
            cfg(&["--metric-names", "trtllm"]).unwrap().metric_names,
            MetricNames::Trtllm
        );
        assert!(cfg(&["--metric-names", "tgi"])
            .unwrap_err()
            .contains("vllm, sglang, trtllm, atom"));
        let c = cfg(&[]).unwrap();
        assert_eq!(
            (c.router, c.eviction),
            (Router::AnyHeader, Eviction::TailFirst)
        );
        assert_eq!(c.router_header, crate::sim::DEFAULT_ROUTER_HEADER);
        let c = cfg(&[
            "--router",
            "session",
            "--router-header",
            "X-Session-ID",
            "--router-parent-header",
            "x-parent",
            "--eviction",
            "lru",
        ])
        .unwrap();
        assert_eq!((c.router, c.eviction), (Router::Session, Eviction::Lru));
        assert_eq!(
            (c.router_header.as_str(), c.router_parent_header.as_str()),
            ("X-Session-ID", "x-parent")
        );
        assert_eq!(
            cfg(&["--router", "round-robin"]).unwrap().router,
            Router::RoundRobin
        );
    }

    #[test]
    fn gpu_power_gives_each_engine_a_simulated_gpu() {
        assert_eq!(cfg(&[]).unwrap().gpu, None);
        let model = |args: &[&str]| cfg(args).unwrap().gpu.unwrap();
        assert_eq!(
            model(&["--gpu-power", "100,50"]),
            GpuModel {
                idle_w: 100.0,
                per_running_w: 50.0,
                energy_counter: true
            }
        );
        assert!(!model(&["--gpu-power", "0,12.5", "--no-energy-counter"]).energy_counter);
        for bad in ["100", "100,50,1", "100,watts", "1e9,1", "100,NaN"] {
            let e = cfg(&["--gpu-power", bad]).unwrap_err();
            assert!(
                e.contains("is not IDLE,PER_SEQ") && e.contains(bad),
                "{bad}: {e}"
            );
        }
        assert!(cfg(&["--no-energy-counter"])
            .unwrap_err()
            .contains("--gpu-power"));
    }

    #[test]
    fn bad_combinations_name_the_flags() {
        assert!(cfg(&["--ttft-ms", "5", "--speed", "2"])
            .unwrap_err()
            .contains("--ttft-ms"));
        assert!(cfg(&["--stall-rate", "0.5"])
            .unwrap_err()
            .contains("--stall-ms"));
        assert!(cfg(&["--fail-rate", "2"]).unwrap_err().contains("fraction"));
        assert!(cfg(&["--speed", "fast"])
            .unwrap_err()
            .contains("not a speed"));
        assert!(cfg(&["--preset", "max", "--speed", "2"])
            .unwrap_err()
            .contains("timed preset"));
        assert!(cfg(&["--engines", "0"]).unwrap_err().contains("engines"));
        assert!(cfg(&["--router", "sticky"])
            .unwrap_err()
            .contains("any-header, session, round-robin, least-loaded"));
        assert!(cfg(&["--eviction", "fifo"])
            .unwrap_err()
            .contains("tail-first, lru"));
        assert!(cfg(&["--router-header", "x-a"])
            .unwrap_err()
            .contains("--router session"));
        assert!(cfg(&["--router", "session", "--router-header", "bad name"])
            .unwrap_err()
            .contains("router_header"));
    }
}
