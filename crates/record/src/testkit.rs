//! Records built by hand for the unit tests of the crates above (statistics, exports, the merge):
//! a successful profiling record with given chunk times and a failed one. Always compiled (two small
//! functions), so that every crate's tests build the same records the same way.

use crate::{Phase, RecordError, RequestRecord, TokenSource, Usage};

/// A successful profiling record: sent at `send` (ms), chunks at `chunks` (ms after send).
pub fn rec(send_ms: u64, chunks_ms: &[u64], isl: u64, osl: u64) -> RequestRecord {
    let ns = |m: u64| m * 1_000_000;
    let send = ns(send_ms);
    let offsets: Vec<u64> = chunks_ms.iter().map(|&c| ns(c)).collect();
    let end = send + offsets.last().copied().unwrap_or(0) + ns(1);
    RequestRecord {
        reply: crate::ReplyStats::default(),
        request_id: format!("req-{send_ms}"),
        correlation_id: "corr-0".into(),
        session_num: 0,
        phase: Phase::Profiling,
        lane: 0,
        trace_id: "trace-a".into(),
        turn: 0,
        num_turns: 3,
        recycle_pass: 0,
        intended_ns: send,
        send_ns: send,
        first_byte_ns: Some(send + ns(1)),
        first_token_ns: offsets.first().map(|o| send + o),
        chunk_offsets_ns: offsets.into(),
        end_ns: end,
        isl,
        osl,
        token_source: TokenSource::Server,
        usage: Usage {
            prompt_tokens: Some(isl),
            completion_tokens: Some(osl),
            cached_tokens: None,
            reasoning_tokens: None,
        },
        max_tokens: 100,
        finish_reason: Some("stop".into()),
        cancelled: false,
        context_overflow: false,
        error: None,
        retry: None,
        server_ttft_ns: None,
        tree: None,
        server: None,
        prompt_blocks: None,
    }
}

/// A profiling record sent at `send_ms` that failed with HTTP 500 before any token.
pub fn failed(send_ms: u64, isl: u64) -> RequestRecord {
    let mut r = rec(send_ms, &[], isl, 0);
    r.first_token_ns = None;
    r.error = Some(RecordError {
        code: 500,
        kind: "http_error".into(),
        message: "internal error".into(),
    });
    r
}

/// `record` as turn `turn` of the stream `stream`: its correlation id, and request id
/// `{stream}-r{turn}`.
pub fn in_stream(mut record: RequestRecord, stream: &str, turn: u32) -> RequestRecord {
    record.correlation_id = stream.into();
    record.request_id = format!("{stream}-r{turn}");
    record.turn = turn;
    record
}

/// `record` in the session tree whose root stream is `root`, its stream a child of `parent`
/// (`None`: the root stream itself).
pub fn in_tree(mut record: RequestRecord, root: &str, parent: Option<&str>) -> RequestRecord {
    record.tree = Some(crate::TreeInfo {
        agent_depth: u8::from(parent.is_some()),
        root_correlation_id: root.into(),
        parent_correlation_id: parent.map(str::to_owned),
        source_trace_id: record.trace_id.clone(),
        prefix_hit_blocks: 0,
        prefix_total_blocks: 1,
        source_outer_idx: None,
        source_inner_idx: None,
    });
    record
}
