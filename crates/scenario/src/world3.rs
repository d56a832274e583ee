//! The `agentx:scenario@0.3.0` world (a component that decides the whole replay): its bindings, and
//! the conversions between them and the host's session-tree API, which speaks 0.2.0's types (the
//! records 0.3.0 keeps unchanged) plus [`super::Decisions`] and [`super::TreeCoverage`] for what it
//! adds.

use super::types as v1;
use super::world2::types as t2;
use super::{AssistantText, Decisions, PromptTiling, TreeCoverage};

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        world: "scenario",
        path: "../../wit/v0.3",
        additional_derives: [PartialEq],
    });
}

use bindings::exports::agentx::scenario::policy as v3;

super::shared::shared_conversions!(v3);

pub(super) fn tree(t: &t2::Tree) -> v3::Tree {
    v3::Tree {
        trace_id: t.trace_id.clone(),
        streams: t
            .streams
            .iter()
            .map(|s| v3::TreeStream {
                conversation_id: s.conversation_id.clone(),
                turn_ts_ms: s.turn_ts_ms.clone(),
                unsendable: s.unsendable.clone(),
            })
            .collect(),
        branches: t
            .branches
            .iter()
            .map(|b| v3::Branch {
                branch_id: b.branch_id.clone(),
                children: b.children.clone(),
                start_ms: b.start_ms,
                spawn_turn: b.spawn_turn,
                join_turn: b.join_turn,
            })
            .collect(),
    }
}

pub(super) fn params(p: t2::TreeParams) -> v3::TreeParams {
    v3::TreeParams {
        seed: p.seed,
        min_ratio: p.min_ratio,
        max_ratio: p.max_ratio,
        lead_cap_ms: p.lead_cap_ms,
    }
}

pub(super) fn tree_start_back(s: v3::TreeStart) -> t2::TreeStart {
    t2::TreeStart {
        t_star_ms: s.t_star_ms,
        streams: s
            .streams
            .into_iter()
            .map(|x| t2::StreamStart {
                index: x.index,
                next_turn: x.next_turn,
                warm_turn: x.warm_turn,
                offset_ms: x.offset_ms,
                lead_ms: x.lead_ms,
                waiting: x.waiting,
                join_turn: x.join_turn,
                branch: x.branch,
            })
            .collect(),
    }
}

pub(super) fn tree_id(t: &t2::TreeId) -> v3::TreeId {
    v3::TreeId {
        run_id: t.run_id.clone(),
        pass: t.pass,
        lane: t.lane,
        trace_id: t.trace_id.clone(),
    }
}

pub(super) fn delay(p: t2::DelayParams, t: t2::TurnTimes) -> (v3::DelayParams, v3::TurnTimes) {
    (
        v3::DelayParams {
            think_time_only: p.think_time_only,
            cap_seconds: p.cap_seconds,
        },
        v3::TurnTimes {
            ts_ms: t.ts_ms,
            prev_ts_ms: t.prev_ts_ms,
            prev_api_ms: t.prev_api_ms,
            think_time_ms: t.think_time_ms,
        },
    )
}

/// 0.3.0's rules as the host uses them: those 0.2.0 has, and the decisions it adds.
pub(super) fn rules_back(r: v3::ReplayRules) -> (t2::ReplayRules, Decisions) {
    (
        t2::ReplayRules {
            warmup_max_tokens: r.warmup_max_tokens,
            warmup_spread: r.warmup_spread,
            system_idle_cap_seconds: r.system_idle_cap_seconds,
            trace_idle_cap_seconds: r.trace_idle_cap_seconds,
            overflow_ends_tree: r.overflow_ends_tree,
            warmup_failure_aborts: r.warmup_failure_aborts,
            recycle_from_turn_zero: r.recycle_from_turn_zero,
            allow_wrap: r.allow_wrap,
            min_metric_coverage: r.min_metric_coverage,
        },
        Decisions {
            assistant_text: Some(match r.assistant_text {
                v3::AssistantText::Recorded => AssistantText::Recorded,
                v3::AssistantText::Live => AssistantText::Live,
            }),
            prompt_tiling: match r.prompt_tiling {
                v3::PromptTiling::RecordedLength => PromptTiling::RecordedLength,
                v3::PromptTiling::Reference => PromptTiling::Reference,
            },
            session_affinity_header: r.session_affinity_header,
            discover_model: r.discover_model,
            warmup_phase_name: r.warmup_phase_name,
            decides_settings: true,
        },
    )
}

pub(super) fn outcome(o: v1::Outcome, c: TreeCoverage) -> v3::Outcome {
    v3::Outcome {
        total_responses: o.total_responses,
        context_overflows: o.context_overflows,
        failed: o.failed,
        cancelled: o.cancelled,
        unsafe_override: o.unsafe_override,
        overflow_rate_limit: o.overflow_rate_limit,
        profiling_seconds: c.profiling_seconds,
        ttft_coverage: c.ttft,
        itl_coverage: c.itl,
        content_coverage: c.content,
    }
}
