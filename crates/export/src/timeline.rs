//! A run as it happened, as Chrome/Perfetto trace-event JSON (`trace.json`) that ui.perfetto.dev and
//! chrome://tracing open as is.
//!
//! What a viewer shows:
//! - one process per lane (`lane N`), and in it one track per concurrent stream (`slot S`): a lane's
//!   root stream and the subagent streams it spawned, each stream on the lowest slot free for its
//!   whole life;
//! - each request a slice from send to end (named `trace turn`, its phase the category), with nested
//!   slices `headers` (send to the response headers), `ttft` (send to the first token) and `decode`
//!   (first token to end); failed, cancelled and context-overflow requests in their own colours;
//! - `think` slices between a stream's requests (the previous end to when the next was due) and
//!   `send lag` slices (due to sent);
//! - flow arrows from the parent request that spawned a subagent stream to the stream's first
//!   request, and from the stream's last request to the parent request that joined it;
//! - the phase edges (warmup, cache pressure, profiling, grace) as global instant events;
//! - the server's gauges (requests running and waiting, KV usage) as counter tracks, per `/metrics`
//!   endpoint, on the run's clock.
//!
//! It streams: a first pass over `records.jsonl` keeps each stream's place (lane, parent, the send and
//! end of each of its requests, 16 bytes a request), the second writes the events as it reads the
//! records again. A torn last line (a killed run) is skipped and said; a missing file is said, and what
//! exists is exported.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use agentx_metrics::engines::ENGINES;
use agentx_metrics::scrape_log::{EndpointLog, ScrapeLog};
use agentx_record::outcome::Outcome;
use agentx_record::{scan_records, RequestRecord, RECORDS_FILE};

use crate::manifest::Manifest;

/// The trace file `agentx-host timeline` writes by default, and `run --timeline` beside the records.
pub const TIMELINE_FILE: &str = "trace.json";

/// The process that holds the run's phase edges.
const RUN_PID: u32 = 0;
/// The first process of the server's counter tracks (one per `/metrics` endpoint); lanes start at 1.
const SERVER_PID_BASE: u32 = 1_000_000;

/// What a timeline holds, counted as it was written (the tests check them against the records and
/// the journal).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TimelineCounts {
    /// Requests exported.
    pub requests: u64,
    /// Complete (`X`) events: requests, their nested phases, think and send-lag slices.
    pub slices: u64,
    /// Flow arrows (a start and a finish event each): spawns and joins.
    pub flows: u64,
    /// Counter (`C`) samples of the server's gauges.
    pub counter_samples: u64,
    /// Global instant events: the phase edges.
    pub instants: u64,
    /// What the run directory lacked or what was skipped, each said once.
    pub missing: Vec<String>,
}

/// Why a timeline could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    /// A record line that does not parse (other than a torn last line).
    #[error("{0}")]
    Records(String),
    /// The output could not be written.
    #[error("cannot write the timeline: {0}")]
    Write(#[from] std::io::Error),
    /// Neither records nor server metrics: nothing to draw.
    #[error("{0} holds no records.jsonl and no server metrics: there is nothing to draw")]
    Empty(String),
}

/// One trace event, as the trace-event format spells it (times in microseconds).
#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    cat: &'a str,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cname: Option<&'static str>,
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    args: serde_json::Value,
}

impl<'a> Event<'a> {
    fn new(name: &'a str, phase: &'static str, ts_ns: u64, pid: u32, tid: u32) -> Event<'a> {
        Event {
            name,
            cat: "",
            ph: phase,
            ts: micros(ts_ns),
            dur: None,
            pid,
            tid,
            id: None,
            bp: None,
            s: None,
            cname: None,
            args: serde_json::Value::Null,
        }
    }

    fn slice(name: &'a str, start_ns: u64, end_ns: u64, pid: u32, tid: u32) -> Event<'a> {
        let mut event = Event::new(name, "X", start_ns, pid, tid);
        event.dur = Some(micros(end_ns.saturating_sub(start_ns)));
        event
    }
}

/// Nanoseconds on the run's clock as the format's microseconds.
fn micros(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// One stream of the run (a session, or one stream of a session tree), from the first pass.
struct Stream {
    lane: u32,
    depth: u8,
    /// The parent stream's correlation id until the first pass ends, then its index.
    parent_id: Option<String>,
    parent: Option<usize>,
    /// When its first request was due, and when its last ended (its life on its slot).
    first_due_ns: u64,
    last_end_ns: u64,
    /// Each request's send and end, in file order (a stream's requests are sequential).
    requests: Vec<(u64, u64)>,
    /// Its track within the lane.
    slot: u32,
    /// The second pass: requests written so far, and the previous one's end.
    written: usize,
    previous_end_ns: Option<u64>,
}

/// The streams of a run, by correlation id.
#[derive(Default)]
struct Streams {
    index: HashMap<String, usize>,
    all: Vec<Stream>,
    /// Slots per lane, for the thread names.
    slots: HashMap<u32, u32>,
}

impl Streams {
    fn add(&mut self, record: &RequestRecord) {
        let at = *self
            .index
            .entry(record.correlation_id.clone())
            .or_insert_with(|| {
                self.all.push(Stream {
                    lane: record.lane,
                    depth: record.tree.as_ref().map_or(0, |tree| tree.agent_depth),
                    parent_id: record
                        .tree
                        .as_ref()
                        .and_then(|tree| tree.parent_correlation_id.clone()),
                    parent: None,
                    first_due_ns: record.intended_ns.min(record.send_ns),
                    last_end_ns: record.end_ns,
                    requests: Vec::new(),
                    slot: 0,
                    written: 0,
                    previous_end_ns: None,
                });
                self.all.len() - 1
            });
        let stream = &mut self.all[at];
        stream.first_due_ns = stream
            .first_due_ns
            .min(record.intended_ns.min(record.send_ns));
        stream.last_end_ns = stream.last_end_ns.max(record.end_ns);
        stream.requests.push((record.send_ns, record.end_ns));
    }

    /// Parents resolved to indices, and each lane's streams laid on the fewest slots: in order of
    /// start, each on the lowest slot whose last stream ended before it began.
    fn settle(&mut self) {
        for at in 0..self.all.len() {
            let parent = self.all[at]
                .parent_id
                .take()
                .and_then(|id| self.index.get(&id).copied());
            self.all[at].parent = parent;
        }
        let mut by_lane: HashMap<u32, Vec<usize>> = HashMap::new();
        for (at, stream) in self.all.iter().enumerate() {
            by_lane.entry(stream.lane).or_default().push(at);
        }
        for (lane, mut members) in by_lane {
            members.sort_by_key(|&at| (self.all[at].first_due_ns, self.all[at].depth));
            let mut slot_ends: Vec<u64> = Vec::new();
            for at in members {
                let (start, end) = (self.all[at].first_due_ns, self.all[at].last_end_ns);
                let slot = match slot_ends.iter().position(|&ended| ended <= start) {
                    Some(free) => free,
                    None => {
                        slot_ends.push(0);
                        slot_ends.len() - 1
                    }
                };
                slot_ends[slot] = end;
                self.all[at].slot = slot as u32;
            }
            self.slots.insert(lane, slot_ends.len() as u32);
        }
    }
}

/// Writes the timeline of the run in `dir` to `out`: its records, its manifest's phase edges (when
/// there is a manifest) and `scrape_log`'s gauges (the journal's, when the caller read one).
pub fn write_timeline(
    dir: &Path,
    scrape_log: Option<&ScrapeLog>,
    out: impl Write,
) -> Result<TimelineCounts, TimelineError> {
    let mut counts = TimelineCounts::default();
    let records_path = dir.join(RECORDS_FILE);
    let manifest = match Manifest::read_dir(dir) {
        Ok(manifest) => Some(manifest),
        Err(e) => {
            counts
                .missing
                .push(format!("no phase edges from the manifest: {e}"));
            None
        }
    };
    let mut streams = Streams::default();
    let have_records = records_path.is_file();
    if have_records {
        let torn = scan_records(&records_path, true, |record| streams.add(&record))
            .map_err(TimelineError::Records)?;
        if let Some(torn) = torn {
            counts.missing.push(format!(
                "{}:{}: a torn last line ({} bytes, a killed run's) is skipped",
                records_path.display(),
                torn.line,
                torn.bytes
            ));
        }
        streams.settle();
    } else {
        counts.missing.push(format!(
            "{} is missing: no requests",
            records_path.display()
        ));
    }
    if scrape_log.is_none() {
        counts.missing.push(
            "no server metrics (no journal, or the run scraped none): no counter tracks".into(),
        );
    }
    if !have_records && scrape_log.is_none_or(|log| log.endpoints.is_empty()) {
        return Err(TimelineError::Empty(dir.display().to_string()));
    }
    let mut writer = EventWriter::new(out)?;
    write_names(&mut writer, &streams, scrape_log);
    if have_records {
        scan_records(&records_path, true, |record| {
            if writer.failed.is_none() {
                write_request(&mut writer, &mut streams, &record, &mut counts);
            }
        })
        .map_err(TimelineError::Records)?;
    }
    if let Some(manifest) = &manifest {
        write_phase_edges(&mut writer, manifest, scrape_log, &mut counts);
    }
    if let Some(log) = scrape_log {
        for (endpoint_index, endpoint) in log.endpoints.iter().enumerate() {
            write_gauges(&mut writer, endpoint_index as u32, endpoint, &mut counts);
        }
    }
    writer.finish()?;
    Ok(counts)
}

/// Writes events as one JSON array, one event a line; the first write error is kept and reported at
/// the end (the records are still read to the end, which is cheap).
struct EventWriter<W: Write> {
    out: std::io::BufWriter<W>,
    first: bool,
    failed: Option<std::io::Error>,
}

impl<W: Write> EventWriter<W> {
    fn new(out: W) -> std::io::Result<EventWriter<W>> {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(EventWriter {
            out,
            first: true,
            failed: None,
        })
    }

    fn event(&mut self, event: &Event<'_>) {
        if self.failed.is_some() {
            return;
        }
        let separator: &[u8] = if self.first { b"" } else { b",\n" };
        self.first = false;
        let written = self.out.write_all(separator).and_then(|()| {
            serde_json::to_writer(&mut self.out, event).map_err(std::io::Error::from)
        });
        if let Err(e) = written {
            self.failed = Some(e);
        }
    }

    fn finish(mut self) -> std::io::Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()
    }
}

/// The process and thread names: the run, each lane and its slots, each server endpoint.
fn write_names<W: Write>(
    writer: &mut EventWriter<W>,
    streams: &Streams,
    scrape_log: Option<&ScrapeLog>,
) {
    let mut name = |pid: u32, tid: u32, kind: &'static str, label: String, sort: u32| {
        let mut event = Event::new(kind, "M", 0, pid, tid);
        event.ts = 0.0;
        event.args = serde_json::json!({ "name": label });
        writer.event(&event);
        let mut order = Event::new(
            if kind == "process_name" {
                "process_sort_index"
            } else {
                "thread_sort_index"
            },
            "M",
            0,
            pid,
            tid,
        );
        order.args = serde_json::json!({ "sort_index": sort });
        writer.event(&order);
    };
    name(RUN_PID, 0, "process_name", "run phases".into(), 0);
    let mut lanes: Vec<(&u32, &u32)> = streams.slots.iter().collect();
    lanes.sort();
    for (&lane, &slots) in lanes {
        name(
            lane + 1,
            0,
            "process_name",
            format!("lane {lane}"),
            lane + 1,
        );
        for slot in 0..slots {
            let label = if slot == 0 {
                "slot 0 (root)".to_string()
            } else {
                format!("slot {slot}")
            };
            name(lane + 1, slot + 1, "thread_name", label, slot);
        }
    }
    if let Some(log) = scrape_log {
        for (at, endpoint) in log.endpoints.iter().enumerate() {
            let pid = SERVER_PID_BASE + at as u32;
            name(
                pid,
                0,
                "process_name",
                format!("server {}", endpoint.url),
                pid,
            );
        }
    }
}

/// A request's slices (with the think and send-lag slices before it, and its flows).
fn write_request<W: Write>(
    writer: &mut EventWriter<W>,
    streams: &mut Streams,
    record: &RequestRecord,
    counts: &mut TimelineCounts,
) {
    let Some(&at) = streams.index.get(&record.correlation_id) else {
        return;
    };
    let (pid, tid) = {
        let stream = &streams.all[at];
        (stream.lane + 1, stream.slot + 1)
    };
    let mut slice = |writer: &mut EventWriter<W>, event: Event<'_>| {
        counts.slices += 1;
        writer.event(&event);
    };
    let previous_end = streams.all[at].previous_end_ns;
    let due = record.intended_ns.max(previous_end.unwrap_or(0));
    if let Some(previous_end) = previous_end {
        if record.intended_ns > previous_end {
            slice(
                writer,
                Event::slice("think", previous_end, record.intended_ns, pid, tid),
            );
        }
    }
    if record.send_ns > due {
        slice(
            writer,
            Event::slice("send lag", due, record.send_ns, pid, tid),
        );
    }
    let name = format!("{} t{}", record.trace_id, record.turn);
    let mut request = Event::slice(&name, record.send_ns, record.end_ns, pid, tid);
    request.cat = record.phase.as_str();
    request.cname = match Outcome::of(record) {
        Outcome::Failed => Some("terrible"),
        Outcome::Cancelled => Some("bad"),
        Outcome::ContextOverflow => Some("yellow"),
        Outcome::Ok => None,
    };
    request.args = request_args(record);
    slice(writer, request);
    if let Some(headers) = record.first_byte_ns {
        slice(
            writer,
            Event::slice("headers", record.send_ns, headers, pid, tid),
        );
    }
    if let Some(first_token) = record.first_token_ns {
        slice(
            writer,
            Event::slice("ttft", record.send_ns, first_token, pid, tid),
        );
        slice(
            writer,
            Event::slice("decode", first_token, record.end_ns, pid, tid),
        );
    }
    counts.requests += 1;
    write_flows(writer, streams, at, record, counts);
    let stream = &mut streams.all[at];
    stream.written += 1;
    stream.previous_end_ns = Some(record.end_ns);
}

/// What a request slice shows when selected.
fn request_args(record: &RequestRecord) -> serde_json::Value {
    serde_json::json!({
        "request_id": record.request_id,
        "correlation_id": record.correlation_id,
        "phase": record.phase.as_str(),
        "turn": record.turn,
        "isl": record.isl,
        "osl": record.osl,
        "cached_tokens": record.usage.cached_tokens,
        "ttft_ms": record.ttft_ns().map(|ns| ns as f64 / 1e6),
        "finish_reason": record.finish_reason,
        "error": record.error.as_ref().map(|e| format!("{} {}: {}", e.code, e.kind, e.message)),
    })
}

/// A subagent stream's spawn arrow (at its first request, from the parent request that ended last
/// before it) and its join arrow (at its last request, to the parent's first request after it).
fn write_flows<W: Write>(
    writer: &mut EventWriter<W>,
    streams: &Streams,
    at: usize,
    record: &RequestRecord,
    counts: &mut TimelineCounts,
) {
    let stream = &streams.all[at];
    let Some(parent_at) = stream.parent else {
        return;
    };
    let parent = &streams.all[parent_at];
    let here = (stream.lane + 1, stream.slot + 1);
    let there = (parent.lane + 1, parent.slot + 1);
    let mut flow = |from: (u32, u32, u64), to: (u32, u32, u64), name: &str| {
        counts.flows += 1;
        let id = Some(counts.flows);
        let mut start = Event::new(name, "s", from.2, from.0, from.1);
        start.cat = "subagent";
        start.id = id;
        writer.event(&start);
        let mut finish = Event::new(name, "f", to.2, to.0, to.1);
        finish.cat = "subagent";
        finish.id = id;
        finish.bp = Some("e");
        writer.event(&finish);
    };
    if stream.written == 0 {
        // The parent request that spawned it: the last one that ended by this send.
        let spawner = parent
            .requests
            .iter()
            .filter(|(_, end)| *end <= record.send_ns)
            .max_by_key(|(_, end)| *end);
        if let Some(&(_, end)) = spawner {
            flow(
                (there.0, there.1, end.saturating_sub(1)),
                (here.0, here.1, record.send_ns),
                "spawn",
            );
        }
    }
    if stream.written + 1 == stream.requests.len() {
        // The parent request that joined it: the first one sent after this end.
        let joiner = parent
            .requests
            .iter()
            .filter(|(send, _)| *send >= record.end_ns)
            .min_by_key(|(send, _)| *send);
        if let Some(&(send, _)) = joiner {
            flow(
                (here.0, here.1, record.end_ns.saturating_sub(1)),
                (there.0, there.1, send),
                "join",
            );
        }
    }
}

/// The phase edges as global instant events: the boundary scrapes' times when the run scraped, else
/// the manifest's profiling window.
fn write_phase_edges<W: Write>(
    writer: &mut EventWriter<W>,
    manifest: &Manifest,
    scrape_log: Option<&ScrapeLog>,
    counts: &mut TimelineCounts,
) {
    let mut edges: Vec<(String, u64)> = Vec::new();
    if let Some(endpoint) = scrape_log.and_then(|log| log.endpoints.first()) {
        for boundary in &endpoint.boundaries {
            edges.push((boundary.boundary.as_str().to_string(), boundary.asked_ns));
        }
    }
    if edges.is_empty() {
        if let Some([start, end]) = manifest.profiling_ns {
            edges.push(("profiling_start".into(), start));
            edges.push(("profiling_complete".into(), end));
        }
    }
    for (name, at_ns) in &edges {
        let mut instant = Event::new(name, "i", *at_ns, RUN_PID, 0);
        instant.cat = "phase";
        instant.s = Some("g");
        writer.event(&instant);
        counts.instants += 1;
    }
}

/// A gauge's metric names in the engine that exports it, and whether that engine reports it as a
/// percentage.
type GaugeNames = (&'static [&'static str], bool);

/// One endpoint's gauges as counter samples, one per successful scrape and gauge.
fn write_gauges<W: Write>(
    writer: &mut EventWriter<W>,
    endpoint_index: u32,
    endpoint: &EndpointLog,
    counts: &mut TimelineCounts,
) {
    let pid = SERVER_PID_BASE + endpoint_index;
    // The first engine whose names the endpoint exports decides each gauge (as the live view reads it).
    let pick = |names_of: fn(&agentx_metrics::engines::Engine) -> &'static [&'static str]| {
        ENGINES.iter().find_map(|engine| {
            let names = names_of(engine);
            names
                .iter()
                .any(|name| endpoint.scalars(name).next().is_some())
                .then_some((names, engine.kv_usage_percent))
        })
    };
    let gauges: [(&str, Option<GaugeNames>, bool); 3] = [
        ("requests running", pick(|engine| engine.running), false),
        ("requests waiting", pick(|engine| engine.waiting), false),
        ("KV usage", pick(|engine| engine.kv_usage), true),
    ];
    for (name, names, average) in gauges {
        let Some((names, percent)) = names else {
            continue;
        };
        for (scrape, &at_ns) in endpoint.scrape_ns.iter().enumerate() {
            let values: Vec<f64> = names
                .iter()
                .flat_map(|metric| endpoint.scalars(metric))
                .filter_map(|(_, track)| track.at(scrape as u32))
                .collect();
            if values.is_empty() {
                continue;
            }
            let sum: f64 = values.iter().sum();
            let value = if average {
                let mean = sum / values.len() as f64;
                if percent {
                    mean
                } else {
                    mean * 100.0
                }
            } else {
                sum
            };
            let mut sample = Event::new(name, "C", at_ns, pid, 0);
            sample.args = serde_json::json!({ "value": value });
            writer.event(&sample);
            counts.counter_samples += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::{failed, in_stream, in_tree, rec};

    fn child_of(record: RequestRecord, parent: &str) -> RequestRecord {
        in_tree(record, parent, Some(parent))
    }

    /// A root turn (0-10 ms), a subagent with two turns (12-20, 25-40 ms) running beside the
    /// root's wait, the root's join turn (45-60 ms) and, on another lane, a failed request.
    fn records() -> Vec<RequestRecord> {
        let mut root_second = in_stream(rec(45, &[5, 14], 100, 2), "root", 1);
        root_second.intended_ns = 42_000_000;
        let mut other_lane = in_stream(failed(3, 50), "other", 0);
        other_lane.lane = 1;
        vec![
            in_stream(rec(0, &[4, 9], 100, 2), "root", 0),
            other_lane,
            child_of(in_stream(rec(12, &[3, 7], 80, 2), "child", 0), "root"),
            child_of(in_stream(rec(25, &[5, 14], 90, 2), "child", 1), "root"),
            root_second,
        ]
    }

    fn write_records(dir: &Path, records: &[RequestRecord], tail: &str) {
        let mut text = String::new();
        for record in records {
            text.push_str(&serde_json::to_string(record).unwrap());
            text.push('\n');
        }
        text.push_str(tail);
        std::fs::write(dir.join(RECORDS_FILE), text).unwrap();
    }

    #[test]
    fn every_request_phase_gap_and_arrow_is_an_event() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), &records(), "{\"request_id\":\"torn");
        let mut out = Vec::new();
        let counts = write_timeline(dir.path(), None, &mut out).unwrap();
        assert_eq!(counts.requests, 5);
        // Each request: itself, headers; 4 with a first token: ttft and decode. Think: the child's
        // second turn (20 -> 25 ms) and the root's join turn (10 -> 42 ms); send lag: 42 -> 45 ms.
        assert_eq!(counts.slices, 5 + 5 + 4 * 2 + 2 + 1);
        assert_eq!(counts.flows, 2, "one spawn, one join");
        assert_eq!(counts.counter_samples, 0);
        assert!(
            counts.missing.iter().any(|m| m.contains("torn last line")),
            "{counts:?}"
        );
        assert!(
            counts.missing.iter().any(|m| m.contains("manifest")),
            "{counts:?}"
        );

        let trace: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let of = |ph: &'static str| events.iter().filter(move |e| e["ph"] == ph);
        assert_eq!(of("X").count() as u64, counts.slices);
        // The spawn leaves the root's first turn (ends at 10 ms) and lands on the child's first send.
        let spawn: Vec<_> = events.iter().filter(|e| e["name"] == "spawn").collect();
        assert_eq!(spawn.len(), 2);
        assert_eq!(
            (spawn[0]["ph"].as_str(), spawn[0]["ts"].as_f64()),
            (Some("s"), Some(9_999.999))
        );
        assert_eq!(
            (spawn[1]["ph"].as_str(), spawn[1]["ts"].as_f64()),
            (Some("f"), Some(12_000.0))
        );
        assert_eq!(spawn[0]["id"], spawn[1]["id"]);
        // The child runs on its own slot of lane 0 while the root's slot is free.
        let child: Vec<_> = of("X")
            .filter(|e| e["name"] == "trace-a t1" && e["args"]["correlation_id"] == "child")
            .collect();
        assert_eq!(child.len(), 1);
        assert_eq!(
            (child[0]["pid"].as_u64(), child[0]["tid"].as_u64()),
            (Some(1), Some(2))
        );
        // The failed request carries its colour and its error.
        let failure = of("X")
            .find(|e| e["args"]["correlation_id"] == "other")
            .unwrap();
        assert_eq!(failure["cname"], "terrible");
        assert_eq!(failure["pid"], 2);
        assert!(failure["args"]["error"].as_str().unwrap().contains("500"));
    }

    #[test]
    fn a_directory_with_nothing_to_draw_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let e = write_timeline(dir.path(), None, Vec::new()).unwrap_err();
        assert!(e.to_string().contains("nothing to draw"), "{e}");
    }
}
