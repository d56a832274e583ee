//! A parser of the Prometheus text exposition format (version 0.0.4), as vLLM, SGLang and other
//! inference servers serve it at `/metrics`.
//!
//! It owns the grammar only: `# HELP` and `# TYPE` lines, samples with optional labels (escaped
//! label values), values including `NaN`, `+Inf` and `-Inf`, and optional millisecond timestamps.
//! Samples are grouped into [`Family`]s: a declared counter owns `NAME` and `NAME_total` (the family
//! is named without `_total`, the way aiperf reports counters), a declared histogram or summary owns
//! its `_bucket`, `_sum` and `_count` (and `_created`) samples, and a sample no `# TYPE` line claims
//! gets an untyped family of its own. Malformed input is an error naming the 1-based line; nothing
//! here panics on what a server sends.

use std::collections::HashMap;

/// The type a `# TYPE` line declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// `counter`: a total that only goes up (the family is named without `_total`).
    Counter,
    /// `gauge`: a value that goes up and down.
    Gauge,
    /// `histogram`: `_bucket` series by `le`, with `_sum` and `_count`.
    Histogram,
    /// `summary`: quantile series, with `_sum` and `_count`.
    Summary,
    /// `untyped`, or no `# TYPE` line at all.
    Untyped,
}

impl MetricType {
    /// The type a `# TYPE` line (or [`MetricType::as_str`]) names.
    pub fn parse(name: &str) -> Option<MetricType> {
        Some(match name {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            "untyped" | "unknown" => MetricType::Untyped,
            _ => return None,
        })
    }

    /// The name aiperf's export uses (`unknown` for untyped).
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
            MetricType::Untyped => "unknown",
        }
    }
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The full sample name, e.g. `vllm:prompt_tokens_total` or `x_seconds_bucket`.
    pub name: String,
    /// Labels in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The sample's value (NaN and the infinities as written).
    pub value: f64,
    /// Milliseconds since the Unix epoch, when the server gave one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of one metric family, in the order they appeared.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The family name (counters without `_total`).
    pub name: String,
    /// The type its `# TYPE` line declared (untyped without one).
    pub kind: MetricType,
    /// The `# HELP` text, unescaped; empty without one.
    pub help: String,
    /// The samples of the family, in page order.
    pub samples: Vec<Sample>,
}

impl Family {
    /// The role of a sample of this family: `""` for the value itself, or the suffix
    /// (`_bucket`, `_sum`, `_count`, `_total`, `_created`).
    pub fn role<'a>(&self, sample: &'a Sample) -> &'a str {
        sample.name.strip_prefix(self.name.as_str()).unwrap_or("")
    }
}

/// Malformed exposition text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message} (in {excerpt:?})")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with the line.
    pub message: String,
    /// The start of the offending line.
    pub excerpt: String,
}

fn err(line_no: usize, line: &str, message: impl Into<String>) -> ParseError {
    let excerpt: String = line.chars().take(120).collect();
    ParseError {
        line: line_no,
        message: message.into(),
        excerpt,
    }
}

fn is_name_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_' || byte == b':'
}

fn is_name_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b':'
}

/// A cursor over one line.
struct Cursor<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s.as_bytes()[self.i], b' ' | b'\t') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn name(&mut self, label: bool) -> Option<&'a str> {
        let bytes = self.s.as_bytes();
        let start = self.i;
        match bytes.get(self.i) {
            Some(&byte) if is_name_start(byte) && !(label && byte == b':') => self.i += 1,
            _ => return None,
        }
        while self.i < bytes.len()
            && is_name_char(bytes[self.i])
            && !(label && bytes[self.i] == b':')
        {
            self.i += 1;
        }
        Some(&self.s[start..self.i])
    }

    fn token(&mut self) -> &'a str {
        let start = self.i;
        while self.i < self.s.len() && !matches!(self.s.as_bytes()[self.i], b' ' | b'\t') {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn rest(&self) -> &'a str {
        &self.s[self.i..]
    }
}

/// Parse a sample value: a float, `NaN`, `+Inf`, `-Inf` (any case).
pub fn parse_value(text: &str) -> Option<f64> {
    let is = |word: &str| text.eq_ignore_ascii_case(word);
    if is("nan") {
        Some(f64::NAN)
    } else if is("+inf") || is("inf") {
        Some(f64::INFINITY)
    } else if is("-inf") {
        Some(f64::NEG_INFINITY)
    } else if text
        .bytes()
        .any(|b| b.is_ascii_alphabetic() && !b.eq_ignore_ascii_case(&b'e'))
    {
        // Rust also accepts "infinity"; the format does not, and a bare word is malformed.
        None
    } else {
        text.parse().ok()
    }
}

fn unescape_help(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(character) = chars.next() {
        if character == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('\\') => out.push('\\'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(character);
        }
    }
    out
}

/// Parse the `{...}` label block at the cursor (which points at `{`).
fn labels(cursor: &mut Cursor<'_>) -> Result<Vec<(String, String)>, String> {
    cursor.i += 1; // '{'
    let mut out: Vec<(String, String)> = Vec::new();
    loop {
        cursor.skip_ws();
        if cursor.peek() == Some(b'}') {
            cursor.i += 1;
            return Ok(out);
        }
        let name = cursor
            .name(true)
            .ok_or_else(|| format!("expected a label name at column {}", cursor.i + 1))?
            .to_string();
        cursor.skip_ws();
        if cursor.peek() != Some(b'=') {
            return Err(format!("expected `=` after label {name:?}"));
        }
        cursor.i += 1;
        cursor.skip_ws();
        if cursor.peek() != Some(b'"') {
            return Err(format!(
                "the value of label {name:?} must be in double quotes"
            ));
        }
        cursor.i += 1;
        let mut value = String::new();
        let rest = cursor.rest();
        let mut chars = rest.char_indices();
        let mut closed = None;
        while let Some((offset, character)) = chars.next() {
            match character {
                '"' => {
                    closed = Some(offset + 1);
                    break;
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, other)) => {
                        return Err(format!("unknown escape `\\{other}` in label {name:?}"))
                    }
                    None => break,
                },
                _ => value.push(character),
            }
        }
        let Some(len) = closed else {
            return Err(format!("unterminated value of label {name:?}"));
        };
        cursor.i += len;
        if out.iter().any(|(k, _)| *k == name) {
            return Err(format!("label {name:?} appears twice"));
        }
        out.push((name, value));
        cursor.skip_ws();
        match cursor.peek() {
            Some(b',') => cursor.i += 1,
            Some(b'}') => {}
            _ => return Err("expected `,` or `}` after a label".to_string()),
        }
    }
}

/// Builds families while lines are read.
#[derive(Default)]
struct Builder {
    families: Vec<Family>,
    /// Family name to index.
    by_name: HashMap<String, usize>,
    /// Sample name to the family that owns it (from `# TYPE` declarations).
    owner: HashMap<String, usize>,
    /// HELP text seen before the family's TYPE line.
    pending_help: HashMap<String, String>,
}

impl Builder {
    fn family(&mut self, name: &str, kind: MetricType) -> usize {
        if let Some(&index) = self.by_name.get(name) {
            return index;
        }
        let help = self
            .pending_help
            .remove(name)
            .or_else(|| self.pending_help.remove(&format!("{name}_total")))
            .unwrap_or_default();
        self.families.push(Family {
            name: name.to_string(),
            kind,
            help,
            samples: Vec::new(),
        });
        let index = self.families.len() - 1;
        self.by_name.insert(name.to_string(), index);
        index
    }

    fn declare(&mut self, declared: &str, kind: MetricType) -> Result<(), String> {
        let name = match kind {
            MetricType::Counter => declared.strip_suffix("_total").unwrap_or(declared),
            _ => declared,
        };
        if let Some(&index) = self.by_name.get(name) {
            let family = &self.families[index];
            if !family.samples.is_empty() || family.kind != kind {
                return Err(format!("a second `# TYPE` line for {declared}"));
            }
        }
        // HELP may name either spelling of a counter.
        if name != declared {
            if let Some(help) = self.pending_help.remove(declared) {
                self.pending_help.insert(name.to_string(), help);
            }
        }
        let index = self.family(name, kind);
        let suffixes: &[&str] = match kind {
            MetricType::Counter => &["", "_total", "_created"],
            MetricType::Histogram => &["_bucket", "_sum", "_count", "_created"],
            MetricType::Summary => &["", "_sum", "_count", "_created"],
            MetricType::Gauge | MetricType::Untyped => &[""],
        };
        for suffix in suffixes {
            self.owner.insert(format!("{name}{suffix}"), index);
        }
        Ok(())
    }

    fn help(&mut self, name: &str, text: String) {
        let key = name.to_string();
        let target = self
            .by_name
            .get(&key)
            .or_else(|| {
                self.by_name
                    .get(name.strip_suffix("_total").unwrap_or(name))
            })
            .copied();
        match target {
            Some(i) => self.families[i].help = text,
            None => {
                self.pending_help.insert(key, text);
            }
        }
    }

    /// Adds `sample` to its family; where it went (family, sample).
    fn sample(&mut self, sample: Sample) -> (usize, usize) {
        let index = match self.owner.get(&sample.name) {
            Some(&index) => index,
            None => {
                let index = self.family(&sample.name.clone(), MetricType::Untyped);
                self.owner.insert(sample.name.clone(), index);
                index
            }
        };
        let samples = &mut self.families[index].samples;
        samples.push(sample);
        (index, samples.len() - 1)
    }
}

/// One line of a page, as [`parse_page`] read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineShape {
    /// A blank line or a comment (`# HELP`, `# TYPE` or an ordinary one).
    Text,
    /// A sample: the line's first `key_len` bytes are everything before its value (its name, its
    /// labels and the blanks after them), and it is sample `sample` of family `family`.
    Sample {
        /// Bytes of the line (without a trailing `\r`) before the value.
        key_len: usize,
        /// Whether a timestamp follows the value.
        timestamp: bool,
        /// Index into the families.
        family: usize,
        /// Index into that family's samples.
        sample: usize,
    },
}

/// A parsed page: its families, and the shape of each of its lines (`str::lines`, in order).
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The families, in order of first appearance.
    pub families: Vec<Family>,
    /// One shape per line.
    pub lines: Vec<LineShape>,
}

/// Parse one exposition page into its families, in order of first appearance.
pub fn parse(text: &str) -> Result<Vec<Family>, ParseError> {
    parse_page(text).map(|page| page.families)
}

/// Parse one exposition page into its families and the shape of each line.
pub fn parse_page(text: &str) -> Result<Page, ParseError> {
    let mut builder = Builder::default();
    let mut lines = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = raw.trim_end_matches('\r');
        let trimmed = line.trim_start_matches([' ', '\t']);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            lines.push(LineShape::Text);
        }
        if trimmed.is_empty() {
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            let mut cursor = Cursor { s: comment, i: 0 };
            cursor.skip_ws();
            let word = cursor.token();
            if word != "HELP" && word != "TYPE" {
                continue; // an ordinary comment
            }
            cursor.skip_ws();
            let name = cursor
                .name(false)
                .ok_or_else(|| err(line_no, line, format!("`# {word}` needs a metric name")))?;
            if word == "HELP" {
                let rest = cursor.rest();
                let rest = rest.strip_prefix([' ', '\t']).unwrap_or(rest);
                builder.help(name, unescape_help(rest));
            } else {
                cursor.skip_ws();
                let kind = cursor.token();
                let kind = MetricType::parse(kind).ok_or_else(|| {
                    err(
                        line_no,
                        line,
                        format!(
                            "unknown metric type {kind:?}; expected counter, gauge, histogram, summary or untyped"
                        ),
                    )
                })?;
                builder
                    .declare(name, kind)
                    .map_err(|m| err(line_no, line, m))?;
            }
            continue;
        }
        let mut cursor = Cursor { s: trimmed, i: 0 };
        let name = cursor
            .name(false)
            .ok_or_else(|| err(line_no, line, "expected a metric name"))?
            .to_string();
        cursor.skip_ws();
        let labels = if cursor.peek() == Some(b'{') {
            labels(&mut cursor).map_err(|m| err(line_no, line, m))?
        } else {
            Vec::new()
        };
        cursor.skip_ws();
        let key_len = line.len() - trimmed.len() + cursor.i;
        let value_text = cursor.token();
        if value_text.is_empty() {
            return Err(err(
                line_no,
                line,
                format!("the sample {name} has no value"),
            ));
        }
        let value = parse_value(value_text)
            .ok_or_else(|| err(line_no, line, format!("{value_text:?} is not a number")))?;
        cursor.skip_ws();
        let timestamp_text = cursor.token();
        let timestamp_ms = if timestamp_text.is_empty() {
            None
        } else {
            Some(timestamp_text.parse::<i64>().map_err(|_| {
                err(
                    line_no,
                    line,
                    format!("{timestamp_text:?} is not a timestamp (integer milliseconds)"),
                )
            })?)
        };
        cursor.skip_ws();
        if !cursor.rest().is_empty() {
            return Err(err(
                line_no,
                line,
                format!("unexpected {:?} after the sample", cursor.rest()),
            ));
        }
        let (family, sample) = builder.sample(Sample {
            name,
            labels,
            value,
            timestamp_ms,
        });
        lines.push(LineShape::Sample {
            key_len,
            timestamp: timestamp_ms.is_some(),
            family,
            sample,
        });
    }
    Ok(Page {
        families: builder.families,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fam<'a>(f: &'a [Family], name: &str) -> &'a Family {
        f.iter()
            .find(|x| x.name == name)
            .unwrap_or_else(|| panic!("no family {name} in {f:#?}"))
    }

    const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 1000.0
# HELP vllm:external_prefix_cache_hits_total External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.
# TYPE vllm:external_prefix_cache_hits counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 42.0
vllm:external_prefix_cache_hits_created{engine="0",model_name="Qwen/Qwen3-0.6B"} 1.7e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 5000.031
"#;

    #[test]
    fn vllm_names_types_and_values() {
        let f = parse(VLLM).unwrap();
        let running = fam(&f, "vllm:num_requests_running");
        assert_eq!(running.kind, MetricType::Gauge);
        assert_eq!(
            running.help,
            "Number of requests in model execution batches."
        );
        assert_eq!(running.samples.len(), 2);
        assert_eq!(running.samples[0].label("engine"), Some("0"));
        assert_eq!(running.samples[0].value, 3.0);
        assert_eq!(fam(&f, "vllm:kv_cache_usage_perc").samples[0].value, 0.25);

        // A counter declared with `_total` is named without it.
        let q = fam(&f, "vllm:prefix_cache_queries");
        assert_eq!(q.kind, MetricType::Counter);
        assert!(q.help.starts_with("Prefix cache queries"));
        assert_eq!(q.role(&q.samples[0]), "_total");
        // ... and one declared without it owns the `_total` and `_created` samples.
        let ext = fam(&f, "vllm:external_prefix_cache_hits");
        assert_eq!(ext.kind, MetricType::Counter);
        assert!(ext.help.starts_with("External prefix cache hits"));
        assert_eq!(ext.samples.len(), 2);
        assert_eq!(ext.role(&ext.samples[1]), "_created");
        assert_eq!(ext.samples[1].value, 1.7e9);

        let h = fam(&f, "vllm:time_to_first_token_seconds");
        assert_eq!(h.kind, MetricType::Histogram);
        let roles: Vec<&str> = h.samples.iter().map(|s| h.role(s)).collect();
        assert_eq!(roles, ["_bucket", "_bucket", "_bucket", "_count", "_sum"]);
        assert_eq!(h.samples[2].label("le"), Some("+Inf"));
        assert_eq!(h.samples[4].value, 5000.031);
        assert_eq!(f.len(), 5);
    }

    #[test]
    fn sglang_names() {
        let text = "# HELP sglang:cached_tokens_total The number of prefix cache tokens.\n\
# TYPE sglang:cached_tokens_total counter\n\
sglang:cached_tokens_total{model_name=\"m\"} 250.0\n\
# HELP sglang:realtime_tokens_total Total realtime tokens by mode.\n\
# TYPE sglang:realtime_tokens_total counter\n\
sglang:realtime_tokens_total{mode=\"prefill_compute\",model_name=\"m\"} 750.0\n\
sglang:realtime_tokens_total{mode=\"prefill_cache\",model_name=\"m\"} 250.0\n\
# TYPE sglang:token_usage gauge\n\
sglang:token_usage{model_name=\"m\"} 0.5\n\
# TYPE sglang:queue_time_seconds histogram\n\
sglang:queue_time_seconds_bucket{le=\"0.1\"} 1\n\
sglang:queue_time_seconds_bucket{le=\"+Inf\"} 1\n\
sglang:queue_time_seconds_sum 0.05\n\
sglang:queue_time_seconds_count 1\n";
        let f = parse(text).unwrap();
        assert_eq!(fam(&f, "sglang:cached_tokens").samples[0].value, 250.0);
        let rt = fam(&f, "sglang:realtime_tokens");
        assert_eq!(rt.kind, MetricType::Counter);
        assert_eq!(rt.samples[1].label("mode"), Some("prefill_cache"));
        assert_eq!(fam(&f, "sglang:token_usage").kind, MetricType::Gauge);
        assert_eq!(fam(&f, "sglang:queue_time_seconds").samples.len(), 4);
    }

    #[test]
    fn escapes_special_values_timestamps_and_untyped() {
        let text = "# HELP odd A \\\\ and a\\nnewline\n\
# TYPE odd gauge\n\
odd{path=\"C:\\\\x\",q=\"say \\\"hi\\\"\",nl=\"a\\nb\",brace=\"}{,=\"} NaN\n\
odd{path=\"y\",} +Inf 1700000000000\n\
odd -Inf\n\
no_type_line{a=\"1\"} 1e-3\n\
  # a plain comment\n\
# TYPE s summary\n\
s{quantile=\"0.5\"} 2\n\
s_sum 10\n\
s_count 4\n\
# TYPE u untyped\n\
u 7\n";
        let f = parse(text).unwrap();
        let odd = fam(&f, "odd");
        assert_eq!(odd.help, "A \\ and a\nnewline");
        let s0 = &odd.samples[0];
        assert!(s0.value.is_nan());
        assert_eq!(s0.label("path"), Some("C:\\x"));
        assert_eq!(s0.label("q"), Some("say \"hi\""));
        assert_eq!(s0.label("nl"), Some("a\nb"));
        assert_eq!(s0.label("brace"), Some("}{,="));
        assert_eq!(odd.samples[1].value, f64::INFINITY);
        assert_eq!(odd.samples[1].timestamp_ms, Some(1_700_000_000_000));
        assert_eq!(odd.samples[2].value, f64::NEG_INFINITY);
        let nt = fam(&f, "no_type_line");
        assert_eq!(nt.kind, MetricType::Untyped);
        assert_eq!(nt.samples[0].value, 0.001);
        let s = fam(&f, "s");
        assert_eq!(s.kind, MetricType::Summary);
        assert_eq!(s.samples.len(), 3);
        assert_eq!(fam(&f, "u").kind, MetricType::Untyped);
    }

    #[test]
    fn malformed_lines_are_named() {
        for (text, line, what) in [
            ("a 1\nb{x=\"1\" 2\n", 2, "expected `,` or `}`"),
            ("a{x=1} 2\n", 1, "double quotes"),
            ("a{x=\"1} 2\n", 1, "unterminated"),
            ("ok 1\n\n3abc 1\n", 3, "expected a metric name"),
            ("a\n", 1, "has no value"),
            ("a one\n", 1, "is not a number"),
            ("a 1 12.5\n", 1, "not a timestamp"),
            ("a 1 2 3\n", 1, "unexpected"),
            ("# TYPE a bogus\n", 1, "unknown metric type"),
            (
                "# TYPE a gauge\na 1\n# TYPE a gauge\n",
                3,
                "second `# TYPE`",
            ),
            ("a{x=\"1\",x=\"2\"} 1\n", 1, "appears twice"),
            ("a{x=\"\\q\"} 1\n", 1, "unknown escape"),
            ("a 1\nb Infinity\n", 2, "not a number"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
        }
    }
}
