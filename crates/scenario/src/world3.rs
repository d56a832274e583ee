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

pub(super) fn tree(tree: &t2::Tree) -> v3::Tree {
    v3::Tree {
        trace_id: tree.trace_id.clone(),
        streams: tree
            .streams
            .iter()
            .map(|stream| v3::TreeStream {
                conversation_id: stream.conversation_id.clone(),
                turn_ts_ms: stream.turn_ts_ms.clone(),
                unsendable: stream.unsendable.clone(),
            })
            .collect(),
        branches: tree
            .branches
            .iter()
            .map(|branch| v3::Branch {
                branch_id: branch.branch_id.clone(),
                children: branch.children.clone(),
                start_ms: branch.start_ms,
                spawn_turn: branch.spawn_turn,
                join_turn: branch.join_turn,
            })
            .collect(),
    }
}

pub(super) fn params(params: t2::TreeParams) -> v3::TreeParams {
    v3::TreeParams {
        seed: params.seed,
        min_ratio: params.min_ratio,
        max_ratio: params.max_ratio,
        lead_cap_ms: params.lead_cap_ms,
    }
}

pub(super) fn tree_start_back(start: v3::TreeStart) -> t2::TreeStart {
    t2::TreeStart {
        t_star_ms: start.t_star_ms,
        streams: start
            .streams
            .into_iter()
            .map(|stream| t2::StreamStart {
                index: stream.index,
                next_turn: stream.next_turn,
                warm_turn: stream.warm_turn,
                offset_ms: stream.offset_ms,
                lead_ms: stream.lead_ms,
                waiting: stream.waiting,
                join_turn: stream.join_turn,
                branch: stream.branch,
            })
            .collect(),
    }
}

pub(super) fn tree_id(id: &t2::TreeId) -> v3::TreeId {
    v3::TreeId {
        run_id: id.run_id.clone(),
        pass: id.pass,
        lane: id.lane,
        trace_id: id.trace_id.clone(),
    }
}

pub(super) fn delay(
    params: t2::DelayParams,
    times: t2::TurnTimes,
) -> (v3::DelayParams, v3::TurnTimes) {
    (
        v3::DelayParams {
            think_time_only: params.think_time_only,
            cap_seconds: params.cap_seconds,
        },
        v3::TurnTimes {
            ts_ms: times.ts_ms,
            prev_ts_ms: times.prev_ts_ms,
            prev_api_ms: times.prev_api_ms,
            think_time_ms: times.think_time_ms,
        },
    )
}

/// 0.3.0's rules as the host uses them: those 0.2.0 has, and the decisions it adds.
pub(super) fn rules_back(rules: v3::ReplayRules) -> (t2::ReplayRules, Decisions) {
    (
        t2::ReplayRules {
            warmup_max_tokens: rules.warmup_max_tokens,
            warmup_spread: rules.warmup_spread,
            system_idle_cap_seconds: rules.system_idle_cap_seconds,
            trace_idle_cap_seconds: rules.trace_idle_cap_seconds,
            overflow_ends_tree: rules.overflow_ends_tree,
            warmup_failure_aborts: rules.warmup_failure_aborts,
            recycle_from_turn_zero: rules.recycle_from_turn_zero,
            allow_wrap: rules.allow_wrap,
            min_metric_coverage: rules.min_metric_coverage,
        },
        Decisions {
            assistant_text: Some(match rules.assistant_text {
                v3::AssistantText::Recorded => AssistantText::Recorded,
                v3::AssistantText::Live => AssistantText::Live,
            }),
            prompt_tiling: match rules.prompt_tiling {
                v3::PromptTiling::RecordedLength => PromptTiling::RecordedLength,
                v3::PromptTiling::Reference => PromptTiling::Reference,
            },
            session_affinity_header: rules.session_affinity_header,
            discover_model: rules.discover_model,
            warmup_phase_name: rules.warmup_phase_name,
            decides_settings: true,
        },
    )
}

pub(super) fn outcome(outcome: v1::Outcome, coverage: TreeCoverage) -> v3::Outcome {
    v3::Outcome {
        total_responses: outcome.total_responses,
        context_overflows: outcome.context_overflows,
        failed: outcome.failed,
        cancelled: outcome.cancelled,
        unsafe_override: outcome.unsafe_override,
        overflow_rate_limit: outcome.overflow_rate_limit,
        profiling_seconds: coverage.profiling_seconds,
        ttft_coverage: coverage.ttft,
        itl_coverage: coverage.itl,
        content_coverage: coverage.content,
    }
}
