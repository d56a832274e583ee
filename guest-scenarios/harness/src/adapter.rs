//! `export_scenario_v3!`: the component of a [`crate::ScenarioV3`] through the WIT world
//! `agentx:scenario@0.3.0`; conversions field for field between the generated bindings and this
//! crate's types.

/// `agentx_with_own_settings!(S)`: [`crate::ScenarioV3`] for `S` as `agentx` with its own settings:
/// `describe` and `resolve` are the calling crate's `describe()` and `resolve(given, entropy)`, and
/// every other entry point is [`crate::agentx::Agentx`]'s. New components that add knobs to
/// `agentx` (or, as `graph-ir`, answer other settings) use it; `agentx-open` and `agent-wire`
/// spell the same delegation out, as they were released, so that their bytes stay what sweeps
/// pinned.
#[macro_export]
macro_rules! agentx_with_own_settings {
    ($scenario:ident) => {
        impl $crate::ScenarioV3 for $scenario {
            fn describe() -> $crate::types::Info {
                describe()
            }

            fn resolve(
                given: Vec<$crate::types::Setting>,
                entropy: u64,
            ) -> Result<$crate::types::Resolved, Vec<$crate::types::Violation>> {
                resolve(given, entropy)
            }

            fn rules(resolved: &[$crate::types::Setting]) -> $crate::Rules {
                <$crate::agentx::Agentx as $crate::ScenarioV3>::rules(resolved)
            }

            fn start_tree(
                params: &$crate::tree::TreeParams,
                lane: u32,
                tree: &$crate::tree::Tree,
            ) -> Option<$crate::tree::TreeStart> {
                <$crate::agentx::Agentx as $crate::ScenarioV3>::start_tree(params, lane, tree)
            }

            fn cache_bust(
                target: $crate::types::Placement,
                tree: &$crate::TreeId,
            ) -> $crate::types::Marker {
                <$crate::agentx::Agentx as $crate::ScenarioV3>::cache_bust(target, tree)
            }

            fn classify_error(
                response: &$crate::types::ErrorResponse,
                phrases: Option<&[String]>,
            ) -> $crate::types::Classification {
                <$crate::agentx::Agentx as $crate::ScenarioV3>::classify_error(response, phrases)
            }

            fn turn_delay(params: &$crate::DelayParams, times: &$crate::TurnTimes) -> f64 {
                <$crate::agentx::Agentx as $crate::ScenarioV3>::turn_delay(params, times)
            }

            fn validity(outcome: &$crate::Outcome) -> Vec<String> {
                <$crate::agentx::Agentx as $crate::ScenarioV3>::validity(outcome)
            }
        }
    };
}

/// `export_scenario_v3!(S)`: the component of a [`crate::ScenarioV3`] through the WIT world
/// `agentx:scenario@0.3.0` (`../../wit/v0.3` relative to the component crate).
#[macro_export]
macro_rules! export_scenario_v3 {
    ($scenario:ty) => {
        ::wit_bindgen::generate!({
            world: "scenario",
            path: "../../wit/v0.3",
        });

        mod __scenario_adapter {
            use super::exports::agentx::scenario::policy as w;
            use super::exports::agentx::scenario::policy as p;
            use $crate::types as t;
            use $crate::ScenarioV3 as _;
            use $crate as v1;
            use $crate::tree as tr;
            use ::std::string::String;
            use ::std::vec::Vec;

            type S = $scenario;

            $crate::__policy_conversions!();

            fn setting_in(s: w::Setting) -> t::Setting {
                t::Setting { name: s.name, value: value_in(s.value), explicit: s.explicit }
            }

            pub struct Component;

            impl p::Guest for Component {
                fn describe() -> w::Info {
                    info_out(S::describe())
                }

                fn resolve(given: Vec<w::Setting>, entropy: u64) -> Result<w::Resolved, Vec<w::Violation>> {
                    resolve_via(given, entropy, S::resolve)
                }

                fn rules(resolved: Vec<w::Setting>) -> w::ReplayRules {
                    let settings: Vec<t::Setting> = resolved.into_iter().map(setting_in).collect();
                    let rules = S::rules(&settings);
                    let r = &rules.base;
                    w::ReplayRules {
                        warmup_max_tokens: r.warmup_max_tokens,
                        warmup_spread: r.warmup_spread,
                        system_idle_cap_seconds: r.system_idle_cap_seconds,
                        trace_idle_cap_seconds: r.trace_idle_cap_seconds,
                        overflow_ends_tree: r.overflow_ends_tree,
                        warmup_failure_aborts: r.warmup_failure_aborts,
                        recycle_from_turn_zero: r.recycle_from_turn_zero,
                        allow_wrap: r.allow_wrap,
                        min_metric_coverage: r.min_metric_coverage,
                        assistant_text: match rules.assistant_text {
                            v1::AssistantText::Recorded => w::AssistantText::Recorded,
                            v1::AssistantText::Live => w::AssistantText::Live,
                        },
                        prompt_tiling: match rules.prompt_tiling {
                            v1::PromptTiling::RecordedLength => w::PromptTiling::RecordedLength,
                            v1::PromptTiling::Reference => w::PromptTiling::Reference,
                        },
                        session_affinity_header: rules.session_affinity_header,
                        discover_model: rules.discover_model,
                        warmup_phase_name: rules.warmup_phase_name,
                    }
                }

                fn start_tree(params: w::TreeParams, lane: u32, tree: w::Tree) -> Option<w::TreeStart> {
                    let tree = tr::Tree {
                        trace_id: tree.trace_id,
                        streams: tree
                            .streams
                            .into_iter()
                            .map(|s| tr::TreeStream {
                                conversation_id: s.conversation_id,
                                turn_ts_ms: s.turn_ts_ms,
                                unsendable: s.unsendable,
                            })
                            .collect(),
                        branches: tree
                            .branches
                            .into_iter()
                            .map(|b| tr::Branch {
                                branch_id: b.branch_id,
                                children: b.children,
                                start_ms: b.start_ms,
                                spawn_turn: b.spawn_turn,
                                join_turn: b.join_turn,
                            })
                            .collect(),
                    };
                    let params = tr::TreeParams {
                        seed: params.seed,
                        min_ratio: params.min_ratio,
                        max_ratio: params.max_ratio,
                        lead_cap_ms: params.lead_cap_ms,
                    };
                    S::start_tree(&params, lane, &tree).map(|s| w::TreeStart {
                        t_star_ms: s.t_star_ms,
                        streams: s
                            .streams
                            .into_iter()
                            .map(|x| w::StreamStart {
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
                    })
                }

                fn cache_bust(target: w::Placement, tree: w::TreeId) -> w::Marker {
                    let m = S::cache_bust(
                        placement_in(target),
                        &v1::TreeId { run_id: tree.run_id, pass: tree.pass, lane: tree.lane, trace_id: tree.trace_id },
                    );
                    w::Marker { text: m.text, placement: placement_out(m.placement) }
                }

                fn classify_error(response: w::ErrorResponse, phrases: Option<Vec<String>>) -> w::Classification {
                    classify_via(response, phrases, S::classify_error)
                }

                fn turn_delay(params: w::DelayParams, times: w::TurnTimes) -> f64 {
                    S::turn_delay(
                        &v1::DelayParams { think_time_only: params.think_time_only, cap_seconds: params.cap_seconds },
                        &v1::TurnTimes {
                            ts_ms: times.ts_ms,
                            prev_ts_ms: times.prev_ts_ms,
                            prev_api_ms: times.prev_api_ms,
                            think_time_ms: times.think_time_ms,
                        },
                    )
                }

                fn validity(o: w::Outcome) -> Vec<String> {
                    S::validity(&v1::Outcome { content_coverage: o.content_coverage, base: $crate::policy_trees_outcome {
                        total_responses: o.total_responses,
                        context_overflows: o.context_overflows,
                        failed: o.failed,
                        cancelled: o.cancelled,
                        unsafe_override: o.unsafe_override,
                        overflow_rate_limit: o.overflow_rate_limit,
                        profiling_seconds: o.profiling_seconds,
                        ttft_coverage: o.ttft_coverage,
                        itl_coverage: o.itl_coverage,
                    }})
                }
            }
        }

        use __scenario_adapter::Component as ScenarioComponent;
        export!(ScenarioComponent);
    };
}
