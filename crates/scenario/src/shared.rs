//! The conversions between the host's records and a later world's generated bindings of the same
//! shape, written once for every world module ([`shared_conversions!`]).

/// The conversions between the host's records (0.1.0's types) and those of a later world's bindings
/// that share their shape (settings, info, resolve's answer, error classification, markers), for
/// the world module `$w` of generated types; each world module invokes it once.
macro_rules! shared_conversions {
    ($w:ident) => {
        pub(super) fn value(v: &v1::Value) -> $w::Value {
            match v {
                v1::Value::Absent => $w::Value::Absent,
                v1::Value::Flag(b) => $w::Value::Flag(*b),
                v1::Value::Integer(i) => $w::Value::Integer(*i),
                v1::Value::Number(x) => $w::Value::Number(*x),
                v1::Value::Text(s) => $w::Value::Text(s.clone()),
                v1::Value::Integers(l) => $w::Value::Integers(l.clone()),
                v1::Value::Texts(l) => $w::Value::Texts(l.clone()),
            }
        }

        fn value_back(v: $w::Value) -> v1::Value {
            match v {
                $w::Value::Absent => v1::Value::Absent,
                $w::Value::Flag(b) => v1::Value::Flag(b),
                $w::Value::Integer(i) => v1::Value::Integer(i),
                $w::Value::Number(x) => v1::Value::Number(x),
                $w::Value::Text(s) => v1::Value::Text(s),
                $w::Value::Integers(l) => v1::Value::Integers(l),
                $w::Value::Texts(l) => v1::Value::Texts(l),
            }
        }

        pub(super) fn settings(given: &[v1::Setting]) -> Vec<$w::Setting> {
            given
                .iter()
                .map(|s| $w::Setting {
                    name: s.name.clone(),
                    value: value(&s.value),
                    explicit: s.explicit,
                })
                .collect()
        }

        fn setting_back(s: $w::Setting) -> v1::Setting {
            v1::Setting {
                name: s.name,
                value: value_back(s.value),
                explicit: s.explicit,
            }
        }

        fn violation_back(v: $w::Violation) -> v1::Violation {
            v1::Violation {
                setting: v.setting,
                message: v.message,
            }
        }

        pub(super) fn info_back(i: $w::Info) -> v1::Info {
            v1::Info {
                name: i.name,
                version: i.version,
                description: i.description,
                knobs: i
                    .knobs
                    .into_iter()
                    .map(|k| v1::Knob {
                        name: k.name,
                        description: k.description,
                        default_value: k.default_value,
                    })
                    .collect(),
                locks: i
                    .locks
                    .into_iter()
                    .map(|l| v1::Lock {
                        setting: l.setting,
                        rule: l.rule,
                    })
                    .collect(),
            }
        }

        pub(super) fn resolved_back(
            r: Result<$w::Resolved, Vec<$w::Violation>>,
        ) -> Result<v1::Resolved, Vec<v1::Violation>> {
            match r {
                Ok(r) => Ok(v1::Resolved {
                    settings: r.settings.into_iter().map(setting_back).collect(),
                    seed: r.seed,
                    seed_drawn: r.seed_drawn,
                    warnings: r.warnings.into_iter().map(violation_back).collect(),
                    invalid_reasons: r.invalid_reasons,
                }),
                Err(v) => Err(v.into_iter().map(violation_back).collect()),
            }
        }

        pub(super) fn error_response(r: &v1::ErrorResponse) -> $w::ErrorResponse {
            $w::ErrorResponse {
                status: r.status,
                body_excerpt: r.body_excerpt.clone(),
            }
        }

        pub(super) fn classification_back(c: $w::Classification) -> v1::Classification {
            v1::Classification {
                class: match c.class {
                    $w::ErrorClass::ContextOverflow => v1::ErrorClass::ContextOverflow,
                    $w::ErrorClass::Other => v1::ErrorClass::Other,
                },
                matched: c.matched,
            }
        }

        pub(super) fn placement(p: v1::Placement) -> $w::Placement {
            match p {
                v1::Placement::None => $w::Placement::None,
                v1::Placement::SystemPrefix => $w::Placement::SystemPrefix,
                v1::Placement::SystemSuffix => $w::Placement::SystemSuffix,
                v1::Placement::FirstTurnPrefix => $w::Placement::FirstTurnPrefix,
                v1::Placement::FirstTurnSuffix => $w::Placement::FirstTurnSuffix,
            }
        }

        pub(super) fn marker_back(m: $w::Marker) -> v1::Marker {
            v1::Marker {
                text: m.text,
                placement: match m.placement {
                    $w::Placement::None => v1::Placement::None,
                    $w::Placement::SystemPrefix => v1::Placement::SystemPrefix,
                    $w::Placement::SystemSuffix => v1::Placement::SystemSuffix,
                    $w::Placement::FirstTurnPrefix => v1::Placement::FirstTurnPrefix,
                    $w::Placement::FirstTurnSuffix => v1::Placement::FirstTurnSuffix,
                },
            }
        }
    };
}
pub(super) use shared_conversions;
