//! What the replay's paused-time tests share: a scripted [`Transport`] (each response's TTFT,
//! inter-token time and length, a failure with its error body, or a panic, chosen per request),
//! small weka corpora written to a kept temporary directory, the built-in scenarios, and the
//! replay's inputs with the records read back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::transport::{Sending, Transport};
use super::{timer, ReplayConfig, ReplayInputs};
use agentx_dataset::{AssistantMode, Dataset, OpenOptions, PromptSynth, TokenCounter};
use agentx_metrics::live::LiveRun;
use agentx_protocol::{Exchange, Failure, FailureKind, JsonBody, RequestBody, RequestIds};
use agentx_record::{read_records, Clock, RecordSink, RequestRecord};
use agentx_scenario::types::Placement;
use agentx_scenario::{Limits, ScenarioEngine, ScenarioInstance};

/// One request as the transport saw it.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// The request's place among all requests sent (from 0).
    pub n: u64,
    /// Its place among the requests of its session (correlation id), from 0.
    pub nth: u32,
    /// A child stream of a session tree (it names a parent).
    pub child: bool,
    /// The request's body as sent.
    pub body: String,
}

/// How the scripted server answers a request.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub ttft: Duration,
    pub itl: Duration,
    /// Streamed tokens (one word each, `w<n>` for the `n`th request).
    pub tokens: u32,
    /// An HTTP error instead: status and body.
    pub fail: Option<(u16, String)>,
    /// The request's task panics when the request is sent.
    pub panic: bool,
    /// Moves the paused clock this far when the request is sent, as if the client had stalled:
    /// everything else wakes late.
    pub stall: Option<Duration>,
}

impl Reply {
    /// 100 ms to the first token, then 4 more 10 ms apart: 140 ms in all.
    pub(crate) fn ok() -> Reply {
        Reply {
            ttft: Duration::from_millis(100),
            itl: Duration::from_millis(10),
            tokens: 5,
            fail: None,
            panic: false,
            stall: None,
        }
    }

    /// A context overflow as vLLM words it, after `Reply::ok`'s TTFT.
    pub(crate) fn overflow() -> Reply {
        Reply {
            fail: Some((
                400,
                "This model's maximum context length is 100 tokens. However, you requested 20 \
                 output tokens and your prompt contains 90 input tokens, for a total of 110 tokens."
                    .into(),
            )),
            ..Reply::ok()
        }
    }

    pub(crate) fn panics() -> Reply {
        Reply {
            panic: true,
            ..Reply::ok()
        }
    }
}

type Script = Box<dyn Fn(&Call) -> Reply + Send + Sync>;

/// A transport whose server is a script; time passes on tokio's clock only.
pub(crate) struct Scripted {
    script: Script,
    seen: Mutex<(u64, HashMap<String, u32>)>,
    ended: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    pub(crate) fn new(script: impl Fn(&Call) -> Reply + Send + Sync + 'static) -> Scripted {
        Scripted {
            script: Box::new(script),
            seen: Mutex::new((0, HashMap::new())),
            ended: Arc::default(),
        }
    }

    /// The correlation ids of the sessions the replay ended, in order (shared: read it after the
    /// transport moved into the replay).
    pub(crate) fn ended(&self) -> Arc<Mutex<Vec<String>>> {
        self.ended.clone()
    }
}

impl Transport for Scripted {
    fn send<'a>(
        &'a self,
        body: JsonBody,
        ids: RequestIds<'a>,
        _keep_text: bool,
        cancel: &'a mut watch::Receiver<bool>,
    ) -> Sending<'a> {
        let call = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.0;
            seen.0 += 1;
            let nth = seen.1.entry(ids.correlation_id.to_owned()).or_insert(0);
            let call = Call {
                n,
                nth: *nth,
                child: ids.parent_correlation_id.is_some(),
                body: String::from_utf8_lossy(&body.to_vec()).into_owned(),
            };
            *nth += 1;
            call
        };
        let reply = (self.script)(&call);
        Box::pin(async move {
            if let Some(d) = reply.stall {
                tokio::time::advance(d).await;
            }
            let sent = timer::now();
            assert!(!reply.panic, "scripted panic of request {}", call.n);
            let mut ex = Exchange {
                status: 200,
                ..Exchange::new(sent)
            };
            let work = async {
                tokio::time::sleep(reply.ttft).await;
                ex.first_byte = Some(timer::now());
                if let Some((status, body)) = &reply.fail {
                    ex.status = *status;
                    ex.error_body = Some(body.clone());
                    ex.failure = Some(Failure {
                        status: *status,
                        kind: FailureKind::Http,
                        server_type: None,
                        message: format!("HTTP {status}"),
                    });
                    return;
                }
                for i in 0..reply.tokens {
                    if i > 0 {
                        tokio::time::sleep(reply.itl).await;
                    }
                    let at = timer::now().duration_since(sent).as_nanos() as u64;
                    if i == 0 {
                        if let Some(hook) = ids.on_first_token {
                            (hook.0)(timer::now());
                        }
                    }
                    ex.chunk_offsets_ns.push(at);
                    ex.content_chunks += 1;
                    ex.text.push_str(&format!("w{} ", call.n));
                }
                ex.finish_reason = Some("stop".into());
            };
            let cut = tokio::select! {
                biased;
                () = work => false,
                _ = cancel.wait_for(|c| *c) => true,
            };
            if cut {
                ex.failure = Some(Failure {
                    status: 0,
                    kind: FailureKind::Cancelled,
                    server_type: None,
                    message: "cancelled".into(),
                });
            }
            ex.end = timer::now();
            ex
        })
    }

    fn end_session(&self, correlation_id: &str) {
        self.ended.lock().unwrap().push(correlation_id.to_owned());
    }
}

/// A weka request at `t` seconds with `api` seconds of recorded API time.
pub(crate) fn req(t: f64, api: f64) -> Value {
    json!({"t": t, "type": "n", "model": "m", "in": 128, "out": 8,
        "hash_ids": [1, 2], "input_types": ["tool_result"], "output_types": ["text"],
        "stop": "tool_use", "api_time": api})
}

/// A subagent entry at `t` seconds holding `requests`.
pub(crate) fn subagent(t: f64, id: &str, requests: Vec<Value>) -> Value {
    json!({"t": t, "type": "subagent", "agent_id": id, "duration_ms": 1000, "requests": Value::Array(requests)})
}

pub(crate) fn trace(id: &str, requests: Vec<Value>) -> Value {
    json!({"id": id, "models": ["m"], "block_size": 64, "hash_id_scope": "local",
        "tool_tokens": 0, "system_tokens": 0, "requests": Value::Array(requests)})
}

/// A directory that outlives the test (the datasets map their cache entries from it).
pub(crate) fn kept_dir() -> PathBuf {
    tempfile::tempdir().unwrap().keep()
}

/// Writes `traces` as a weka corpus in `dir`.
pub(crate) fn corpus_file(dir: &Path, traces: &[Value]) -> PathBuf {
    let p = dir.join("corpus.jsonl");
    let mut text = String::new();
    for value in traces {
        text.push_str(&value.to_string());
        text.push('\n');
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// Opens a weka corpus (its cache beside it).
pub(crate) fn open(dir: &Path, path: &Path) -> Dataset {
    Dataset::open_path(
        path,
        &OpenOptions {
            cache_dir: Some(dir.join("cache")),
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

/// A built-in scenario component, instantiated (`agentx-v1` for trees, `agentx-mvp` for lanes).
pub(crate) fn scenario(bytes: &[u8], name: &str) -> ScenarioInstance {
    let engine = ScenarioEngine::new(Limits::default(), None).unwrap();
    engine
        .load_bytes(Path::new(name), bytes, None)
        .unwrap()
        .instantiate()
        .unwrap()
}

/// A replay configuration: `secs` of profiling, no grace limit, nothing printed, no timer thread.
pub(crate) fn config(secs: f64) -> ReplayConfig {
    ReplayConfig {
        duration: Duration::from_secs_f64(secs),
        grace: None,
        warmup_grace: None,
        failed_request_threshold: None,
        placement: Placement::FirstTurnPrefix,
        mode: AssistantMode::Recorded,
        use_server_token_count: false,
        overflow_phrases: None,
        run_id: "test-run".into(),
        stats_interval: None,
        warmup_progress_interval: None,
        trace_idle_cap: None,
        timer_thread: false,
        chat_template: None,
        prompt_chain_block_size: Some(16),
        wire: agentx_dataset::Wire::Text,
        keep_reasoning: false,
    }
}

/// A replay's inputs on `transport`, with its records going to a sink in a kept directory; the
/// clock starts now (virtual 0 of a paused test).
pub(crate) struct Harness {
    pub sink: RecordSink,
    /// Kept open so the replay is never interrupted.
    pub interrupt: watch::Sender<u32>,
    /// The replay's live counts, the sink's records added as they are written (lanes 0-63).
    pub live: Arc<LiveRun>,
}

impl Harness {
    pub(crate) fn inputs(
        dataset: Dataset,
        scenario: ScenarioInstance,
        transport: Scripted,
    ) -> (Harness, ReplayInputs) {
        let dir = kept_dir();
        let live = Arc::new(LiveRun::new(&(0..64).collect::<Vec<u32>>()));
        let watched = live.clone();
        let sink = RecordSink::create_watched(
            &agentx_record::fsio::Root::create(&dir).unwrap(),
            vec![Box::new(move |rec: &RequestRecord| watched.absorb(rec))],
        )
        .unwrap();
        let clock = Clock::start();
        let (interrupt, rx) = watch::channel(0u32);
        let synth = PromptSynth::new(1);
        let inputs = ReplayInputs {
            dataset,
            synth,
            counter: TokenCounter::Words,
            client: Box::new(transport),
            body: RequestBody::new("m", true, true, &[]),
            scenario,
            records: sink.sender(),
            clock,
            interrupt: rx,
            progress: false,
            srv_row: None,
            live: live.clone(),
            on_profiling: None,
            boundary: None,
            shard: None,
            early_stop: None,
        };
        (
            Harness {
                sink,
                interrupt,
                live,
            },
            inputs,
        )
    }

    /// Every record the replay sent, in the order sent. Checks the live counts against them on
    /// the way: each record was counted sent and completed in its phase, and nothing is left in
    /// flight or busy.
    pub(crate) fn records(self) -> Vec<RequestRecord> {
        let path = self.sink.path().to_owned();
        self.sink.close().unwrap();
        drop(self.interrupt);
        let records = read_records(&path).unwrap();
        let live = self.live.snapshot();
        for phase in [
            agentx_record::Phase::Warmup,
            agentx_record::Phase::Profiling,
        ] {
            let of_phase = records.iter().filter(|rec| rec.phase == phase).count() as u64;
            let index = usize::from(phase == agentx_record::Phase::Profiling);
            assert_eq!(
                live.sent[index], of_phase,
                "{phase:?} requests counted sent"
            );
            assert_eq!(
                live.phase(phase).completed(),
                of_phase,
                "{phase:?} completed"
            );
        }
        assert_eq!((live.in_flight, live.lanes_busy), ([0, 0], 0), "{live:?}");
        records
    }
}

/// Milliseconds of a run-clock offset.
pub(crate) fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
