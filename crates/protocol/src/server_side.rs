//! The server's own account of a request ([`ServerSide`]), read from what it sends beyond the
//! answer: the built-in simulator's `x-sim-*` response headers ([`from_headers`]: the engine, its
//! queue and prefill, the admission order and why each missed prompt token missed) and Dynamo's
//! `nvext` object on a streamed chunk ([`NvExtJson`], asked for with
//! `"nvext": {"extra_fields": ["worker_id", "timing"]}`: the prefill and decode workers, the queue,
//! prefill, TTFT and total times and the router's predicted cache hit; ai-dynamo/dynamo
//! `lib/llm/src/protocols/common/timing.rs`). Every figure is optional: a server says what it says.

use serde::Deserialize;

use agentx_record::{MissTruth, ServerSide};

use crate::headers::{
    SIM_ADMIT_SEQ_HEADER, SIM_ENGINE_HEADER, SIM_MISS_CAPACITY_HEADER, SIM_MISS_COLD_HEADER,
    SIM_MISS_ROUTING_HEADER, SIM_PREFILL_MS_HEADER, SIM_QUEUE_MS_HEADER,
};

/// Nanoseconds of a millisecond figure (negative or not finite: none).
fn ns_of_ms(millis: f64) -> Option<u64> {
    (millis.is_finite() && millis >= 0.0).then(|| (millis * 1e6).round() as u64)
}

/// The simulator's account, from its response headers; `None` when none of them came.
pub fn from_headers(headers: &hyper::HeaderMap) -> Option<ServerSide> {
    let text = |name: &str| headers.get(name)?.to_str().ok();
    let number = |name: &str| text(name)?.trim().parse::<u64>().ok();
    let millis = |name: &str| ns_of_ms(text(name)?.trim().parse::<f64>().ok()?);
    let truth = match (
        number(SIM_MISS_COLD_HEADER),
        number(SIM_MISS_CAPACITY_HEADER),
        number(SIM_MISS_ROUTING_HEADER),
    ) {
        (Some(cold), Some(capacity), Some(routing)) => Some(MissTruth {
            cold,
            capacity,
            routing,
        }),
        _ => None,
    };
    let server = ServerSide {
        worker: text(SIM_ENGINE_HEADER).map(str::to_owned),
        queue_ns: millis(SIM_QUEUE_MS_HEADER),
        prefill_ns: millis(SIM_PREFILL_MS_HEADER),
        admit_seq: number(SIM_ADMIT_SEQ_HEADER),
        truth,
        ..ServerSide::default()
    };
    (server != ServerSide::default()).then_some(server)
}

/// Dynamo's `nvext` on a response chunk (the fields read here; the rest is ignored).
#[derive(Debug, Default, Deserialize)]
pub struct NvExtJson {
    #[serde(default)]
    worker_id: Option<WorkerIdJson>,
    #[serde(default)]
    timing: Option<TimingJson>,
}

#[derive(Debug, Default, Deserialize)]
struct WorkerIdJson {
    #[serde(default)]
    prefill_worker_id: Option<u64>,
    #[serde(default)]
    prefill_dp_rank: Option<u32>,
    #[serde(default)]
    decode_worker_id: Option<u64>,
    #[serde(default)]
    decode_dp_rank: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
struct TimingJson {
    #[serde(default)]
    prefill_wait_time_ms: Option<f64>,
    #[serde(default)]
    prefill_time_ms: Option<f64>,
    #[serde(default)]
    ttft_ms: Option<f64>,
    #[serde(default)]
    total_time_ms: Option<f64>,
    #[serde(default)]
    kv_hit_rate: Option<f64>,
}

/// `"{worker}/{rank}"` of a Dynamo worker (`0` is an unset lease, `u32::MAX` an unset rank).
fn worker_name(worker: Option<u64>, rank: Option<u32>) -> Option<String> {
    let worker = worker.filter(|&id| id != 0)?;
    Some(match rank.filter(|&rank| rank != u32::MAX) {
        Some(rank) => format!("{worker}/{rank}"),
        None => worker.to_string(),
    })
}

impl NvExtJson {
    /// Adds what this chunk's `nvext` says to `server` (a later chunk's figure replaces an
    /// earlier one; Dynamo sends them once, on the final chunk).
    pub fn absorb_into(self, server: &mut Option<ServerSide>) {
        let side = server.get_or_insert_with(ServerSide::default);
        if let Some(ids) = self.worker_id {
            let decode = worker_name(ids.decode_worker_id, ids.decode_dp_rank);
            let prefill = worker_name(ids.prefill_worker_id, ids.prefill_dp_rank);
            if decode.is_some() {
                side.worker.clone_from(&decode);
            }
            // Aggregated serving names the same instance twice: one worker.
            if prefill.is_some() && prefill != decode {
                side.prefill_worker = prefill;
            }
        }
        if let Some(timing) = self.timing {
            let keep = |slot: &mut Option<u64>, ms: Option<f64>| {
                if let Some(ns) = ms.and_then(ns_of_ms) {
                    *slot = Some(ns);
                }
            };
            keep(&mut side.queue_ns, timing.prefill_wait_time_ms);
            keep(&mut side.prefill_ns, timing.prefill_time_ms);
            keep(&mut side.ttft_ns, timing.ttft_ms);
            keep(&mut side.total_ns, timing.total_time_ms);
            if let Some(rate) = timing.kv_hit_rate.filter(|rate| rate.is_finite()) {
                side.predicted_hit = Some(rate.clamp(0.0, 1.0));
            }
        }
        if *side == ServerSide::default() {
            *server = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulators_headers_give_its_engine_timings_order_and_truth() {
        let mut headers = hyper::HeaderMap::new();
        for (name, value) in [
            (SIM_ENGINE_HEADER, "3"),
            (SIM_QUEUE_MS_HEADER, "12.345"),
            (SIM_PREFILL_MS_HEADER, "0.500"),
            (SIM_ADMIT_SEQ_HEADER, "42"),
            (SIM_MISS_COLD_HEADER, "64"),
            (SIM_MISS_CAPACITY_HEADER, "128"),
            (SIM_MISS_ROUTING_HEADER, "0"),
        ] {
            headers.insert(name, value.parse().unwrap());
        }
        let server = from_headers(&headers).unwrap();
        assert_eq!(server.worker.as_deref(), Some("3"));
        assert_eq!(server.queue_ns, Some(12_345_000));
        assert_eq!(server.prefill_ns, Some(500_000));
        assert_eq!(server.admit_seq, Some(42));
        assert_eq!(
            server.truth,
            Some(MissTruth {
                cold: 64,
                capacity: 128,
                routing: 0
            })
        );
        assert_eq!(from_headers(&hyper::HeaderMap::new()), None);
    }

    #[test]
    fn dynamos_nvext_gives_its_workers_and_timing() {
        let chunk = r#"{"worker_id": {"prefill_worker_id": 7587890, "prefill_dp_rank": 0,
                          "decode_worker_id": 7587891, "decode_dp_rank": 4294967295},
            "timing": {"request_received_ms": 1764950000123, "prefill_wait_time_ms": 12.4,
                       "prefill_time_ms": 88.1, "ttft_ms": 100.6, "total_time_ms": 2400.2,
                       "kv_hit_rate": 0.83}}"#;
        let nvext: NvExtJson = serde_json::from_str(chunk).unwrap();
        let mut server = None;
        nvext.absorb_into(&mut server);
        let server = server.unwrap();
        assert_eq!(server.worker.as_deref(), Some("7587891"));
        assert_eq!(server.prefill_worker.as_deref(), Some("7587890/0"));
        assert_eq!(server.queue_ns, Some(12_400_000));
        assert_eq!(server.prefill_ns, Some(88_100_000));
        assert_eq!(server.ttft_ns, Some(100_600_000));
        assert_eq!(server.total_ns, Some(2_400_200_000));
        assert_eq!(server.predicted_hit, Some(0.83));
        // Aggregated: one instance for both is one worker; an empty nvext leaves nothing.
        let same: NvExtJson = serde_json::from_str(
            r#"{"worker_id": {"prefill_worker_id": 9, "prefill_dp_rank": 1, "decode_worker_id": 9, "decode_dp_rank": 1}}"#,
        )
        .unwrap();
        let mut server = None;
        same.absorb_into(&mut server);
        let server = server.unwrap();
        assert_eq!(
            (server.worker.as_deref(), server.prefill_worker),
            (Some("9/1"), None)
        );
        let mut nothing = None;
        serde_json::from_str::<NvExtJson>("{}")
            .unwrap()
            .absorb_into(&mut nothing);
        assert_eq!(nothing, None);
    }
}
