//! Trace selection at import: aiperf's filter-then-cap over `--max-context-length` and
//! `--num-dataset-entries` (aiperf 0.13.0.dev20261023, `dataset/loader/selection.py`,
//! `weka_trace.py::_trace_peak_context_length`).
//!
//! A trace's peak context is the largest context any of its requests asks a server for: over top-level
//! requests `in + max(1, min(out, max_osl))` (`max_osl` = the output cap when one is set, else
//! unbounded), over requests nested in subagent entries `in + max(1, out)` (those are never capped).
//! FILTER drops a trace whose peak exceeds `--max-context-length`; CAP then keeps the first
//! `--num-dataset-entries` traces that passed, so a dropped trace never uses up an entry. Traces are
//! scanned in source order and scanning stops once the cap is filled. No trace left is an error naming
//! the limit and the smallest peak seen. The counts ([`SelectionReport`]) are stored in the cache entry,
//! so a warm open reports them too.

use serde::{Deserialize, Serialize};

use super::weka::ParsedTrace;

/// What selection a caller asks for ([`super::OpenOptions`]'s selection fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Selection {
    /// Keep at most this many traces (`--num-dataset-entries`).
    pub num_dataset_entries: Option<usize>,
    /// Drop traces whose peak context exceeds this (`--max-context-length`).
    pub max_context_length: Option<u64>,
    /// The output cap of top-level requests the peak is computed with (aiperf's
    /// `--synthesis-max-osl`); only matters with `max_context_length`.
    pub max_osl: Option<u32>,
}

/// The peak context of a trace (see the module doc).
pub(crate) fn peak_context(trace: &ParsedTrace, max_osl: Option<u32>) -> u64 {
    let cap = |out: u32| max_osl.map_or(out, |m| out.min(m)).max(1);
    trace
        .requests
        .iter()
        .map(|r| u64::from(r.input) + u64::from(cap(r.output)))
        .max()
        .unwrap_or(0)
        .max(trace.subagent_peak)
}

/// The counts of one selection pass, stored in the cache entry next to the import warnings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectionReport {
    /// `--max-context-length` of the pass.
    pub max_context_length: Option<u64>,
    /// `--num-dataset-entries` of the pass.
    pub num_dataset_entries: Option<u64>,
    /// The output cap the peaks were computed with.
    pub max_osl: Option<u32>,
    /// Traces read (scanning stops once the cap is filled).
    pub scanned: u64,
    /// Traces dropped because their peak context exceeds `max_context_length`.
    pub dropped: u64,
    /// Traces kept.
    pub kept: u64,
    /// The smallest and largest peak context over the scanned traces.
    pub smallest_peak: u64,
    /// The largest peak context over the scanned traces.
    pub largest_peak: u64,
}

/// Filter-then-cap state over traces offered in source order.
#[derive(Debug, Clone)]
pub(crate) struct Selector {
    sel: Selection,
    report: SelectionReport,
}

impl Selector {
    pub(crate) fn new(sel: Selection) -> Self {
        Selector {
            sel,
            report: SelectionReport {
                max_context_length: sel.max_context_length,
                num_dataset_entries: sel.num_dataset_entries.map(|n| n as u64),
                max_osl: sel.max_osl,
                ..SelectionReport::default()
            },
        }
    }

    /// Whether the trace is kept (false: dropped by the context limit). Call only while not [`Self::full`].
    pub(crate) fn offer(&mut self, trace: &ParsedTrace) -> bool {
        let peak = peak_context(trace, self.sel.max_osl);
        let r = &mut self.report;
        r.smallest_peak = if r.scanned == 0 {
            peak
        } else {
            r.smallest_peak.min(peak)
        };
        r.largest_peak = r.largest_peak.max(peak);
        r.scanned += 1;
        if self.sel.max_context_length.is_some_and(|m| peak > m) {
            r.dropped += 1;
            return false;
        }
        r.kept += 1;
        true
    }

    /// Whether the cap is filled (nothing more needs reading).
    pub(crate) fn full(&self) -> bool {
        self.sel
            .num_dataset_entries
            .is_some_and(|n| self.report.kept >= n as u64)
    }

    pub(crate) fn into_report(self) -> SelectionReport {
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::super::weka::{parse_trace, ParsedTrace};
    use super::super::Location;
    use super::*;

    /// A trace with top-level requests of (in, out) and one subagent with requests of (in, out).
    fn trace(id: &str, main: &[(u32, u32)], sub: &[(u32, u32)]) -> ParsedTrace {
        let req = |(i, o): &(u32, u32), t: usize| {
            format!(r#"{{"t":{t},"type":"n","model":"m","in":{i},"out":{o},"hash_ids":[1]}}"#)
        };
        let mut reqs: Vec<String> = main.iter().enumerate().map(|(k, r)| req(r, k)).collect();
        if !sub.is_empty() {
            let inner: Vec<String> = sub.iter().map(|r| req(r, 0)).collect();
            reqs.push(format!(
                r#"{{"t":0,"type":"subagent","agent_id":"a","requests":[{}]}}"#,
                inner.join(",")
            ));
        }
        let text = format!(
            r#"{{"id":"{id}","models":["m"],"block_size":64,"hash_id_scope":"local","requests":[{}]}}"#,
            reqs.join(",")
        );
        parse_trace(&text, &Location::default()).unwrap()
    }

    #[test]
    fn peak_caps_main_outputs_but_not_subagent_outputs() {
        let t = trace("a", &[(100, 50), (200, 0)], &[]);
        // max(100 + 50, 200 + max(1, 0))
        assert_eq!(peak_context(&t, None), 201);
        assert_eq!(peak_context(&t, Some(10)), 201);
        let t = trace("b", &[(100, 500)], &[]);
        assert_eq!(peak_context(&t, None), 600);
        assert_eq!(peak_context(&t, Some(10)), 110);
        assert_eq!(peak_context(&t, Some(0)), 101);
        // Subagent requests count with their recorded output, whatever the cap.
        let t = trace("c", &[(100, 500)], &[(300, 400), (50, 0)]);
        assert_eq!(t.subagent_peak, 700);
        assert_eq!(peak_context(&t, Some(10)), 700);
    }

    #[test]
    fn filter_then_cap_never_spends_an_entry_on_a_dropped_trace() {
        let traces = [
            trace("big", &[(1000, 10)], &[]),
            trace("s1", &[(10, 10)], &[]),
            trace("big2", &[(10, 10)], &[(900, 1)]),
            trace("s2", &[(20, 5)], &[]),
            trace("s3", &[(30, 5)], &[]),
        ];
        let mut s = Selector::new(Selection {
            num_dataset_entries: Some(2),
            max_context_length: Some(100),
            max_osl: None,
        });
        let mut kept = Vec::new();
        for t in &traces {
            if s.full() {
                break;
            }
            if s.offer(t) {
                kept.push(t.id.clone());
            }
        }
        assert_eq!(kept, ["s1", "s2"]);
        let r = &s.report;
        assert_eq!((r.scanned, r.dropped, r.kept), (4, 2, 2));
        assert_eq!((r.smallest_peak, r.largest_peak), (20, 1010));
        assert_eq!(r.max_context_length, Some(100));
        assert_eq!(r.num_dataset_entries, Some(2));
        assert!(s.full());
    }

    /// A traces.jsonl whose traces have one request each with these (in, out).
    fn corpus(dir: &std::path::Path, reqs: &[(u32, u32)]) -> std::path::PathBuf {
        let lines: Vec<String> = reqs
            .iter()
            .enumerate()
            .map(|(k, (i, o))| {
                format!(
                    r#"{{"id":"t{k}","models":["m"],"block_size":64,"hash_id_scope":"local","requests":[{{"t":0,"type":"n","model":"m","in":{i},"out":{o},"hash_ids":[{k}]}}]}}"#
                )
            })
            .collect();
        let p = dir.join("traces.jsonl");
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    }

    #[test]
    fn open_selects_reports_and_keys_the_cache_by_the_selection() {
        use super::super::{Dataset, DatasetError, OpenOptions, Outcome};
        let dir = tempfile::tempdir().unwrap();
        let path = corpus(
            dir.path(),
            &[(500, 100), (50, 10), (90, 20), (60, 0), (70, 5)],
        );
        let opts = |n: Option<usize>, m: Option<u64>, osl: Option<u32>| OpenOptions {
            num_dataset_entries: n,
            max_context_length: m,
            max_osl: osl,
            cache_dir: Some(dir.path().join("cache")),
            format: None,
            block_size: None,
            trace_block_size: None,
        };
        let all = Dataset::open_path(&path, &opts(None, None, None)).unwrap();
        assert_eq!(all.len(), 5);
        assert_eq!(all.selection(), None);
        // Peaks 600, 60, 110, 61, 75: the limit 100 drops two, the cap keeps the first two that fit.
        let ds = Dataset::open_path(&path, &opts(Some(2), Some(100), None)).unwrap();
        let ids: Vec<_> = ds.trajectories().map(|t| t.id().to_owned()).collect();
        assert_eq!(ids, ["t1", "t3"]);
        let r = ds.selection().unwrap();
        assert_eq!((r.scanned, r.dropped, r.kept), (4, 2, 2));
        assert_eq!((r.smallest_peak, r.largest_peak), (60, 600));
        assert_ne!(ds.cache_key(), all.cache_key());
        assert_eq!(ds.outcome(), Outcome::Built);
        // A warm open finds the entry and still reports the counts.
        let warm = Dataset::open_path(&path, &opts(Some(2), Some(100), None)).unwrap();
        assert_eq!(warm.outcome(), Outcome::Hit);
        assert_eq!(warm.selection(), Some(r));
        assert!(warm.warnings().is_empty());
        // The output cap changes the peaks (t2: 90 + 10) and so the key.
        let capped = Dataset::open_path(&path, &opts(None, Some(100), Some(10))).unwrap();
        assert_eq!(capped.len(), 4);
        assert_ne!(capped.cache_key(), ds.cache_key());
        // Without a context limit the cap alone keys as before and the output cap does not matter.
        let a = Dataset::open_path(&path, &opts(Some(2), None, None)).unwrap();
        let b = Dataset::open_path(&path, &opts(Some(2), None, Some(10))).unwrap();
        assert_eq!(a.cache_key(), b.cache_key());
        assert_eq!(b.outcome(), Outcome::Hit);
        assert_eq!(a.len(), 2);
        // Nothing fits: the error names the limit and the smallest peak.
        let e = Dataset::open_path(&path, &opts(None, Some(59), None)).unwrap_err();
        assert!(matches!(
            e,
            DatasetError::EmptySelection {
                smallest_peak: 60,
                ..
            }
        ));
        let msg = e.to_string();
        assert!(
            msg.contains("--max-context-length 59") && msg.contains("60"),
            "{msg}"
        );
    }

    #[test]
    fn without_a_limit_everything_passes() {
        let mut s = Selector::new(Selection::default());
        assert!(s.offer(&trace("a", &[(1_000_000, 1)], &[])));
        assert!(!s.full());
        assert_eq!(s.into_report().dropped, 0);
    }
}
