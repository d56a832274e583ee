//! The weka trace parser and validator (`agentx::dataset::weka::parse_trace`): arbitrary text as one
//! trace object. Checks no panic, and that every trace it accepts holds what the module promises
//! after conversion (finite start times, finite non-negative durations, no `ttft` on a normal
//! request, `block_size >= 1`) with a warning for each departure it tolerates (decreasing start
//! times, a first request shorter than the tools+system prefix).
#![no_main]

use agentx::dataset::warnings::WarningKind;
use agentx::dataset::weka::{self, ParsedTrace, RequestKind};
use agentx::dataset::{DatasetError, Location};
use libfuzzer_sys::fuzz_target;

fn warned(t: &ParsedTrace, kind: WarningKind) -> bool {
    t.warnings.iter().any(|w| w.kind == kind)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = Location {
        file: "traces.jsonl".into(),
        line: 7,
        ..Location::default()
    };
    match weka::parse_trace(text, &base) {
        Ok(t) => {
            assert!(t.block_size > 0);
            let mut last = None;
            for r in &t.requests {
                assert!(r.t.is_finite(), "t {}", r.t);
                if last.is_some_and(|l| r.t < l) {
                    assert!(warned(&t, WarningKind::DecreasingTime));
                }
                last = Some(r.t);
                for d in [r.api_time, r.think_time, r.ttft].into_iter().flatten() {
                    assert!(d.is_finite() && d >= 0.0, "duration {d}");
                }
                if r.kind == RequestKind::Normal {
                    assert!(r.ttft.is_none());
                }
            }
            if let Some(first) = t.requests.first() {
                let prefix = u64::from(t.tool_tokens) + u64::from(t.system_tokens);
                if prefix.div_ceil(u64::from(t.block_size)) > first.hash_ids.len() as u64 {
                    assert!(warned(&t, WarningKind::ShortFirstRequest));
                }
            }
            for w in &t.warnings {
                let _ = w.to_string();
            }
        }
        Err(e) => {
            if let DatasetError::Invalid { location, .. } = &e {
                assert!(location.line >= base.line, "error line {}", location.line);
            }
            let _ = e.to_string();
        }
    }
});
