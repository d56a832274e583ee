//! The connection pool under [`super::Client`], and how it keeps up with the server's keep-alive.
//!
//! A server closes idle connections on its own schedule: llama.cpp answers every response with
//! `Keep-Alive: timeout=5, max=100` and closes a connection idle for 5 s or after 100 requests. A
//! client that reuses a connection the server is closing at that moment loses the request
//! ("connection closed before message completed"). This module keeps that from happening:
//!
//! - Every connection carries a [`super::conn::ConnMeta`] (when it was opened, how many responses it
//!   served), put there by [`TrackedConnector`] and read back from responses and errors.
//! - [`KeepAlive`] is parsed from each response. Its `timeout` lowers the pool's idle timeout to the
//!   server's deadline minus a margin ([`idle_deadline`]); the pool is rebuilt with the new timeout
//!   (connections in flight finish on the old one). Its `max` retires a connection (poisons it) once
//!   it has served `max - 1` responses, before the server closes it.
//! - [`Pools::fresh`] never keeps a connection, so a request sent on it always opens a new one: the
//!   client's one retry after a failure on a reused connection goes there.
//! - [`Pools::sticky`] holds each session's own connection for `--connection-reuse-strategy
//!   sticky-user-sessions` ([`super::sticky`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::conn::{Https, TrackedConnector};
use super::JsonBody;

pub(crate) type Legacy = hyper_util::client::legacy::Client<TrackedConnector, JsonBody>;

/// A server's `Keep-Alive` response header (RFC 2068 §19.7.1, as Apache, nginx and llama.cpp send it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct KeepAlive {
    /// Seconds an idle connection stays open.
    pub(crate) timeout: Option<u64>,
    /// Requests a connection serves before the server closes it.
    pub(crate) max: Option<u32>,
}

impl KeepAlive {
    /// Parses `timeout=5, max=100` (either part optional, any order, case-insensitive); `None` when
    /// neither is there.
    pub(crate) fn parse(header: &str) -> Option<KeepAlive> {
        let mut parsed = KeepAlive::default();
        for part in header.split(',') {
            let Some((name, value)) = part.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "timeout" => parsed.timeout = value.parse().ok(),
                "max" => parsed.max = value.parse().ok(),
                _ => {}
            }
        }
        (parsed.timeout.is_some() || parsed.max.is_some()).then_some(parsed)
    }
}

/// How long the pool may keep a connection idle when the server closes it after `server_timeout`:
/// the server's deadline minus a margin of a quarter of it, at least 250 ms and at most 1 s
/// (5 s → 4 s, 1 s → 750 ms, 60 s → 59 s).
pub(crate) fn idle_deadline(server_timeout: Duration) -> Duration {
    let margin = (server_timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(1));
    server_timeout.saturating_sub(margin)
}

/// The pooled client (replaced when the idle timeout must shrink) and the never-pooling one.
pub(crate) struct Pools {
    connector: TrackedConnector,
    http2: bool,
    current: RwLock<Legacy>,
    /// The current pool's idle timeout, nanoseconds.
    idle_ns: AtomicU64,
    fresh: Legacy,
    /// The sessions' own connections (`sticky-user-sessions`).
    pub(crate) sticky: super::sticky::Sticky,
}

impl Pools {
    pub(crate) fn new(https: Https, idle: Duration, http2: bool) -> Pools {
        let connector = TrackedConnector::new(https);
        Pools {
            current: RwLock::new(build(connector.clone(), idle, usize::MAX, http2)),
            fresh: build(connector.clone(), idle, 0, http2),
            idle_ns: AtomicU64::new(idle.as_nanos() as u64),
            connector: connector.clone(),
            http2,
            sticky: super::sticky::Sticky::new(connector.clone(), http2),
        }
    }

    /// The pooled client for the next request.
    pub(crate) fn pooled(&self) -> Legacy {
        self.current.read().expect("pool lock").clone()
    }

    /// A client that opens a new connection for every request.
    pub(crate) fn fresh(&self) -> &Legacy {
        &self.fresh
    }

    pub(crate) fn idle_timeout(&self) -> Duration {
        Duration::from_nanos(self.idle_ns.load(Ordering::Relaxed))
    }

    /// Lowers the idle timeout to `idle` if it is shorter than the current one: later requests use a
    /// new pool with that timeout. Returns whether it changed.
    pub(crate) fn lower_idle_timeout(&self, idle: Duration) -> bool {
        let idle_ns = idle.as_nanos() as u64;
        let mut cur = self.current.write().expect("pool lock");
        if idle_ns >= self.idle_ns.load(Ordering::Relaxed) {
            return false;
        }
        self.idle_ns.store(idle_ns, Ordering::Relaxed);
        *cur = build(self.connector.clone(), idle, usize::MAX, self.http2);
        true
    }
}

fn build(connector: TrackedConnector, idle: Duration, max_idle: usize, http2: bool) -> Legacy {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(idle)
        .pool_max_idle_per_host(max_idle)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http2_only(http2)
        .http1_max_buf_size(super::HTTP1_MAX_BUF)
        .build(connector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_header_forms() {
        assert_eq!(
            KeepAlive::parse("timeout=5, max=100"),
            Some(KeepAlive {
                timeout: Some(5),
                max: Some(100)
            })
        );
        assert_eq!(
            KeepAlive::parse("MAX=3 ,Timeout=\"15\""),
            Some(KeepAlive {
                timeout: Some(15),
                max: Some(3)
            })
        );
        assert_eq!(
            KeepAlive::parse("timeout=2"),
            Some(KeepAlive {
                timeout: Some(2),
                max: None
            })
        );
        assert_eq!(KeepAlive::parse("close"), None);
        assert_eq!(KeepAlive::parse(""), None);
        assert_eq!(
            KeepAlive::parse("timeout=x, max=7"),
            Some(KeepAlive {
                timeout: None,
                max: Some(7)
            })
        );
    }

    #[test]
    fn idle_deadline_leaves_a_margin() {
        let s = Duration::from_secs;
        assert_eq!(idle_deadline(s(5)), s(4));
        assert_eq!(idle_deadline(s(1)), Duration::from_millis(750));
        assert_eq!(idle_deadline(s(60)), s(59));
        assert_eq!(idle_deadline(Duration::from_millis(200)), Duration::ZERO);
    }
}
