//! Which session and stream a captured request belongs to, and its stream's parent: from the
//! agents' own session headers (the routing profiles' header table, `agentx_protocol::routing`),
//! else from the prompt's structure (a request that extends a known stream's last prompt continues
//! it; anything else starts a session of its own).

use std::collections::HashMap;

use agentx_protocol::routing::{Carries, HEADER_TABLE};
use hyper::HeaderMap;

/// A request's place in the captured sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The session (tree) the request belongs to.
    pub root: String,
    /// Its stream (the root's own stream is named like the root).
    pub stream: String,
    /// The stream's parent stream, for a subagent's.
    pub parent: Option<String>,
    /// How it was known: `header:<profile>` or `structure`.
    pub source: String,
}

/// The ids one profile's headers carry on a request.
fn from_headers(headers: &HeaderMap) -> Option<Identity> {
    let mut profiles: Vec<&str> = Vec::new();
    for row in HEADER_TABLE {
        if !profiles.contains(&row.profile) {
            profiles.push(row.profile);
        }
    }
    for profile in profiles {
        let mut root = None;
        let mut stream = None;
        let mut parent = None;
        for row in HEADER_TABLE.iter().filter(|row| row.profile == profile) {
            let Some(value) = headers
                .get(row.name)
                .and_then(|value| value.to_str().ok())
                .filter(|value| !value.is_empty())
            else {
                continue;
            };
            match row.carries {
                Carries::Root => root = Some(value.to_string()),
                Carries::Stream => stream = Some(value.to_string()),
                Carries::Parent => parent = Some(value.to_string()),
                Carries::Literal(_) => {}
            }
        }
        if root.is_none() && stream.is_none() {
            continue;
        }
        // A child's stream header under a root header: its parent is the root unless named.
        let stream_name = stream.clone().or_else(|| root.clone())?;
        if parent.is_none() {
            if let Some(root) = root.as_ref().filter(|root| **root != stream_name) {
                parent = Some(root.clone());
            }
        }
        return Some(Identity {
            root: root.unwrap_or_else(|| stream_name.clone()),
            stream: stream_name,
            parent,
            source: format!("header:{profile}"),
        });
    }
    None
}

/// The streams seen so far: each stream's root and parent, and its last prompt's blocks.
#[derive(Debug, Default)]
pub struct Sessions {
    streams: HashMap<String, Known>,
    fresh: u64,
}

#[derive(Debug)]
struct Known {
    root: String,
    last_blocks: Vec<u64>,
}

impl Sessions {
    /// The identity of a request with `headers` whose prompt is `blocks`; remembers its blocks.
    pub fn identify(&mut self, headers: &HeaderMap, blocks: &[u64]) -> Identity {
        let identity = match from_headers(headers) {
            Some(mut identity) => {
                // A parent seen before gives its root to a child that names only its parent
                // (Dynamo's headers carry no root).
                if let Some(known) = identity.parent.as_ref().and_then(|p| self.streams.get(p)) {
                    if identity.root == identity.stream {
                        identity.root = known.root.clone();
                    }
                }
                identity
            }
            None => self.by_structure(blocks),
        };
        let known = self
            .streams
            .entry(identity.stream.clone())
            .or_insert_with(|| Known {
                root: identity.root.clone(),
                last_blocks: Vec::new(),
            });
        known.last_blocks = blocks.to_vec();
        identity
    }

    /// The stream whose last prompt this one extends most (at least half of it, and a block), or
    /// a new session.
    fn by_structure(&mut self, blocks: &[u64]) -> Identity {
        let best = self
            .streams
            .iter()
            .map(|(name, known)| {
                let shared = known
                    .last_blocks
                    .iter()
                    .zip(blocks)
                    .take_while(|(a, b)| a == b)
                    .count();
                (shared, known.last_blocks.len(), name)
            })
            .filter(|&(shared, last, _)| shared >= 1 && shared * 2 >= last)
            .max_by(|a, b| (a.0, b.2).cmp(&(b.0, a.2)));
        if let Some((_, _, name)) = best {
            let root = self.streams[name].root.clone();
            return Identity {
                root,
                stream: name.clone(),
                parent: None,
                source: "structure".into(),
            };
        }
        self.fresh += 1;
        let name = format!("session-{}", self.fresh);
        Identity {
            root: name.clone(),
            stream: name,
            parent: None,
            source: "structure".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn claude_codes_headers_name_the_root_the_agent_and_a_nested_agents_parent() {
        let mut sessions = Sessions::default();
        let root = sessions.identify(&headers(&[("x-claude-code-session-id", "S")]), &[1]);
        assert_eq!((root.root.as_str(), root.stream.as_str()), ("S", "S"));
        assert_eq!(root.parent, None);
        let child = sessions.identify(
            &headers(&[
                ("x-claude-code-session-id", "S"),
                ("x-claude-code-agent-id", "A"),
            ]),
            &[7],
        );
        assert_eq!(child.parent.as_deref(), Some("S"));
        let nested = sessions.identify(
            &headers(&[
                ("x-claude-code-session-id", "S"),
                ("x-claude-code-agent-id", "B"),
                ("x-claude-code-parent-agent-id", "A"),
            ]),
            &[9],
        );
        assert_eq!(nested.parent.as_deref(), Some("A"));
        assert_eq!(nested.root, "S");
        assert_eq!(nested.source, "header:claude-code");
    }

    #[test]
    fn dynamos_child_takes_its_root_from_its_parent() {
        let mut sessions = Sessions::default();
        sessions.identify(&headers(&[("x-dynamo-session-id", "P")]), &[1]);
        let child = sessions.identify(
            &headers(&[
                ("x-dynamo-session-id", "C"),
                ("x-dynamo-parent-session-id", "P"),
            ]),
            &[2],
        );
        assert_eq!(child.root, "P");
        assert_eq!(child.parent.as_deref(), Some("P"));
    }

    #[test]
    fn without_headers_a_prompt_that_extends_a_stream_continues_it() {
        let mut sessions = Sessions::default();
        let none = HeaderMap::new();
        let first = sessions.identify(&none, &[1, 2, 3]);
        let second = sessions.identify(&none, &[1, 2, 3, 4, 5]);
        assert_eq!(first.stream, second.stream);
        let other = sessions.identify(&none, &[8, 9]);
        assert_ne!(other.root, first.root);
        assert_eq!(other.source, "structure");
    }
}
