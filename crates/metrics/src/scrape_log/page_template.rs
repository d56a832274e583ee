//! The shape of an endpoint's last parsed page, so that the next page, when only its values
//! changed, is folded in without being parsed again.
//!
//! A server's `/metrics` page keeps its lines from scrape to scrape: the same comments, the same
//! samples with the same labels in the same order; only the numbers move. [`PageTemplate`] keeps,
//! for each line of the page [`EndpointLog::ingest_text`](super::EndpointLog::ingest_text) last
//! parsed in full, the text that does not change (a whole comment or blank line; a sample line up
//! to its value), and for each sample where [`EndpointLog::ingest`](super::EndpointLog::ingest)
//! put its value (a [`Slot`]: the family, the series' labels, the role). A new page whose every
//! line equals its template line but for the value gives the values in line order
//! ([`PageTemplate::values`]); anything else (a line more or less, a new series or bucket, a
//! timestamp, a value that is not a number) is parsed in full, as the first page was, and becomes
//! the template. The values land where a full parse would put them: the slots are the ones the full
//! ingest resolved, and the page they came from had the same names, labels and comments.

use std::ops::Range;

use super::Labels;
use crate::prometheus::{self, LineShape, Page};

/// Where one sample's value goes within its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A counter's, gauge's or untyped metric's value.
    Value,
    /// A histogram's `_sum`.
    Sum,
    /// A histogram's `_count`.
    Count,
    /// A histogram bucket: its index in the series' buckets, and its bound's bits (checked before
    /// the value is folded in).
    Bucket {
        /// Index into `HistogramTrack::buckets`.
        index: usize,
        /// `f64::to_bits` of the bucket's `le`.
        le_bits: u64,
    },
}

/// Where a sample's value went: its family, its series and its role.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    /// The family's name.
    pub family: String,
    /// The series' labels (sorted, without a bucket's `le`).
    pub labels: Labels,
    /// The role within the series.
    pub role: Role,
}

/// Consecutive samples of one series (a histogram's buckets, sum and count; a single value).
#[derive(Debug, Clone)]
pub(super) struct Group {
    /// The family's name.
    pub family: String,
    /// The series' labels.
    pub labels: Labels,
    /// The roles, one per value, in line order.
    pub roles: Vec<Role>,
}

/// What a line of the next page must be.
#[derive(Debug, Clone)]
struct Line {
    /// The template text the line must equal (a text line) or start with (a sample line).
    fixed: Range<usize>,
    /// A sample line, whose value follows `fixed`; `feeds` when ingest folds its value in.
    sample: Option<bool>,
}

/// The template an [`EndpointLog`](super::EndpointLog) keeps: bookkeeping of its ingests, so any
/// two are equal (as `FamilyLog::seen` is left out of a family's equality), and a log read back
/// from a journal, which has none, equals the one written.
#[derive(Clone, Default)]
pub(super) struct Kept(pub Option<PageTemplate>);

impl PartialEq for Kept {
    fn eq(&self, _: &Kept) -> bool {
        true
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(template) => write!(f, "PageTemplate({} lines)", template.lines.len()),
            None => f.write_str("None"),
        }
    }
}

/// The last fully parsed page's lines and where their values went.
#[derive(Debug, Clone, Default)]
pub(super) struct PageTemplate {
    /// The fixed text of every line, one after the other.
    text: String,
    lines: Vec<Line>,
    /// The series the values feed, in line order.
    pub groups: Vec<Group>,
}

impl PageTemplate {
    /// The template of `text`, parsed as `page`, whose sample `s` of family `f` went to
    /// `slots[f][s]` (`None`: ingest skipped it). `None` when a sample carries a timestamp (the
    /// value is then not the last word of its line).
    pub(super) fn new(
        text: &str,
        page: &Page,
        slots: &[Vec<Option<Slot>>],
    ) -> Option<PageTemplate> {
        let mut template = PageTemplate::default();
        let mut current: Option<Group> = None;
        for (raw, shape) in text.lines().zip(&page.lines) {
            let line = raw.trim_end_matches('\r');
            let start = template.text.len();
            let (fixed, sample) = match *shape {
                LineShape::Text => (line, None),
                LineShape::Sample {
                    timestamp: true, ..
                } => return None,
                LineShape::Sample {
                    key_len,
                    family,
                    sample,
                    ..
                } => {
                    let slot = slots.get(family)?.get(sample)?.as_ref();
                    if let Some(slot) = slot {
                        match current.as_mut() {
                            Some(group)
                                if group.family == slot.family && group.labels == slot.labels =>
                            {
                                group.roles.push(slot.role);
                            }
                            _ => {
                                template.groups.extend(current.take());
                                current = Some(Group {
                                    family: slot.family.clone(),
                                    labels: slot.labels.clone(),
                                    roles: vec![slot.role],
                                });
                            }
                        }
                    }
                    (line.get(..key_len)?, Some(slot.is_some()))
                }
            };
            template.text.push_str(fixed);
            template.lines.push(Line {
                fixed: start..template.text.len(),
                sample,
            });
        }
        template.groups.extend(current);
        (template.lines.len() == page.lines.len()).then_some(template)
    }

    /// The values of `text`'s samples that feed a series, in line order, when every line of `text`
    /// is its template line with another value; `None` otherwise (parse it in full).
    pub(super) fn values(&self, text: &str) -> Option<Vec<f64>> {
        let mut values = Vec::with_capacity(self.groups.iter().map(|g| g.roles.len()).sum());
        let mut lines = text.lines();
        for expected in &self.lines {
            let line = lines.next()?.trim_end_matches('\r');
            let fixed = &self.text[expected.fixed.clone()];
            match expected.sample {
                None if line == fixed => {}
                None => return None,
                Some(feeds) => {
                    let value = line.strip_prefix(fixed)?;
                    if value.is_empty() || value.contains([' ', '\t']) {
                        return None;
                    }
                    let value = prometheus::parse_value(value)?;
                    if feeds {
                        values.push(value);
                    }
                }
            }
        }
        lines.next().is_none().then_some(values)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EndpointLog, Fetch, FetchOutcome};
    use crate::prometheus;
    use rand::{RngExt, SeedableRng};
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    /// A vLLM-like page: gauges and counters of two engines, a histogram, a summary, `_created`
    /// samples and an ordinary comment; `change` alters its shape (0 keeps it).
    fn page(rng: &mut rand::rngs::StdRng, change: u32) -> String {
        let mut value = || f64::from(rng.random_range(0..1000u32)) / 4.0;
        let mut text = String::from("# an ordinary comment\n");
        let engines: &[&str] = if change == 1 {
            &["0", "1", "2"]
        } else {
            &["0", "1"]
        };
        text += "# HELP vllm:num_requests_running Requests running.\n# TYPE vllm:num_requests_running gauge\n";
        for engine in engines {
            text += &format!(
                "vllm:num_requests_running{{model_name=\"m\",engine=\"{engine}\"}} {}\n",
                value()
            );
        }
        text += "# TYPE vllm:prompt_tokens counter\n";
        for engine in engines {
            if change == 2 && *engine == "1" {
                continue; // a series gone from the page
            }
            text += &format!(
                "vllm:prompt_tokens_total{{engine=\"{engine}\"}} {}\n",
                value()
            );
            text += &format!("vllm:prompt_tokens_created{{engine=\"{engine}\"}} 1.7e9\n");
        }
        text += "# TYPE vllm:ttft_seconds histogram\n";
        let mut bounds = vec!["0.01", "0.1", "1.0", "+Inf"];
        if change == 3 {
            bounds.insert(2, "0.5"); // a new bucket
        }
        let mut count = 0.0;
        for le in bounds {
            count += value();
            text += &format!("vllm:ttft_seconds_bucket{{engine=\"0\",le=\"{le}\"}} {count}\n");
        }
        text += &format!("vllm:ttft_seconds_sum{{engine=\"0\"}} {}\nvllm:ttft_seconds_count{{engine=\"0\"}} {count}\n", value());
        text += &format!(
            "# TYPE s summary\ns{{quantile=\"0.5\"}} {}\ns_sum 3\ns_count 2\n",
            value()
        );
        text += &format!("untyped_thing {}\n", value());
        match change {
            4 => text = text.replace("untyped_thing ", "untyped_thing  "), // two blanks
            5 => text += "late_sample 1 1700000000000\n",                  // a timestamp
            6 => text = text.replace("untyped_thing ", "untyped_thing +Inf\nx -inf\ny "),
            7 => text = text.replace("s_sum 3", "s_sum three"), // malformed
            8 => text = text.replace('\n', "\r\n"),
            9 => text += &format!("untyped_thing {}\n", value()), // the series twice
            _ => {}
        }
        text
    }

    fn fetch(t_ns: u64) -> Fetch {
        Fetch {
            start_ns: t_ns,
            latency_ns: 1,
            outcome: FetchOutcome::Ok { changed: true },
        }
    }

    /// The log as a full parse of every page folds it in.
    fn parsed_in_full(log: &mut EndpointLog, t_ns: u64, text: &str) -> Result<(), String> {
        let page = prometheus::parse_page(text).map_err(|e| e.to_string())?;
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        log.fold_families(fetch(t_ns), t_ns, hasher.finish(), &page.families);
        Ok(())
    }

    #[test]
    fn a_page_of_the_same_lines_folds_in_as_its_full_parse_would() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut templated = EndpointLog::new("http://h/metrics".into());
        let mut reference = EndpointLog::new("http://h/metrics".into());
        let mut by_values = 0;
        for (n, change) in (0..400u32)
            .map(|n| (n, if n % 7 == 6 { n / 7 % 10 } else { 0 }))
            .collect::<Vec<_>>()
        {
            let text = page(&mut rng, change);
            let t_ns = u64::from(n) * 1_000_000;
            let fits = templated.template.0.as_ref().and_then(|t| t.values(&text));
            by_values += usize::from(fits.is_some());
            let got = templated
                .ingest_text(fetch(t_ns), t_ns, &text)
                .map_err(|e| e.to_string());
            let want = parsed_in_full(&mut reference, t_ns, &text);
            assert_eq!(
                got.is_ok(),
                want.is_ok(),
                "page {n} (change {change}): {got:?} {want:?}"
            );
            if want.is_err() {
                reference.fail(fetch(t_ns), String::new());
                templated.fail(fetch(t_ns), String::new());
            }
            assert_eq!(templated, reference, "page {n} (change {change})");
        }
        // Most pages keep the shape of the one before; those were folded in by their values.
        assert!(by_values > 300, "{by_values} of 400 pages by their values");
        let template = templated.template.0.as_ref().expect("a template");
        assert!(
            template.groups.iter().any(|g| g.roles.len() > 4),
            "a histogram's series is one group"
        );
    }

    #[test]
    fn a_template_is_not_used_once_the_log_has_lost_its_bucket() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut log = EndpointLog::new("http://h/metrics".into());
        log.ingest_text(fetch(0), 0, &page(&mut rng, 0)).unwrap();
        let family = log.families.get_mut("vllm:ttft_seconds").unwrap();
        for series in family.series.values_mut() {
            if let super::super::SeriesLog::Histogram(h) = series {
                h.buckets.remove(0);
            }
        }
        let template = log.template.0.clone().unwrap();
        assert!(!log.fits(&template));
        // The next page is parsed in full and the bucket comes back.
        log.ingest_text(fetch(1), 1, &page(&mut rng, 0)).unwrap();
        assert!(log.fits(log.template.0.as_ref().unwrap()));
    }
}
