//! Which engine a chat request runs on ([`Router`]): by any session header, by one session header
//! with parents, round-robin, or by load.
//!
//! Invariants: with [`Router::Session`] a session's engine is fixed by its first request and never
//! changes; a child session whose parent is bound goes to its parent's engine. A spawned child finds
//! its parent bound (the parent's turn precedes the spawn), but a tree started mid-way primes its
//! alive streams at once, and a child admitted before its parent is bound by its own key, as a
//! router that has not seen the parent would. Dispatch is a pure function of the headers, the arrival order
//! and (for `LeastLoaded`) the engines' counts, so a rerun routes the same way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use agentx_tokens::blocks::hash_str;
use hyper::header::{HeaderMap, HeaderName};

use super::config::{Router, SimConfig};
use super::engine::Engine;

/// The headers a router would key a session on, in the order [`Router::AnyHeader`] consults them.
const SESSION_KEYS: [&str; 5] = [
    "x-session-affinity",
    "x-smg-routing-key",
    "x-dynamo-session-id",
    "x-session-id",
    "x-correlation-id",
];

/// The routing state of one server.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    router: Router,
    engines: u64,
    header: HeaderName,
    parent_header: HeaderName,
    round_robin: AtomicU64,
    /// Session key to engine, for [`Router::Session`].
    bindings: Mutex<HashMap<String, usize>>,
    /// Requests a keyed router found no key on (sent round-robin).
    unkeyed: AtomicU64,
}

impl Dispatcher {
    /// The router of `config` (already validated).
    pub(crate) fn new(config: &SimConfig) -> Dispatcher {
        // `validate` checked both names; the fallbacks are never taken.
        let name = |text: &str, default: &'static str| {
            HeaderName::from_bytes(text.as_bytes())
                .unwrap_or_else(|_| HeaderName::from_static(default))
        };
        Dispatcher {
            router: config.router,
            engines: u64::from(config.engines.max(1)),
            header: name(&config.router_header, super::config::DEFAULT_ROUTER_HEADER),
            parent_header: name(
                &config.router_parent_header,
                super::config::DEFAULT_ROUTER_PARENT_HEADER,
            ),
            round_robin: AtomicU64::new(0),
            bindings: Mutex::new(HashMap::new()),
            unkeyed: AtomicU64::new(0),
        }
    }

    /// Requests a keyed router ([`Router::AnyHeader`], [`Router::Session`]) found no key on.
    pub(crate) fn unkeyed(&self) -> u64 {
        self.unkeyed.load(Relaxed)
    }

    /// The engine (an index into `engines`) a request with `headers` runs on.
    pub(crate) fn pick(&self, headers: &HeaderMap, engines: &[Arc<Engine>]) -> usize {
        match self.router {
            Router::AnyHeader => {
                let key = SESSION_KEYS
                    .iter()
                    .find_map(|name| value(headers, &HeaderName::from_static(name)));
                match key {
                    Some(key) => (hash_str(key) % self.engines) as usize,
                    None => self.unkeyed_next(),
                }
            }
            Router::Session => match value(headers, &self.header) {
                Some(key) => self.bind(key, value(headers, &self.parent_header)),
                None => self.unkeyed_next(),
            },
            Router::RoundRobin => self.next(),
            Router::LeastLoaded => engines
                .iter()
                .enumerate()
                .min_by_key(|(index, engine)| (engine.metrics.load(), *index))
                .map_or(0, |(index, _)| index),
        }
    }

    /// The next engine in turn.
    fn next(&self) -> usize {
        (self.round_robin.fetch_add(1, Relaxed) % self.engines) as usize
    }

    fn unkeyed_next(&self) -> usize {
        self.unkeyed.fetch_add(1, Relaxed);
        self.next()
    }

    /// The engine of session `key`, bound on its first request: to its parent's engine when the
    /// parent is bound, else by the hash of the key.
    fn bind(&self, key: &str, parent: Option<&str>) -> usize {
        let mut bindings = self
            .bindings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&engine) = bindings.get(key) {
            return engine;
        }
        let engine = parent
            .and_then(|parent| bindings.get(parent).copied())
            .unwrap_or((hash_str(key) % self.engines) as usize);
        bindings.insert(key.to_owned(), engine);
        engine
    }
}

/// The non-empty value of header `name`.
fn value<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
}
