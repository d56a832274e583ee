//! The SSE decoder (`agentx::client::sse`): arbitrary bytes, fed whole and cut into pieces at
//! fuzzer-chosen points. Checks the decoder's promise: the same events (and the same outcome, error
//! or partial event) for every split of the stream, and no panic.
#![no_main]

use agentx::client::sse::{SseDecoder, SseError};
use libfuzzer_sys::fuzz_target;

/// Events, the error that stopped decoding (its kind only: the offset names the piece it was
/// found in) and whether an event was left unfinished.
#[derive(Debug, PartialEq)]
struct Decoded {
    events: Vec<String>,
    error: Option<&'static str>,
    partial: bool,
}

fn decode<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> Decoded {
    let mut d = SseDecoder::new();
    let mut events = Vec::new();
    let mut error = None;
    for p in pieces {
        if let Err(e) = d.feed(p, |e| events.push(e.to_owned())) {
            let _ = e.to_string();
            error = Some(match e {
                SseError::Utf8 { .. } => "utf8",
                SseError::LineTooLong => "too long",
            });
            break;
        }
    }
    let partial = error.is_none() && d.has_partial();
    Decoded {
        events,
        error,
        partial,
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte seeds the cut points; the rest is the stream.
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let whole = decode(std::iter::once(stream));
    let mut cuts = Vec::new();
    let mut at = 0usize;
    let mut x = u32::from(seed) | 1;
    while at < stream.len() {
        // xorshift: piece lengths 0..=15, empty pieces included.
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let next = (at + (x % 16) as usize).min(stream.len());
        cuts.push(&stream[at..next]);
        at = next;
    }
    let split = decode(cuts.into_iter());
    assert_eq!(whole, split, "the events depend on how the stream was cut");
    let bytewise = decode(stream.chunks(1));
    assert_eq!(whole, bytewise, "byte-at-a-time decoding differs");
});
