//! numpy's own answers, from `fixtures/golden/start_turn_vectors.json` (written by
//! `guest-scenarios/golden/gen_start_turn_vectors.py`): every SeedSequence state, raw PCG64 draw,
//! `choice(n)` index and start turn must match, with zero mismatches.

use std::format;
use std::string::String;
use std::vec::Vec;

use serde_json::Value as J;

use crate::rng::{choice_index, Pcg64, SeedSequence};
use crate::start::start_turn;
use crate::types::{StartParams, Trajectory};

fn doc() -> J {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/golden/start_turn_vectors.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("{path}: {e}; generate it with guest-scenarios/golden/gen_start_turn_vectors.py")
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn u64s(v: &J) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn seed_sequence_pool_and_state() {
    let d = doc();
    let cases = d["seed_sequence"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for c in cases {
        let e = c["entropy"].as_u64().unwrap();
        let ss = SeedSequence::new(e);
        let pool: Vec<u64> = ss.pool().iter().map(|&x| u64::from(x)).collect();
        assert_eq!(pool, u64s(&c["pool"]), "pool of {e}");
        assert_eq!(
            ss.generate_u64x4().to_vec(),
            u64s(&c["state_u64"]),
            "state of {e}"
        );
        let mut w = [0u32; 8];
        ss.generate_u32(&mut w);
        assert_eq!(
            w.iter().map(|&x| u64::from(x)).collect::<Vec<_>>(),
            u64s(&c["state_u32"])
        );
    }
}

#[test]
fn pcg64_raw_draws() {
    let d = doc();
    for c in d["pcg64_raw"].as_array().unwrap() {
        let e = c["entropy"].as_u64().unwrap();
        let mut g = Pcg64::from_entropy(e);
        let got: Vec<u64> = (0..16).map(|_| g.next_u64()).collect();
        assert_eq!(got, u64s(&c["draws"]), "raw draws of {e}");
    }
}

#[test]
fn choice_of_large_populations() {
    let d = doc();
    let cases = d["choice"].as_array().unwrap();
    let mut bad = Vec::new();
    for c in cases {
        let v = u64s(c);
        let got = choice_index(v[0], v[1] as u32);
        if u64::from(got) != v[2] {
            bad.push(format!(
                "entropy {} n {}: want {} got {got}",
                v[0], v[1], v[2]
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} mismatches: {:#?}",
        bad.len(),
        cases.len(),
        &bad[..bad.len().min(10)]
    );
}

#[test]
fn start_turns_match_numpy() {
    let d = doc();
    let cases = d["start_turn"].as_array().unwrap();
    assert!(cases.len() >= 5000, "only {} vectors", cases.len());
    let mut bad: Vec<String> = Vec::new();
    let mut usable = 0;
    for c in cases {
        let seed = c[0].as_u64().unwrap();
        let t = Trajectory {
            trace_id: c[1].as_str().unwrap().into(),
            num_turns: c[2].as_u64().unwrap() as u32,
            unsendable: c[5]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect(),
        };
        let p = StartParams {
            seed,
            min_ratio: c[3].as_f64().unwrap(),
            max_ratio: c[4].as_f64().unwrap(),
        };
        let want = c[6].as_u64().map(|k| k as u32);
        usable += usize::from(want.is_some());
        let got = start_turn(&p, &t);
        if got != want {
            bad.push(format!("{c}: got {got:?}"));
        }
    }
    assert!(usable > cases.len() / 2);
    assert!(
        bad.is_empty(),
        "{} of {} mismatches, first: {:#?}",
        bad.len(),
        cases.len(),
        &bad[..bad.len().min(10)]
    );
}
