//! Cache truth: the block chains the replay hashes from what it sends equal the chains of the
//! prompts as the simulator reads them, in every assistant mode and tiling, with and without a
//! cache-bust marker; and against a four-engine simulator whose cache is the model's LRU, the
//! run's cache report splits the misses exactly as the simulator does (cold, capacity, routing),
//! with nothing unexplained, under session and round-robin routing and a cache below the working
//! set.

use agentx::dataset::tokens::blocks::chain_of;
use agentx::dataset::{
    AssistantMode, CacheBust, Conversation, Dataset, OpenOptions, Placement, PromptSynth, Tiling,
};

use std::collections::HashSet;

use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{fixture, tree_run_args, Run, Sim};

fn open_golden_corpus(cache: &std::path::Path) -> Dataset {
    Dataset::open_path(
        &fixture("golden").join("tiling").join("corpus.jsonl"),
        &OpenOptions {
            num_dataset_entries: Some(8),
            ..crate::support::open_options(cache)
        },
    )
    .expect("open the golden tiling corpus")
}

/// The chain of the messages as the simulator reads them: each message's content, in order.
fn chain_of_messages(
    conv: &Conversation,
    bust: Option<CacheBust<'_>>,
    block_size: u32,
) -> (Vec<u64>, u64) {
    let messages = conv.messages(bust);
    let chain = chain_of(messages.iter().map(|m| m.content.as_str()), block_size);
    (chain.hashes, chain.tokens)
}

/// The conversation's next turn. Every third turn has no live reply (a failed request), which
/// rebuilds or keeps the recorded text; the others answer with text that needs JSON escapes.
fn advance_with_a_reply(conv: &mut Conversation, turn: usize) {
    let reply = format!("reply \"{turn}\"\n\twith\\escapes\u{1}and  words");
    conv.advance((turn % 3 != 2).then_some(reply.as_str()))
        .expect("a next turn");
}

/// Walks every turn of the first traces, checking the kept chain against the whole prompt's at
/// two block sizes; returns the turns checked.
fn check_every_turn(
    ds: &Dataset,
    mode: AssistantMode,
    tiling: Tiling,
    bust: Option<CacheBust<'_>>,
) -> usize {
    let synth = PromptSynth::new(7).with_tiling(tiling);
    let mut checked = 0;
    for traj in ds.trajectories() {
        let mut conv = synth
            .conversation(traj, 0, mode)
            .expect("turn 0 exists")
            .with_recorded_history();
        for turn in 0..traj.num_turns() {
            for block_size in [16, 64] {
                let kept = conv.with_prompt_chain(bust, block_size, |hashes, tokens| {
                    (hashes.to_vec(), tokens)
                });
                assert_eq!(
                    kept,
                    chain_of_messages(&conv, bust, block_size),
                    "trace {} turn {turn}, {mode:?} {tiling:?}, block size {block_size}, marker {:?}",
                    traj.id(),
                    bust.map(|marker| marker.placement)
                );
                checked += 1;
            }
            if conv.is_final() {
                break;
            }
            advance_with_a_reply(&mut conv, turn);
        }
    }
    checked
}

/// Walks every turn of the first traces as the replay registers them: each turn's masked chain
/// leaves out the blocks forgotten after the turn before (every one of them in the set of
/// registered blocks) and gives the rest of the whole masked prompt's chain, as if nothing had been
/// forgotten; the plain chain the same, with the last forgotten block's hash; returns the turns
/// checked.
fn check_masked_forgetting(ds: &Dataset, mode: AssistantMode, bust: CacheBust<'_>) -> usize {
    let synth = PromptSynth::new(7);
    let masked = CacheBust {
        placement: bust.placement,
        text: "#",
    };
    let mut checked = 0;
    for traj in ds.trajectories() {
        let mut conv = synth
            .conversation(traj, 0, mode)
            .expect("turn 0 exists")
            .with_recorded_history();
        let mut registered = std::collections::HashSet::new();
        let mut sent = std::collections::HashSet::new();
        for turn in 0..traj.num_turns() {
            let (known, tail, words) = conv
                .with_masked_prompt_chain(Some(bust), 16, |known, tail, words| {
                    (known, tail.to_vec(), words)
                })
                .expect("a marker");
            let (whole, whole_words) = chain_of_messages(&conv, Some(masked), 16);
            let at = format!("trace {} turn {turn}, {mode:?}", traj.id());
            assert_eq!((&tail[..], words), (&whole[known..], whole_words), "{at}");
            assert!(
                whole[..known].iter().all(|h| registered.contains(h)),
                "{at}"
            );
            registered.extend(tail);
            // The plain chain likewise: the blocks after the ones given up, joined to them by the
            // last one's hash.
            let (forgotten, last_forgotten, plain_tail, plain_words) = conv
                .with_marked_prompt_chain(Some(bust), 16, |prompt| {
                    let tail = prompt.hashes.to_vec();
                    (prompt.forgotten, prompt.last_forgotten, tail, prompt.words)
                });
            let (plain, _) = chain_of_messages(&conv, Some(bust), 16);
            assert_eq!(
                (&plain_tail[..], plain_words),
                (&plain[forgotten..], whole_words),
                "{at}"
            );
            assert_eq!(
                last_forgotten,
                forgotten.checked_sub(1).map(|last| plain[last]),
                "{at}"
            );
            assert!(plain[..forgotten].iter().all(|h| sent.contains(h)), "{at}");
            sent.extend(plain_tail);
            conv.forget_chains();
            checked += 1;
            if conv.is_final() {
                break;
            }
            advance_with_a_reply(&mut conv, turn);
        }
    }
    checked
}

#[test]
fn both_chains_forget_what_was_registered_and_go_on_as_the_whole() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open_golden_corpus(cache.path());
    let mut checked = 0;
    for placement in [Placement::SystemPrefix, Placement::FirstUserSuffix] {
        for mode in [AssistantMode::Recorded, AssistantMode::Live] {
            let bust = CacheBust {
                placement,
                text: "[session-3f2a]",
            };
            checked += check_masked_forgetting(&ds, mode, bust);
        }
    }
    assert!(checked > 100, "only {checked} turns checked");
}

/// Each turn's conversation made anew (as a stream's next turn after a warmup primer is), adopting
/// the chains its turn before made and registered: both chains leave out only blocks the turn
/// before registered, and give the rest of the whole prompt's chains. Returns the turns checked and
/// the blocks they did not hash again.
fn check_adopted_chains(ds: &Dataset, tiling: Tiling, bust: CacheBust<'_>) -> (usize, usize) {
    let synth = PromptSynth::new(7).with_tiling(tiling);
    let masked = CacheBust {
        placement: bust.placement,
        text: "#",
    };
    let conversation = |traj, turn| {
        synth
            .conversation(traj, turn, AssistantMode::Recorded)
            .expect("the turn exists")
            .with_recorded_history()
    };
    let (mut checked, mut adopted) = (0, 0);
    for traj in ds.trajectories() {
        let (mut sent, mut masked_sent) = (HashSet::new(), HashSet::new());
        let mut earlier: Option<Conversation> = None;
        for turn in 0..traj.num_turns() {
            let conv = conversation(traj, turn);
            if let Some(earlier) = &earlier {
                conv.adopt_chains(earlier);
            }
            let at = format!(
                "trace {} turn {turn}, {tiling:?} {:?}",
                traj.id(),
                bust.placement
            );
            let (forgotten, tail) = conv.with_marked_prompt_chain(Some(bust), 16, |prompt| {
                (prompt.forgotten, prompt.hashes.to_vec())
            });
            let (plain, _) = chain_of_messages(&conv, Some(bust), 16);
            assert_eq!(&tail[..], &plain[forgotten..], "{at}");
            assert!(plain[..forgotten].iter().all(|h| sent.contains(h)), "{at}");
            let (known, masked_tail) = conv
                .with_masked_prompt_chain(Some(bust), 16, |known, tail, _| (known, tail.to_vec()))
                .expect("a marker");
            let (whole_masked, _) = chain_of_messages(&conv, Some(masked), 16);
            assert_eq!(&masked_tail[..], &whole_masked[known..], "{at}");
            assert!(
                whole_masked[..known]
                    .iter()
                    .all(|h| masked_sent.contains(h)),
                "{at}"
            );
            sent.extend(tail);
            masked_sent.extend(masked_tail);
            conv.forget_chains();
            adopted += forgotten;
            checked += 1;
            earlier = Some(conv);
        }
    }
    (checked, adopted)
}

#[test]
fn a_conversation_made_anew_takes_over_the_chains_of_its_turn_before() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open_golden_corpus(cache.path());
    let (mut checked, mut adopted) = (0, 0);
    for tiling in [Tiling::RecordedLength, Tiling::Reference] {
        for placement in [Placement::SystemPrefix, Placement::FirstUserSuffix] {
            let bust = CacheBust {
                placement,
                text: "[session-3f2a]",
            };
            let (turns, blocks) = check_adopted_chains(&ds, tiling, bust);
            checked += turns;
            adopted += blocks;
        }
    }
    assert!(checked > 100, "only {checked} turns checked");
    assert!(adopted > 1000, "only {adopted} blocks taken over");
}

#[test]
fn chains_are_not_taken_over_across_modes_traces_or_markers() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open_golden_corpus(cache.path());
    let synth = PromptSynth::new(7);
    let bust = CacheBust {
        placement: Placement::SystemPrefix,
        text: "[session-3f2a]",
    };
    let mut trajectories = ds.trajectories();
    let (first, second) = (trajectories.next().unwrap(), trajectories.next().unwrap());
    let registered = |traj, mode| {
        let conv = synth.conversation(traj, 0, mode).expect("turn 0 exists");
        conv.with_marked_prompt_chain(Some(bust), 16, |_| ());
        conv.forget_chains();
        conv
    };
    let forgotten_after = |next: &Conversation, earlier: &Conversation, bust| {
        next.adopt_chains(earlier);
        next.with_marked_prompt_chain(Some(bust), 16, |prompt| prompt.forgotten)
    };
    let recorded = AssistantMode::Recorded;
    let next = |traj, mode| synth.conversation(traj, 1, mode).expect("turn 1 exists");
    // Live mode knows a message by its place in one history.
    let live = AssistantMode::Live;
    assert_eq!(
        forgotten_after(&next(first, live), &registered(first, live), bust),
        0
    );
    // Another trace's chains are not this one's.
    let other = registered(second, recorded);
    assert_eq!(forgotten_after(&next(first, recorded), &other, bust), 0);
    // Another marker starts the chains anew.
    let earlier = registered(first, recorded);
    let another = CacheBust {
        placement: Placement::SystemPrefix,
        text: "[session-9c1d]",
    };
    assert_eq!(
        forgotten_after(&next(first, recorded), &earlier, another),
        0
    );
    // The same trace and marker take them over.
    let earlier = registered(first, recorded);
    assert!(forgotten_after(&next(first, recorded), &earlier, bust) > 0);
}

#[test]
fn the_chain_kept_across_turns_equals_the_chain_of_the_whole_prompt() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open_golden_corpus(cache.path());
    let mut checked = 0;
    for mode in [AssistantMode::Recorded, AssistantMode::Live] {
        for tiling in [Tiling::RecordedLength, Tiling::Reference] {
            checked += check_every_turn(&ds, mode, tiling, None);
        }
    }
    assert!(checked > 200, "only {checked} turns checked");
}

#[test]
fn the_chain_stays_true_through_compactions_and_mid_trace_starts() {
    // Long with-subagents traces squeezed into a small context: their contexts reset (compact)
    // again and again, and a segment rebuilt after a reset can sit where an old one sat.
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("compacted.jsonl");
    agentx::dataset::synth::write_corpus(
        &agentx::dataset::synth::SynthOptions {
            traces: 6,
            seed: 7,
            max_isl: None,
            max_turns: Some(400),
            context: Some(4096),
            subagents: true,
        },
        &corpus,
    )
    .unwrap();
    let ds = Dataset::open_path(&corpus, &crate::support::open_options(dir.path())).unwrap();
    let synth = PromptSynth::new(7);
    let mut checked = 0;
    for traj in ds.trajectories() {
        for start in [0, traj.num_turns() / 3] {
            let mut conv = synth
                .conversation(traj, start, AssistantMode::Recorded)
                .expect("the start turn exists")
                .with_recorded_history();
            loop {
                let kept =
                    conv.with_prompt_chain(None, 16, |hashes, tokens| (hashes.to_vec(), tokens));
                assert_eq!(
                    kept,
                    chain_of_messages(&conv, None, 16),
                    "trace {} from turn {start}, turn {}",
                    traj.id(),
                    conv.turn()
                );
                checked += 1;
                if conv.is_final() {
                    break;
                }
                conv.advance(None).expect("a next turn");
            }
        }
    }
    assert!(checked > 500, "only {checked} turns checked");
}

#[test]
fn the_chain_includes_the_marker_where_it_is_written() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open_golden_corpus(cache.path());
    for placement in [
        Placement::SystemPrefix,
        Placement::SystemSuffix,
        Placement::FirstUserPrefix,
        Placement::FirstUserSuffix,
    ] {
        // A prefix marker ends without a space and a suffix one starts without one, so they run
        // into the words next to them, as on the wire.
        let bust = CacheBust {
            placement,
            text: "[session-3f2a]",
        };
        check_every_turn(&ds, AssistantMode::Live, Tiling::RecordedLength, Some(bust));
        check_every_turn(&ds, AssistantMode::Recorded, Tiling::Reference, Some(bust));
        check_masked_chains(&ds, placement);
    }
}

/// Two sessions of each trace with different markers: their chains differ, their masked chains
/// are equal, and equal the chain of the prompt with the marker written as `#`.
fn check_masked_chains(ds: &Dataset, placement: Placement) {
    let synth = PromptSynth::new(7);
    let marker = |text| CacheBust { placement, text };
    let masked_text = marker("#");
    for traj in ds.trajectories().take(3) {
        let conv = synth
            .conversation(traj, 1, AssistantMode::Recorded)
            .expect("turn 1 exists");
        let chain =
            |text| conv.with_prompt_chain(Some(marker(text)), 16, |hashes, _| hashes.to_vec());
        let masked = |text| {
            conv.with_masked_prompt_chain(Some(marker(text)), 16, |known, hashes, words| {
                assert_eq!(known, 0, "nothing was forgotten");
                (hashes.to_vec(), words)
            })
        };
        let (first, second) = (chain("[rid:0001]"), chain("[rid:0002]"));
        assert_ne!(first, second, "{placement:?}");
        // The blocks before the marker's first block are the same under any marker; from it on
        // they chain it (what the prefix registry forgets of a tree that ended).
        let marked_from = conv.marked_from_block().expect("the marker was hashed");
        let same = first
            .iter()
            .zip(&second)
            .take_while(|(a, b)| a == b)
            .count();
        assert_eq!(same, marked_from.min(first.len()), "{placement:?}");
        assert_eq!(masked("[rid:0001]"), masked("[rid:0002]"), "{placement:?}");
        assert_eq!(
            masked("[rid:0001]"),
            Some(chain_of_messages(&conv, Some(masked_text), 16)),
            "{placement:?}"
        );
        assert_eq!(
            conv.with_masked_prompt_chain(None, 16, |_, _, words| words),
            None
        );
    }
}

/// A four-engine simulator whose prefix cache (`capacity_tokens` per engine) is the cache model's
/// own LRU, routing by `router`.
fn four_engine_sim(router: agentx::sim::Router, capacity_tokens: u64) -> Sim {
    Sim::start(SimConfig {
        engines: 4,
        router,
        eviction: agentx::sim::Eviction::Lru,
        cache_capacity_tokens: capacity_tokens,
        ..SimConfig::default()
    })
}

/// Runs the with-subagents trees against `sim` with Dynamo's session headers; the cache truth of
/// its summary.
fn cache_truth_of(sim: &Sim, extra: &[&str]) -> (Value, Vec<agentx::record::RequestRecord>) {
    cache_truth_at(sim, 4, extra)
}

/// [`cache_truth_of`] with `lanes` lanes.
fn cache_truth_at(
    sim: &Sim,
    lanes: u32,
    extra: &[&str],
) -> (Value, Vec<agentx::record::RequestRecord>) {
    let mut args = tree_run_args(&sim.url(), &["--routing-headers", "dynamo"]);
    let concurrency = args.iter().position(|arg| arg == "--concurrency").unwrap() + 1;
    args[concurrency] = lanes.to_string();
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let run = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    let cache = summary["summary"]["cache"].clone();
    assert!(cache.is_object(), "no cache truth in {summary}");
    (cache, run.records())
}

/// The model's split equals the simulator's own, token for token, and the server hit exactly what
/// the model predicts.
fn assert_exact(cache: &Value) {
    let miss = &cache["miss"];
    let split = &cache["server_split"];
    for cause in ["capacity", "routing"] {
        assert_eq!(miss[cause], split[cause], "{cause}: {cache:#}");
    }
    // The simulator knows no marker and no history: what the marker kept from hitting, and what a
    // rewritten history missed, are cold to it.
    assert_eq!(
        missed(cache, "cold") + missed(cache, "bust") + missed(cache, "divergence"),
        split["cold"].as_u64().unwrap(),
        "{cache:#}"
    );
    assert_eq!(miss["unexplained"], 0, "{cache:#}");
    assert_eq!(miss["surplus"], 0, "{cache:#}");
    assert_eq!(
        cache["measured"]["value"], cache["achievable"]["per_worker_as_routed"]["value"],
        "{cache:#}"
    );
    assert_eq!(cache["routing"], "measured");
    // The simulator's counters over the profiling window say what its responses said.
    let counters = cache["measured_counters"]["device"].as_f64().unwrap();
    let measured = cache["measured"]["value"].as_f64().unwrap();
    assert!((counters - measured).abs() < 1e-9, "{cache:#}");
    // The engines the responses named: a short run may leave one of the four unused.
    let workers = cache["workers"].as_u64().unwrap();
    assert!((1..=4).contains(&workers), "{cache:#}");
    assert_eq!(cache["block_size"]["value"], 16);
}

fn missed(cache: &Value, cause: &str) -> u64 {
    cache["miss"][cause].as_u64().unwrap()
}

/// Every stream ran on one worker, and every subagent whose root the server admitted first on its
/// root's. (A tree started mid-way primes its alive streams at once: a subagent the server admits
/// before its root cannot find the root bound, and is bound by its own header.)
fn assert_each_tree_on_one_worker(records: &[agentx::record::RequestRecord]) {
    use std::collections::HashMap;
    // Each stream's worker and the admission number of its first request.
    let mut streams: HashMap<&str, (&str, u64)> = HashMap::new();
    for record in records {
        let server = record.server.as_ref();
        let worker = server.and_then(|server| server.worker.as_deref());
        let admitted = server.and_then(|server| server.admit_seq);
        let (Some(worker), Some(admitted)) = (worker, admitted) else {
            panic!("{} named no worker or admission", record.request_id);
        };
        let stream = streams
            .entry(record.correlation_id.as_str())
            .or_insert((worker, admitted));
        assert_eq!(
            stream.0, worker,
            "{} ({:?}, turn {}) of stream {} moved worker",
            record.request_id, record.phase, record.turn, record.correlation_id
        );
        stream.1 = stream.1.min(admitted);
    }
    let mut bound_to_root = 0;
    for record in records {
        let tree = record.tree.as_ref().expect("a tree run's record");
        let (Some(child), Some(root)) = (
            streams.get(record.correlation_id.as_str()),
            streams.get(tree.root_correlation_id.as_str()),
        ) else {
            continue;
        };
        if tree.agent_depth > 0 && root.1 < child.1 {
            assert_eq!(
                child.0, root.0,
                "subagent stream {} is not on its root's worker",
                record.correlation_id
            );
            bound_to_root += 1;
        }
    }
    assert!(bound_to_root > 0, "no subagent followed its root");
}

#[test]
fn session_routing_keeps_each_tree_on_one_worker_and_the_model_matches_the_simulator_exactly() {
    let sim = four_engine_sim(agentx::sim::Router::Session, 1 << 20);
    let (cache, records) = cache_truth_of(&sim, &[]);
    assert_exact(&cache);
    // Each tree stays on one engine once bound, a subagent on its parent's. (Its routing misses are
    // then content another session sent first to another engine: the corpus's shared prefixes and
    // recycled trees, a share that depends on the run's length.)
    assert_each_tree_on_one_worker(&records);
    // The capacity came from the simulator's vllm:cache_config_info.
    assert_eq!(cache["capacity_tokens"]["value"], 1 << 20, "{cache:#}");
    assert_eq!(cache["capacity_tokens"]["source"], "vllm:cache_config_info");
    // Every record kept its chain, at the simulator's block size.
    assert!(records.iter().all(|record| record
        .prompt_blocks
        .as_ref()
        .is_some_and(|chain| chain.block_size == 16)));
    let measured = cache["measured"]["value"].as_f64().unwrap();
    assert!(measured > 0.3, "{cache:#}");

    // Twelve lanes on eight trees: lanes share trees, each with its own marker, so blocks one
    // session sent miss in another for the marker alone, and the split stays exact.
    // A simulator of its own: one that served the run above still holds that run's prompts.
    let fresh = four_engine_sim(agentx::sim::Router::Session, 1 << 20);
    let (shared, records) = cache_truth_at(&fresh, 12, &[]);
    assert_exact(&shared);
    assert_each_tree_on_one_worker(&records);
    assert!(missed(&shared, "bust") > 0, "{shared:#}");
}

#[test]
fn round_robin_routing_shows_as_routing_misses_and_a_small_cache_as_capacity_misses() {
    let sim = four_engine_sim(agentx::sim::Router::RoundRobin, 1 << 20);
    let (cache, _) = cache_truth_of(&sim, &[]);
    assert_exact(&cache);
    let routed_miss = 1.0
        - cache["achievable"]["per_worker_as_routed"]["value"]
            .as_f64()
            .unwrap();
    // A session's turns land on other engines than its prefix: routing misses, which an infinite
    // cache would have hit.
    assert!(missed(&cache, "routing") > 0, "{cache:#}");
    let infinite = cache["achievable"]["infinite"]["value"].as_f64().unwrap();
    assert!(infinite > 1.0 - routed_miss, "{cache:#}");

    let small = four_engine_sim(agentx::sim::Router::Session, 4096);
    let (cache, _) = cache_truth_of(&small, &[]);
    assert_exact(&cache);
    // The model evicted exactly the blocks the simulator did.
    let families = agentx::metrics::prometheus::parse(&small.metrics_text()).unwrap();
    let evicted: u64 = families
        .iter()
        .flat_map(|family| &family.samples)
        .filter(|sample| sample.name == "agentx_sim:kv_evicted_blocks_total")
        .map(|sample| sample.value as u64)
        .sum();
    assert!(evicted > 0);
    assert_eq!(cache["evicted_blocks"], evicted, "{cache:#}");
    assert!(missed(&cache, "capacity") > 0, "{cache:#}");
    assert!(cache["capacity_gap_median_ms"].as_f64().unwrap() > 0.0);
    // A capacity given by flag that contradicts the server is noted, and used.
    let (flagged, _) = cache_truth_of(&small, &["--kv-capacity-tokens", "8192"]);
    assert_eq!(flagged["capacity_tokens"]["value"], 8192);
    assert!(
        flagged["notes"].as_array().unwrap().iter().any(|note| note
            .as_str()
            .unwrap()
            .contains("contradicts the server's 4096")),
        "{flagged:#}"
    );
}

/// The achievable hit before a run: `dataset stats` walks the corpus with lanes side by side, and
/// the dry run walks the plan's lanes, both through the same cache model; a capacity below the
/// lanes' working set loses hits to eviction, one above it loses none.
#[test]
fn the_achievable_hit_before_a_run_in_corpus_and_plan_order() {
    let corpus = fixture("traces-24.jsonl");
    let corpus = corpus.to_str().unwrap();
    let stats = |extra: &[&str]| {
        let mut args = vec!["dataset", "stats", corpus, "--json"];
        args.extend_from_slice(extra);
        let run = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
        assert_eq!(run.code(), 0, "{}", run.stderr());
        serde_json::from_str::<Value>(&run.stdout()).unwrap()
    };
    let small = stats(&["--concurrency", "8", "--kv-capacity-tokens", "200000"]);
    let walked = &small["achievable"];
    let infinite = walked["infinite"].as_f64().unwrap();
    // The infinite cache is the corpus's prefix hit (in tokens rather than blocks).
    let theoretical = small["theoretical_hit_rate_prefix"].as_f64().unwrap();
    assert!((infinite - theoretical).abs() < 0.01, "{walked}");
    assert!(
        walked["at_capacity"].as_f64().unwrap() < infinite - 0.05,
        "{walked}"
    );
    assert!(walked["evicted_blocks"].as_u64().unwrap() > 0, "{walked}");
    assert_eq!(walked["requests"], small["requests"]);
    let ample = stats(&["--concurrency", "8", "--kv-capacity-tokens", "100000000"]);
    assert_eq!(
        ample["achievable"]["at_capacity"],
        ample["achievable"]["infinite"]
    );
    assert_eq!(ample["achievable"]["evicted_blocks"], 0);
    // Without a capacity there is no walk.
    assert!(stats(&[]).get("achievable").is_none());

    for scenario in ["agentx-mvp", "agentx"] {
        let args = [
            "run",
            "--dry-run",
            "--json",
            "--scenario",
            scenario,
            "--dataset",
            corpus,
            "--concurrency",
            "8",
            "--random-seed",
            "3",
            "--kv-capacity-tokens",
            "100000",
        ];
        let run = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let plan: Value = serde_json::from_str(&run.stdout()).unwrap();
        let walked = &plan["achievable"];
        assert_eq!(walked["lanes"], 8, "{scenario}: {walked}");
        assert_eq!(walked["capacity_tokens"], 100000);
        assert!(
            walked["requests"].as_u64().unwrap() >= 8,
            "{scenario}: {walked}"
        );
        let at_capacity = walked["at_capacity"].as_f64().unwrap();
        assert!(
            at_capacity < walked["infinite"].as_f64().unwrap(),
            "{scenario}: {walked}"
        );
    }
}
