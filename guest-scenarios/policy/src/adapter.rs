//! `export_scenario!`: the one place that maps wit-bindgen's generated types to this crate's and back.
//!
//! A component crate is `policy::export_scenario!(policy::mvp::Mvp);` and nothing else: the macro runs
//! `wit_bindgen::generate!` on `../../wit` (relative to the component crate) in the component, so the
//! policy crate itself stays free of bindings and testable natively. Conversions are field for field;
//! the WIT names and these types' names correspond one to one.

#[macro_export]
macro_rules! export_scenario {
    ($scenario:ty) => {
        ::wit_bindgen::generate!({
            world: "scenario",
            path: "../../wit",
        });

        mod __scenario_adapter {
            use super::exports::agentx::scenario::policy as w;
            use super::exports::agentx::scenario::policy as p;
            use $crate::types as t;
            use $crate::Scenario as _;
            use ::std::string::String;
            use ::std::vec::Vec;

            type S = $scenario;

            $crate::__policy_conversions!();

            fn params_in(s: w::StartParams) -> t::StartParams {
                t::StartParams { seed: s.seed, min_ratio: s.min_ratio, max_ratio: s.max_ratio }
            }

            fn trajectory_in(x: w::Trajectory) -> t::Trajectory {
                t::Trajectory { trace_id: x.trace_id, num_turns: x.num_turns, unsendable: x.unsendable }
            }

            pub struct Component;

            impl p::Guest for Component {
                fn describe() -> w::Info {
                    info_out(S::describe())
                }

                fn resolve(given: Vec<w::Setting>, entropy: u64) -> Result<w::Resolved, Vec<w::Violation>> {
                    resolve_via(given, entropy, S::resolve)
                }

                fn start_turn(params: w::StartParams, trajectory: w::Trajectory) -> Option<u32> {
                    S::start_turn(&params_in(params), &trajectory_in(trajectory))
                }

                fn plan_starts(params: w::StartParams, trajectories: Vec<w::Trajectory>) -> Vec<Option<u32>> {
                    let params = params_in(params);
                    let ts: Vec<t::Trajectory> = trajectories.into_iter().map(trajectory_in).collect();
                    S::plan_starts(&params, &ts)
                }

                fn cache_bust(target: w::Placement, session: w::SessionId) -> w::Marker {
                    let m = S::cache_bust(
                        placement_in(target),
                        &t::SessionId {
                            run_id: session.run_id,
                            recycle_pass: session.recycle_pass,
                            lane: session.lane,
                            trace_id: session.trace_id,
                        },
                    );
                    w::Marker { text: m.text, placement: placement_out(m.placement) }
                }

                fn classify_error(response: w::ErrorResponse, phrases: Option<Vec<String>>) -> w::Classification {
                    classify_via(response, phrases, S::classify_error)
                }

                fn turn_delay(params: w::DelayParams, timing: w::TurnTiming) -> f64 {
                    S::turn_delay(
                        &t::DelayParams { think_time_only: params.think_time_only, cap_seconds: params.cap_seconds },
                        &t::TurnTiming { think_time: timing.think_time, timestamp_gap: timing.timestamp_gap },
                    )
                }

                fn validity(o: w::Outcome) -> Vec<String> {
                    S::validity(&t::Outcome {
                        total_responses: o.total_responses,
                        context_overflows: o.context_overflows,
                        failed: o.failed,
                        cancelled: o.cancelled,
                        unsafe_override: o.unsafe_override,
                        overflow_rate_limit: o.overflow_rate_limit,
                    })
                }
            }
        }

        use __scenario_adapter::Component as ScenarioComponent;
        export!(ScenarioComponent);
    };
}

/// The conversions both worlds share (values, settings, violations, placements, info, resolve and
/// classify), expanded inside each adapter module, where `w` names the generated interface and `t`
/// this crate's types.
#[doc(hidden)]
#[macro_export]
macro_rules! __policy_conversions {
    () => {
        fn value_in(v: w::Value) -> t::Value {
            match v {
                w::Value::Absent => t::Value::Absent,
                w::Value::Flag(b) => t::Value::Flag(b),
                w::Value::Integer(i) => t::Value::Integer(i),
                w::Value::Number(x) => t::Value::Number(x),
                w::Value::Text(s) => t::Value::Text(s),
                w::Value::Integers(xs) => t::Value::Integers(xs),
                w::Value::Texts(xs) => t::Value::Texts(xs),
            }
        }

        fn value_out(v: t::Value) -> w::Value {
            match v {
                t::Value::Absent => w::Value::Absent,
                t::Value::Flag(b) => w::Value::Flag(b),
                t::Value::Integer(i) => w::Value::Integer(i),
                t::Value::Number(x) => w::Value::Number(x),
                t::Value::Text(s) => w::Value::Text(s),
                t::Value::Integers(xs) => w::Value::Integers(xs),
                t::Value::Texts(xs) => w::Value::Texts(xs),
            }
        }

        fn violation_out(v: t::Violation) -> w::Violation {
            w::Violation {
                setting: v.setting,
                message: v.message,
            }
        }

        fn placement_in(p: w::Placement) -> t::Placement {
            match p {
                w::Placement::None => t::Placement::None,
                w::Placement::SystemPrefix => t::Placement::SystemPrefix,
                w::Placement::SystemSuffix => t::Placement::SystemSuffix,
                w::Placement::FirstTurnPrefix => t::Placement::FirstTurnPrefix,
                w::Placement::FirstTurnSuffix => t::Placement::FirstTurnSuffix,
            }
        }

        fn placement_out(p: t::Placement) -> w::Placement {
            match p {
                t::Placement::None => w::Placement::None,
                t::Placement::SystemPrefix => w::Placement::SystemPrefix,
                t::Placement::SystemSuffix => w::Placement::SystemSuffix,
                t::Placement::FirstTurnPrefix => w::Placement::FirstTurnPrefix,
                t::Placement::FirstTurnSuffix => w::Placement::FirstTurnSuffix,
            }
        }

        fn info_out(i: t::Info) -> w::Info {
            w::Info {
                name: i.name,
                version: i.version,
                description: i.description,
                knobs: i
                    .knobs
                    .into_iter()
                    .map(|k| w::Knob {
                        name: k.name,
                        description: k.description,
                        default_value: k.default_value,
                    })
                    .collect(),
                locks: i
                    .locks
                    .into_iter()
                    .map(|l| w::Lock {
                        setting: l.setting,
                        rule: l.rule,
                    })
                    .collect(),
            }
        }

        fn resolve_via(
            given: Vec<w::Setting>,
            entropy: u64,
            f: fn(Vec<t::Setting>, u64) -> Result<t::Resolved, Vec<t::Violation>>,
        ) -> Result<w::Resolved, Vec<w::Violation>> {
            let given = given
                .into_iter()
                .map(|s| t::Setting {
                    name: s.name,
                    value: value_in(s.value),
                    explicit: s.explicit,
                })
                .collect();
            match f(given, entropy) {
                Ok(r) => Ok(w::Resolved {
                    settings: r
                        .settings
                        .into_iter()
                        .map(|s| w::Setting {
                            name: s.name,
                            value: value_out(s.value),
                            explicit: s.explicit,
                        })
                        .collect(),
                    seed: r.seed,
                    seed_drawn: r.seed_drawn,
                    warnings: r.warnings.into_iter().map(violation_out).collect(),
                    invalid_reasons: r.invalid_reasons,
                }),
                Err(v) => Err(v.into_iter().map(violation_out).collect()),
            }
        }

        fn classify_via(
            response: w::ErrorResponse,
            phrases: Option<Vec<String>>,
            f: fn(&t::ErrorResponse, Option<&[String]>) -> t::Classification,
        ) -> w::Classification {
            let c = f(
                &t::ErrorResponse {
                    status: response.status,
                    body_excerpt: response.body_excerpt,
                },
                phrases.as_deref(),
            );
            w::Classification {
                class: match c.class {
                    t::ErrorClass::ContextOverflow => w::ErrorClass::ContextOverflow,
                    t::ErrorClass::Other => w::ErrorClass::Other,
                },
                matched: c.matched,
            }
        }
    };
}
