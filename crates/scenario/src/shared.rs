//! The conversions between the host's records and a later world's generated bindings of the same
//! shape, written once for every world module ([`shared_conversions!`]).

/// The conversions between the host's records (0.1.0's types) and those of a later world's bindings
/// that share their shape (settings, info, resolve's answer, error classification, markers), for
/// the world module `$w` of generated types; each world module invokes it once.
macro_rules! shared_conversions {
    ($w:ident) => {
        pub(super) fn value(value: &v1::Value) -> $w::Value {
            match value {
                v1::Value::Absent => $w::Value::Absent,
                v1::Value::Flag(b) => $w::Value::Flag(*b),
                v1::Value::Integer(i) => $w::Value::Integer(*i),
                v1::Value::Number(x) => $w::Value::Number(*x),
                v1::Value::Text(s) => $w::Value::Text(s.clone()),
                v1::Value::Integers(l) => $w::Value::Integers(l.clone()),
                v1::Value::Texts(l) => $w::Value::Texts(l.clone()),
            }
        }

        fn value_back(value: $w::Value) -> v1::Value {
            match value {
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
                .map(|setting| $w::Setting {
                    name: setting.name.clone(),
                    value: value(&setting.value),
                    explicit: setting.explicit,
                })
                .collect()
        }

        fn setting_back(setting: $w::Setting) -> v1::Setting {
            v1::Setting {
                name: setting.name,
                value: value_back(setting.value),
                explicit: setting.explicit,
            }
        }

        fn violation_back(violation: $w::Violation) -> v1::Violation {
            v1::Violation {
                setting: violation.setting,
                message: violation.message,
            }
        }

        pub(super) fn info_back(info: $w::Info) -> v1::Info {
            v1::Info {
                name: info.name,
                version: info.version,
                description: info.description,
                knobs: info
                    .knobs
                    .into_iter()
                    .map(|knob| v1::Knob {
                        name: knob.name,
                        description: knob.description,
                        default_value: knob.default_value,
                    })
                    .collect(),
                locks: info
                    .locks
                    .into_iter()
                    .map(|lock| v1::Lock {
                        setting: lock.setting,
                        rule: lock.rule,
                    })
                    .collect(),
            }
        }

        pub(super) fn resolved_back(
            answer: Result<$w::Resolved, Vec<$w::Violation>>,
        ) -> Result<v1::Resolved, Vec<v1::Violation>> {
            match answer {
                Ok(resolved) => Ok(v1::Resolved {
                    settings: resolved.settings.into_iter().map(setting_back).collect(),
                    seed: resolved.seed,
                    seed_drawn: resolved.seed_drawn,
                    warnings: resolved.warnings.into_iter().map(violation_back).collect(),
                    invalid_reasons: resolved.invalid_reasons,
                }),
                Err(violations) => Err(violations.into_iter().map(violation_back).collect()),
            }
        }

        pub(super) fn error_response(response: &v1::ErrorResponse) -> $w::ErrorResponse {
            $w::ErrorResponse {
                status: response.status,
                body_excerpt: response.body_excerpt.clone(),
            }
        }

        pub(super) fn classification_back(
            classification: $w::Classification,
        ) -> v1::Classification {
            v1::Classification {
                class: match classification.class {
                    $w::ErrorClass::ContextOverflow => v1::ErrorClass::ContextOverflow,
                    $w::ErrorClass::Other => v1::ErrorClass::Other,
                },
                matched: classification.matched,
            }
        }

        pub(super) fn placement(placement: v1::Placement) -> $w::Placement {
            match placement {
                v1::Placement::None => $w::Placement::None,
                v1::Placement::SystemPrefix => $w::Placement::SystemPrefix,
                v1::Placement::SystemSuffix => $w::Placement::SystemSuffix,
                v1::Placement::FirstTurnPrefix => $w::Placement::FirstTurnPrefix,
                v1::Placement::FirstTurnSuffix => $w::Placement::FirstTurnSuffix,
            }
        }

        pub(super) fn marker_back(marker: $w::Marker) -> v1::Marker {
            v1::Marker {
                text: marker.text,
                placement: match marker.placement {
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
