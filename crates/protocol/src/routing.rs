//! What a request carries for routers and how connections map to sessions: the session headers
//! built from a stream's correlation id (aiperf's `AIPERF_HTTP_*_FROM_CORRELATION_ID` switches), the
//! routing-header profiles of the routers and agents that key on headers ([`Profile`],
//! `--routing-headers`, every header they send in one table, [`HEADER_TABLE`]), the name of the
//! correlation header itself (`--session-header`), and the connection reuse strategy
//! (`--connection-reuse-strategy`).
//!
//! The values are mechanism: the client writes them; the caller (the CLI) decides which are on.

use std::str::FromStr;

use hyper::header::{HeaderName, HeaderValue};
use hyper::http::request::Builder;

use crate::RequestIds;

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
    /// `--routing-headers`: a profile's headers in place of the switches above (which are then
    /// off).
    pub profile: Option<Profile>,
}

impl Default for RoutingHeaders {
    fn default() -> Self {
        RoutingHeaders {
            correlation: HeaderName::from_static("x-correlation-id"),
            session_affinity: true,
            session_id: false,
            smg_routing_key: false,
            dynamo_session_id: false,
            profile: None,
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
    pub fn set(&mut self, switch: &str, enabled: bool) -> bool {
        match switch {
            "X_SESSION_AFFINITY_FROM_CORRELATION_ID" => self.session_affinity = enabled,
            "X_SESSION_ID_FROM_CORRELATION_ID" => self.session_id = enabled,
            "X_SMG_ROUTING_KEY_FROM_CORRELATION_ID" => self.smg_routing_key = enabled,
            "X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID" => self.dynamo_session_id = enabled,
            _ => return false,
        }
        true
    }

    /// [`RoutingHeaders::names`], with a custom profile's header: every name that may be sent
    /// besides the correlation header, for the manifest and the summary.
    pub fn sent_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.names().iter().map(|name| (*name).to_owned()).collect();
        if let Some(Profile::Custom(name)) = &self.profile {
            names.push(name.as_str().to_owned());
        }
        names
    }

    /// The header names sent besides the correlation header, for logs and the manifest.
    pub fn names(&self) -> Vec<&'static str> {
        if let Some(profile) = &self.profile {
            return profile.names();
        }
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

    /// Writes the correlation header and the session headers (the profile's, or the switched-on
    /// ones) onto `req`. They are written last, so each replaces any header of the same name
    /// (names are case-insensitive).
    pub fn apply(&self, mut req: Builder, ids: &RequestIds<'_>) -> Builder {
        let (corr, parent) = (ids.correlation_id, ids.parent_correlation_id);
        let Ok(value) = HeaderValue::from_str(corr) else {
            return req;
        };
        if let Some(profile) = &self.profile {
            if let Some(headers) = req.headers_mut() {
                headers.insert(self.correlation.clone(), value);
                for (name, header_value) in profile.headers(ids) {
                    headers.insert(name, header_value);
                }
            }
            return req;
        }
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

/// A router's or an agent's routing headers, as `--routing-headers` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Profile {
    /// Dynamo's session headers: the stream's session, its parent's, and the final-turn marker.
    Dynamo,
    /// The SGLang model gateway's sticky-session key.
    Smg,
    /// `X-Session-ID` (vLLM's router, llm-d, OpenCode through Dynamo).
    SessionId,
    /// What Claude Code sends: the root's session id everywhere, the subagent's agent id.
    ClaudeCode,
    /// What Codex sends: the root's session, the stream's thread, the parent thread.
    Codex,
    /// One header of the user's naming, carrying the stream's correlation id.
    Custom(HeaderName),
    /// No session header beside the correlation header.
    None,
}

/// The profile names `--routing-headers` takes (with `custom:NAME`).
pub const PROFILE_NAMES: [&str; 6] = [
    "dynamo",
    "smg",
    "session-id",
    "claude-code",
    "codex",
    "none",
];

/// Which of a request's ids a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    /// The stream's own correlation id.
    Stream,
    /// The parent stream's correlation id (child streams only).
    Parent,
    /// The correlation id of the tree's root stream (a single stream is its own root).
    Root,
    /// A fixed value.
    Literal(&'static str),
}

/// On which requests a header is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentOn {
    /// Every request.
    Every,
    /// Requests of child streams (subagents).
    Child,
    /// Requests of child streams whose parent is itself a child (nested subagents).
    NestedChild,
    /// Each stream's final turn.
    Last,
}

/// One header a profile sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRow {
    /// The profile (`--routing-headers` name).
    pub profile: &'static str,
    /// The header's name, as its owner spells it.
    pub name: &'static str,
    /// What it carries.
    pub carries: Carries,
    /// When it is sent.
    pub sent_on: SentOn,
}

const fn row(
    profile: &'static str,
    name: &'static str,
    carries: Carries,
    sent_on: SentOn,
) -> HeaderRow {
    HeaderRow {
        profile,
        name,
        carries,
        sent_on,
    }
}

/// Every header a profile sends; the one home of these names (docs/guide/replay.md, "Routing-header
/// profiles", has the sources). Dynamo: `lib/llm/src/protocols/agents.rs` and its session-ids page
/// (session, parent, final); Claude Code and Codex: the native headers Dynamo's router reads for
/// them; SMG: the gateway's manual policy key.
pub const HEADER_TABLE: &[HeaderRow] = &[
    row(
        "dynamo",
        "X-Dynamo-Session-ID",
        Carries::Stream,
        SentOn::Every,
    ),
    row(
        "dynamo",
        "X-Dynamo-Parent-Session-ID",
        Carries::Parent,
        SentOn::Child,
    ),
    row(
        "dynamo",
        "X-Dynamo-Session-Final",
        Carries::Literal("true"),
        SentOn::Last,
    ),
    row("smg", "X-SMG-Routing-Key", Carries::Stream, SentOn::Every),
    row("session-id", "X-Session-ID", Carries::Stream, SentOn::Every),
    row(
        "claude-code",
        "x-claude-code-session-id",
        Carries::Root,
        SentOn::Every,
    ),
    row(
        "claude-code",
        "x-claude-code-agent-id",
        Carries::Stream,
        SentOn::Child,
    ),
    row(
        "claude-code",
        "x-claude-code-parent-agent-id",
        Carries::Parent,
        SentOn::NestedChild,
    ),
    row("codex", "session-id", Carries::Root, SentOn::Every),
    row("codex", "thread-id", Carries::Stream, SentOn::Every),
    row(
        "codex",
        "x-codex-parent-thread-id",
        Carries::Parent,
        SentOn::Child,
    ),
    row(
        "codex",
        "x-openai-subagent",
        Carries::Literal("collab_spawn"),
        SentOn::Child,
    ),
];

/// Headers `custom:NAME` may not name: they carry the request itself.
const NOT_ROUTING: [&str; 6] = [
    "host",
    "authorization",
    "x-api-key",
    "x-request-id",
    "traceparent",
    "transfer-encoding",
];

impl std::str::FromStr for Profile {
    type Err = String;

    fn from_str(text: &str) -> Result<Profile, String> {
        let expected = || {
            format!(
                "`{text}` is not a routing-header profile; use one of {}, or custom:NAME",
                PROFILE_NAMES.join(", ")
            )
        };
        if let Some(name) = text.strip_prefix("custom:") {
            let lower = name.trim().to_ascii_lowercase();
            if lower.starts_with("content-") || NOT_ROUTING.contains(&lower.as_str()) {
                return Err(format!(
                    "custom:{name}: {name} carries the request itself, not a routing key; name a header of your router's, e.g. custom:X-Route-Key"
                ));
            }
            return HeaderName::from_bytes(lower.as_bytes())
                .map(Profile::Custom)
                .map_err(|_| {
                    format!("custom:{name}: `{name}` is not a valid HTTP header name; e.g. custom:X-Route-Key")
                });
        }
        Ok(match text {
            "dynamo" => Profile::Dynamo,
            "smg" => Profile::Smg,
            "session-id" => Profile::SessionId,
            "claude-code" => Profile::ClaudeCode,
            "codex" => Profile::Codex,
            "none" => Profile::None,
            _ => return Err(expected()),
        })
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Profile::Custom(name) => write!(f, "custom:{name}"),
            other => f.write_str(other.table_name()),
        }
    }
}

impl Profile {
    /// The profile's name in [`HEADER_TABLE`] (`custom` for a custom header).
    fn table_name(&self) -> &'static str {
        match self {
            Profile::Dynamo => "dynamo",
            Profile::Smg => "smg",
            Profile::SessionId => "session-id",
            Profile::ClaudeCode => "claude-code",
            Profile::Codex => "codex",
            Profile::Custom(_) => "custom",
            Profile::None => "none",
        }
    }

    /// The profile's rows of [`HEADER_TABLE`].
    pub fn rows(&self) -> impl Iterator<Item = &'static HeaderRow> {
        let name = self.table_name();
        HEADER_TABLE.iter().filter(move |row| row.profile == name)
    }

    /// Every header name the profile can send.
    pub fn names(&self) -> Vec<&'static str> {
        match self {
            // A custom name is the user's; the manifest's profile names it.
            Profile::Custom(_) => Vec::new(),
            profile => profile.rows().map(|row| row.name).collect(),
        }
    }

    /// The headers of one request.
    pub fn headers(&self, ids: &RequestIds<'_>) -> Vec<(HeaderName, HeaderValue)> {
        if let Profile::Custom(name) = self {
            return HeaderValue::from_str(ids.correlation_id)
                .map(|value| vec![(name.clone(), value)])
                .unwrap_or_default();
        }
        let root = ids.root();
        let parent = ids.parent_correlation_id;
        let nested = parent.is_some_and(|parent_id| parent_id != root);
        self.rows()
            .filter(|row| match row.sent_on {
                SentOn::Every => true,
                SentOn::Child => parent.is_some(),
                SentOn::NestedChild => nested,
                SentOn::Last => ids.last,
            })
            .filter_map(|row| {
                let value = match row.carries {
                    Carries::Stream => ids.correlation_id,
                    Carries::Parent => parent?,
                    Carries::Root => root,
                    Carries::Literal(text) => text,
                };
                Some((
                    HeaderName::from_bytes(row.name.to_ascii_lowercase().as_bytes()).ok()?,
                    HeaderValue::from_str(value).ok()?,
                ))
            })
            .collect()
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
        let ids = RequestIds {
            request_id: "r1",
            correlation_id: "c1",
            parent_correlation_id: Some("p0"),
            root_correlation_id: Some("p0"),
            last: false,
            on_first_token: None,
        };
        let req = r.apply(req, &ids).body(()).unwrap();
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
            .apply(hyper::Request::post("http://x/"), &ids("c1", None, false))
            .body(())
            .unwrap();
        assert_eq!(req.headers()["x-my-session"], "c1");
        assert!(req.headers().get("x-correlation-id").is_none());
        assert!(req.headers().get("x-session-affinity").is_none());
    }

    /// The ids of a request of stream `corr` under `parent` (root `r0`).
    fn ids(corr: &'static str, parent: Option<&'static str>, last: bool) -> RequestIds<'static> {
        RequestIds {
            request_id: "req",
            correlation_id: corr,
            parent_correlation_id: parent,
            root_correlation_id: Some(if parent.is_some() { "r0" } else { corr }),
            last,
            on_first_token: None,
        }
    }

    /// The headers `profile` writes on a request with `ids`, by name, besides the correlation.
    fn sent(profile: &str, ids: &RequestIds<'_>) -> Vec<(String, String)> {
        let routing = RoutingHeaders {
            profile: Some(profile.parse().unwrap()),
            ..RoutingHeaders::default()
        };
        let req = routing
            .apply(hyper::Request::post("http://x/"), ids)
            .body(())
            .unwrap();
        let mut headers: Vec<(String, String)> = req
            .headers()
            .iter()
            .filter(|(name, _)| *name != "x-correlation-id")
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_string()))
            .collect();
        headers.sort();
        headers
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = expected
            .iter()
            .map(|(name, value)| ((*name).to_string(), (*value).to_string()))
            .collect();
        pairs.sort();
        pairs
    }

    #[test]
    fn each_profile_sends_its_headers_on_a_subagents_first_turn_and_a_roots_last() {
        // A nested subagent's first turn: stream c2 under c1, in the tree of r0.
        let child = ids("c2", Some("c1"), false);
        // The root's final turn.
        let root_last = ids("r0", None, true);
        /// A profile, the headers of the child's request, those of the root's last.
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)]);
        let cases: [Case; 6] = [
            (
                "dynamo",
                &[
                    ("x-dynamo-session-id", "c2"),
                    ("x-dynamo-parent-session-id", "c1"),
                ],
                &[
                    ("x-dynamo-session-id", "r0"),
                    ("x-dynamo-session-final", "true"),
                ],
            ),
            (
                "smg",
                &[("x-smg-routing-key", "c2")],
                &[("x-smg-routing-key", "r0")],
            ),
            (
                "session-id",
                &[("x-session-id", "c2")],
                &[("x-session-id", "r0")],
            ),
            (
                "claude-code",
                &[
                    ("x-claude-code-session-id", "r0"),
                    ("x-claude-code-agent-id", "c2"),
                    ("x-claude-code-parent-agent-id", "c1"),
                ],
                &[("x-claude-code-session-id", "r0")],
            ),
            (
                "codex",
                &[
                    ("session-id", "r0"),
                    ("thread-id", "c2"),
                    ("x-codex-parent-thread-id", "c1"),
                    ("x-openai-subagent", "collab_spawn"),
                ],
                &[("session-id", "r0"), ("thread-id", "r0")],
            ),
            ("none", &[], &[]),
        ];
        for (profile, on_child, on_root_last) in cases {
            assert_eq!(sent(profile, &child), pairs(on_child), "{profile}, child");
            assert_eq!(
                sent(profile, &root_last),
                pairs(on_root_last),
                "{profile}, root's last"
            );
        }
        // A first-level subagent (its parent is the root) carries no parent agent id.
        let first_level = ids("c1", Some("r0"), false);
        assert_eq!(
            sent("claude-code", &first_level),
            pairs(&[
                ("x-claude-code-session-id", "r0"),
                ("x-claude-code-agent-id", "c1")
            ])
        );
        assert_eq!(
            sent("custom:X-Route-Key", &child),
            pairs(&[("x-route-key", "c2")])
        );
    }

    #[test]
    fn a_profile_replaces_the_switches_and_bad_names_are_refused_with_the_choices() {
        let routing = RoutingHeaders {
            profile: Some(Profile::Dynamo),
            ..RoutingHeaders::default()
        };
        // The default X-Session-Affinity switch is on, but the profile decides.
        assert_eq!(
            routing.names(),
            vec![
                "X-Dynamo-Session-ID",
                "X-Dynamo-Parent-Session-ID",
                "X-Dynamo-Session-Final"
            ]
        );
        let error = "bogus".parse::<Profile>().unwrap_err();
        assert!(
            error.contains("dynamo, smg, session-id, claude-code, codex, none")
                && error.contains("custom:NAME"),
            "{error}"
        );
        assert!("custom:Bad Name"
            .parse::<Profile>()
            .unwrap_err()
            .contains("not a valid HTTP header name"));
        assert!("custom:Content-Length"
            .parse::<Profile>()
            .unwrap_err()
            .contains("carries the request itself"));
        assert!("custom:authorization".parse::<Profile>().is_err());
        for name in PROFILE_NAMES {
            assert_eq!(name.parse::<Profile>().unwrap().to_string(), name);
        }
        assert_eq!(
            "custom:X-Route-Key".parse::<Profile>().unwrap().to_string(),
            "custom:x-route-key"
        );
    }

    #[test]
    fn the_names_sent_include_a_custom_profiles_header() {
        let routing = RoutingHeaders {
            profile: Some("custom:X-My-Session".parse().unwrap()),
            ..RoutingHeaders::default()
        };
        assert_eq!(routing.sent_names(), ["x-my-session"]);
        let dynamo = RoutingHeaders {
            profile: Some("dynamo".parse().unwrap()),
            ..RoutingHeaders::default()
        };
        assert_eq!(dynamo.sent_names(), dynamo.names());
    }

    #[test]
    fn reuse_strategies_parse() {
        assert_eq!("pooled".parse(), Ok(ConnectionReuse::Pooled));
        assert_eq!("never".parse(), Ok(ConnectionReuse::Never));
        assert_eq!("sticky_user_sessions".parse(), Ok(ConnectionReuse::Sticky));
        assert!("always".parse::<ConnectionReuse>().is_err());
    }
}
