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
//!    has planned, `go` when all have: every shard starts its warmup together.
//! 4. `warmup` from each shard; `profile` when every warmup returned, else `stop` to all.
//! 5. During profiling each shard's `tally` feeds the failed-request threshold over all shards; a
//!    `stop` from one shard (interrupt) or the threshold goes to all.
//! 6. `done` when a shard wrote its files; `bye` to all when every shard is done (or lost). A shard
//!    whose connection drops before `done` stops the others.
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

/// The coordinator's port unless `--coordinator-port` / `AGENTX_COORDINATOR_PORT` says otherwise.
pub const DEFAULT_PORT: u16 = 29517;

/// How long a new connection may take to say its hello (at most the rendezvous timeout).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest first line the coordinator reads from a connection it has not admitted.
const MAX_HELLO_BYTES: u64 = 1 << 20;

/// What pins a shard's plan; every shard's must agree with shard 0's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    pub index: u32,
    pub count: u32,
    /// `--run-id` (or one derived from the scheduler's job id); `None`: shard 0 mints one.
    pub run_id: Option<String>,
    pub seed: u64,
    /// The seed was drawn, not given: shard 0's is used by all.
    pub seed_drawn: bool,
    pub scenario_sha256: String,
    pub dataset_key: String,
    pub concurrency: u32,
    /// The scenario's resolved settings (name and value), the seed excepted.
    pub settings: BTreeMap<String, serde_json::Value>,
    pub failed_request_threshold: Option<f64>,
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
                let show =
                    |v: Option<&serde_json::Value>| v.map_or("unset".into(), |v| v.to_string());
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
    Go,
    Warmup {
        ok: bool,
        message: Option<String>,
    },
    Profile,
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
    Done,
    Bye,
}

fn reason_of(s: &str) -> StopReason {
    match s {
        "failed_request_threshold_exceeded" => StopReason::ThresholdExceeded,
        "warmup_failed" => StopReason::WarmupFailed,
        _ => StopReason::Interrupted,
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

async fn send(w: &mut OwnedWriteHalf, m: &Msg) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

/// Reads the next message; `Ok(None)` at the end of the stream.
async fn recv(r: &mut BufReader<OwnedReadHalf>) -> anyhow::Result<Option<Msg>> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let m = serde_json::from_str(line.trim_end())
        .map_err(|e| anyhow!("a rendezvous message is not one this host speaks ({e}): {line:?}"))?;
    Ok(Some(m))
}

/// Reads the first line of a connection not yet admitted, at most [`MAX_HELLO_BYTES`].
async fn recv_first(r: &mut BufReader<OwnedReadHalf>) -> Result<Msg, String> {
    let mut line = Vec::new();
    let n = (&mut *r)
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

/// What the coordinator saw, for shard 0's manifest.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CoordinatorReport {
    /// Shards whose connection dropped before they were done.
    pub lost: Vec<u32>,
    /// Every shard's wall-clock offset from the coordinator and host, as the shards reported them.
    pub shards: Vec<ShardSeen>,
}

/// One shard as the coordinator saw it.
#[derive(Debug, Clone, Serialize)]
pub struct ShardSeen {
    pub index: u32,
    pub host: String,
    pub peer: String,
}

/// Shard 0's listening coordinator.
pub struct Coordinator {
    task: tokio::task::JoinHandle<anyhow::Result<CoordinatorReport>>,
    /// Where it listens (the port resolved when 0 was asked for).
    addr: SocketAddr,
}

impl Coordinator {
    /// Binds `addr` and serves the rendezvous of `reference.count` shards in the background,
    /// admitting only connections whose hello proves `auth`; `timeout` bounds the wait for every
    /// shard's hello and ready.
    pub async fn start(
        addr: SocketAddr,
        reference: Hello,
        auth: RendezvousAuth,
        timeout: Duration,
    ) -> anyhow::Result<Coordinator> {
        let listener = TcpListener::bind(addr).await.with_context(|| {
            format!(
                "shard 0 cannot listen on {addr} for the rendezvous; free the port or choose another in --coordinator HOST:PORT, \
                 or pass --coordinator-bind with an address of this machine (0.0.0.0 for every interface)"
            )
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        if auth.is_authenticated() {
            tracing::info!(%addr, shards = reference.count, secret = auth.source, "rendezvous: listening; shards prove the run's secret");
        } else {
            tracing::warn!(
                %addr,
                shards = reference.count,
                "rendezvous: listening UNAUTHENTICATED (no AGENTX_RENDEZVOUS_TOKEN, Slurm job or Kubernetes Job to derive a secret from): any peer that reaches this port can join; set AGENTX_RENDEZVOUS_TOKEN on every shard"
            );
        }
        let task = tokio::spawn(serve(listener, reference, auth, timeout));
        Ok(Coordinator { task, addr })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Shard 0 joins its own rendezvous (at the address it listens on; loopback when that is every
    /// interface). If the coordinator ends first (it refused the run before shard 0's own hello
    /// arrived, say) that is the error: shard 0 says why as the others do.
    pub async fn join_own(
        &mut self,
        hello: &Hello,
        auth: &RendezvousAuth,
        timeout: Duration,
    ) -> anyhow::Result<Member> {
        let target = match self.addr.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::from(([127, 0, 0, 1], self.addr.port()))
            }
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, self.addr.port()))
            }
            _ => self.addr,
        };
        let target = target.to_string();
        let ended = |r: Result<anyhow::Result<CoordinatorReport>, tokio::task::JoinError>| match r {
            Ok(Err(e)) => e,
            Ok(Ok(_)) => anyhow!("the rendezvous ended before shard 0 joined it"),
            Err(e) => anyhow!("the rendezvous task failed: {e}"),
        };
        let joined = tokio::select! {
            m = Member::join(&target, hello, auth, timeout) => m,
            r = &mut self.task => return Err(ended(r)),
        };
        match joined {
            Ok(m) => Ok(m),
            // A coordinator that ended (it refused the run) closes shard 0's own connection with
            // it, and its reason is the one to tell.
            Err(e) => match tokio::time::timeout(Duration::from_secs(1), &mut self.task).await {
                Ok(r) => Err(ended(r)),
                Err(_) => Err(e),
            },
        }
    }

    /// Waits for the rendezvous to end (every shard done or lost).
    pub async fn finish(self, timeout: Duration) -> anyhow::Result<CoordinatorReport> {
        match tokio::time::timeout(timeout, self.task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(anyhow!("the rendezvous task failed: {e}")),
            Err(_) => bail!(
                "not every shard finished within {} s after shard 0 did",
                timeout.as_secs()
            ),
        }
    }
}

enum Event {
    Msg(usize, Msg),
    Closed(usize),
}

async fn serve(
    listener: TcpListener,
    reference: Hello,
    auth: RendezvousAuth,
    timeout: Duration,
) -> anyhow::Result<CoordinatorReport> {
    let count = reference.count as usize;
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
    let mut conns = Conns::default();

    // Phase 1: hellos.
    let gate = std::sync::Arc::new(Gate {
        auth,
        hello_timeout: HELLO_TIMEOUT.min(timeout),
    });
    let hellos = gather_hellos(
        &listener, gate, &reference, timeout, &mut conns, &ev_tx, &mut ev_rx,
    )
    .await?;
    // Every shard joined: nobody else may.
    drop(listener);
    let run_id = reference.run_id.clone().unwrap_or_else(super::fresh_id);
    let conn_of: BTreeMap<u32, usize> = conns
        .index_of
        .iter()
        .enumerate()
        .filter_map(|(c, i)| i.map(|i| (i, c)))
        .collect();
    let members = Members {
        out: &conns.out,
        conn_of: &conn_of,
    };
    members.broadcast(Msg::Welcome {
        run_id: run_id.clone(),
        seed: reference.seed,
    });
    tracing::info!(shards = count, run_id = %run_id, "rendezvous: every shard joined");

    // Phases 2 to 4: ready, warmup, profiling, done.
    let mut st = Phases::default();
    let ready_deadline = tokio::time::Instant::now() + timeout;
    while st.done.len() + st.lost.len() < count {
        let ev = if st.ready < count {
            match tokio::time::timeout_at(ready_deadline, ev_rx.recv()).await {
                Ok(Some(ev)) => ev,
                Ok(None) => break,
                Err(_) => {
                    let message = format!(
                        "not every shard planned within --rendezvous-timeout {} s",
                        timeout.as_secs()
                    );
                    members.broadcast(Msg::Refuse {
                        message: message.clone(),
                    });
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    bail!("{message}");
                }
            }
        } else {
            match ev_rx.recv().await {
                Some(ev) => ev,
                None => break,
            }
        };
        match ev {
            Event::Msg(c, m) => {
                let Some(i) = conns.index_of.get(c).copied().flatten() else {
                    continue;
                };
                st.on_msg(i, m, &reference, &members);
            }
            Event::Closed(c) => {
                let Some(i) = conns.index_of.get(c).copied().flatten() else {
                    continue;
                };
                st.on_closed(i, count, &members);
            }
        }
    }
    members.broadcast(Msg::Bye);
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(CoordinatorReport {
        lost: st.lost,
        shards: hellos
            .values()
            .map(|h| ShardSeen {
                index: h.index,
                host: h.host.clone(),
                peer: conn_of
                    .get(&h.index)
                    .map(|c| conns.peers[*c].clone())
                    .unwrap_or_default(),
            })
            .collect(),
    })
}

/// The coordinator's connections, in accept order.
#[derive(Default)]
struct Conns {
    /// Where to send to each connection.
    out: Vec<mpsc::UnboundedSender<Msg>>,
    peers: Vec<String>,
    /// conn -> shard index, once its hello was accepted.
    index_of: Vec<Option<u32>>,
}

/// The shards that joined, by index.
struct Members<'c> {
    out: &'c [mpsc::UnboundedSender<Msg>],
    conn_of: &'c BTreeMap<u32, usize>,
}

impl Members<'_> {
    fn broadcast(&self, m: Msg) {
        for c in self.conn_of.values() {
            let _ = self.out[*c].send(m.clone());
        }
    }
}

/// A connection whose hello proved the run's secret.
struct Admitted {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    peer: SocketAddr,
    hello: Hello,
}

/// What admits a connection: the run's secret, and how long its hello may take.
struct Gate {
    auth: RendezvousAuth,
    hello_timeout: Duration,
}

impl Gate {
    /// Reads a new connection's first line and admits it if it is a hello that proves the secret;
    /// otherwise logs why, tells a peer that speaks the protocol, and closes the connection.
    async fn admit(&self, stream: TcpStream, peer: SocketAddr) -> Option<Admitted> {
        let _ = stream.set_nodelay(true);
        let (r, mut writer) = stream.into_split();
        let mut reader = BufReader::new(r);
        let first = match tokio::time::timeout(self.hello_timeout, recv_first(&mut reader)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "it said no hello within {} s",
                self.hello_timeout.as_secs_f64()
            )),
        };
        let why = match first {
            Ok(Msg::Hello { hello, proof }) => {
                if self.auth.admits(proof.as_deref()) {
                    return Some(Admitted {
                        reader,
                        writer,
                        peer,
                        hello: *hello,
                    });
                }
                let message = match (self.auth.is_authenticated(), proof.is_some()) {
                    (true, true) => "its rendezvous secret is not this run's: give every shard the same AGENTX_RENDEZVOUS_TOKEN (or run them in one Slurm job step / Kubernetes Job)",
                    (true, false) => "it proves no rendezvous secret and shard 0 has one: give every shard the same AGENTX_RENDEZVOUS_TOKEN (or run them in one Slurm job step / Kubernetes Job)",
                    _ => "it proves a rendezvous secret and shard 0 has none: give every shard the same AGENTX_RENDEZVOUS_TOKEN",
                };
                let _ = send(
                    &mut writer,
                    &Msg::Refuse {
                        message: format!("shard 0 refused shard {}: {message}", hello.index),
                    },
                )
                .await;
                let _ = writer.shutdown().await;
                format!("claims to be shard {}, but {message}", hello.index)
            }
            Ok(_) => "its first message is not a hello".to_string(),
            Err(why) => why,
        };
        tracing::warn!(%peer, "rendezvous: refused a connection: {why}");
        None
    }
}

/// Serves one admitted connection: a writer task sending what the returned sender is given
/// (ending after a bye or a refusal) and a reader task answering pings and passing every other
/// message on.
fn spawn_conn(
    r: BufReader<OwnedReadHalf>,
    mut w: OwnedWriteHalf,
    id: usize,
    ev_tx: mpsc::UnboundedSender<Event>,
) -> mpsc::UnboundedSender<Msg> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let pong_tx = tx.clone();
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if send(&mut w, &m).await.is_err() {
                break;
            }
            if matches!(m, Msg::Bye | Msg::Refuse { .. }) {
                let _ = w.shutdown().await;
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut r = r;
        loop {
            match recv(&mut r).await {
                Ok(Some(Msg::Ping { t1 })) => {
                    let _ = pong_tx.send(Msg::Pong { t1, t2: wall_ns() });
                }
                Ok(Some(m)) => {
                    let _ = ev_tx.send(Event::Msg(id, m));
                }
                Ok(None) | Err(_) => {
                    let _ = ev_tx.send(Event::Closed(id));
                    break;
                }
            }
        }
    });
    tx
}

/// Phase 1: accepts connections until every shard said a hello that proves the run's secret and
/// agrees with shard 0's plan; each connection's hello is awaited in a task of its own, so a peer
/// that says nothing delays no one. A disagreement or the timeout refuses every admitted
/// connection and fails.
async fn gather_hellos(
    listener: &TcpListener,
    gate: std::sync::Arc<Gate>,
    reference: &Hello,
    timeout: Duration,
    conns: &mut Conns,
    ev_tx: &mpsc::UnboundedSender<Event>,
    ev_rx: &mut mpsc::UnboundedReceiver<Event>,
) -> anyhow::Result<BTreeMap<u32, Hello>> {
    let count = reference.count as usize;
    let mut hellos: BTreeMap<u32, Hello> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut refusal: Option<String> = None;
    let mut pending = tokio::task::JoinSet::new();
    let mut awaited: Vec<(SocketAddr, tokio::task::AbortHandle)> = Vec::new();
    while hellos.len() < count && refusal.is_none() {
        tokio::select! {
            a = listener.accept() => {
                match a {
                    Ok((stream, peer)) => {
                        let gate = gate.clone();
                        awaited.retain(|(_, h)| !h.is_finished());
                        awaited.push((peer, pending.spawn(async move { gate.admit(stream, peer).await })));
                    }
                    // A connection that failed before it was accepted (reset, or out of file
                    // descriptors for a moment): not the run's business.
                    Err(e) => {
                        tracing::warn!("rendezvous: accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            Some(done) = pending.join_next(), if !pending.is_empty() => {
                let Ok(Some(a)) = done else { continue };
                let id = conns.out.len();
                conns.out.push(spawn_conn(a.reader, a.writer, id, ev_tx.clone()));
                conns.peers.push(a.peer.to_string());
                conns.index_of.push(None);
                let h = a.hello;
                {
                    let mut why = Vec::new();
                    if h.index >= reference.count || h.count != reference.count {
                        why.push(format!(
                            "shard {}/{} does not fit a run of {} shards (indices 0 to {})",
                            h.index, h.count, reference.count, reference.count - 1
                        ));
                    } else if hellos.contains_key(&h.index) {
                        why.push(format!("shard {} joined twice (check --shard / SLURM_PROCID / JOB_COMPLETION_INDEX)", h.index));
                    } else {
                        why.extend(h.differences(reference));
                    }
                    if why.is_empty() {
                        conns.index_of[id] = Some(h.index);
                        hellos.insert(h.index, h);
                    } else {
                        refusal = Some(format!(
                            "shard {} on {} disagrees with shard 0 on the plan: {}",
                            h.index, h.host, why.join("; ")
                        ));
                    }
                }
            }
            Some(ev) = ev_rx.recv() => match ev {
                Event::Msg(_, _) => {}
                Event::Closed(id) => {
                    if let Some(i) = conns.index_of[id].take() {
                        hellos.remove(&i);
                        tracing::warn!("rendezvous: shard {i} left before every shard joined");
                    }
                }
            },
            _ = tokio::time::sleep_until(deadline) => {
                let missing: Vec<String> = (0..reference.count)
                    .filter(|i| !hellos.contains_key(i))
                    .map(|i| i.to_string())
                    .collect();
                refusal = Some(format!(
                    "shards {} did not join within --rendezvous-timeout {} s",
                    missing.join(", "),
                    timeout.as_secs()
                ));
            }
        }
    }
    // Connections still on their hello are no shard of this run: they close with the phase.
    for (peer, h) in awaited.iter().filter(|(_, h)| !h.is_finished()) {
        h.abort();
        tracing::warn!(%peer, "rendezvous: refused a connection: it said no hello before the rendezvous closed");
    }
    if let Some(message) = refusal {
        for tx in &conns.out {
            let _ = tx.send(Msg::Refuse {
                message: message.clone(),
            });
        }
        // Let the refusals go out before the task ends.
        tokio::time::sleep(Duration::from_millis(200)).await;
        bail!("{message}");
    }
    Ok(hellos)
}

/// Phases 2 to 4 as the coordinator follows them: ready, warmup, profiling, done.
#[derive(Default)]
struct Phases {
    ready: usize,
    warm_ok: usize,
    warm_fail: Option<String>,
    warm_seen: usize,
    done: std::collections::BTreeSet<u32>,
    lost: Vec<u32>,
    tallies: BTreeMap<u32, (u64, u64, u64, u64)>,
    stopped: bool,
}

impl Phases {
    /// A message of shard `i`.
    fn on_msg(&mut self, i: u32, m: Msg, reference: &Hello, members: &Members<'_>) {
        let count = reference.count as usize;
        match m {
            Msg::Ready => {
                self.ready += 1;
                if self.ready == count {
                    members.broadcast(Msg::Go);
                }
            }
            Msg::Warmup { ok, message } => {
                self.warm_seen += 1;
                if ok {
                    self.warm_ok += 1;
                } else if self.warm_fail.is_none() {
                    self.warm_fail = Some(message.unwrap_or_else(|| format!("shard {i} failed")));
                }
                if self.warm_seen == count {
                    match &self.warm_fail {
                        None if self.warm_ok == count => members.broadcast(Msg::Profile),
                        _ => {
                            self.stopped = true;
                            members.broadcast(Msg::Stop {
                                reason: StopReason::WarmupFailed.as_str().into(),
                                message: self.warm_fail.clone().unwrap_or_default(),
                            });
                        }
                    }
                } else if !ok && !self.stopped {
                    // No shard profiles after a failed warmup: tell the others now.
                    self.stopped = true;
                    members.broadcast(Msg::Stop {
                        reason: StopReason::WarmupFailed.as_str().into(),
                        message: self.warm_fail.clone().unwrap_or_default(),
                    });
                }
            }
            Msg::Tally {
                requests,
                failed,
                overflows,
                cancelled,
            } => {
                self.tallies
                    .insert(i, (requests, failed, overflows, cancelled));
                if let (Some(f), false) = (reference.failed_request_threshold, self.stopped) {
                    let (req, fail, over, canc) =
                        self.tallies.values().fold((0, 0, 0, 0), |a, t| {
                            (a.0 + t.0, a.1 + t.1, a.2 + t.2, a.3 + t.3)
                        });
                    let all = Tally {
                        requests: req,
                        failed: fail,
                        context_overflows: over,
                        cancelled: canc,
                        ..Tally::default()
                    };
                    if all.threshold_exceeded(f, u64::from(reference.concurrency)) {
                        self.stopped = true;
                        let judged = all.threshold_judged();
                        members.broadcast(Msg::Stop {
                            reason: StopReason::ThresholdExceeded.as_str().into(),
                            message: format!(
                                "--failed-request-threshold {f} exceeded over all shards: {fail} of {judged} profiling requests failed; in-flight requests were cancelled"
                            ),
                        });
                    }
                }
            }
            Msg::Stop { reason, message } if !self.stopped => {
                self.stopped = true;
                members.broadcast(Msg::Stop { reason, message });
            }
            Msg::Done => {
                self.done.insert(i);
            }
            _ => {}
        }
    }

    /// Shard `i`'s connection closed.
    fn on_closed(&mut self, i: u32, count: usize, members: &Members<'_>) {
        if !self.done.contains(&i) && !self.lost.contains(&i) {
            self.lost.push(i);
            tracing::error!("rendezvous: shard {i} lost its connection before it was done");
            if !self.stopped {
                self.stopped = true;
                members.broadcast(Msg::Stop {
                    reason: StopReason::Interrupted.as_str().into(),
                    message: format!(
                        "shard {i} lost its connection to the rendezvous, so every shard stopped"
                    ),
                });
            }
            if self.ready < count {
                self.ready += 1;
            }
            if self.warm_seen < count && !self.stopped {
                self.warm_seen += 1;
            }
        }
    }
}

// ---------------------------------------------------------------- member (every shard)

/// A shard's side of the rendezvous after `welcome`.
pub struct Member {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    pub run_id: String,
    pub seed: u64,
    /// Coordinator wall clock minus this host's, nanoseconds (positive: this clock is behind).
    pub clock_offset_ns: i64,
    /// The round trip of the ping that measured the offset.
    pub clock_rtt_ns: u64,
    /// How long joining took (connect to welcome).
    pub joined_in: Duration,
}

impl Member {
    /// Connects to `coordinator` (retrying until `timeout`), says hello with the proof of `auth`,
    /// measures the clock offset and waits for the welcome.
    pub async fn join(
        coordinator: &str,
        hello: &Hello,
        auth: &RendezvousAuth,
        timeout: Duration,
    ) -> anyhow::Result<Member> {
        let t0 = tokio::time::Instant::now();
        let deadline = t0 + timeout;
        let mut last_err = String::new();
        let stream = loop {
            match tokio::time::timeout_at(deadline, TcpStream::connect(coordinator)).await {
                Ok(Ok(s)) => break s,
                Ok(Err(e)) => last_err = e.to_string(),
                Err(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "no coordinator answered at {coordinator} within --rendezvous-timeout {} s ({last_err}); \
                     start shard 0 (it listens there) or fix --coordinator / --coordinator-port",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let _ = stream.set_nodelay(true);
        let (r, mut writer) = stream.into_split();
        let mut reader = BufReader::new(r);
        let lost = |e: &dyn std::fmt::Display| {
            anyhow!("the rendezvous at {coordinator} closed during the hello: {e}")
        };
        // The hello first: the coordinator answers nothing before it.
        send(
            &mut writer,
            &Msg::Hello {
                hello: Box::new(hello.clone()),
                proof: auth.proof(),
            },
        )
        .await
        .map_err(|e| lost(&e))?;
        // The clock offset: the ping with the shortest round trip of five (a welcome that comes
        // meanwhile is kept).
        let mut welcome: Option<(String, u64)> = None;
        let mut best: Option<(u64, i64)> = None;
        for _ in 0..5 {
            let t1 = wall_ns();
            send(&mut writer, &Msg::Ping { t1 })
                .await
                .map_err(|e| lost(&e))?;
            loop {
                let m = tokio::time::timeout_at(deadline, recv(&mut reader))
                    .await
                    .map_err(|_| {
                        anyhow!("the rendezvous at {coordinator} did not answer a ping")
                    })??;
                match m {
                    Some(Msg::Pong { t1: back, t2 }) if back == t1 => {
                        let t3 = wall_ns();
                        let rtt = t3.saturating_sub(t1);
                        let offset = t2 as i128 - (t1 as i128 + t3 as i128) / 2;
                        if best.is_none_or(|(r, _)| rtt < r) {
                            best = Some((rtt, offset as i64));
                        }
                        break;
                    }
                    Some(Msg::Refuse { message }) => {
                        bail!("the rendezvous refused this run: {message}")
                    }
                    Some(Msg::Welcome { run_id, seed }) => welcome = Some((run_id, seed)),
                    Some(_) => continue,
                    None => return Err(lost(&"end of stream")),
                }
            }
        }
        let (clock_rtt_ns, clock_offset_ns) = best.unwrap_or((0, 0));
        let joined = |reader, writer, (run_id, seed)| Member {
            reader,
            writer,
            run_id,
            seed,
            clock_offset_ns,
            clock_rtt_ns,
            joined_in: t0.elapsed(),
        };
        if let Some(w) = welcome {
            return Ok(joined(reader, writer, w));
        }
        loop {
            let m = tokio::time::timeout_at(deadline, recv(&mut reader))
                .await
                .map_err(|_| {
                    anyhow!(
                        "not every shard joined the rendezvous at {coordinator} within --rendezvous-timeout {} s",
                        timeout.as_secs()
                    )
                })??;
            match m {
                Some(Msg::Welcome { run_id, seed }) => {
                    return Ok(joined(reader, writer, (run_id, seed)))
                }
                Some(Msg::Refuse { message }) => {
                    bail!("the rendezvous refused this run: {message}")
                }
                Some(_) => continue,
                None => return Err(lost(&"end of stream")),
            }
        }
    }

    /// Says this shard has planned and waits until every shard has (`go`).
    pub async fn ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        send(&mut self.writer, &Msg::Ready).await?;
        loop {
            let m = tokio::time::timeout(timeout, recv(&mut self.reader))
                .await
                .map_err(|_| {
                    anyhow!(
                        "the other shards did not get ready within {} s",
                        timeout.as_secs()
                    )
                })??;
            match m {
                Some(Msg::Go) => return Ok(()),
                Some(Msg::Refuse { message }) | Some(Msg::Stop { message, .. }) => {
                    bail!("the rendezvous stopped the run before warmup: {message}")
                }
                Some(_) => continue,
                None => bail!("the rendezvous closed before warmup began"),
            }
        }
    }

    /// The replay's side of the link, and the task that carries it over the connection until the
    /// returned [`Finish`] is used.
    pub fn link(self, index: u32, count: u32) -> (ShardLink, Finish) {
        let (warm_tx, warm_rx) = oneshot::channel::<Result<(), String>>();
        let (profile_tx, profile_rx) = oneshot::channel::<Result<(), String>>();
        let (stop_tx, stop_rx) = watch::channel::<Option<(StopReason, String)>>(None);
        let (tally_tx, mut tally_rx) = watch::channel(Tally::default());
        let (local_tx, mut local_rx) = mpsc::unbounded_channel::<(StopReason, String)>();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<()>();
        let Member {
            mut reader,
            mut writer,
            ..
        } = self;
        // Reading a line is not cancel-safe, so it has a task of its own and the loop below
        // selects on its channel.
        let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Option<Msg>>();
        tokio::spawn(async move {
            loop {
                let m = recv(&mut reader).await.ok().flatten();
                let end = m.is_none();
                if in_tx.send(m).is_err() || end {
                    break;
                }
            }
        });
        let task = tokio::spawn(async move {
            let mut warm_rx = Some(warm_rx);
            let mut profile_tx = Some(profile_tx);
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            let mut sent_tally = (0u64, 0u64);
            let mut said_done = false;
            loop {
                tokio::select! {
                    r = async { warm_rx.as_mut().expect("guarded").await }, if warm_rx.is_some() => {
                        warm_rx = None;
                        let m = match r {
                            Ok(Ok(())) => Msg::Warmup { ok: true, message: None },
                            Ok(Err(e)) => Msg::Warmup { ok: false, message: Some(e) },
                            Err(_) => Msg::Warmup { ok: false, message: Some(format!("shard {index} ended before its warmup returned")) },
                        };
                        if send(&mut writer, &m).await.is_err() { break; }
                    }
                    m = in_rx.recv() => match m.flatten() {
                        Some(Msg::Profile) => {
                            if let Some(tx) = profile_tx.take() { let _ = tx.send(Ok(())); }
                        }
                        Some(Msg::Stop { reason, message }) => {
                            if let Some(tx) = profile_tx.take() { let _ = tx.send(Err(message.clone())); }
                            stop_tx.send_replace(Some((reason_of(&reason), message)));
                        }
                        Some(Msg::Bye) => return Ok(()),
                        Some(_) => {}
                        None => {
                            let why = "the rendezvous connection to shard 0 was lost".to_string();
                            if let Some(tx) = profile_tx.take() { let _ = tx.send(Err(why.clone())); }
                            if !said_done {
                                stop_tx.send_replace(Some((StopReason::Interrupted, why.clone())));
                            }
                            return Err(anyhow!(why));
                        }
                    },
                    _ = tick.tick() => {
                        let t = tally_rx.borrow_and_update().clone();
                        if (t.requests, t.failed) != sent_tally {
                            sent_tally = (t.requests, t.failed);
                            let m = Msg::Tally { requests: t.requests, failed: t.failed, overflows: t.context_overflows, cancelled: t.cancelled };
                            if send(&mut writer, &m).await.is_err() { break; }
                        }
                    }
                    Some((reason, message)) = local_rx.recv() => {
                        let m = Msg::Stop { reason: reason.as_str().into(), message };
                        if send(&mut writer, &m).await.is_err() { break; }
                    }
                    Some(()) = done_rx.recv(), if !said_done => {
                        said_done = true;
                        // The last counts first, so the threshold sees them.
                        let t = tally_rx.borrow().clone();
                        let _ = send(&mut writer, &Msg::Tally { requests: t.requests, failed: t.failed, overflows: t.context_overflows, cancelled: t.cancelled }).await;
                        if send(&mut writer, &Msg::Done).await.is_err() { break; }
                    }
                }
            }
            Err(anyhow!("the rendezvous connection to shard 0 was lost"))
        });
        (
            ShardLink {
                index,
                count,
                warmup_done: warm_tx,
                profile: profile_rx,
                remote_stop: stop_rx,
                tally: tally_tx,
                local_stop: local_tx,
            },
            Finish {
                done: done_tx,
                task,
            },
        )
    }
}

/// Tells the rendezvous this shard is done and waits for the end of the run.
pub struct Finish {
    done: mpsc::UnboundedSender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Finish {
    /// Sends `done` (this shard wrote its files) and waits for `bye` (every shard is done) up to
    /// `timeout`.
    pub async fn done(self, timeout: Duration) -> anyhow::Result<()> {
        let _ = self.done.send(());
        match tokio::time::timeout(timeout, self.task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(anyhow!("the rendezvous task failed: {e}")),
            Err(_) => bail!(
                "the other shards did not finish within {} s of this one",
                timeout.as_secs()
            ),
        }
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
