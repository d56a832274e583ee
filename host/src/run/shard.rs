//! A sharded run's configuration as the run takes it: which shard this process is, where the
//! coordinator is (and where shard 0 listens), and the secret that admits a shard to the
//! rendezvous ([`RendezvousAuth`]: the proof a shard sends, compared in constant time). Where
//! each comes from (flags, Slurm, Kubernetes) is read by `cli::shard`.

use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// This process's part of a sharded run.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardConfig {
    /// This shard's index, from 0 (shard 0 coordinates).
    pub index: u32,
    /// Shards in the run.
    pub count: u32,
    /// `HOST:PORT` of shard 0's rendezvous.
    pub coordinator: String,
    /// The rendezvous port: shard 0 listens on it and the others dial it.
    pub port: u16,
    /// `--coordinator-bind` (or `AGENTX_COORDINATOR_BIND`): the host or address shard 0 listens
    /// on; `None`: the coordinator's own address (the host of [`ShardConfig::coordinator`]).
    pub bind: Option<String>,
    /// What a shard proves at the rendezvous to be admitted.
    pub auth: RendezvousAuth,
    /// How long joining (and getting ready) may take.
    pub timeout: Duration,
    /// Shard 0 merges every shard's directory into this one at the end (shared filesystem).
    pub merge_into: Option<PathBuf>,
    /// Where the index and count came from, for messages and the manifest.
    pub source: &'static str,
}

/// The secret the shards of one run share, which each shard proves in its hello; the coordinator
/// admits no connection without it. Debug and messages never show it.
#[derive(Clone)]
pub struct RendezvousAuth {
    /// `None`: the rendezvous is unauthenticated (nothing to derive a secret from).
    secret: Option<[u8; 32]>,
    /// Where the secret came from, for the log: `AGENTX_RENDEZVOUS_TOKEN`, `the Slurm job step`, ...
    pub source: &'static str,
}

/// Two are equal when their secrets are, wherever each came from.
impl PartialEq for RendezvousAuth {
    fn eq(&self, other: &Self) -> bool {
        self.secret == other.secret
    }
}

impl std::fmt::Debug for RendezvousAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendezvousAuth")
            .field("secret", &self.secret.map(|_| "<redacted>"))
            .field("source", &self.source)
            .finish()
    }
}

impl RendezvousAuth {
    /// No secret: any peer that speaks the protocol may join.
    pub fn none() -> RendezvousAuth {
        RendezvousAuth {
            secret: None,
            source: "none",
        }
    }

    /// A secret from `token` (e.g. what `AGENTX_RENDEZVOUS_TOKEN` holds).
    pub fn token(token: &str, source: &'static str) -> RendezvousAuth {
        let d = Sha256::digest(format!("agentx-rendezvous-v1\0{token}").as_bytes());
        RendezvousAuth {
            secret: Some(d.into()),
            source,
        }
    }

    /// Whether there is a secret to prove.
    pub fn is_authenticated(&self) -> bool {
        self.secret.is_some()
    }

    /// What a shard sends in its hello: a digest of the secret bound to this protocol, never the
    /// token itself.
    pub fn proof(&self) -> Option<String> {
        self.secret.map(|s| {
            hex::encode(Sha256::digest(
                [b"agentx-rendezvous-proof\0".as_slice(), &s].concat(),
            ))
        })
    }

    /// Whether `proof` (from a peer's hello) proves this secret, compared in constant time.
    pub fn admits(&self, proof: Option<&str>) -> bool {
        use subtle::ConstantTimeEq;
        match (self.proof(), proof) {
            (None, None) => true,
            (Some(mine), Some(theirs)) => {
                // Equal lengths through a digest, so the comparison's time says nothing.
                let a = Sha256::digest(mine.as_bytes());
                let b = Sha256::digest(theirs.as_bytes());
                bool::from(a.ct_eq(&b))
            }
            _ => false,
        }
    }
}
