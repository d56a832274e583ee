//! The rendezvous of a sharded run: shard 0 listens, every shard (shard 0 too, over loopback)
//! connects, and one JSON line per message keeps the phases global.
//!
//! 1. `hello`, the first line of every connection: the proof that the peer shares the run's secret
//!    ([`RendezvousAuth`]) and what pins its plan (scenario sha256, dataset key, seed, run id,
//!    concurrency, resolved settings, threshold). A peer whose first line is not a hello with the
//!    right proof within [`HELLO_TIMEOUT`] is refused, logged and forgotten: it is no shard, so it
//!    cannot stop, delay or join the run (each connection's hello is awaited in a task of its own).
//!    The coordinator compares every admitted hello with shard 0's and refuses the run, naming what
//!    differs, when one disagrees; a shard index out of range, twice, or a different shard count is
//!    refused too.
//! 2. `ping`/`pong`: each shard measures its wall-clock offset from the coordinator (the sample with
//!    the shortest round trip), kept in its manifest so a merge puts all records on one timeline.
//! 3. `welcome` (run id and seed: shard 0's, so a drawn seed is drawn once), `ready` when a shard
//!    has planned, `go` when all have, naming an instant [`GO_LEAD`] ahead on the coordinator's
//!    clock: every shard starts its warmup at that instant on its own clock (through its measured
//!    offset), so the session-tree primers of all shards sit on one t* timeline.
//! 4. `warmup` from each shard; `profile` when every warmup returned, else `stop` to all. After a
//!    session-tree warmup's cache-pressure stage each shard's `warmup` carries the smallest offset
//!    of its resumed turns and `profile` the smallest of all: profiling's T0 over all shards.
//! 5. During profiling each shard's `tally` feeds the failed-request threshold over all shards; a
//!    `stop` from one shard (interrupt) or the threshold goes to all.
//! 6. `drained` when a shard's replay returned (its last profiling request returned or was
//!    cancelled); `done` when it wrote its files; `bye` to all when every shard is done (or lost).
//!    A shard whose connection drops before `done` stops the others.
//!
//! The server-metrics boundary scrapes of the global phase edges are shard 0's (its scraper is the
//! only one): the coordinator takes the `profiling_start` scrape when every warmup returned and
//! before it sends `profile`, and the `profiling_complete` scrape when every shard drained (or was
//! lost); shard 0 stops scraping only after it ([`Coordinator::profiling_complete`]).
//!
//! Shard 0 listens on the coordinator's own address (`--coordinator`'s host), or on
//! `--coordinator-bind`; after every shard joined it stops listening.
//!
//! No request goes through here: each shard owns its lanes outright.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

use super::shard::RendezvousAuth;
use crate::replay::{ShardLink, StopReason, Tally};

mod coordinator;
mod member;

pub use coordinator::*;
pub use member::*;

/// The coordinator's port unless `--coordinator-port` / `AGENTX_COORDINATOR_PORT` says otherwise.
pub const DEFAULT_PORT: u16 = 29517;

/// How far ahead of the `go` the warmup's common start lies (the `go` must reach every shard first).
pub const GO_LEAD: Duration = Duration::from_millis(100);

/// How long a new connection may take to say its hello (at most the rendezvous timeout).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest first line the coordinator reads from a connection it has not admitted.
const MAX_HELLO_BYTES: u64 = 1 << 20;

/// What pins a shard's plan; every shard's must agree with shard 0's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    /// The shard's index, from 0.
    pub index: u32,
    /// Shards in the run.
    pub count: u32,
    /// `--run-id` (or one derived from the scheduler's job id); `None`: shard 0 mints one.
    pub run_id: Option<String>,
    /// The run's seed.
    pub seed: u64,
    /// The seed was drawn, not given: shard 0's is used by all.
    pub seed_drawn: bool,
    /// The scenario component's sha256.
    pub scenario_sha256: String,
    /// The dataset's cache key.
    pub dataset_key: String,
    /// Lanes over all shards.
    pub concurrency: u32,
    /// The scenario's resolved settings (name and value), the seed excepted.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// `--failed-request-threshold`, which every shard must apply alike.
    pub failed_request_threshold: Option<f64>,
    /// The shard's host name.
    pub host: String,
}

impl Hello {
    /// What differs between this hello and the reference (shard 0's), one item per field.
    pub fn differences(&self, reference: &Hello) -> Vec<String> {
        let mut out = Vec::new();
        let mut differ = |what: &str, mine: String, theirs: String| {
            if mine != theirs {
                out.push(format!("{what}{mine} (shard 0 has {theirs})"));
            }
        };
        differ(
            "shard count ",
            self.count.to_string(),
            reference.count.to_string(),
        );
        differ(
            "scenario sha256:",
            self.scenario_sha256.clone(),
            reference.scenario_sha256.clone(),
        );
        differ(
            "dataset digest ",
            self.dataset_key.clone(),
            reference.dataset_key.clone(),
        );
        differ(
            "run id ",
            format!("{:?}", self.run_id),
            format!("{:?}", reference.run_id),
        );
        differ(
            "--concurrency ",
            self.concurrency.to_string(),
            reference.concurrency.to_string(),
        );
        differ(
            "--failed-request-threshold ",
            format!("{:?}", self.failed_request_threshold),
            format!("{:?}", reference.failed_request_threshold),
        );
        match (self.seed_drawn, reference.seed_drawn) {
            (false, false) if self.seed != reference.seed => out.push(format!(
                "--random-seed {} (shard 0 has {})",
                self.seed, reference.seed
            )),
            (false, true) => out.push(format!("--random-seed {} (shard 0 has none)", self.seed)),
            (true, false) => out.push(format!("no --random-seed (shard 0 has {})", reference.seed)),
            _ => {}
        }
        let names: std::collections::BTreeSet<&String> = self
            .settings
            .keys()
            .chain(reference.settings.keys())
            .collect();
        for n in names {
            let (a, b) = (self.settings.get(n), reference.settings.get(n));
            if a != b {
                let show = |v: Option<&serde_json::Value>| {
                    v.map_or("unset".into(), std::string::ToString::to_string)
                };
                out.push(format!("--{n} {} (shard 0 has {})", show(a), show(b)));
            }
        }
        out
    }
}

/// One line of the protocol.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum Msg {
    Hello {
        hello: Box<Hello>,
        /// [`RendezvousAuth::proof`]; `None` when the shard has no secret.
        #[serde(default)]
        proof: Option<String>,
    },
    Ping {
        t1: u64,
    },
    Pong {
        t1: u64,
        t2: u64,
    },
    Welcome {
        run_id: String,
        seed: u64,
    },
    Refuse {
        message: String,
    },
    Ready,
    /// Every shard planned: warmup begins at `at_ns` on the coordinator's wall clock (each shard
    /// converts it through its measured offset), or at once when it is absent.
    Go {
        #[serde(default)]
        at_ns: Option<u64>,
    },
    Warmup {
        ok: bool,
        message: Option<String>,
        /// A session-tree shard after the cache-pressure stage: the smallest offset (ms) of its
        /// resumed turns, for profiling's T0 over all shards.
        #[serde(default)]
        t0_ms: Option<f64>,
    },
    /// Every warmup returned: profiling begins, with the smallest `t0_ms` the shards sent.
    Profile {
        #[serde(default)]
        t0_ms: Option<f64>,
    },
    Tally {
        requests: u64,
        failed: u64,
        overflows: u64,
        cancelled: u64,
    },
    Stop {
        reason: String,
        message: String,
    },
    /// This shard's replay returned: every profiling request of it returned or was cancelled.
    Drained,
    Done,
    Bye,
}

/// Why another shard stopped the run (an interrupt when its reason is not one this shard knows,
/// or the normal end, which is no reason to stop the others).
fn reason_of(reason: &str) -> StopReason {
    match StopReason::parse(reason) {
        Some(r @ (StopReason::ThresholdExceeded | StopReason::WarmupFailed)) => r,
        _ => StopReason::Interrupted,
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

async fn send(writer: &mut OwnedWriteHalf, message: &Msg) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line).await
}

/// Reads the next message; `Ok(None)` at the end of the stream.
async fn recv(reader: &mut BufReader<OwnedReadHalf>) -> anyhow::Result<Option<Msg>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let m = serde_json::from_str(line.trim_end())
        .map_err(|e| anyhow!("a rendezvous message is not one this host speaks ({e}): {line:?}"))?;
    Ok(Some(m))
}

/// Reads the first line of a connection not yet admitted, at most [`MAX_HELLO_BYTES`].
async fn recv_first(reader: &mut BufReader<OwnedReadHalf>) -> Result<Msg, String> {
    let mut line = Vec::new();
    let n = (&mut *reader)
        .take(MAX_HELLO_BYTES)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| format!("the connection failed ({e})"))?;
    if n == 0 {
        return Err("it closed without a hello".into());
    }
    if line.last() != Some(&b'\n') {
        return Err(format!(
            "its first line is not a rendezvous message (no line end within {} bytes)",
            line.len()
        ));
    }
    serde_json::from_slice(&line)
        .map_err(|_| "its first line is not a rendezvous message".to_string())
}

// ---------------------------------------------------------------- coordinator (shard 0)

/// The address shard 0 listens on: `bind` (`--coordinator-bind`) or else the host of
/// `coordinator` (`HOST:PORT`), resolved, with the rendezvous `port`. A name that does not resolve
/// yet (a Kubernetes pod's own DNS record appears shortly after it starts) is retried until
/// `timeout`.
pub async fn listen_addr(
    coordinator: &str,
    bind: Option<&str>,
    port: u16,
    timeout: Duration,
) -> anyhow::Result<SocketAddr> {
    let (host, what) = match bind {
        Some(b) => (b.to_string(), format!("--coordinator-bind {b}")),
        None => {
            let host = coordinator
                .rsplit_once(':')
                .map_or(coordinator, |(h, _)| h)
                .to_string();
            (host, format!("--coordinator {coordinator}"))
        }
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let err = match tokio::net::lookup_host((bare, port)).await {
            Ok(mut addrs) => match addrs.next() {
                Some(a) => {
                    if a.ip().is_loopback() && bind.is_none() && bare != "localhost" {
                        tracing::warn!(
                            "rendezvous: {bare} resolves to {} on this machine, so shards on other machines cannot reach shard 0; pass --coordinator-bind with this machine's address (0.0.0.0 for every interface) if they must",
                            a.ip()
                        );
                    }
                    return Ok(a);
                }
                None => "no address".to_string(),
            },
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "shard 0 cannot resolve {bare} ({what}) to listen on within {} s: {err}; pass --coordinator-bind ADDR with an address of this machine",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            index: 0,
            count: 2,
            run_id: None,
            seed: 7,
            seed_drawn: false,
            scenario_sha256: "aa".into(),
            dataset_key: "dd".into(),
            concurrency: 8,
            settings: [("cache-bust".to_string(), serde_json::json!("system_prefix"))].into(),
            failed_request_threshold: None,
            host: "h0".into(),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Shard 0 says why the run was refused even when another shard's disagreeing hello reached
    /// the coordinator before shard 0's own did (it used to wait for its own connection, which the
    /// ended coordinator never answered).
    #[test]
    fn shard_0_reports_a_refusal_that_came_before_its_own_hello() {
        rt().block_on(async {
            let auth = RendezvousAuth::token("t", "test");
            let local = SocketAddr::from(([127, 0, 0, 1], 0));
            let mut c = Coordinator::start(local, hello(), auth.clone(), Duration::from_secs(5))
                .await
                .unwrap();
            let mut other = hello();
            other.index = 1;
            other.seed = 43;
            let target = c.addr().to_string();
            let e = Member::join(&target, &other, &auth, Duration::from_secs(5))
                .await
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("--random-seed 43 (shard 0 has 7)"), "{e}");
            let e = c
                .join_own(&hello(), &auth, Duration::from_secs(5))
                .await
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("--random-seed 43 (shard 0 has 7)"), "{e}");
        });
    }

    /// A peer without the secret is refused and the rendezvous goes on for the shards that have it.
    #[test]
    fn only_peers_that_prove_the_secret_join() {
        rt().block_on(async {
            let auth = RendezvousAuth::token("t", "test");
            let local = SocketAddr::from(([127, 0, 0, 1], 0));
            let mut c = Coordinator::start(local, hello(), auth.clone(), Duration::from_secs(5))
                .await
                .unwrap();
            let target = c.addr().to_string();
            let mut one = hello();
            one.index = 1;
            for wrong in [RendezvousAuth::token("u", "test"), RendezvousAuth::none()] {
                let e = Member::join(&target, &one, &wrong, Duration::from_secs(5))
                    .await
                    .err()
                    .unwrap()
                    .to_string();
                assert!(e.contains("shard 0 refused shard 1"), "{e}");
            }
            let zero = hello();
            let (m0, m1) = tokio::join!(
                c.join_own(&zero, &auth, Duration::from_secs(5)),
                Member::join(&target, &one, &auth, Duration::from_secs(5)),
            );
            assert_eq!(m0.unwrap().seed, 7);
            assert_eq!(m1.unwrap().seed, 7);
        });
    }

    #[test]
    fn a_secret_is_proved_not_shown() {
        let a = RendezvousAuth::token("s3cret", "test");
        let p = a.proof().unwrap();
        assert!(!p.contains("s3cret") && p.len() == 64);
        assert!(a.admits(Some(&p)));
        assert!(!a.admits(Some(&p[..63])));
        assert!(!a.admits(None));
        assert!(!RendezvousAuth::token("other", "test").admits(Some(&p)));
        assert!(RendezvousAuth::none().admits(None));
        assert!(!RendezvousAuth::none().admits(Some(&p)));
        assert!(!format!("{a:?}").contains(&p));
    }

    #[test]
    fn differences_name_each_field_that_differs() {
        let r = hello();
        assert!(r.differences(&r).is_empty());
        let mut h = hello();
        h.index = 1;
        h.host = "h1".into();
        assert!(h.differences(&r).is_empty(), "index and host may differ");
        h.scenario_sha256 = "bb".into();
        h.dataset_key = "ee".into();
        h.seed_drawn = true;
        h.settings
            .insert("cache-bust".into(), serde_json::json!("none"));
        assert_eq!(
            h.differences(&r),
            vec![
                "scenario sha256:bb (shard 0 has aa)",
                "dataset digest ee (shard 0 has dd)",
                "no --random-seed (shard 0 has 7)",
                "--cache-bust \"none\" (shard 0 has \"system_prefix\")",
            ]
        );
    }
}
