//! What several test modules share: fixture paths, a simulator serving on its own runtime, and a
//! finished `agentx-host` command (a process, or run in this process) with its artifact directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use agentx::record::{read_records, Phase, RequestRecord};
use agentx::sim::{self, SimConfig, SimHandle};
use serde_json::Value;

/// `agentx-host COMMAND` against the server at `url` on the fixture corpus: its model, seed 42,
/// `--unsafe-override` (short runs are below the scenario's 900 s floor), a 10 s grace period and no
/// progress lines; a `run` replays the built-in agentx-mvp (single-stream sessions). The caller adds
/// the rest.
pub(crate) fn fixture_args(command: &str, url: &str) -> Vec<String> {
    let scenario = (command == "run").then_some("agentx-mvp");
    corpus_args(command, scenario, &fixture("traces-24.jsonl"), url)
}

/// The flags of a session-tree run of the default scenario on the with-subagents fixture against
/// `url`, then `extra`: 4 lanes, 3 s of profiling, a grace period of 60 s every request finishes
/// within (so no record is cancelled and the server's counters equal the records), think gaps
/// capped at 10 ms, no realtime block.
pub(crate) fn tree_run_args(url: &str, extra: &[&str]) -> Vec<String> {
    let corpus = fixture("traces-subagents-8.jsonl");
    let common = [
        "run",
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--random-seed",
        "42",
        "--unsafe-override",
        "--concurrency",
        "4",
        "--benchmark-duration",
        "3",
        "--benchmark-grace-period",
        "60",
        "--trace-idle-gap-cap-seconds",
        "0.01",
        "--stats-interval",
        "0",
    ];
    common
        .iter()
        .chain(extra)
        .map(std::string::ToString::to_string)
        .collect()
}

/// [`fixture_args`] on `corpus`, with `scenario` (when given) after the command.
pub(crate) fn corpus_args(
    command: &str,
    scenario: Option<&str>,
    corpus: &Path,
    url: &str,
) -> Vec<String> {
    let mut args = vec![command.to_string()];
    args.extend(scenario.map(str::to_owned));
    args.extend(
        [
            "--url",
            url,
            "--model",
            "agentx-sim",
            "--input-file",
            corpus.to_str().unwrap(),
            "--random-seed",
            "42",
            "--unsafe-override",
            "--benchmark-grace-period",
            "10",
            "--stats-interval",
            "0",
        ]
        .map(str::to_owned),
    );
    args
}

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// A simulator on its own runtime, serving while the test thread waits on the binary; its
/// `SimConfig::metric_names` chooses whose metric names `/metrics` speaks.
/// A default simulator that keeps every chat request's headers ([`Sim::received`]).
pub(crate) fn recording_sim() -> Sim {
    Sim::start(SimConfig {
        record_headers: true,
        ..SimConfig::default()
    })
}

pub(crate) struct Sim {
    rt: tokio::runtime::Runtime,
    handle: Option<SimHandle>,
}

impl Sim {
    pub(crate) fn start(cfg: SimConfig) -> Sim {
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

    pub(crate) fn url(&self) -> String {
        self.handle.as_ref().unwrap().url()
    }

    /// The `/metrics` page now, under the names `SimConfig::metric_names` chose.
    pub(crate) fn metrics_text(&self) -> String {
        self.handle.as_ref().unwrap().metrics_text()
    }

    /// Chat completion requests received so far.
    pub(crate) fn requests(&self) -> u64 {
        self.handle.as_ref().unwrap().chat_requests()
    }

    /// The chat requests' headers and connections (with `record_headers` on).
    pub(crate) fn received(&self) -> Vec<sim::Received> {
        self.handle.as_ref().unwrap().received()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
    }
}

/// The compiled-component cache every test's home shares (`<home>/compiled`, a link to one
/// directory under the target directory): entries are named by the component's sha256, the
/// wasmtime version and the engine configuration and written atomically, so each component is
/// compiled once per suite run rather than once per test.
pub(crate) fn shared_compiled_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("agentx-compiled")
}

/// Creates the home `home` with its compiled-component cache linked to [`shared_compiled_cache`]
/// (nothing when `home/compiled` exists). With `AGENTX_TEST_PRIVATE_COMPILED` set in the test
/// process, each home gets a cache of its own instead (under `agentx-compiled-private/`, kept, so
/// that the compilations of a suite run can be counted).
pub(crate) fn share_compiled_cache(home: &Path) {
    static PRIVATE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let link = home.join("compiled");
    if link.symlink_metadata().is_ok() {
        return;
    }
    let shared = if std::env::var_os("AGENTX_TEST_PRIVATE_COMPILED").is_some() {
        let nth = PRIVATE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("agentx-compiled-private")
            .join(format!("{}-{nth}", std::process::id()))
    } else {
        shared_compiled_cache()
    };
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(home).unwrap();
    std::os::unix::fs::symlink(&shared, &link).unwrap();
}

/// `agentx-host` in `dir` (its home under `dir/home`, sharing the suite's compiled components), with
/// `env` set over an environment cleared of the variables that change a replay (`AIPERF_*`,
/// `AGENTX_*`, and a scheduler's `SLURM_*`).
pub(crate) fn agentx_command(dir: &Path, env: &[(&str, &str)]) -> std::process::Command {
    share_compiled_cache(&dir.join("home"));
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_agentx-host"));
    c.current_dir(dir)
        .env("AGENTX_HOME", dir.join("home"))
        .env("AGENTX_LOG", "info");
    for (k, _) in std::env::vars() {
        if k.starts_with("AIPERF_")
            || k.starts_with("SLURM_")
            || k == "JOB_COMPLETION_INDEX"
            || (k.starts_with("AGENTX_") && k != "AGENTX_LOG")
        {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c
}

/// A finished `agentx-host` command: its output, its working directory (a run without
/// `--output-artifact-dir` writes to a fresh `artifacts/<scenario>-<time>-<id>`, named by
/// `artifacts/latest`) and how long it took. [`Run::exec`] runs the binary; [`Run::in_process`] runs
/// the command in this process, whose stderr holds what the command printed but not its log lines.
pub(crate) struct Run {
    pub out: Output,
    pub dir: tempfile::TempDir,
    pub took: Duration,
}

impl Run {
    /// `agentx-host ARGS` in `dir` (its artifacts under `dir/artifacts`, its home under `dir/home`),
    /// with `env` set over an environment cleared of the variables that change a replay.
    pub(crate) fn exec<S: AsRef<std::ffi::OsStr>>(
        dir: tempfile::TempDir,
        args: &[S],
        env: &[(&str, &str)],
    ) -> Run {
        let started = std::time::Instant::now();
        let out = agentx_command(dir.path(), env).args(args).output().unwrap();
        Run {
            out,
            dir,
            took: started.elapsed(),
        }
    }

    /// `agentx-host ARGS` run in this process ([`agentx::cli::run_in_process`]) as [`Run::exec`]
    /// runs it: in `dir`, its home `dir/home`, the environment `env` and nothing of this process's.
    /// The command's stderr has what it printed, not its log lines. Panics when the command cannot
    /// run in a process that is not its own (the refusal says why). With `AGENTX_TEST_SPAWN` set in
    /// the test process it spawns the binary ([`Run::exec`]), to check that both agree.
    pub(crate) fn in_process<S: AsRef<std::ffi::OsStr>>(
        dir: tempfile::TempDir,
        args: &[S],
        env: &[(&str, &str)],
    ) -> Run {
        if std::env::var_os("AGENTX_TEST_SPAWN").is_some() {
            return Run::exec(dir, args, env);
        }
        let argv: Vec<String> = args
            .iter()
            .map(|arg| {
                arg.as_ref()
                    .to_str()
                    .expect("an in-process argument is UTF-8")
                    .to_owned()
            })
            .collect();
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        let home = dir.path().join("home");
        share_compiled_cache(&home);
        let started = std::time::Instant::now();
        let done = agentx::cli::run_in_process(&argv, dir.path(), &home, &env)
            .unwrap_or_else(|refusal| panic!("agentx-host {argv:?} in process: {refusal:#}"));
        let out = Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(i32::from(done.code) << 8),
            stdout: done.stdout.into_bytes(),
            stderr: done.stderr.into_bytes(),
        };
        Run {
            out,
            dir,
            took: started.elapsed(),
        }
    }

    pub(crate) fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub(crate) fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    pub(crate) fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    /// The newest run's artifact directory (`artifacts/latest`).
    pub(crate) fn artifacts(&self) -> PathBuf {
        self.dir.path().join("artifacts/latest")
    }
    pub(crate) fn records(&self) -> Vec<RequestRecord> {
        read_records(&self.artifacts().join("records.jsonl")).unwrap()
    }
    /// An artifact file as JSON.
    pub(crate) fn json(&self, name: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.artifacts().join(name)).unwrap()).unwrap()
    }
    pub(crate) fn summary(&self) -> Value {
        self.json("run_summary.json")
    }
}

/// The first Chromium-family browser on PATH (`chromium`, `chromium-browser`, `google-chrome`), for
/// the tests that load a page in a real browser; `None` where none is installed.
pub(crate) fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// `chromium --headless` on `page` with `args` (e.g. `--dump-dom`), its own profile directory under
/// `profile`, and a virtual time budget so timers of the page run before it returns.
pub(crate) fn headless(browser: &Path, profile: &Path, page: &Path, args: &[&str]) -> Output {
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .env("HOME", profile)
        .output()
        .unwrap()
}

/// Waits until `path` (a records file being written) holds at least `n` records; panics after
/// `within`.
pub(crate) fn wait_for_records(path: &Path, n: usize, within: Duration) {
    let t0 = std::time::Instant::now();
    loop {
        let have = std::fs::read_to_string(path)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        if have >= n {
            return;
        }
        assert!(t0.elapsed() < within, "no records streamed");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the server counted over a phase, from the metrics of a `server_metrics_export.json`
/// (`metrics` or `warmup_metrics`): the increases of the simulator's vLLM counters on endpoint
/// `url` (`…/metrics`), summed over its series (engines, and `finished_reason` for requests), as
/// `[prompt tokens, generation tokens, prefix-cache hits, requests]`. A counter whose increase is
/// not published (`null`) fails the test, naming it.
pub(crate) fn server_counts(metrics: &Value, url: &str) -> [u64; 4] {
    [
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:prefix_cache_hits",
        "vllm:request_success",
    ]
    .map(|name| {
        let series = metrics[name]["series"]
            .as_array()
            .unwrap_or_else(|| panic!("no {name} in {metrics}"));
        series
            .iter()
            .filter(|s| s["endpoint_url"] == url)
            .map(|s| {
                s["stats"]["total"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name}: no total in {s}"))
            })
            .sum()
    })
}

/// A request of a plan: which trace's turn it replays, in which pass over the trace (the first
/// pass starts at a sampled turn with the trace's own history, a recycled one at turn 0 with every
/// reply live), and whether as a lane's warmup. The session (`correlation_id`) is not part of it:
/// sessions are numbered as lanes dispatch, which timing orders. Only the warmup requests (one per lane, at the lane's sampled start) are sure to be in both
/// of two replays; how far a lane gets in the profiling phase depends on the machine's load. The
/// cache-bust marker differs between runs in its bytes, never in its length.
pub(crate) fn plan_key(r: &RequestRecord) -> (String, u32, u32, bool) {
    (
        r.trace_id.clone(),
        r.turn,
        r.recycle_pass,
        r.phase == Phase::Warmup,
    )
}

/// What the simulator counted for the records of `phase`, as [`server_counts`] gives it: the
/// prompt, completion and cached tokens of each record's usage (the server's own counts, which it
/// adds to its counters when it admits a request and as it generates), and one request per record
/// that ended without an error.
///
/// Which records count is what the simulator counts: a request refused before admission (an API
/// error) counts nothing and its record has no usage; every request that streamed to its end
/// counts once under `finished_reason` `stop` or `length`. A request cancelled at the end of the
/// grace period is the one the client cannot account for: the server counted its prompt when it
/// admitted it, and generated tokens the client never read, and it counts its `abort` only when it
/// notices the closed connection, which may be after the last scrape; its record has no usage.
/// The runs of these tests give every request the time to finish, and this fails on a cancelled
/// record rather than guess.
pub(crate) fn record_counts(records: &[RequestRecord], phase: Phase) -> [u64; 4] {
    let of: Vec<&RequestRecord> = records.iter().filter(|r| r.phase == phase).collect();
    let cancelled: Vec<&str> = of
        .iter()
        .filter(|r| r.cancelled)
        .map(|r| r.request_id.as_str())
        .collect();
    assert!(
        cancelled.is_empty(),
        "cancelled {phase:?} requests {cancelled:?}: the server's counts of a cancelled request \
         are not the client's (see record_counts)"
    );
    let sum = |f: fn(&RequestRecord) -> Option<u64>| of.iter().filter_map(|r| f(r)).sum::<u64>();
    [
        sum(|r| r.usage.prompt_tokens),
        sum(|r| r.usage.completion_tokens),
        sum(|r| r.usage.cached_tokens),
        of.iter().filter(|r| r.error.is_none()).count() as u64,
    ]
}

/// The boundaries (`profiling_start`, …) whose scrapes endpoint `url` took, from the export's
/// `summary.boundary_scrapes`, in order.
pub(crate) fn boundaries_taken(export: &Value, url: &str) -> Vec<String> {
    export["summary"]["boundary_scrapes"][url]
        .as_array()
        .unwrap_or_else(|| panic!("no boundary scrapes of {url} in {}", export["summary"]))
        .iter()
        .filter(|b| b["time"].is_string())
        .map(|b| b["boundary"].as_str().unwrap().to_string())
        .collect()
}

/// [`server_counts`] from a `server_metrics_export.csv`: the `total` column of the counter rows of
/// `endpoint` (as the CSV shows it, `host:port`), summed per metric.
pub(crate) fn csv_counts(csv: &str, endpoint: &str) -> [u64; 4] {
    [
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:prefix_cache_hits",
        "vllm:request_success",
    ]
    .map(|name| {
        csv.lines()
            .map(|l| l.split(',').collect::<Vec<&str>>())
            .filter(|f| f.len() > 4 && f[0] == endpoint && f[1] == "counter" && f[2] == name)
            .map(|f| {
                f[4].parse::<u64>()
                    .unwrap_or_else(|_| panic!("{name}: no total in {f:?}"))
            })
            .sum()
    })
}

/// The validator of a committed JSON Schema (`rel` under the repository, draft 2020-12).
pub(crate) fn schema_validator(rel: &str) -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let text = std::fs::read_to_string(&path).expect("the schema file");
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::draft202012::new(&schema).expect("the schema is a valid 2020-12 schema")
}

/// Every way `doc` violates `validator`'s schema, with where.
pub(crate) fn schema_errors(validator: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    validator
        .iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

/// Fails with every violation when `dir`'s `run_manifest.json` or `run_summary.json` does not
/// match its committed schema (`schemas/run_*.schema.json`, generated from the types).
#[track_caller]
pub(crate) fn assert_artifacts_match_schemas(dir: &Path) {
    for (file, schema) in [
        ("run_manifest.json", "schemas/run_manifest.schema.json"),
        ("run_summary.json", "schemas/run_summary.schema.json"),
    ] {
        let path = dir.join(file);
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let errors = schema_errors(&schema_validator(schema), &doc);
        assert!(
            errors.is_empty(),
            "{} does not match {schema}:\n{}",
            path.display(),
            errors.join("\n")
        );
    }
}

/// The client settings of a test that talks to a server by hand: chat completions at `url`, no
/// key, pooled connections, 5 s to connect and 60 s per request.
pub(crate) fn chat_client_config(url: &str) -> agentx::client::ClientConfig {
    agentx::client::ClientConfig {
        url: url.to_owned(),
        endpoint: "/v1/chat/completions".into(),
        api: agentx::client::EndpointType::Chat,
        api_key: None,
        idle_timeout: Duration::from_secs(300),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(60),
        http2: false,
        routing: agentx::client::RoutingHeaders::default(),
        reuse: agentx::client::ConnectionReuse::default(),
        tcp_user_timeout: None,
        trace_context: false,
    }
}

/// The options of opening a corpus into the cache at `cache`: every trace, as it declares itself.
pub(crate) fn open_options(cache: &Path) -> agentx::dataset::OpenOptions {
    agentx::dataset::OpenOptions {
        num_dataset_entries: None,
        max_context_length: None,
        max_osl: None,
        cache_dir: Some(cache.to_owned()),
        format: None,
        block_size: None,
        trace_block_size: None,
    }
}
