//! What a request carries for routers and how connections map to sessions: the session headers
//! built from a stream's correlation id (aiperf's `AIPERF_HTTP_*_FROM_CORRELATION_ID` switches), the
//! name of the correlation header itself (`--session-header`), and the connection reuse strategy
//! (`--connection-reuse-strategy`).
//!
//! The values are mechanism: the client writes them; the caller (the CLI) decides which are on.

use std::str::FromStr;

use hyper::header::{HeaderName, HeaderValue};
use hyper::http::request::Builder;

/// The headers built from a stream's correlation id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingHeaders {
    /// The header carrying the stream's own correlation id (`X-Correlation-ID`, renamed by
    /// `--session-header`).
    pub correlation: HeaderName,
    /// `X-Session-Affinity: <corr>` (on by default, as in aiperf).
    pub session_affinity: bool,
    /// `X-Session-ID: <corr>`.
    pub session_id: bool,
    /// `X-SMG-Routing-Key: <corr>` (SGLang model gateway).
    pub(crate) smg_routing_key: bool,
    /// `X-Dynamo-Session-ID: <corr>`, plus `X-Dynamo-Parent-Session-ID: <parent corr>` on child
    /// streams.
    pub dynamo_session_id: bool,
}

impl Default for RoutingHeaders {
    fn default() -> Self {
        RoutingHeaders {
            correlation: HeaderName::from_static("x-correlation-id"),
            session_affinity: true,
            session_id: false,
            smg_routing_key: false,
            dynamo_session_id: false,
        }
    }
}

/// The environment switches of [`RoutingHeaders`], by their name after the `AGENTX_HTTP_` /
/// `AIPERF_HTTP_` prefix, with their defaults.
pub const SWITCHES: [(&str, bool); 4] = [
    ("X_SESSION_AFFINITY_FROM_CORRELATION_ID", true),
    ("X_SESSION_ID_FROM_CORRELATION_ID", false),
    ("X_SMG_ROUTING_KEY_FROM_CORRELATION_ID", false),
    ("X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID", false),
];

impl RoutingHeaders {
    /// Sets the switch named like an entry of [`SWITCHES`]; false for an unknown name.
    pub fn set(&mut self, switch: &str, on: bool) -> bool {
        match switch {
            "X_SESSION_AFFINITY_FROM_CORRELATION_ID" => self.session_affinity = on,
            "X_SESSION_ID_FROM_CORRELATION_ID" => self.session_id = on,
            "X_SMG_ROUTING_KEY_FROM_CORRELATION_ID" => self.smg_routing_key = on,
            "X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID" => self.dynamo_session_id = on,
            _ => return false,
        }
        true
    }

    /// The header names sent besides the correlation header, for logs and the manifest.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.session_affinity {
            names.push("X-Session-Affinity");
        }
        if self.session_id {
            names.push("X-Session-ID");
        }
        if self.smg_routing_key {
            names.push("X-SMG-Routing-Key");
        }
        if self.dynamo_session_id {
            names.push("X-Dynamo-Session-ID");
        }
        names
    }

    /// Writes the correlation header and the switched-on session headers onto `req`. They are
    /// written last, so each replaces any header of the same name (names are case-insensitive).
    pub fn apply(&self, mut req: Builder, corr: &str, parent: Option<&str>) -> Builder {
        let Ok(value) = HeaderValue::from_str(corr) else {
            return req;
        };
        if let Some(headers) = req.headers_mut() {
            headers.insert(self.correlation.clone(), value.clone());
            if self.session_affinity {
                headers.insert(HeaderName::from_static("x-session-affinity"), value.clone());
            }
            if self.session_id {
                headers.insert(HeaderName::from_static("x-session-id"), value.clone());
            }
            if self.smg_routing_key {
                headers.insert(HeaderName::from_static("x-smg-routing-key"), value.clone());
            }
            if self.dynamo_session_id {
                headers.insert(HeaderName::from_static("x-dynamo-session-id"), value);
                if let Some(parent_value) =
                    parent.and_then(|parent_value| HeaderValue::from_str(parent_value).ok())
                {
                    headers.insert(
                        HeaderName::from_static("x-dynamo-parent-session-id"),
                        parent_value,
                    );
                }
            }
        }
        req
    }
}

/// Which connection a request goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionReuse {
    /// Any idle connection of the shared pool (aiperf's default).
    #[default]
    Pooled,
    /// A new connection for every request, closed after its response.
    Never,
    /// One connection per session (correlation id), kept for its turns and released on its final
    /// turn, an error or a cancellation.
    Sticky,
}

impl ConnectionReuse {
    /// The value's spelling on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionReuse::Pooled => "pooled",
            ConnectionReuse::Never => "never",
            ConnectionReuse::Sticky => "sticky-user-sessions",
        }
    }
}

impl FromStr for ConnectionReuse {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "pooled" => Ok(ConnectionReuse::Pooled),
            "never" => Ok(ConnectionReuse::Never),
            "sticky-user-sessions" | "sticky" => Ok(ConnectionReuse::Sticky),
            _ => Err(format!(
                "{s:?} is not a connection reuse strategy; use pooled, never or sticky-user-sessions"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_the_switches_and_replace_case_variants() {
        let mut r = RoutingHeaders::default();
        assert!(r.set("X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID", true));
        assert!(!r.set("X_NOPE", true));
        let req = hyper::Request::post("http://x/")
            .header("X-Session-Affinity", "stale")
            .header("x-correlation-id", "stale");
        let req = r.apply(req, "c1", Some("p0")).body(()).unwrap();
        let h = req.headers();
        assert_eq!(h.get_all("x-session-affinity").iter().count(), 1);
        assert_eq!(h["x-session-affinity"], "c1");
        assert_eq!(h["x-correlation-id"], "c1");
        assert_eq!(h["x-dynamo-session-id"], "c1");
        assert_eq!(h["x-dynamo-parent-session-id"], "p0");
        assert!(h.get("x-session-id").is_none());
        assert!(h.get("x-smg-routing-key").is_none());
        assert_eq!(r.names(), vec!["X-Session-Affinity", "X-Dynamo-Session-ID"]);
    }

    #[test]
    fn renamed_correlation_header_and_no_parent_on_roots() {
        let r = RoutingHeaders {
            correlation: HeaderName::from_static("x-my-session"),
            session_affinity: false,
            ..RoutingHeaders::default()
        };
        let req = r
            .apply(hyper::Request::post("http://x/"), "c1", None)
            .body(())
            .unwrap();
        assert_eq!(req.headers()["x-my-session"], "c1");
        assert!(req.headers().get("x-correlation-id").is_none());
        assert!(req.headers().get("x-session-affinity").is_none());
    }

    #[test]
    fn reuse_strategies_parse() {
        assert_eq!("pooled".parse(), Ok(ConnectionReuse::Pooled));
        assert_eq!("never".parse(), Ok(ConnectionReuse::Never));
        assert_eq!("sticky_user_sessions".parse(), Ok(ConnectionReuse::Sticky));
        assert!("always".parse::<ConnectionReuse>().is_err());
    }
}
