use super::*;
use crate::{Dataset, OpenOptions};

/// Traces of three turns at t = 0, 10, 20 s, of 128, 256 and 384 tokens in 64-token blocks (each
/// turn extends the one before), the last one holding its lane 5 s; local hash ids.
fn growing_traces(dir: &std::path::Path, traces: usize) -> Dataset {
    let lines: Vec<String> = (0..traces)
        .map(|trace| {
            format!(
                r#"{{"id":"t{trace}","models":["m"],"block_size":64,"hash_id_scope":"local","requests":[{{"t":0,"type":"n","model":"m","in":128,"out":1,"hash_ids":[1,2]}},{{"t":10,"type":"n","model":"m","in":256,"out":1,"hash_ids":[1,2,3,4]}},{{"t":20,"type":"n","model":"m","in":384,"out":1,"api_time":5,"hash_ids":[1,2,3,4,5,6]}}]}}"#
            )
        })
        .collect();
    let path = dir.join("traces.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    Dataset::open_path(
        &path,
        &OpenOptions {
            cache_dir: Some(dir.join("cache")),
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn one_lane_hits_each_turns_predecessor_and_a_cache_that_holds_a_trace_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = growing_traces(dir.path(), 2);
    // Turn 1 hits turn 0's two blocks, turn 2 turn 1's four (of its five usable): 384 of 768 tokens.
    let hit = walk(&dataset, &corpus_order(1, Some(6 * 64), 2)).unwrap();
    assert_eq!((hit.requests, hit.prompt_tokens), (6, 1536));
    assert_eq!(hit.infinite, 0.5);
    assert_eq!(hit.at_capacity, Some(0.5));
    // The second trace's six blocks evicted the first's.
    assert_eq!(hit.evicted_blocks, Some(6));
    assert_eq!(hit.span_s, 45.0);
    // No capacity: no hit at all.
    let none = walk(&dataset, &corpus_order(1, Some(0), 2)).unwrap();
    assert_eq!(none.at_capacity, Some(0.0));
    assert_eq!(none.infinite, 0.5);
}

#[test]
fn lanes_that_share_a_small_cache_evict_each_others_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = growing_traces(dir.path(), 4);
    let alone = walk(&dataset, &corpus_order(1, Some(6 * 64), 4)).unwrap();
    let shared = walk(&dataset, &corpus_order(4, Some(6 * 64), 4)).unwrap();
    assert_eq!(shared.infinite, alone.infinite);
    assert!(
        shared.at_capacity.unwrap() < alone.at_capacity.unwrap(),
        "{shared:?}"
    );
    assert!(shared.evicted_blocks > alone.evicted_blocks);
    // Four lanes play the four traces side by side.
    assert_eq!(shared.span_s, 20.0);
}

#[test]
fn a_warm_turn_fills_the_cache_without_counting_and_the_horizon_stops_the_walk() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = growing_traces(dir.path(), 1);
    let spec = WalkSpec {
        lanes: vec![LaneStart {
            trace: 0,
            first_turn: 1,
            warm: true,
        }],
        queue: Vec::new(),
        recycle: false,
        unique_sessions: true,
        capacity_tokens: None,
        horizon_s: None,
    };
    let hit = walk(&dataset, &spec).unwrap();
    // Turns 1 and 2: 128 + 256 of 256 + 384 tokens.
    assert_eq!((hit.requests, hit.prompt_tokens), (2, 640));
    assert_eq!(hit.infinite, 384.0 / 640.0);
    assert_eq!(hit.at_capacity, None);
    let early = walk(
        &dataset,
        &WalkSpec {
            horizon_s: Some(5.0),
            ..spec
        },
    )
    .unwrap();
    assert_eq!(early.requests, 1);
}

#[test]
fn a_recycled_trace_shares_its_prefix_unless_each_session_is_unique() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = growing_traces(dir.path(), 1);
    let spec = |unique_sessions: bool| WalkSpec {
        lanes: vec![LaneStart {
            trace: 0,
            first_turn: 0,
            warm: false,
        }],
        queue: Vec::new(),
        recycle: true,
        unique_sessions,
        capacity_tokens: None,
        // Two passes: 0, 10, 20 and (after the last turn's 5 s) 25, 35, 45.
        horizon_s: Some(45.0),
    };
    let unique = walk(&dataset, &spec(true)).unwrap();
    assert_eq!(unique.requests, 6);
    assert_eq!(unique.infinite, 0.5);
    // The second pass hits all it can use: 1 + 3 + 5 blocks of 2 + 4 + 6 in 64-token blocks.
    let shared = walk(&dataset, &spec(false)).unwrap();
    assert_eq!(shared.infinite, (384.0 + 9.0 * 64.0) / 1536.0);
}

#[test]
fn a_corpus_without_time_is_played_once_through_not_forever() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = (0..3)
        .map(|trace| {
            format!(
                r#"{{"id":"t{trace}","models":["m"],"block_size":64,"hash_id_scope":"local","requests":[{{"t":0,"type":"n","model":"m","in":128,"out":1,"hash_ids":[1,2]}}]}}"#
            )
        })
        .collect();
    let path = dir.path().join("traces.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let dataset = Dataset::open_path(
        &path,
        &OpenOptions {
            cache_dir: Some(dir.path().join("cache")),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let spec = WalkSpec {
        lanes: vec![LaneStart {
            trace: 0,
            first_turn: 0,
            warm: false,
        }],
        queue: vec![1, 2],
        recycle: true,
        unique_sessions: true,
        capacity_tokens: None,
        horizon_s: Some(600.0),
    };
    let hit = walk(&dataset, &spec).unwrap();
    assert_eq!(hit.requests, 3);
    assert!(hit.stopped.unwrap().contains("no time"));
}
