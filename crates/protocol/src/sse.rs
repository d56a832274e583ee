//! Incremental Server-Sent Events decoding.
//!
//! Bytes arrive in arbitrary pieces (a TCP read can end anywhere, even inside a `\r\n`); the decoder
//! keeps the unfinished line and yields each event once its terminating blank line has arrived, so
//! the events are the same for every split of the stream. It follows the WHATWG event-stream rules
//! that matter to OpenAI-compatible servers: lines end in `\n`, `\r\n` or `\r`; lines starting with
//! `:` are comments (keep-alives); `data` lines of one event are joined with `\n`; `event`, `id` and
//! `retry` are accepted and ignored; a single space after the colon is removed. Strictness lives here
//! too: a field that is not valid UTF-8 or an unbounded line is an error that says what was wrong,
//! so the request becomes an error record instead of a silent mis-measurement.

use thiserror::Error;

/// Longest line the decoder buffers before declaring the stream malformed.
pub(crate) const MAX_LINE: usize = 16 << 20;

/// A malformed event stream.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SseError {
    /// A line that is not UTF-8.
    #[error("malformed SSE: a line is not valid UTF-8 (near byte {offset} of the stream)")]
    Utf8 {
        /// Where in the stream (bytes from its start).
        offset: u64,
    },
    /// A line longer than `MAX_LINE` (16 MiB).
    #[error("malformed SSE: a line is longer than {MAX_LINE} bytes without a line break")]
    LineTooLong,
}

/// Incremental decoder state.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The unfinished line.
    line: Vec<u8>,
    /// `data` of the event being assembled.
    data: String,
    has_data: bool,
    /// The previous chunk ended in `\r`: a `\n` at the start of the next one belongs to it.
    after_cr: bool,
    /// Bytes consumed so far, for error positions.
    offset: u64,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed the next piece of the stream; `on_event` gets the `data` of every completed event.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        mut on_event: impl FnMut(&str),
    ) -> Result<(), SseError> {
        // An empty piece says nothing about the `\n` that may follow a `\r`: keep waiting for it.
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
                self.offset += 1;
            }
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', bytes) {
            let (head, tail) = bytes.split_at(pos);
            let ends_in_cr = tail[0] == b'\r';
            let mut rest = &tail[1..];
            if ends_in_cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    _ => {}
                }
            }
            let consumed = (bytes.len() - rest.len()) as u64;
            if self.line.is_empty() {
                self.line_done(head, &mut on_event)?;
            } else {
                self.line.extend_from_slice(head);
                let line = std::mem::take(&mut self.line);
                let result = self.line_done(&line, &mut on_event);
                self.line = line;
                self.line.clear();
                result?;
            }
            self.offset += consumed;
            bytes = rest;
        }
        if self.line.len() + bytes.len() > MAX_LINE {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(bytes);
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Whether the stream ended in the middle of an event (bytes or data not yet dispatched).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    fn line_done(&mut self, line: &[u8], on_event: &mut impl FnMut(&str)) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                on_event(&self.data);
                self.data.clear();
                self.has_data = false;
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let after_colon = &line[i + 1..];
                (
                    &line[..i],
                    after_colon.strip_prefix(b" ").unwrap_or(after_colon),
                )
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            let text = std::str::from_utf8(value).map_err(|_| SseError::Utf8 {
                offset: self.offset,
            })?;
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(text);
            self.has_data = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_split(stream: &[u8], splits: &[usize]) -> Result<Vec<String>, SseError> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        let mut last = 0;
        for &s in splits.iter().chain(std::iter::once(&stream.len())) {
            d.feed(&stream[last..s], |e| out.push(e.to_string()))?;
            last = s;
        }
        Ok(out)
    }

    const STREAM: &[u8] = b": keep-alive\r\n\r\ndata: {\"a\":1}\n\nevent: x\r\nid: 7\rdata:{\"b\":\"\xc3\xa9\"}\r\n\r\ndata: line1\ndata: line2\n\n:comment\ndata: [DONE]\r\r";

    fn expected() -> Vec<String> {
        vec![
            "{\"a\":1}".to_string(),
            "{\"b\":\"é\"}".to_string(),
            "line1\nline2".to_string(),
            "[DONE]".to_string(),
        ]
    }

    #[test]
    fn whole_stream() {
        assert_eq!(decode_split(STREAM, &[]).unwrap(), expected());
    }

    /// Every way of cutting the stream in two or three pieces yields the same events: this covers
    /// cuts inside `\r\n`, inside a multi-byte UTF-8 character, inside `data:` and between events.
    #[test]
    fn every_split_gives_the_same_events() {
        let n = STREAM.len();
        for a in 0..=n {
            assert_eq!(
                decode_split(STREAM, &[a]).unwrap(),
                expected(),
                "split at {a}"
            );
            for b in a..=n {
                assert_eq!(
                    decode_split(STREAM, &[a, b]).unwrap(),
                    expected(),
                    "splits at {a},{b}"
                );
            }
        }
    }

    #[test]
    fn byte_at_a_time() {
        let splits: Vec<usize> = (1..STREAM.len()).collect();
        assert_eq!(decode_split(STREAM, &splits).unwrap(), expected());
    }

    /// Found by the `sse` fuzz target: an empty piece between a `\r` and its `\n` made the `\n` a
    /// blank line of its own, which ended the event early (`["a", "b"]` instead of `["a\nb"]`).
    #[test]
    fn empty_piece_inside_crlf() {
        let stream = b"data: a\r\ndata: b\n\n";
        assert_eq!(decode_split(stream, &[]).unwrap(), ["a\nb"]);
        assert_eq!(decode_split(stream, &[8, 8]).unwrap(), ["a\nb"]);
        assert_eq!(decode_split(stream, &[8, 8, 8, 9, 9]).unwrap(), ["a\nb"]);
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let err = decode_split(b"data: \xff\xfe\n\n", &[]).unwrap_err();
        assert!(matches!(err, SseError::Utf8 { .. }));
        assert!(err.to_string().contains("not valid UTF-8"));
    }

    #[test]
    fn partial_event_is_reported() {
        let mut d = SseDecoder::new();
        d.feed(b"data: {\"x\"", |_| panic!("no event yet")).unwrap();
        assert!(d.has_partial());
        let mut got = Vec::new();
        d.feed(b":1}\n\n", |e| got.push(e.to_string())).unwrap();
        assert_eq!(got, ["{\"x\":1}"]);
        assert!(!d.has_partial());
    }
}
