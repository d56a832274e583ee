//! The Prometheus text parser (`agentx::metrics::prometheus::parse`): arbitrary text. Checks no
//! panic, a 1-based error line inside the text, and the grouping of samples into families.
#![no_main]

use agentx::metrics::prometheus::{self, MetricType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match prometheus::parse(&text) {
        Ok(families) => {
            for f in &families {
                let _ = f.kind.as_str();
                for s in &f.samples {
                    let role = f.role(s);
                    assert!(
                        s.name.starts_with(&f.name) || f.kind == MetricType::Untyped,
                        "sample {:?} in family {:?}",
                        s.name,
                        f.name
                    );
                    assert!(role.len() <= s.name.len());
                    for (k, _) in &s.labels {
                        let _ = s.label(k);
                    }
                }
            }
        }
        Err(e) => {
            let lines = text.split('\n').count().max(1);
            assert!(
                e.line >= 1 && e.line <= lines,
                "error line {} of {lines}",
                e.line
            );
            let _ = e.to_string();
        }
    }
    let _ = prometheus::parse_value(&text);
});
