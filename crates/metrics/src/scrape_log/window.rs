//! Where a time window's edges fall on one endpoint's scrapes: the one home of the window-edge rule
//! the server-metrics export and the GPU energy both read.
//!
//! Edges go by scrape index: a phase runs from its start boundary scrape (the profiling window:
//! `profiling_start`, taken after the warmup drained) to its end one (`profiling_complete`), as
//! agentx-harness 1.0.12 selects its window by phase-tagged scrapes, so times never decide an edge.
//! An edge whose boundary scrape is missing (failed twice, a log without boundaries, a run killed
//! before it) falls back to the periodic scrapes around the phase's time window (the last at or
//! before its start, the first at or after its end), and the notes say so.

use super::{Boundary, EndpointLog};

/// The indices into an endpoint's scrapes that bound a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Reference scrape: the window's start boundary scrape, or the last one at or before the
    /// start (else the first one).
    pub from: u32,
    /// The end boundary scrape, or the first scrape at or after the end (else the last one).
    pub to: u32,
    /// The scrapes a gauge is read at: from the start boundary scrape to the end one, or those
    /// inside `[start, end]` by time.
    pub inside: std::ops::Range<u32>,
    /// Seconds between the `from` and `to` scrapes (the window's length when they coincide).
    pub secs: f64,
}

impl Span {
    /// The span between two scrapes of `log`, both included.
    pub fn between(log: &EndpointLog, from: u32, to: u32) -> Span {
        let to = to.max(from);
        let times = &log.scrape_ns;
        let (from_ns, to_ns) = (times[from as usize], times[to as usize]);
        Span {
            from,
            to,
            inside: from..to + 1,
            secs: to_ns.saturating_sub(from_ns) as f64 / 1e9,
        }
    }
}

/// The span of a time window, by scrape times: the last scrape at or before its start to the
/// first at or after its end. `None` when the endpoint has no scrape.
pub fn span(log: &EndpointLog, (start, end): (u64, u64)) -> Option<Span> {
    let times = &log.scrape_ns;
    if times.is_empty() {
        return None;
    }
    let first_inside = times.partition_point(|&x| x < start);
    let past_inside = times.partition_point(|&x| x <= end);
    let from = if first_inside < times.len() && times[first_inside] == start {
        first_inside
    } else {
        first_inside.saturating_sub(1)
    };
    let to = if past_inside > 0 && times[past_inside - 1] == end {
        past_inside - 1
    } else {
        past_inside.min(times.len() - 1)
    };
    let window_secs = end.saturating_sub(start) as f64 / 1e9;
    let secs = if times[to] > times[from] {
        (times[to] - times[from]) as f64 / 1e9
    } else {
        window_secs
    };
    Some(Span {
        from: from as u32,
        to: to as u32,
        inside: first_inside as u32..past_inside as u32,
        secs,
    })
}

/// A phase window: the boundary scrapes that bound it, and the time window that stands in for a
/// missing one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Its name in notes (`profiling`, `warmup`).
    pub name: &'static str,
    /// The boundary scrape its first edge is.
    pub start: Boundary,
    /// The boundary scrape its last edge is.
    pub end: Boundary,
    /// Clock offsets of the phase (the replay's), for an edge without its boundary scrape.
    pub window: (u64, u64),
}

impl Phase {
    /// The profiling phase of a run whose replay profiled over `window` (clock offsets): from the
    /// `profiling_start` boundary scrape to the `profiling_complete` one.
    pub fn profiling(window: (u64, u64)) -> Phase {
        Phase {
            name: "profiling",
            start: Boundary::ProfilingStart,
            end: Boundary::ProfilingComplete,
            window,
        }
    }
}

/// Where one endpoint's window edges come from, and what to say about them.
#[derive(Debug, Clone, PartialEq)]
pub struct Edges {
    /// The scrapes that bound the window.
    pub span: Span,
    /// Both edges are boundary scrapes.
    pub exact: bool,
    /// The first edge is the start boundary scrape.
    pub from_boundary: bool,
    /// The last edge is the end boundary scrape.
    pub to_boundary: bool,
    /// The edges that are not boundary scrapes, and why.
    pub notes: Vec<String>,
}

/// The edges of `phase` on endpoint `log`: its boundary scrapes by index; an edge whose boundary
/// scrape is missing (failed twice, or never asked for) falls back to the periodic scrapes around
/// the phase's time window, and the notes say so, dating scrapes with `time_of` (given a scrape's
/// clock offset). `None` when the endpoint has no scrape.
pub fn edges(log: &EndpointLog, phase: &Phase, time_of: &dyn Fn(u64) -> String) -> Option<Edges> {
    let by_time = span(log, phase.window)?;
    let time_of = |i: u32| time_of(log.scrape_ns[i as usize]);
    if log.boundaries.is_empty() {
        let (from, to) = (by_time.from, by_time.to);
        return Some(Edges {
            span: by_time,
            exact: false,
            from_boundary: false,
            to_boundary: false,
            notes: vec![format!(
                "{}: no boundary scrapes (a log written before they existed): the {} window runs \
                 from the periodic scrape at {} to the one at {}, and requests that ended between \
                 a scrape and a phase edge count on the wrong side of it",
                log.url,
                phase.name,
                time_of(from),
                time_of(to)
            )],
        });
    }
    let mut notes = Vec::new();
    let mut edge = |end_boundary: Boundary, periodic: u32| -> (u32, bool) {
        let why = match log.boundary(end_boundary).map(|x| &x.taken) {
            Some(Ok(i)) => return (*i, true),
            Some(Err(why)) => format!("failed twice ({why})"),
            None => "was never taken (the run stopped before it)".to_string(),
        };
        notes.push(format!(
            "{}: the {} boundary scrape {why}; the {} window's edge there is the periodic scrape \
             at {} instead",
            log.url,
            end_boundary.as_str(),
            phase.name,
            time_of(periodic)
        ));
        (periodic, false)
    };
    let (from, start_boundary) = edge(phase.start, by_time.from);
    let (to, end_boundary) = edge(phase.end, by_time.to);
    Some(Edges {
        span: if start_boundary || end_boundary {
            Span::between(log, from, to)
        } else {
            by_time
        },
        exact: start_boundary && end_boundary,
        from_boundary: start_boundary,
        to_boundary: end_boundary,
        notes,
    })
}
