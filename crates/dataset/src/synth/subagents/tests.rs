//! The with-subagents shape through agentx's own parser and session-tree builder.

use serde_json::Value;

use super::super::{trace_line as line_of, SynthOptions};
use crate::error::Location;
use crate::tree::TreeOptions;
use crate::tree::{build, chain::ChainClass, NestedBasis, SessionTree, StreamKind};
use crate::weka::{parse_trace, ParsedTrace};

fn opts(traces: usize, seed: u64) -> SynthOptions {
    SynthOptions {
        traces,
        seed,
        max_isl: None,
        max_turns: None,
        context: None,
        subagents: true,
    }
}

fn lines(o: &SynthOptions) -> Vec<String> {
    (0..o.traces)
        .map(|i| {
            let mut b = Vec::new();
            line_of(o, i, &mut b);
            String::from_utf8(b).unwrap()
        })
        .collect()
}

fn parse(lines: &[String]) -> Vec<ParsedTrace> {
    lines
        .iter()
        .map(|l| parse_trace(l, &Location::default()).unwrap())
        .collect()
}

fn trees(traces: &[ParsedTrace]) -> Vec<SessionTree> {
    let opts = TreeOptions {
        basis: NestedBasis::infer(traces),
        ..TreeOptions::default()
    };
    traces.iter().map(|t| build(t, &opts).unwrap()).collect()
}

/// A stream's recorded interval: first start to last end.
fn interval(t: &SessionTree, s: usize) -> (f64, f64) {
    let turns = &t.streams[s].turns;
    let a = turns.iter().map(|x| x.ts_ms).fold(f64::INFINITY, f64::min);
    let b = turns
        .iter()
        .map(|x| x.ts_ms + x.api_time_ms.unwrap_or(0.0))
        .fold(f64::NEG_INFINITY, f64::max);
    (a, b)
}

#[test]
fn a_small_corpus_builds_into_trees_of_the_intended_shape() {
    let o = opts(20, 7);
    let text = lines(&o);
    let traces = parse(&text);
    assert_eq!(NestedBasis::infer(&traces), NestedBasis::Absolute);
    let built = trees(&traces);
    let plain = SynthOptions {
        subagents: false,
        ..o.clone()
    };
    let (mut fanned, mut background, mut fa, mut aux, mut with_sub) = (0, 0, 0, 0, 0);
    for (i, (trace, tree)) in traces.iter().zip(&built).enumerate() {
        let what = &tree.trace_id;
        assert!(tree.dropped_subagents.is_empty(), "{what}");
        assert_eq!(tree.counts.clamped_requests, 0, "{what}");
        assert_eq!(tree.counts.empty_hash_requests, 0, "{what}");
        // The main chain is the default shape's trace, request for request.
        let mut b = Vec::new();
        line_of(&plain, i, &mut b);
        let root = parse_trace(std::str::from_utf8(&b).unwrap(), &Location::default()).unwrap();
        assert_eq!(tree.streams[0].turns.len(), root.requests.len(), "{what}");
        let flat_turns: usize = tree
            .streams
            .iter()
            .filter(|s| s.kind == StreamKind::Flat)
            .map(|s| s.turns.len())
            .sum();
        assert_eq!(
            root.requests.len() + flat_turns,
            trace.requests.len(),
            "{what}"
        );
        // One stream per subagent entry: its requests are one chain.
        let subs: Vec<_> = tree
            .streams
            .iter()
            .filter(|s| s.kind == StreamKind::Subagent)
            .collect();
        assert_eq!(subs.len(), trace.subagent_entries.len(), "{what}");
        for (s, e) in subs.iter().zip(&trace.subagent_entries) {
            let agent = e.agent_id.as_deref().unwrap();
            assert_eq!(s.id, format!("{what}::sa:{agent}"));
            assert_eq!(s.turns.len(), e.requests.len(), "{}", s.id);
        }
        if !subs.is_empty() {
            with_sub += 1;
        }
        for br in &tree.branches {
            let sa = br
                .children
                .iter()
                .all(|&c| tree.streams[c].kind == StreamKind::Subagent);
            if sa && br.join_turn.is_none() {
                background += 1;
                // Exactly the async_launched entries run in the background.
                for &c in &br.children {
                    let e = trace
                        .subagent_entries
                        .iter()
                        .find(|e| tree.streams[c].id.ends_with(e.agent_id.as_deref().unwrap()))
                        .unwrap();
                    assert!(e.duration_ms.is_none(), "{}", tree.streams[c].id);
                }
            }
            if sa && br.children.len() >= 2 {
                let mut iv: Vec<(f64, f64)> =
                    br.children.iter().map(|&c| interval(tree, c)).collect();
                iv.sort_by(|a, b| a.0.total_cmp(&b.0));
                assert!(iv.windows(2).any(|w| w[1].0 < w[0].1), "{}", br.id);
                fanned += 1;
            }
            if let Some(j) = br.join_turn {
                // The join starts after every child ended.
                let end = br
                    .children
                    .iter()
                    .map(|&c| interval(tree, c).1)
                    .fold(0.0, f64::max);
                assert!(tree.streams[0].turns[j].ts_ms + 1e-3 >= end, "{}", br.id);
            }
        }
        for s in tree.streams.iter().filter(|s| s.kind == StreamKind::Flat) {
            match s.class {
                Some(ChainClass::Agent) => {
                    assert!(s.id.contains("::fa:"), "{}", s.id);
                    assert!(s.turns.len() >= 2, "{}", s.id);
                    fa += 1;
                }
                Some(ChainClass::Aux) => {
                    assert!(s.id.contains("::aux:"), "{}", s.id);
                    aux += 1;
                }
                c => panic!("{}: unexpected class {c:?}", s.id),
            }
        }
    }
    assert!(with_sub >= 12, "{with_sub} of 20 traces with subagents");
    assert!(
        fanned >= 3,
        "{fanned} branches with >= 2 overlapping children"
    );
    assert!(background >= 1, "{background} background branches");
    assert!(fa >= 1 && aux >= 1, "fa {fa}, aux {aux}");
}

#[test]
fn output_is_deterministic_for_a_seed() {
    let a = lines(&opts(6, 11));
    assert_eq!(a, lines(&opts(6, 11)));
    assert_ne!(a, lines(&opts(6, 12)));
    // A trace depends only on (seed, index).
    assert_eq!(a[..3], lines(&opts(3, 11))[..]);
    let v: Value = serde_json::from_str(&a[0]).unwrap();
    assert_eq!(v["id"], "trace_0001");
}

#[test]
fn context_and_max_isl_shrink_the_subagents_too() {
    for o in [
        SynthOptions {
            context: Some(4_096),
            ..opts(12, 3)
        },
        SynthOptions {
            max_isl: Some(40_000),
            max_turns: Some(30),
            ..opts(12, 3)
        },
    ] {
        let cap = o
            .context
            .unwrap_or(u32::MAX)
            .min(o.max_isl.unwrap_or(u32::MAX));
        let traces = parse(&lines(&o));
        let built = trees(&traces);
        assert!(built.iter().any(|t| t.streams.len() > 1));
        for t in &traces {
            for e in &t.subagent_entries {
                assert!(e.requests.len() <= o.max_turns.unwrap_or(usize::MAX));
                for r in &e.requests {
                    assert!(r.input < cap, "{} {}", t.id, r.input);
                }
            }
        }
    }
}
