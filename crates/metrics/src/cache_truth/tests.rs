use agentx_record::testkit::{in_stream, rec};
use agentx_record::{MissTruth, PromptBlocks, ServerSide};

use super::*;

/// A stream's turn with a chain of `words` words in blocks of 4, its first `shared` blocks first
/// sent by `from`, run on `worker` as the `admit`-th request, reporting `cached` tokens.
struct Turn<'a> {
    stream: &'a str,
    turn: u32,
    send_ms: u64,
    words: u64,
    shared: u32,
    from: Option<&'a str>,
    worker: &'a str,
    admit: u64,
    cached: Option<u64>,
}

/// A stream's first turn of 9 words, the first request the server admitted, on worker 0, with no
/// cached tokens.
fn first_turn(stream: &str) -> Turn<'_> {
    Turn {
        stream,
        turn: 0,
        send_ms: 0,
        words: 9,
        shared: 0,
        from: None,
        worker: "0",
        admit: 1,
        cached: Some(0),
    }
}

fn record(turn: &Turn<'_>) -> RequestRecord {
    let mut record = in_stream(
        rec(turn.send_ms, &[5, 6], turn.words, 2),
        turn.stream,
        turn.turn,
    );
    record.usage.cached_tokens = turn.cached;
    record.prompt_blocks = Some(PromptBlocks {
        block_size: 4,
        blocks: (turn.words / 4) as u32,
        words: turn.words,
        shared: turn.shared,
        from: turn.from.map(str::to_owned),
        shared_unmarked: None,
    });
    record.server = Some(ServerSide {
        worker: Some(turn.worker.to_owned()),
        admit_seq: Some(turn.admit),
        ..ServerSide::default()
    });
    record
}

fn spec(capacity_tokens: Option<u64>) -> ModelSpec {
    ModelSpec {
        block_size: None,
        capacity_tokens: capacity_tokens.map(|value| Sourced {
            value,
            source: "--kv-capacity-tokens".to_owned(),
        }),
    }
}

#[test]
fn a_turn_on_another_worker_misses_its_history_for_routing() {
    let records = [
        record(&Turn {
            stream: "a",
            turn: 0,
            send_ms: 0,
            words: 10,
            shared: 0,
            from: None,
            worker: "0",
            admit: 1,
            cached: Some(0),
        }),
        record(&Turn {
            stream: "a",
            turn: 1,
            send_ms: 100,
            words: 18,
            shared: 2,
            from: Some("a-r0"),
            worker: "1",
            admit: 2,
            cached: Some(0),
        }),
    ];
    let report = cache_report(&records, &spec(None)).unwrap();
    assert_eq!((report.workers, report.routing.as_str()), (2, "measured"));
    // Turn 0: two usable blocks, cold, and its 2-word tail. Turn 1 on worker 1: its first two
    // blocks sit on worker 0 (routing), the next two are new, plus a 2-word tail.
    assert_eq!(report.miss.routing, 8);
    assert_eq!(report.miss.cold, 10 + 10);
    assert_eq!(report.miss.capacity, 0);
    assert_eq!(report.miss.unexplained, Some(0));
    assert_eq!(report.achievable.infinite.value, Some(8.0 / 28.0));
    assert_eq!(report.achievable.per_worker_as_routed.value, Some(0.0));
    assert_eq!(report.measured.value, Some(0.0));
    assert!(report.achievable.pooled_at_capacity.value.is_none());
    assert!(report
        .notes
        .iter()
        .any(|note| note.contains("--kv-capacity-tokens")));
    assert_eq!(report.by_turn.len(), 2);
    assert_eq!(report.by_turn[1].miss.routing, 8);
}

#[test]
fn a_prefix_evicted_before_its_return_misses_for_capacity_with_its_gap() {
    let turn = |stream, turn, send_ms, shared, from, admit, cached| Turn {
        stream,
        turn,
        send_ms,
        words: 9,
        shared,
        from,
        worker: "0",
        admit,
        cached,
    };
    let records = [
        record(&turn("a", 0, 0, 0, None, 1, Some(0))),
        // Another prompt fills the two-block cache.
        record(&turn("b", 0, 50, 0, None, 2, Some(0))),
        // The first prompt again: evicted; the server still hit 8 (more than the model).
        record(&turn("c", 0, 250, 2, Some("a-r0"), 3, Some(8))),
    ];
    let report = cache_report(&records, &spec(Some(8))).unwrap();
    assert_eq!(report.miss.capacity, 8);
    assert_eq!(report.miss.cold, 8 + 1 + 8 + 1 + 1);
    assert_eq!(report.capacity_gap_median_ms, Some(250.0));
    assert_eq!(report.miss.surplus, Some(8));
    assert_eq!(report.miss.unexplained, Some(0));
    // An infinite cache would have hit the third prompt's two blocks.
    assert_eq!(report.achievable.infinite.value, Some(8.0 / 27.0));
    assert_eq!(report.achievable.pooled_at_capacity.value, Some(0.0));
}

#[test]
fn the_server_hitting_less_than_the_model_is_unexplained() {
    let first = first_turn("a");
    let again = Turn {
        stream: "a",
        turn: 1,
        send_ms: 10,
        shared: 2,
        from: Some("a-r0"),
        admit: 2,
        cached: Some(4),
        ..first
    };
    let report = cache_report(&[record(&first), record(&again)], &spec(None)).unwrap();
    assert_eq!(report.miss.unexplained, Some(4));
    assert_eq!(report.miss.surplus, Some(0));
}

#[test]
fn figures_the_records_cannot_support_are_null_with_the_reason() {
    let mut no_usage = record(&Turn {
        cached: None,
        ..first_turn("a")
    });
    no_usage.server = None;
    let report = cache_report(&[no_usage.clone()], &spec(None)).unwrap();
    assert!(report.measured.value.is_none());
    assert!(report
        .measured
        .null_reason
        .as_deref()
        .unwrap()
        .contains("--enable-prompt-tokens-details"));
    assert_eq!(report.miss.unexplained, None);
    assert_eq!(report.routing, "one pool");
    // Records from before the chains: no report at all.
    no_usage.prompt_blocks = None;
    assert!(cache_report(&[no_usage], &spec(None)).is_none());
}

#[test]
fn a_refused_long_prompt_misses_every_token_for_the_context_cap() {
    let mut refused = record(&Turn {
        stream: "a",
        turn: 0,
        send_ms: 0,
        words: 40,
        shared: 0,
        from: None,
        worker: "0",
        admit: 1,
        cached: None,
    });
    refused.server = None;
    refused.first_token_ns = None;
    refused.context_overflow = true;
    refused.usage.prompt_tokens = None;
    let report = cache_report(&[refused], &spec(None)).unwrap();
    assert_eq!(report.miss.context_cap, 40);
    assert_eq!(report.prompt_tokens, 40);
}

#[test]
fn a_larger_block_size_takes_every_other_chain_block_and_words_scale_to_tokens() {
    let mut first = record(&Turn {
        stream: "a",
        turn: 0,
        send_ms: 0,
        words: 17,
        shared: 0,
        from: None,
        worker: "0",
        admit: 1,
        cached: Some(0),
    });
    let mut again = record(&Turn {
        stream: "a",
        turn: 1,
        send_ms: 5,
        words: 17,
        shared: 4,
        from: Some("a-r0"),
        worker: "0",
        admit: 2,
        cached: Some(16),
    });
    // The server counts twice the words (a tokenizer): the model's words scale to its tokens.
    first.usage.prompt_tokens = Some(34);
    again.usage.prompt_tokens = Some(34);
    let eight = ModelSpec {
        block_size: Some(Sourced {
            value: 8,
            source: "vllm:cache_config_info".to_owned(),
        }),
        capacity_tokens: None,
    };
    let report = cache_report(&[first.clone(), again.clone()], &eight).unwrap();
    assert_eq!(report.block_size.value, 8);
    // Two blocks of 8 words hit: 16 words, 32 tokens; the server said 16.
    assert_eq!(report.achievable.infinite.value, Some(32.0 / 68.0));
    assert_eq!(report.miss.unexplained, Some(16));
    // A block size that is not a multiple of the chains' falls back to the chains', with a note.
    let six = ModelSpec {
        block_size: Some(Sourced {
            value: 6,
            source: "--kv-block-size".to_owned(),
        }),
        capacity_tokens: None,
    };
    let report = cache_report(&[first, again], &six).unwrap();
    assert_eq!(report.block_size.value, 4);
    assert!(report
        .notes
        .iter()
        .any(|note| note.contains("not a multiple")));
}

#[test]
fn the_servers_own_split_is_summed_when_every_response_gave_it() {
    let mut only = record(&first_turn("a"));
    only.server.as_mut().unwrap().truth = Some(MissTruth {
        cold: 9,
        capacity: 0,
        routing: 0,
    });
    let report = cache_report(&[only], &spec(None)).unwrap();
    assert_eq!(
        report.server_split,
        Some(ServerMissSplit {
            cold: 9,
            capacity: 0,
            routing: 0
        })
    );
    assert_eq!(report.miss.cold, 9);
}

#[test]
fn blocks_another_session_sent_with_its_own_marker_miss_for_the_bust() {
    let mut first = record(&first_turn("a"));
    first.prompt_blocks.as_mut().unwrap().shared_unmarked = Some(0);
    // A second session of the same trace: its marker makes every block new, but with the markers
    // masked its first block was sent by the first session.
    let mut second = record(&Turn {
        stream: "b",
        admit: 2,
        send_ms: 10,
        ..first_turn("b")
    });
    second.prompt_blocks.as_mut().unwrap().shared_unmarked = Some(1);
    let report = cache_report(&[first, second], &spec(None)).unwrap();
    // Each has two usable blocks and a 1-word tail: the first's all cold; the second's first
    // block missed for the bust, the rest cold.
    assert_eq!(report.miss.bust, 4);
    assert_eq!(report.miss.cold, 9 + 4 + 1);
    assert_eq!(report.by_turn[0].miss.bust, 4);
}

#[test]
fn each_session_has_its_own_row_and_the_rows_add_up() {
    let records = [
        record(&first_turn("a")),
        record(&Turn {
            admit: 2,
            send_ms: 5,
            ..first_turn("b")
        }),
        record(&Turn {
            turn: 1,
            admit: 3,
            send_ms: 10,
            words: 13,
            shared: 2,
            from: Some("a-r0"),
            cached: Some(8),
            ..first_turn("a")
        }),
    ];
    let report = cache_report(&records, &spec(None)).unwrap();
    let sessions: Vec<(&str, u64)> = report
        .by_session
        .iter()
        .map(|row| (row.session.as_str(), row.requests))
        .collect();
    assert_eq!(sessions, [("a", 2), ("b", 1)]);
    let prompt: u64 = report.by_session.iter().map(|row| row.prompt_tokens).sum();
    assert_eq!(prompt, report.prompt_tokens);
    let cold: u64 = report.by_session.iter().map(|row| row.miss.cold).sum();
    assert_eq!(cold, report.miss.cold);
    // Session a's second turn hit its first turn's two blocks.
    assert_eq!(report.by_session[0].measured.value, Some(8.0 / 22.0));
}

#[test]
fn a_prompt_that_rewrites_its_sessions_history_misses_there_for_divergence() {
    let first = record(&Turn {
        words: 17,
        ..first_turn("a")
    });
    // The next turn keeps the first block and rewrites the next three (a compaction): its
    // positions 1 to 3 were sent by the turn before, with other text.
    let second = record(&Turn {
        turn: 1,
        admit: 2,
        send_ms: 10,
        words: 21,
        shared: 1,
        from: Some("a-r0"),
        cached: Some(4),
        ..first_turn("a")
    });
    let report = cache_report(&[first, second], &spec(None)).unwrap();
    // The second turn: one block hit; of its four usable blocks after it, three rewrite the first
    // turn's (the first had four full blocks), the fourth is new, plus a 1-word tail.
    assert_eq!(report.miss.divergence, 3 * 4);
    assert_eq!(report.miss.cold, 16 + 1 + 4 + 1);
    assert_eq!(report.miss.unexplained, Some(0));
}

/// A prompt's keys as runs: the common prefix with another prompt is the one of the keys written
/// out, across run boundaries and at either end.
#[test]
fn key_runs_keep_the_common_prefix() {
    let owner = |ix: u64, from: u64, to: u64| (from..to).map(move |position| (ix << 24) | position);
    let previous: Vec<u64> = owner(0, 0, 5).chain(owner(3, 5, 9)).collect();
    let runs = KeyRuns::of(&previous);
    assert_eq!(runs.runs.len(), 2);
    assert_eq!(runs.len, 9);
    let written_out = |keys: &[u64]| {
        previous
            .iter()
            .zip(keys)
            .take_while(|(before, now)| before == now)
            .count()
    };
    let longer: Vec<u64> = previous.iter().copied().chain(owner(7, 9, 12)).collect();
    let diverged: Vec<u64> = owner(0, 0, 5).chain(owner(4, 5, 9)).collect();
    let shorter: Vec<u64> = owner(0, 0, 3).collect();
    for keys in [&longer[..], &diverged, &shorter, &[], &previous] {
        assert_eq!(runs.common_prefix(keys), written_out(keys));
    }
}

/// Forgetting the blocks no later chain reaches changes no figure: over streams that extend their
/// prompts, cut them, and start from other streams' prompts, on two workers with a small cache, the
/// report is the one a model that keeps every block gives, and the model ends holding fewer blocks.
#[test]
fn forgetting_unreached_blocks_changes_no_figure() {
    let mut draw = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: u64| {
        draw = draw.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (draw >> 33) % below
    };
    let streams = ["a", "b", "c", "d", "e"];
    // Each stream's last request and its block count.
    let mut last: Vec<Option<(String, u32)>> = vec![None; streams.len()];
    let mut records = Vec::new();
    for index in 0..300u64 {
        let stream_ix = next(streams.len() as u64) as usize;
        let turn = records
            .iter()
            .filter(|r: &&RequestRecord| r.correlation_id == streams[stream_ix])
            .count() as u32;
        // Most turns extend the stream's prompt; some cut it, some start from another stream's.
        let source = match next(10) {
            0 => last[next(streams.len() as u64) as usize].clone(),
            1 => last[stream_ix].clone().map(|(id, blocks)| (id, blocks / 2)),
            _ => last[stream_ix].clone(),
        };
        let (from, shared) = source.map_or((None, 0), |(id, blocks)| (Some(id), blocks));
        let blocks = shared + 1 + next(6) as u32;
        let mut record = record(&Turn {
            stream: streams[stream_ix],
            turn,
            send_ms: 10 * index,
            words: u64::from(blocks) * 4 + next(4),
            shared,
            from: from.as_deref(),
            worker: if next(2) == 0 { "0" } else { "1" },
            admit: index + 1,
            cached: Some(0),
        });
        record.request_id = format!("{}-r{turn}", streams[stream_ix]);
        last[stream_ix] = Some((record.request_id.clone(), blocks));
        records.push(record);
    }
    for capacity in [Some(64), None] {
        let spec = spec(capacity);
        let (forgetting, remembered) = report_of(&records, &spec, Forget::Unreached).unwrap();
        let (keeping, all) = report_of(&records, &spec, Forget::Nothing).unwrap();
        assert_eq!(forgetting, keeping);
        assert!(
            remembered < all / 2,
            "{remembered} of {all} blocks remembered"
        );
        assert!(keeping.miss.capacity > 0 || capacity.is_none());
    }
}

/// The steps a first sender keeps answer as a map of every block would: chains that each hold a
/// prefix of a sender's blocks (from its first own position, at the model's alignment), used at
/// times in any order, some senders forgotten.
#[test]
fn last_use_steps_answer_as_a_map_of_every_block() {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(5);
    for factor in [1usize, 4] {
        let mut steps = LastUse::default();
        let mut every: HashMap<u64, u64> = HashMap::new();
        let starts: Vec<usize> = (0..6).map(|_| rng.random_range(0..40)).collect();
        for _ in 0..400 {
            let owner = rng.random_range(0..starts.len());
            if rng.random_range(0..30) == 0 {
                steps.forget(owner);
                every.retain(|key, _| key_parts(*key).0 != owner as u64);
                continue;
            }
            let at = rng.random_range(0..1_000_000u64);
            let upto = starts[owner] + rng.random_range(0..60);
            for position in (starts[owner]..upto).filter(|p| (p + 1) % factor == 0) {
                let key = block_key(owner, position);
                steps.insert(key, at);
                every.insert(key, at);
            }
            for (probe, &start) in starts.iter().enumerate() {
                for position in (start..start + 70).filter(|p| (p + 1) % factor == 0) {
                    let key = block_key(probe, position);
                    assert_eq!(
                        steps.get(key),
                        every.get(&key).copied(),
                        "{probe}:{position}"
                    );
                }
            }
        }
        assert!(steps.owners() <= starts.len());
    }
}
