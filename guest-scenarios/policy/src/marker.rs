//! Cache-bust text for one session (docs/specs/replay-rules.md#cache-bust-marker).
//!
//! agentx-mvp uses aiperf's marker: `[rid:` + the first 12 hex digits of
//! `sha256("{run_id}:{recycle_pass}:{lane}:{trace_id}")` + `]`, followed by a blank line for prefix
//! placements and preceded by one for suffix placements. kvct-v01 uses kv-cache-tester's idea instead:
//! a salt of eight plain words prepended to the first user turn, here drawn from the same digest so
//! that it is deterministic per session.
//!
//! Invariant: the text depends only on the session id (and the placement for the separator side);
//! warmup and profiling mint the same session id for a lane, so they send the same bytes and the
//! warmed prefix cache carries over.

use alloc::string::String;
use alloc::vec::Vec;
use sha2::{Digest, Sha256};

use crate::types::{Marker, Placement, SessionId};

const SEPARATOR: &str = "\n\n";

/// `sha256("{run_id}:{recycle_pass}:{lane}:{trace_id}")`.
pub fn session_digest(s: &SessionId) -> [u8; 32] {
    let mut a = [0u8; 20];
    let mut b = [0u8; 20];
    let mut h = Sha256::new();
    h.update(s.run_id.as_bytes());
    h.update(b":");
    h.update(crate::decimal(u64::from(s.recycle_pass), &mut a));
    h.update(b":");
    h.update(crate::decimal(u64::from(s.lane), &mut b));
    h.update(b":");
    h.update(s.trace_id.as_bytes());
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

fn place(body: &str, placement: Placement) -> Marker {
    if placement == Placement::None {
        return Marker {
            text: String::new(),
            placement,
        };
    }
    let mut text = String::with_capacity(body.len() + SEPARATOR.len());
    if placement.is_prefix() {
        text.push_str(body);
        text.push_str(SEPARATOR);
    } else {
        text.push_str(SEPARATOR);
        text.push_str(body);
    }
    Marker { text, placement }
}

/// The `[rid:<12 hex>]` marker with its separator, or an empty `none` marker.
pub fn rid_marker(target: Placement, s: &SessionId) -> Marker {
    let d = session_digest(s);
    let mut body = String::from("[rid:");
    body.push_str(&hex(&d[..6]));
    body.push(']');
    place(&body, target)
}

/// 64 short, common words: each is a single token for the usual tokenizers, so eight of them make the
/// eight-token salt kv-cache-tester prepends.
const SALT_WORDS: [&str; 64] = [
    "apple", "river", "stone", "cloud", "green", "light", "table", "water", "house", "paper",
    "music", "field", "night", "plant", "chair", "bread", "glass", "horse", "money", "phone",
    "sugar", "train", "world", "youth", "zebra", "north", "south", "ocean", "metal", "radio",
    "space", "tiger", "piano", "lemon", "eagle", "brick", "coral", "delta", "ember", "frost",
    "grape", "honey", "ivory", "jelly", "karma", "lunar", "maple", "nylon", "olive", "pearl",
    "quilt", "robin", "salt", "tulip", "umbra", "vivid", "wheat", "pixel", "yacht", "amber",
    "baker", "cedar", "dune", "flame",
];

/// kv-cache-tester v0.1's per-user salt: eight words chosen by the session digest, one 6-bit slice of
/// it per word, joined by spaces.
pub fn salt_words(s: &SessionId) -> String {
    let d = session_digest(s);
    let words: Vec<&str> = d[..8]
        .iter()
        .map(|b| SALT_WORDS[usize::from(b & 63)])
        .collect();
    words.join(" ")
}

/// The salt with its separator at the requested placement (`none`: no salt).
pub fn salt_marker(target: Placement, s: &SessionId) -> Marker {
    place(&salt_words(s), target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn sid(pass: u32, lane: u32) -> SessionId {
        SessionId {
            run_id: "1b4e28ba-2fa1-11d2-883f-0016d3cca427".to_string(),
            recycle_pass: pass,
            lane,
            trace_id: "trace_0003".to_string(),
        }
    }

    #[test]
    fn rid_marker_shape_and_separators() {
        let m = rid_marker(Placement::FirstTurnPrefix, &sid(0, 3));
        assert!(
            m.text.starts_with("[rid:") && m.text.ends_with("]\n\n"),
            "{:?}",
            m.text
        );
        assert_eq!(m.text.len(), "[rid:".len() + 12 + 1 + 2);
        let s = rid_marker(Placement::SystemSuffix, &sid(0, 3));
        assert_eq!(
            s.text,
            alloc::format!("\n\n{}", &m.text[..m.text.len() - 2])
        );
        let none = rid_marker(Placement::None, &sid(0, 3));
        assert_eq!((none.text.as_str(), none.placement), ("", Placement::None));
    }

    #[test]
    fn rid_marker_matches_python_hexdigest() {
        // python3 -c 'import hashlib;print(hashlib.sha256("<run>:<pass>:<lane>:<trace>".encode()).hexdigest()[:12])'
        let s = SessionId {
            run_id: "run-1".to_string(),
            recycle_pass: 0,
            lane: 0,
            trace_id: "trace_0001".to_string(),
        };
        assert_eq!(
            rid_marker(Placement::FirstTurnPrefix, &s).text,
            "[rid:ca87eb1ca427]\n\n"
        );
        let s = SessionId {
            run_id: "1b4e28ba-2fa1-11d2-883f-0016d3cca427".to_string(),
            recycle_pass: 2,
            lane: 7,
            trace_id: "会话🙂".to_string(),
        };
        assert_eq!(
            rid_marker(Placement::FirstTurnSuffix, &s).text,
            "\n\n[rid:09953ce63c99]"
        );
    }

    #[test]
    fn markers_differ_per_pass_and_lane() {
        let a = rid_marker(Placement::FirstTurnPrefix, &sid(0, 0)).text;
        assert_ne!(a, rid_marker(Placement::FirstTurnPrefix, &sid(1, 0)).text);
        assert_ne!(a, rid_marker(Placement::FirstTurnPrefix, &sid(0, 1)).text);
        assert_eq!(a, rid_marker(Placement::FirstTurnPrefix, &sid(0, 0)).text);
    }

    #[test]
    fn salt_is_eight_words() {
        let s = salt_words(&sid(0, 0));
        assert_eq!(s.split(' ').count(), 8);
        assert_ne!(s, salt_words(&sid(0, 1)));
        let m = salt_marker(Placement::FirstTurnPrefix, &sid(0, 0));
        assert_eq!(m.text, alloc::format!("{s}\n\n"));
    }
}
