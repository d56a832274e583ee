//! The weka JSON as read, before any check: lenient numbers (integers as floats or strings, as
//! recorders write them), hash-id lists, the raw trace and its entries.

use super::*;

/// An integer as aiperf's (lax) pydantic model reads one: a JSON integer, an integral float (`3.0`), a
/// string of digits (`" 1_000 "`, `"12.0"`) or a boolean. `coerced` says it was not a plain integer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Int {
    pub(super) v: i128,
    pub(super) coerced: bool,
}

/// Parses an integer the way pydantic's lax mode does from a string: surrounding whitespace, a sign,
/// underscores between digits, and a zero fraction are allowed.
pub(super) fn parse_int_str(text: &str) -> Option<i128> {
    let text = text.trim();
    let (neg, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let int = match digits.split_once('.') {
        Some((i, f)) if !f.is_empty() && f.bytes().all(|b| b == b'0') => i,
        Some(_) => return None,
        None => digits,
    };
    let bytes = int.as_bytes();
    if bytes.is_empty() || bytes[0] == b'_' || bytes[bytes.len() - 1] == b'_' {
        return None;
    }
    let mut v: i128 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'0'..=b'9' => v = v.checked_mul(10)?.checked_add(i128::from(b - b'0'))?,
            b'_' if bytes[i - 1] != b'_' => {}
            _ => return None,
        }
    }
    Some(if neg { -v } else { v })
}

pub(super) struct IntVisitor;

impl serde::de::Visitor<'_> for IntVisitor {
    type Value = Int;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an integer")
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Int, E> {
        Ok(Int {
            v: i128::from(v),
            coerced: false,
        })
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Int, E> {
        Ok(Int {
            v: i128::from(v),
            coerced: false,
        })
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Int, E> {
        if v.is_finite() && v.fract() == 0.0 {
            // `as` saturates beyond i128: only absurd magnitudes collapse.
            Ok(Int {
                v: v as i128,
                coerced: true,
            })
        } else {
            Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
        }
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Int, E> {
        parse_int_str(v)
            .map(|v| Int { v, coerced: true })
            .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Int, E> {
        Ok(Int {
            v: i128::from(v),
            coerced: true,
        })
    }
}

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IntVisitor)
    }
}

/// A number as aiperf's (lax) pydantic model reads a float: a JSON number, a numeric string (`"1.5"`,
/// `"nan"`, `"inf"`) or a boolean. `coerced` says it was not a plain number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Float {
    pub(super) v: f64,
    pub(super) coerced: bool,
}

pub(super) struct FloatVisitor;

impl serde::de::Visitor<'_> for FloatVisitor {
    type Value = Float;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a number")
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Float, E> {
        self.visit_f64(v as f64)
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Float, E> {
        self.visit_f64(v as f64)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Float, E> {
        Ok(Float { v, coerced: false })
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Float, E> {
        let t = v.trim();
        let ok = !t.starts_with('_') && !t.ends_with('_') && !t.contains("__");
        ok.then(|| t.replace('_', "").parse::<f64>().ok())
            .flatten()
            .map(|v| Float { v, coerced: true })
            .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Float, E> {
        Ok(Float {
            v: f64::from(u8::from(v)),
            coerced: true,
        })
    }
}

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FloatVisitor)
    }
}

/// A `hash_ids` list: ids in 0..=2^32-1 in place; others (which aiperf accepts as Python ints) get a
/// placeholder and are listed in `wide` (position, value) to be remapped per trace.
#[derive(Debug, Default)]
pub(super) struct HashIdList {
    pub(super) ids: Vec<u32>,
    pub(super) wide: Vec<(u32, i128)>,
    pub(super) coerced: bool,
}

impl<'de> Deserialize<'de> for HashIdList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = HashIdList;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of integer hash ids")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<HashIdList, A::Error> {
                let mut out = HashIdList {
                    ids: Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16)),
                    ..HashIdList::default()
                };
                while let Some(Int { v, coerced }) = seq.next_element::<Int>()? {
                    out.coerced |= coerced;
                    match u32::try_from(v) {
                        Ok(id) => out.ids.push(id),
                        Err(_) => {
                            out.wide.push((out.ids.len() as u32, v));
                            out.ids.push(0);
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrace {
    pub(super) id: String,
    pub(super) models: Option<Vec<String>>,
    pub(super) block_size: Int,
    pub(super) hash_id_scope: String,
    pub(super) tool_tokens: Option<Int>,
    pub(super) system_tokens: Option<Int>,
    pub(super) requests: Vec<RawEntry>,
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) totals: Option<serde::de::IgnoredAny>,
}

/// Request and subagent entries share one struct so `deny_unknown_fields` works without serde's
/// buffering of internally tagged enums (slow on large hash-id arrays); which fields a `type` allows is
/// checked after parsing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEntry {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) t: Option<Float>,
    pub(super) model: Option<String>,
    #[serde(rename = "in")]
    pub(super) input: Option<Int>,
    #[serde(rename = "out")]
    pub(super) output: Option<Int>,
    pub(super) hash_ids: Option<HashIdList>,
    pub(super) input_types: Option<Vec<String>>,
    pub(super) output_types: Option<Vec<String>>,
    pub(super) stop: Option<String>,
    pub(super) api_time: Option<Float>,
    pub(super) think_time: Option<Float>,
    pub(super) ttft: Option<Float>,
    pub(super) agent_id: Option<String>,
    pub(super) subagent_type: Option<String>,
    pub(super) duration_ms: Option<Float>,
    pub(super) total_tokens: Option<Int>,
    pub(super) tool_use_count: Option<Int>,
    pub(super) status: Option<String>,
    pub(super) requests: Option<Vec<RawEntry>>,
    pub(super) models: Option<Vec<String>>,
    pub(super) tool_tokens: Option<Int>,
    pub(super) system_tokens: Option<Int>,
}

impl RawEntry {
    /// Names of the subagent-only fields present.
    pub(super) fn subagent_fields(&self) -> impl Iterator<Item = &'static str> {
        [
            ("agent_id", self.agent_id.is_some()),
            ("subagent_type", self.subagent_type.is_some()),
            ("duration_ms", self.duration_ms.is_some()),
            ("total_tokens", self.total_tokens.is_some()),
            ("tool_use_count", self.tool_use_count.is_some()),
            ("status", self.status.is_some()),
            ("requests", self.requests.is_some()),
            ("models", self.models.is_some()),
            ("tool_tokens", self.tool_tokens.is_some()),
            ("system_tokens", self.system_tokens.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, p)| p.then_some(n))
    }

    /// Names of the request-only fields present.
    pub(super) fn request_fields(&self) -> impl Iterator<Item = &'static str> {
        [
            ("model", self.model.is_some()),
            ("in", self.input.is_some()),
            ("out", self.output.is_some()),
            ("hash_ids", self.hash_ids.is_some()),
            ("input_types", self.input_types.is_some()),
            ("output_types", self.output_types.is_some()),
            ("stop", self.stop.is_some()),
            ("api_time", self.api_time.is_some()),
            ("think_time", self.think_time.is_some()),
            ("ttft", self.ttft.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, p)| p.then_some(n))
    }
}
