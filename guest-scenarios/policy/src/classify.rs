//! Context-overflow classification of a failed response (docs/specs/replay-rules.md#context-overflow).
//!
//! A phrase matches, case-insensitively, when it occurs in the raw body excerpt or in the error message
//! the body carries: the OpenAI `error.message`, a string-valued `error` (TGI's shape), or a top-level
//! `message` (vLLM's and SGLang's `{"object":"error","message":...}` shape). Looking inside the JSON
//! matters when the server escapes characters of the message (`\"`, `\u0027`); the raw body covers
//! excerpts cut short before the JSON closes. A body may also be one SSE event (`data: {...}`): the
//! JSON starts at its first `{`.
//!
//! The HTTP status is deliberately not consulted, as in aiperf: servers report overflows as 400, 413,
//! 422, 500 (older vLLM engine errors) or inside a 200 stream, and a phrase as specific as these does
//! not occur in unrelated failures. An empty phrase never matches (it would match everything).
//!
//! Invariant: never panics and never recurses deeper than [`MAX_DEPTH`], whatever the excerpt holds.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::types::{Classification, ErrorClass, ErrorResponse};

const MAX_DEPTH: usize = 64;

/// The texts of one failed response a phrase is matched against, lower-cased: the raw body, then any
/// messages found in its JSON.
pub fn haystacks(body: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(2);
    out.push(body.to_lowercase());
    for m in json_messages(body) {
        out.push(m.to_lowercase());
    }
    out
}

/// Classify with a plain phrase list: the first phrase (in list order) found in any haystack.
pub fn classify_phrases<S: AsRef<str>>(resp: &ErrorResponse, phrases: &[S]) -> Classification {
    let hay = haystacks(&resp.body_excerpt);
    for p in phrases {
        let p = p.as_ref();
        if p.is_empty() {
            continue;
        }
        let lp = p.to_lowercase();
        if hay.iter().any(|h| h.contains(&lp)) {
            return overflow(p);
        }
    }
    other()
}

pub fn overflow(matched: &str) -> Classification {
    Classification {
        class: ErrorClass::ContextOverflow,
        matched: Some(matched.to_string()),
    }
}

pub fn other() -> Classification {
    Classification {
        class: ErrorClass::Other,
        matched: None,
    }
}

/// The error messages a JSON error body carries (see the module comment), in document order.
pub fn json_messages(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(start) = body.find('{') else {
        return out;
    };
    let mut p = Parser {
        s: &body.as_bytes()[start..],
        i: 0,
    };
    let _ = p.object(0, &mut |key, p, depth| match key {
        "error" => match p.peek() {
            Some(b'"') => {
                let s = p.string()?;
                out.push(s);
                Some(())
            }
            Some(b'{') => p.object(depth + 1, &mut |k, p, d| {
                if k == "message" && p.peek() == Some(b'"') {
                    let s = p.string()?;
                    out.push(s);
                    Some(())
                } else {
                    p.value(d + 1)
                }
            }),
            _ => p.value(depth + 1),
        },
        "message" if p.peek() == Some(b'"') => {
            let s = p.string()?;
            out.push(s);
            Some(())
        }
        _ => p.value(depth + 1),
    });
    out
}

/// A minimal JSON reader: enough to walk objects, read strings and skip anything else. `None` means
/// malformed or cut-off input; whatever was found before that is kept by the caller.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

type Field<'f> = dyn FnMut(&str, &mut Parser<'_>, usize) -> Option<()> + 'f;

impl Parser<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    fn object(&mut self, depth: usize, field: &mut Field<'_>) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(&key, self, depth)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(depth, &mut |_, p, d| p.value(d + 1)),
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.value(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => {
                // number, true, false, null: everything up to the next delimiter
                let start = self.i;
                while let Some(&c) = self.s.get(self.i) {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.s.get(self.i..self.i + 4)?;
        let text = core::str::from_utf8(digits).ok()?;
        let v = u32::from_str_radix(text, 16).ok()?;
        self.i += 4;
        Some(v)
    }

    fn string(&mut self) -> Option<String> {
        self.eat(b'"')?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = *self.s.get(self.i)?;
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.s.get(self.i)?;
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&hi)
                                && self.s.get(self.i..self.i + 2) == Some(b"\\u")
                            {
                                self.i += 2;
                                let lo = self.hex4()?;
                                0x10000 + ((hi - 0xd800) << 10) + (lo.wrapping_sub(0xdc00) & 0x3ff)
                            } else {
                                hi
                            };
                            char::from_u32(code).unwrap_or('\u{fffd}')
                        }
                        _ => return None,
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                _ => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_from_the_common_shapes() {
        assert_eq!(
            json_messages(
                r#"{"error":{"message":"a \"quoted\" it\u0027s","type":"x","code":400}}"#
            ),
            ["a \"quoted\" it's"]
        );
        assert_eq!(
            json_messages(r#"{"error":"Input validation error","error_type":"validation"}"#),
            ["Input validation error"]
        );
        assert_eq!(
            json_messages(
                r#"{"object":"error","message":"m","type":"BadRequestError","param":null,"code":400}"#
            ),
            ["m"]
        );
        assert_eq!(
            json_messages("data: {\"error\": {\"message\": \"s\"}}\n\n"),
            ["s"]
        );
        assert_eq!(
            json_messages(r#"{"error": {"message": "\ud83d\ude42"}}"#),
            ["\u{1f642}"]
        );
    }

    #[test]
    fn broken_input_never_panics() {
        for body in [
            "",
            "{",
            "{\"error\"",
            "{\"error\":{\"message\":\"cut",
            "not json",
            "{\"a\":[1,2,{\"b\":",
            "{\"error\":\"\\u12\"}",
            "{\"message\":\"\\ud800\"}",
            "}{",
            "{\"a\":tru",
        ] {
            let _ = json_messages(body);
        }
        let deep = "[".repeat(10_000);
        let _ = json_messages(&alloc::format!("{{\"a\":{deep}"));
        let deep = "{\"a\":".repeat(10_000);
        let _ = json_messages(&deep);
    }

    #[test]
    fn empty_phrase_never_matches() {
        let r = ErrorResponse {
            status: 400,
            body_excerpt: "anything".into(),
        };
        assert_eq!(classify_phrases(&r, &[""]).class, ErrorClass::Other);
        let none: [&str; 0] = [];
        assert_eq!(classify_phrases(&r, &none).class, ErrorClass::Other);
    }
}
