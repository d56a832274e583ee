//! The synthetic corpus generator: weka traces with the published shape of the 949-trace
//! `cc-traces-weka-no-subagents-051226` corpus, for tests and benchmarks without the real data.
//!
//! Shape (per trace, from the seed's ChaCha8 generator on the trace index's stream, so each trace
//! is independent of the number generated): about 145 turns on average (log-normal, median 93;
//! ~136k requests over 949 traces); 64-token blocks with local hash ids numbered in first-seen
//! order; 8-13k tool and 2-4k system tokens; a starting input of median ~20k tokens (up to ~640k
//! for the few long-context sessions); each turn appends the previous output and new tool or user
//! content, so consecutive turns share all full blocks of the previous prompt (a ~97% theoretical
//! hit rate); a context near the session's limit is compacted to the system prefix plus a summary,
//! and rarely a session rewinds to an earlier turn (both non-monotonic cuts); ~3% of turns have
//! `out: 0`; ~2% of requests are repeated as a streaming / non-streaming pair with identical hash
//! ids; think times are short after tool use and long after `end_turn`. `max_isl` and `max_turns`
//! shrink the corpus (the committed fixtures use them).
//!
//! `context` scales the whole shape to a server's context length instead (for 4k-32k models): the
//! tools+system prefix, the starting input, the growth per turn, compaction summaries and the
//! session limits scale by `context / 200,000` (a standard session's limit), outputs by its square
//! root (so a 4k corpus still streams tens of tokens per turn). Standard sessions then compact below
//! `context` and fit; the ~8% long-context sessions, whose limit is four times larger, grow past it
//! and overflow, as long sessions overflow a 200k model. Without `context` the output is unchanged.

use std::io::{BufWriter, Write};
use std::path::Path;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, LogNormal};

use super::error::DatasetError;

pub mod subagents;

/// Generator settings.
#[derive(Debug, Clone, Default)]
pub struct SynthOptions {
    /// Number of traces to write.
    pub traces: usize,
    /// Seed of every draw; equal options write equal bytes.
    pub seed: u64,
    /// Cap on any request's input tokens (compaction happens before it); `None`: the model's limit.
    pub max_isl: Option<u32>,
    /// Cap on turns per trace.
    pub max_turns: Option<usize>,
    /// Scale the trace shape to a server context of this many tokens (see the module doc).
    pub context: Option<u32>,
    /// Write traces of the with-subagents shape: subagent entries, fan-out, background subagents and
    /// flat worker chains (see [`subagents`]).
    pub subagents: bool,
}

/// The reference context of the shape: a standard session's limit.
const REFERENCE_CONTEXT: f64 = 200_000.0;

/// Smallest `--context`: the scaled prefix must still leave room for a conversation.
pub(crate) const MIN_CONTEXT: u32 = 1_024;

/// Totals of a generated corpus.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SynthSummary {
    /// Traces written.
    pub traces: usize,
    /// Requests written (top-level and nested).
    pub requests: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// The draws of one trace: a ChaCha8 stream through rand's and rand_distr's distributions.
struct Draws(ChaCha8Rng);

impl Draws {
    /// Trace `index` of the corpus for `seed`: the seed's generator on its own stream, so a trace
    /// depends only on (seed, index).
    fn new(seed: u64, index: usize) -> Draws {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(index as u64);
        Draws(rng)
    }
    fn chance(&mut self, probability: f64) -> bool {
        self.0.random_bool(probability)
    }
    /// Uniform in `[low, high]`.
    fn range(&mut self, low: u32, high: u32) -> u32 {
        self.0.random_range(low..=high)
    }
    /// Log-normal with this median (`e^mu`) and `sigma`.
    fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        LogNormal::new(median.ln(), sigma)
            .expect("finite median and sigma")
            .sample(&mut self.0)
    }
}

const BLOCK: u32 = 64;
const OPUS: &str = "claude-opus-4-5-20251101";
const SONNET: &str = "claude-sonnet-4-5-20250929";

fn push_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut buf = [0u8; 20];
    let mut pos = buf.len();
    loop {
        pos -= 1;
        buf[pos] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[pos..]);
}

fn push_secs(out: &mut Vec<u8>, seconds: f64) {
    // Millisecond resolution, like the proxy's captures.
    let millis = (seconds * 1000.0).round() as u64;
    push_u64(out, millis / 1000);
    out.push(b'.');
    let frac = millis % 1000;
    out.extend_from_slice(&[
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

struct Req {
    t: f64,
    streaming: bool,
    input: u32,
    output: u32,
    ids_keep: usize,
    ids_new: std::ops::Range<u32>,
    input_types: &'static str,
    output_types: &'static str,
    stop: &'static str,
    api_time: f64,
    think_time: Option<f64>,
}

/// A trace's main session as generated: its model, declared prefix and requests.
struct RootChain {
    model: &'static str,
    tool: u32,
    system: u32,
    /// Full blocks of the tools+system prefix (what a compaction keeps).
    sys_blocks: usize,
    /// The first hash id not used by the requests.
    next_id: u32,
    reqs: Vec<Req>,
}

/// Draws trace `index`'s main session from `rng` (the draws of [`trace_line`], in its order).
fn root_chain(opts: &SynthOptions, rng: &mut Draws) -> RootChain {
    // Token sizes scale with `f`, outputs with `g` (both 1 without `context`: the same numbers).
    let ctx_scale = opts
        .context
        .map_or(1.0, |c| f64::from(c) / REFERENCE_CONTEXT);
    let out_scale = ctx_scale.sqrt();
    let tok = |x: u32| -> u32 {
        if opts.context.is_some() {
            (f64::from(x) * ctx_scale).round().max(1.0) as u32
        } else {
            x
        }
    };
    let long_context = rng.chance(0.08);
    let model = if rng.chance(0.15) { SONNET } else { OPUS };
    let mut limit: u32 = if long_context {
        tok(800_000)
    } else {
        tok(200_000)
    };
    if let Some(cap) = opts.max_isl {
        limit = limit.min(cap);
    }
    // Sessions compact near their limit: 80% of a 200k context, 99% of a 1M-class one.
    let compact_at = (f64::from(limit) * if long_context { 0.99 } else { 0.8 }) as u32;
    let tool = rng.range(tok(8_000), tok(13_000));
    let system = rng.range(tok(2_000), tok(4_000));
    let prefix = tool + system;
    let sys_blocks = prefix.div_ceil(BLOCK);
    let floor = (sys_blocks * BLOCK + tok(200))
        .min(limit.saturating_sub(1))
        .max(prefix + 1);
    let mut turns = (rng.lognormal(93.0, 1.0).round() as usize).clamp(1, 1_500);
    if let Some(cap) = opts.max_turns {
        turns = turns.min(cap.max(1));
    }
    let start = if long_context {
        rng.lognormal(150_000.0 * ctx_scale, 0.8)
    } else {
        rng.lognormal(20_000.0 * ctx_scale, 0.9)
    };
    let mut input = (start as u32)
        .min((f64::from(limit) * 0.8) as u32)
        .min(tok(639_552))
        .max(floor);

    // Hash ids: the current list is `ids[..]`; fresh ids count up from 1 in first-seen order.
    let mut next_id: u32 = 1;
    let mut ids: Vec<u32> = Vec::new();
    let mut history: Vec<(u32, usize)> = Vec::new(); // (input, full blocks) per turn, for rewinds
    let mut reqs: Vec<Req> = Vec::with_capacity(turns);
    let mut clock = 0.0f64;
    let mut prev_stop = "";
    let mut prev_out = 0u32;
    let mut turn = 0usize;
    while turn < turns {
        let mut keep = ids.len();
        if turn > 0 {
            // Grow by the previous output plus new content, then cut if needed.
            let add = rng
                .lognormal(900.0 * ctx_scale, 1.3)
                .clamp(f64::from(tok(20)), 60_000.0 * ctx_scale) as u32;
            let mut next = input.saturating_add(prev_out).saturating_add(add);
            if next > compact_at || next >= limit {
                // Compaction: keep the tools+system prefix, replace the rest with a summary.
                keep = sys_blocks as usize;
                let room = f64::from(limit.saturating_sub(prefix)) / 3.0;
                let summary = rng
                    .lognormal(9_000.0 * ctx_scale, 0.5)
                    .clamp(1_000.0 * ctx_scale, 30_000.0 * ctx_scale)
                    .min(room.max(f64::from(tok(200)))) as u32;
                next = (prefix + summary).min(limit.saturating_sub(1)).max(floor);
            } else if history.len() > 3 && rng.chance(0.004) {
                // Rewind to an earlier turn and continue from there.
                let back = rng.range(1, (history.len() - 1).min(20) as u32) as usize;
                let (in_then, full_then) = history[history.len() - 1 - back];
                keep = full_then;
                next = in_then.saturating_add(add).min(limit - 1);
            }
            input = next;
        }
        let full = (input / BLOCK) as usize;
        keep = keep.min(full);
        ids.truncate(keep);
        let first_new = next_id;
        while ids.len() < full {
            ids.push(next_id);
            next_id += 1;
        }
        let (output, stop, think_time) =
            draw_turn(rng, out_scale, turn, turn + 1 == turns, prev_stop);
        clock += think_time.unwrap_or(1.0);
        let api_time = 0.4 + f64::from(output) / 70.0 + f64::from(input) / 200_000.0;
        let output_types = match (output, stop) {
            (0, _) => "tool_use",
            (_, "tool_use") => "text,thinking,tool_use",
            _ => "thinking,text",
        };
        let input_types = if turn == 0 || prev_stop == "end_turn" {
            "text"
        } else {
            "tool_result"
        };
        reqs.push(Req {
            t: clock,
            streaming: rng.chance(0.7),
            input,
            output,
            ids_keep: keep,
            ids_new: first_new..next_id,
            input_types,
            output_types,
            stop,
            api_time,
            think_time,
        });
        clock += api_time;
        history.push((input, full));
        turn += 1;
        // A streaming / non-streaming pair: the same prompt sent again straight away.
        if turn < turns && rng.chance(0.02) {
            let twin = twin_of(&reqs[reqs.len() - 1], next_id, ids.len(), clock);
            clock += twin.api_time;
            history.push((input, full));
            reqs.push(twin);
            turn += 1;
        }
        prev_stop = reqs[reqs.len() - 1].stop;
        prev_out = reqs[reqs.len() - 1].output;
    }
    RootChain {
        model,
        tool,
        system,
        sys_blocks: sys_blocks as usize,
        next_id,
        reqs,
    }
}

/// Turn `turn_index`'s output tokens, stop reason and think time (`scale` scales outputs; `last`:
/// the last turn, which ends the session).
fn draw_turn(
    rng: &mut Draws,
    scale: f64,
    turn_index: usize,
    last: bool,
    prev_stop: &str,
) -> (u32, &'static str, Option<f64>) {
    let output = if rng.chance(0.03) {
        0
    } else {
        rng.lognormal(180.0 * scale, 1.1)
            .clamp(1.0, 32_000.0 * scale) as u32
    };
    let stop = if last || (output > 0 && rng.chance(0.1)) {
        "end_turn"
    } else if output > 0 && rng.chance(0.02) {
        ""
    } else {
        "tool_use"
    };
    let think_time = if turn_index == 0 {
        Some(0.0)
    } else if rng.chance(0.01) {
        None
    } else if prev_stop == "end_turn" {
        Some(rng.lognormal(25.0, 1.5).min(3_600.0))
    } else {
        Some(rng.lognormal(1.5, 1.0).min(120.0))
    };
    (output, stop, think_time)
}

/// The same prompt as `prev` sent again straight away, streaming the other way.
fn twin_of(prev: &Req, next_id: u32, ids_len: usize, time: f64) -> Req {
    let mut twin = Req {
        ids_new: next_id..next_id,
        ids_keep: ids_len,
        think_time: Some(0.0),
        t: time,
        ..*prev
    };
    twin.streaming = !twin.streaming;
    twin
}

/// Generates trace `index` of the corpus as one JSON line (without the newline); with
/// [`SynthOptions::subagents`], a trace of the with-subagents shape ([`subagents`]).
pub(crate) fn trace_line(opts: &SynthOptions, index: usize, out: &mut Vec<u8>) -> usize {
    if opts.subagents {
        return subagents::trace_line(opts, index, out);
    }
    let mut rng = Draws::new(opts.seed, index);
    let RootChain {
        model,
        tool,
        system,
        reqs,
        ..
    } = root_chain(opts, &mut rng);
    // Serialize; hash ids are rebuilt from (kept prefix of the previous list, new range).
    let trace_id = format!("trace_{:04}", index + 1);
    let (mut sum_in, mut sum_out) = (0u64, 0u64);
    out.extend_from_slice(b"{\"id\":\"");
    out.extend_from_slice(trace_id.as_bytes());
    out.extend_from_slice(b"\",\"models\":[\"");
    out.extend_from_slice(model.as_bytes());
    out.extend_from_slice(b"\"],\"block_size\":64,\"hash_id_scope\":\"local\",\"tool_tokens\":");
    push_u64(out, u64::from(tool));
    out.extend_from_slice(b",\"system_tokens\":");
    push_u64(out, u64::from(system));
    out.extend_from_slice(b",\"requests\":[");
    let mut cur: Vec<u32> = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        cur.truncate(r.ids_keep);
        cur.extend(r.ids_new.clone());
        sum_in += u64::from(r.input);
        sum_out += u64::from(r.output);
        if i > 0 {
            out.push(b',');
        }
        write_request(out, r, model, &cur);
    }
    out.extend_from_slice(b"],\"totals\":{\"parent_tokens\":{\"input\":");
    push_u64(out, sum_in);
    out.extend_from_slice(b",\"output\":");
    push_u64(out, sum_out);
    out.extend_from_slice(b"},\"subagent_count\":0}}");
    reqs.len()
}

/// One request object (`{"t":...}`) with these hash ids.
fn write_request(out: &mut Vec<u8>, request: &Req, model: &str, ids: &[u32]) {
    out.extend_from_slice(b"{\"t\":");
    push_secs(out, request.t);
    out.extend_from_slice(if request.streaming {
        b",\"type\":\"s\",\"model\":\""
    } else {
        b",\"type\":\"n\",\"model\":\""
    });
    out.extend_from_slice(model.as_bytes());
    out.extend_from_slice(b"\",\"in\":");
    push_u64(out, u64::from(request.input));
    out.extend_from_slice(b",\"out\":");
    push_u64(out, u64::from(request.output));
    out.extend_from_slice(b",\"hash_ids\":[");
    for (j, h) in ids.iter().enumerate() {
        if j > 0 {
            out.push(b',');
        }
        push_u64(out, u64::from(*h));
    }
    out.extend_from_slice(b"],\"input_types\":[");
    for (j, s) in request.input_types.split(',').enumerate() {
        out.extend_from_slice(if j > 0 { b",\"" } else { b"\"" });
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"],\"output_types\":[");
    for (j, s) in request.output_types.split(',').enumerate() {
        out.extend_from_slice(if j > 0 { b",\"" } else { b"\"" });
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"],\"stop\":\"");
    out.extend_from_slice(request.stop.as_bytes());
    out.extend_from_slice(b"\",\"api_time\":");
    push_secs(out, request.api_time);
    out.extend_from_slice(b",\"think_time\":");
    match request.think_time {
        Some(x) => push_secs(out, x),
        None => out.extend_from_slice(b"null"),
    }
    if request.streaming {
        out.extend_from_slice(b",\"ttft\":");
        push_secs(out, 0.3 + f64::from(request.input) / 150_000.0);
    }
    out.push(b'}');
}

/// Writes a corpus as `traces.jsonl` to `path`.
pub fn write_corpus(opts: &SynthOptions, path: &Path) -> Result<SynthSummary, DatasetError> {
    if opts.traces == 0 {
        return Err(DatasetError::Argument("--traces must be at least 1".into()));
    }
    if let Some(context) = opts.context {
        if context < MIN_CONTEXT {
            return Err(DatasetError::Argument(format!(
                "--context {context} is too small: the scaled tools+system prefix needs room; use at least {MIN_CONTEXT}"
            )));
        }
    }
    // The tools+system prefix alone is up to 17,000 tokens at full scale (85 per 1,000 of context).
    let least = match opts.context {
        Some(context) => (f64::from(context) * 0.1).ceil() as u32,
        None => 20_000,
    };
    if opts.max_isl.is_some_and(|m| m < least) {
        return Err(DatasetError::Argument(match opts.context {
            Some(context) => format!(
                "--max-isl must be at least {least} tokens with --context {context}: the scaled tools+system prefix alone is up to {}",
                (f64::from(context) * 0.085).ceil() as u32
            ),
            None => "--max-isl must be at least 20000 tokens: the tools+system prefix alone is up to 17000; \
                     for a small-context server use --context N, which scales the whole trace shape"
                .into(),
        }));
    }
    let io_err = |e| DatasetError::io("write", path, e);
    // Written beneath the output's directory, opened as a capability, then renamed into place.
    let (root, name) = agentx_record::fsio::Root::for_file(path).map_err(io_err)?;
    let tmp = name.with_extension(format!("tmp.{}", std::process::id()));
    let mut writer = BufWriter::with_capacity(1 << 20, root.create_file(&tmp).map_err(io_err)?);
    let mut line = Vec::new();
    let mut sum = SynthSummary {
        traces: opts.traces,
        ..SynthSummary::default()
    };
    for i in 0..opts.traces {
        line.clear();
        sum.requests += trace_line(opts, i, &mut line);
        line.push(b'\n');
        sum.bytes += line.len() as u64;
        writer.write_all(&line).map_err(io_err)?;
    }
    writer
        .into_inner()
        .map_err(|e| io_err(e.into_error()))?
        .sync_all()
        .map_err(io_err)?;
    root.rename(&tmp, &name).map_err(io_err)?;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Location;
    use crate::weka::parse_trace;

    #[test]
    fn traces_parse_and_are_deterministic() {
        let opts = SynthOptions {
            traces: 5,
            seed: 3,
            max_isl: Some(40_000),
            max_turns: Some(60),
            context: None,
            subagents: false,
        };
        for i in 0..5 {
            let mut a = Vec::new();
            let mut b = Vec::new();
            let n = trace_line(&opts, i, &mut a);
            trace_line(&opts, i, &mut b);
            assert_eq!(a, b);
            let t = parse_trace(std::str::from_utf8(&a).unwrap(), &Location::default()).unwrap();
            assert_eq!(t.requests.len(), n);
            for r in &t.requests {
                assert!(r.input <= 40_000);
                assert_eq!(r.hash_ids.len() as u32, r.input / 64);
            }
        }
    }
}
