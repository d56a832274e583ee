//! The timeline export's cost on a long, wide run: a synthetic `records.jsonl` of a 1-hour,
//! 1,024-lane session-tree run (each lane replays trees of a root and two subagent streams, turns of
//! 2-9 s with 1-3 s think gaps), then `export::timeline::write_timeline` over it, timed, with the
//! process's peak RSS of the export alone (the generation's peak is reset before it through
//! `/proc/self/clear_refs`).
//!
//! It prints the records' count and size, the trace's size and counts, the export's wall time and
//! its peak RSS; it asserts nothing about time or memory (the guide records the figures).
//!
//! Run: `cargo bench --bench timeline -- [--lanes N] [--hours H] [--keep DIR]`
//! (defaults 1024 and 1; `--keep` writes the run directory there instead of a temporary one).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use agentx::export::timeline::write_timeline;
use agentx::record::testkit::rec;
use agentx::record::{Phase, RequestRecord, TreeInfo, RECORDS_FILE};

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|value| value.parse().ok())
}

/// VmHWM or VmRSS of this process, in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// A deterministic spread of durations: `low..high` ms, from a counter.
fn spread(counter: &mut u64, low: u64, high: u64) -> u64 {
    *counter = counter
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    low + (*counter >> 33) % (high - low)
}

/// One request of a tree's stream, ending `duration` after `send`.
fn request(
    lane: u32,
    tree: u64,
    stream: &str,
    turn: u32,
    send_ms: u64,
    duration_ms: u64,
    parent: Option<&str>,
) -> RequestRecord {
    let mut record = rec(send_ms, &[duration_ms / 4, duration_ms - 1], 20_000, 400);
    let root = format!("l{lane}-t{tree}-root");
    record.correlation_id = format!("l{lane}-t{tree}-{stream}");
    record.request_id = format!("{}-r{turn}", record.correlation_id);
    record.lane = lane;
    record.turn = turn;
    record.trace_id = format!("trace-{}", tree % 97);
    record.phase = Phase::Profiling;
    record.tree = Some(TreeInfo {
        agent_depth: u8::from(parent.is_some()),
        root_correlation_id: root,
        parent_correlation_id: parent.map(str::to_owned),
        source_trace_id: record.trace_id.clone(),
        prefix_hit_blocks: 10,
        prefix_total_blocks: 12,
        source_outer_idx: Some(turn),
        source_inner_idx: None,
    });
    record
}

/// Writes the synthetic run's records; returns their count.
fn write_run(dir: &std::path::Path, lanes: u32, hours: f64) -> u64 {
    let end_ms = (hours * 3_600_000.0) as u64;
    let file = std::fs::File::create(dir.join(RECORDS_FILE)).unwrap();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut counter = 7u64;
    let mut written = 0u64;
    for lane in 0..lanes {
        let (mut now, mut tree) = (u64::from(lane) * 3, 0u64);
        while now < end_ms {
            let root = format!("l{lane}-t{tree}-root");
            // The root's first turn, two subagents side by side, the root's join turn.
            let first = spread(&mut counter, 2_000, 9_000);
            let mut records = vec![request(lane, tree, "root", 0, now, first, None)];
            now += first + spread(&mut counter, 1_000, 3_000);
            let mut children_end = now;
            for child in ["a", "b"] {
                let mut at = now;
                for turn in 0..3 {
                    let duration = spread(&mut counter, 2_000, 9_000);
                    records.push(request(lane, tree, child, turn, at, duration, Some(&root)));
                    at += duration + spread(&mut counter, 1_000, 3_000);
                }
                children_end = children_end.max(at);
            }
            now = children_end;
            let last = spread(&mut counter, 2_000, 9_000);
            records.push(request(lane, tree, "root", 1, now, last, None));
            now += last + spread(&mut counter, 1_000, 3_000);
            records.sort_by_key(|record| record.end_ns);
            for record in &records {
                serde_json::to_writer(&mut out, record).unwrap();
                out.write_all(b"\n").unwrap();
                written += 1;
            }
            tree += 1;
        }
    }
    out.flush().unwrap();
    written
}

fn main() {
    let lanes: u32 = arg("--lanes").unwrap_or(1024);
    let hours: f64 = arg("--hours").unwrap_or(1.0);
    let temp = tempfile::tempdir().unwrap();
    let dir: PathBuf =
        arg::<String>("--keep").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let records = write_run(&dir, lanes, hours);
    let records_mib =
        std::fs::metadata(dir.join(RECORDS_FILE)).unwrap().len() as f64 / f64::from(1 << 20);
    println!(
        "records: {records} ({records_mib:.0} MiB) for {lanes} lanes x {hours} h, written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The export's own peak: reset the high-water mark the generation left.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_mib("VmRSS:");
    let started = Instant::now();
    let trace = std::fs::File::create(dir.join("trace.json")).unwrap();
    let counts = write_timeline(&dir, None, trace).unwrap();
    let took = started.elapsed().as_secs_f64();
    let trace_mib =
        std::fs::metadata(dir.join("trace.json")).unwrap().len() as f64 / f64::from(1 << 20);
    println!(
        "timeline: {} requests, {} slices, {} flows in {took:.1} s ({:.0} records/s); trace.json {trace_mib:.0} MiB",
        counts.requests,
        counts.slices,
        counts.flows,
        records as f64 / took
    );
    println!(
        "peak RSS of the export: {:.0} MiB (RSS before it {before:.0} MiB)",
        status_mib("VmHWM:")
    );
}
