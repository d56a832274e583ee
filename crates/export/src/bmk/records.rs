//! The records of `profile_export.jsonl` as the report reads them (phase, failure, latencies).

use super::*;

/// The phase of a record; records without a phase (older aiperf) are profiling records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordPhase {
    Warmup,
    Profiling,
}

/// What a failed record says went wrong.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Failure {
    pub(crate) code: Option<i64>,
    pub(crate) kind: Option<String>,
    pub(crate) message: Option<String>,
}

impl Failure {
    /// The category InferenceX groups dropped rows by: the error's type (`type`, `error_type` or
    /// `class`), else its code, else its message up to the first ':'.
    pub(crate) fn category(&self) -> String {
        if let Some(kind) = self.kind.as_deref().filter(|kind| !kind.is_empty()) {
            return kind.to_string();
        }
        if let Some(code) = self.code {
            return code.to_string();
        }
        match self.message.as_deref() {
            Some(m) if !m.trim().is_empty() => m.split(':').next().unwrap_or(m).trim().to_string(),
            _ => "unknown".into(),
        }
    }

    /// A context overflow, as the record writer classified it (`error.type`).
    pub(crate) fn is_context_overflow(&self) -> bool {
        self.kind.as_deref().is_some_and(|kind| {
            let kind = kind.to_ascii_lowercase().replace(['_', '-', ' '], "");
            kind.contains("contextoverflow")
        })
    }
}

/// One line of `profile_export.jsonl`, reduced to what the report reads. Latencies are in seconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProfileRecord {
    /// 1-based line in the file, for messages.
    pub(crate) line: usize,
    pub(crate) conversation_id: String,
    pub(crate) turn_index: Option<u64>,
    pub(crate) start_ns: Option<u64>,
    pub(crate) end_ns: Option<u64>,
    /// `metadata.credit_issued_ns`: when the request's credit was issued (the stability windows'
    /// clock); `None` when absent, null or not a finite non-negative number.
    pub(crate) credit_issued_ns: Option<u64>,
    /// `metadata.source_trace_id`: the root trajectory the request replays (subagents share their
    /// root's); `None` when absent or empty.
    pub(crate) source_trace_id: Option<String>,
    pub(crate) phase: RecordPhase,
    pub(crate) cancelled: bool,
    pub(crate) error: Option<Failure>,
    /// aiperf's `time_to_first_token` and `request_latency`: from the request's start.
    pub(crate) ttft_s: Option<f64>,
    pub(crate) e2el_s: Option<f64>,
    /// agentx's `scheduled_time_to_first_token` and `scheduled_request_latency`: from when the
    /// request was due (absent from aiperf's own exports).
    pub(crate) scheduled_ttft_s: Option<f64>,
    pub(crate) scheduled_e2el_s: Option<f64>,
    /// aiperf's `time_to_first_output_token`: to the first output after the reasoning.
    pub(crate) ttfo_s: Option<f64>,
    pub(crate) itl_s: Option<f64>,
    /// aiperf's `full_response_inter_token_latency` (the whole response over its tokens), when the
    /// record writer gave it.
    pub(crate) full_response_itl_s: Option<f64>,
    pub(crate) isl: Option<f64>,
    pub(crate) osl: Option<f64>,
    pub(crate) cache_read_tokens: Option<f64>,
}

impl ProfileRecord {
    /// What became of the request ([`Outcome`]); an overflow is an error the record writer typed as one.
    pub(crate) fn outcome(&self) -> Outcome {
        Outcome::classify(
            self.error
                .as_ref()
                .is_some_and(Failure::is_context_overflow),
            self.cancelled,
            self.error.is_some(),
        )
    }

    /// Counted as a success: no error and not cancelled.
    pub(crate) fn ok(&self) -> bool {
        self.outcome().is_ok()
    }
}

#[derive(Deserialize)]
pub(super) struct RawRecord {
    metadata: RawMeta,
    #[serde(default)]
    metrics: serde_json::Map<String, Value>,
    #[serde(default)]
    error: Value,
}

#[derive(Deserialize)]
pub(super) struct RawMeta {
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    turn_index: Option<u64>,
    #[serde(default)]
    request_start_ns: Option<u64>,
    #[serde(default)]
    request_end_ns: Option<u64>,
    #[serde(default)]
    credit_issued_ns: Option<Value>,
    #[serde(default)]
    source_trace_id: Option<String>,
    #[serde(default)]
    benchmark_phase: Option<String>,
    #[serde(default)]
    was_cancelled: Option<bool>,
}

/// Seconds per unit of a latency metric; aiperf writes `ms`, and a missing unit means `ms`.
pub(super) fn seconds_per(unit: Option<&str>) -> Option<f64> {
    match unit.map(str::trim) {
        None | Some("ms" | "") => Some(1e-3),
        Some("s" | "sec") => Some(1.0),
        Some("us" | "µs") => Some(1e-6),
        Some("ns") => Some(1e-9),
        _ => None,
    }
}

/// The scalar value and unit of `metrics[name]` (`{"value","unit"}` or a bare number); `None` when absent
/// or null.
pub(super) fn metric_value<'a>(
    metrics: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<(f64, Option<&'a str>)>, String> {
    let (value, unit) = match metrics.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => (
            o.get("value").unwrap_or(&Value::Null),
            o.get("unit").and_then(Value::as_str),
        ),
        Some(value) => (value, None),
    };
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_f64()
            .map(|x| Some((x, unit)))
            .ok_or_else(|| format!("metrics.{name}.value is not a finite number")),
        other => Err(format!(
            "metrics.{name}.value must be a number, got {}",
            kind_of(other)
        )),
    }
}

pub(super) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A latency metric in seconds, kept only when > 0 (InferenceX's `_ms_to_s`).
pub(super) fn latency(
    metrics: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<f64>, String> {
    let Some((value, unit)) = metric_value(metrics, name)? else {
        return Ok(None);
    };
    let per = seconds_per(unit).ok_or_else(|| {
        format!(
            "metrics.{name}.unit {:?} is not a time unit (ms, s, us, ns)",
            unit.unwrap_or_default()
        )
    })?;
    let seconds = value * per;
    Ok((seconds > 0.0).then_some(seconds))
}

/// Python truthiness of the `error` field: null, false, "" and empty containers mean no error.
pub(super) fn failure_of(value: &Value) -> Option<Failure> {
    match value {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Object(o) if o.is_empty() => None,
        Value::Object(o) => Some(Failure {
            code: o.get("code").and_then(Value::as_i64),
            kind: ["type", "error_type", "class"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str))
                .map(str::to_owned),
            message: o.get("message").and_then(Value::as_str).map(str::to_owned),
        }),
        Value::String(s) => Some(Failure {
            message: Some(s.clone()),
            ..Failure::default()
        }),
        other => Some(Failure {
            message: Some(other.to_string()),
            ..Failure::default()
        }),
    }
}

/// Parses one record line (1-based `line` for messages).
pub(super) fn parse_record(text: &str, line: usize) -> Result<ProfileRecord, String> {
    let raw: RawRecord = serde_json::from_str(text).map_err(|e| {
        format!("not an aiperf record ({e}); each line must be one JSON object with `metadata`, `metrics` and `error`")
    })?;
    let phase = match raw.metadata.benchmark_phase.as_deref() {
        None | Some("profiling") => RecordPhase::Profiling,
        Some("warmup") => RecordPhase::Warmup,
        Some(other) => {
            return Err(format!(
                "metadata.benchmark_phase {other:?} is not \"warmup\" or \"profiling\""
            ))
        }
    };
    let metrics = &raw.metrics;
    let count = |name: &str| -> Result<Option<f64>, String> {
        Ok(metric_value(metrics, name)?.map(|(v, _)| v))
    };
    Ok(ProfileRecord {
        line,
        conversation_id: raw.metadata.conversation_id.unwrap_or_default(),
        turn_index: raw.metadata.turn_index,
        start_ns: raw.metadata.request_start_ns,
        end_ns: raw.metadata.request_end_ns,
        credit_issued_ns: raw
            .metadata
            .credit_issued_ns
            .as_ref()
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(|t| t as u64),
        source_trace_id: raw.metadata.source_trace_id.filter(|s| !s.is_empty()),
        phase,
        cancelled: raw.metadata.was_cancelled.unwrap_or(false),
        error: failure_of(&raw.error),
        ttft_s: latency(metrics, "time_to_first_token")?,
        e2el_s: latency(metrics, "request_latency")?,
        scheduled_ttft_s: latency(metrics, "scheduled_time_to_first_token")?,
        scheduled_e2el_s: latency(metrics, "scheduled_request_latency")?,
        ttfo_s: latency(metrics, "time_to_first_output_token")?,
        itl_s: latency(metrics, "inter_token_latency")?,
        full_response_itl_s: latency(metrics, "full_response_inter_token_latency")?,
        isl: count("input_sequence_length")?,
        osl: count("output_sequence_length")?,
        cache_read_tokens: count("usage_prompt_cache_read_tokens")?,
    })
}

/// Parses the text of a `profile_export.jsonl`; `path` names the file in errors (`path:line: ...`).
#[cfg(test)]
pub(crate) fn parse_profile_export(
    text: &str,
    path: &Path,
) -> Result<Vec<ProfileRecord>, ReportError> {
    read_profile_export(text.as_bytes(), path)
}

/// As [`parse_profile_export`], a line at a time from `reader` (a long run's export runs to
/// gigabytes, and only its parsed records are kept).
pub(crate) fn read_profile_export(
    mut reader: impl std::io::BufRead,
    path: &Path,
) -> Result<Vec<ProfileRecord>, ReportError> {
    let mut out = Vec::new();
    let mut line_buf = String::new();
    for line in 1.. {
        line_buf.clear();
        let bytes_read = reader
            .read_line(&mut line_buf)
            .map_err(|source| ReportError::Read {
                path: path.to_owned(),
                source,
            })?;
        if bytes_read == 0 {
            break;
        }
        if line_buf.trim().is_empty() {
            continue;
        }
        out.push(parse_record(line_buf.trim_end(), line).map_err(|message| {
            ReportError::Record {
                path: path.to_owned(),
                line,
                message,
            }
        })?);
    }
    Ok(out)
}
