//! The other inputs of the report: aiperf's server metrics export and its aggregate summary.

use super::*;

/// How a server metric aggregates across its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricKind {
    /// Increases over the window: series are summed (`stats.total`).
    Counter,
    /// Levels (usage, queue lengths, percentages): series are averaged (`stats.avg`).
    Gauge,
    Histogram,
}

/// One `(endpoint, labels)` series of a server metric.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Series {
    pub(crate) endpoint: Option<String>,
    pub(crate) labels: BTreeMap<String, String>,
    /// The numeric entries of `stats`.
    pub(crate) stats: BTreeMap<String, f64>,
    /// The numeric entries of each of `timeslices` (with `--slice-duration`), in order.
    pub(crate) timeslices: Vec<BTreeMap<String, f64>>,
}

/// One server metric of `server_metrics_export.json`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerMetric {
    pub(crate) kind: MetricKind,
    pub(crate) series: Vec<Series>,
}

/// The parts of aiperf's `server_metrics_export.json` the report reads: metrics by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ServerMetrics {
    pub(crate) metrics: BTreeMap<String, ServerMetric>,
}

impl ServerMetrics {
    /// Parses the file's text; `path` names it in errors.
    pub(crate) fn parse(text: &str, path: &Path) -> Result<ServerMetrics, ReportError> {
        let doc: Value = serde_json::from_str(text).map_err(|e| ReportError::File {
            path: path.to_owned(),
            message: format!("not JSON ({e}); expected aiperf's server metrics export"),
        })?;
        ServerMetrics::of_doc(&doc, path)
    }

    /// Reads the export's parsed JSON; `path` names it in errors.
    pub(crate) fn of_doc(doc: &Value, path: &Path) -> Result<ServerMetrics, ReportError> {
        let err = |message: String| ReportError::File {
            path: path.to_owned(),
            message,
        };
        let mut out = ServerMetrics::default();
        let metrics = match doc.get("metrics") {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(err(format!(
                    "`metrics` must be an object keyed by metric name, got {}",
                    kind_of(other)
                )))
            }
        };
        for (name, m) in metrics {
            let series_v = match m.get("series") {
                Some(Value::Array(a)) => a.as_slice(),
                None | Some(Value::Null) => &[],
                Some(other) => {
                    return Err(err(format!(
                        "metrics[{name:?}].series must be a list, got {}",
                        kind_of(other)
                    )))
                }
            };
            let mut series = Vec::with_capacity(series_v.len());
            for (i, s) in series_v.iter().enumerate() {
                let stats = match s.get("stats") {
                    Some(Value::Object(o)) => o
                        .iter()
                        .filter_map(|(k, value)| value.as_f64().map(|x| (k.clone(), x)))
                        .collect(),
                    None | Some(Value::Null) => BTreeMap::new(),
                    Some(other) => {
                        return Err(err(format!(
                            "metrics[{name:?}].series[{i}].stats must be an object, got {}",
                            kind_of(other)
                        )))
                    }
                };
                let labels = match s.get("labels") {
                    Some(Value::Object(o)) => o
                        .iter()
                        .map(|(k, value)| {
                            let value = value
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| value.to_string());
                            (k.clone(), value)
                        })
                        .collect(),
                    _ => BTreeMap::new(),
                };
                let timeslices = s
                    .get("timeslices")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_object)
                            .map(|o| {
                                o.iter()
                                    .filter_map(|(k, value)| value.as_f64().map(|x| (k.clone(), x)))
                                    .collect()
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                series.push(Series {
                    timeslices,
                    endpoint: s
                        .get("endpoint_url")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    labels,
                    stats,
                });
            }
            let declared = m.get("type").and_then(Value::as_str);
            let kind = match declared {
                Some("counter") => MetricKind::Counter,
                Some("histogram") => MetricKind::Histogram,
                Some("gauge" | "unknown") => MetricKind::Gauge,
                // No type: a series with an increase over the window is a counter.
                _ if series.iter().any(|s| s.stats.contains_key("total")) => MetricKind::Counter,
                _ => MetricKind::Gauge,
            };
            out.metrics
                .insert(name.clone(), ServerMetric { kind, series });
        }
        Ok(out)
    }

    /// The metric's value over the window, aggregated by its kind over the series `keep` accepts:
    /// counters sum `total` (8 engines' increases add up), gauges average `avg` (8 engines at 50% read
    /// 50%), histograms sum `sum`. `None` when the metric or the stat is absent, and for a counter
    /// one of whose series has no `total` (the export leaves it `null` when the counter went
    /// backwards or missing in the window): a sum over the other series would be a mixed increase.
    pub(crate) fn value_where(&self, name: &str, keep: impl Fn(&Series) -> bool) -> Option<f64> {
        let metric = self.metrics.get(name)?;
        let stat = match metric.kind {
            MetricKind::Counter => "total",
            MetricKind::Gauge => "avg",
            MetricKind::Histogram => "sum",
        };
        if metric.kind == MetricKind::Counter
            && metric
                .series
                .iter()
                .any(|s| keep(s) && !s.stats.contains_key(stat))
        {
            return None;
        }
        let vals: Vec<f64> = metric
            .series
            .iter()
            .filter(|s| keep(s))
            .filter_map(|s| s.stats.get(stat).copied())
            .collect();
        if vals.is_empty() {
            return None;
        }
        let sum: f64 = vals.iter().sum();
        Some(match metric.kind {
            MetricKind::Gauge => sum / vals.len() as f64,
            _ => sum,
        })
    }

    /// [`Self::value_where`] over every series.
    pub(crate) fn value(&self, name: &str) -> Option<f64> {
        self.value_where(name, |_| true)
    }

    /// The value over the series whose label `key` equals `want`.
    pub(crate) fn value_labelled(&self, name: &str, key: &str, want: &str) -> Option<f64> {
        self.value_where(name, |s| {
            s.labels.get(key).map(String::as_str) == Some(want)
        })
    }
}

/// A JSON artifact file's text, or an error naming the file.
pub(super) fn json_doc(text: &str, path: &Path) -> Result<Value, ReportError> {
    serde_json::from_str(text).map_err(|e| ReportError::File {
        path: path.to_owned(),
        message: format!("not JSON ({e})"),
    })
}

/// The parts of `profile_export_aiperf.json` the report reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AiperfSummary {
    /// `theoretical_prefix_cache_hit`: `sum / count`, else `avg / 100` when its unit is `%`.
    pub(crate) theoretical_cache_hit_rate: Option<f64>,
    /// `metadata.dataset`, copied into the nested result as `dataset`.
    pub(crate) dataset: Option<Value>,
}

impl AiperfSummary {
    pub(crate) fn parse(text: &str, path: &Path) -> Result<AiperfSummary, ReportError> {
        let doc = json_doc(text, path)?;
        let theoretical = doc.get("theoretical_prefix_cache_hit");
        let field = |k: &str| {
            theoretical
                .and_then(|theoretical| theoretical.get(k))
                .and_then(Value::as_f64)
        };
        let rate = match (field("sum"), field("count")) {
            (Some(s), Some(c)) if c > 0.0 => Some(s / c),
            _ => match (
                field("avg"),
                theoretical
                    .and_then(|theoretical| theoretical.get("unit"))
                    .and_then(Value::as_str),
            ) {
                (Some(a), Some("%")) => Some(a / 100.0),
                _ => None,
            },
        };
        Ok(AiperfSummary {
            theoretical_cache_hit_rate: rate.filter(|x| x.is_finite()),
            dataset: doc
                .pointer("/metadata/dataset")
                .filter(|v| !v.is_null())
                .cloned(),
        })
    }
}
