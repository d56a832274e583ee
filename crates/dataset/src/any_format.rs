//! The one entry point that hands a source's traces to the cache builder, whichever format it is in
//! ([`super::format::Format`]): each parser turns its records into [`ParsedTrace`]s.

use std::ops::ControlFlow;

use super::error::DatasetError;
use super::format::{jsonl_path, Format, FormatSpec};
use super::weka::{ParsedTrace, SourceFiles};

/// Reads the traces of a source in format `spec` and hands each to `on_trace` until it answers
/// `Break`. Returns the number of traces read; a source without any trace is
/// [`DatasetError::Empty`].
pub(crate) fn scan(
    spec: &FormatSpec,
    files: &SourceFiles,
    on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    match spec.format {
        Format::Weka => match spec.trace_block_size {
            None => super::weka::scan_traces(files, on_trace),
            Some(n) => {
                let mut on_trace = on_trace;
                super::weka::scan_traces(files, |t| on_trace(super::weka::relayout(t, n)?))
            }
        },
        Format::Mooncake => super::mooncake::scan(jsonl_path(files, spec.format)?, spec, on_trace),
        Format::Tracelab => super::tracelab::scan(jsonl_path(files, spec.format)?, spec, on_trace),
        Format::Dynamo => {
            super::dynamo::scan_request_trace(jsonl_path(files, spec.format)?, spec, on_trace)
        }
        Format::AgenticMooncake => {
            super::dynamo::scan_agentic_mooncake(jsonl_path(files, spec.format)?, spec, on_trace)
        }
        Format::Otel => super::otel::scan(files, spec, on_trace),
    }
}
