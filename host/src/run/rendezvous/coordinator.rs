//! Shard 0's side of the rendezvous: listening, admitting shards that prove the run's secret, and
//! driving the phases every shard goes through together.

use super::*;

pub use crate::export::manifest::{RendezvousReport as CoordinatorReport, ShardSeen};

/// Shard 0's listening coordinator.
pub struct Coordinator {
    task: tokio::task::JoinHandle<anyhow::Result<CoordinatorReport>>,
    /// Where it listens (the port resolved when 0 was asked for).
    addr: SocketAddr,
    /// Takes the boundary scrapes of the global phase edges (set once shard 0's scraper runs).
    edges: EdgeScrapes,
    /// Set when the profiling_complete edge passed (every shard drained or was lost).
    complete: watch::Receiver<bool>,
}

/// The hook that takes the global edges' boundary scrapes, once there is a scraper.
type EdgeScrapes = std::sync::Arc<std::sync::Mutex<Option<crate::replay::BoundaryHook>>>;

/// A global phase edge the coordinator reached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Edge {
    /// Every warmup returned: profiling begins (with the smallest hand-off offset).
    Profile(Option<f64>),
    /// Every shard drained (or was lost).
    Complete,
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
        let edges: EdgeScrapes = EdgeScrapes::default();
        let (complete_tx, complete) = watch::channel(false);
        let scrapes = EdgeTaker {
            hook: edges.clone(),
            complete: complete_tx,
        };
        let task = tokio::spawn(serve(listener, reference, auth, timeout, scrapes));
        Ok(Coordinator {
            task,
            addr,
            edges,
            complete,
        })
    }

    /// From now on, the coordinator takes the boundary scrapes of the global phase edges with
    /// `hook` (shard 0's scraper).
    pub fn take_boundaries(&self, hook: crate::replay::BoundaryHook) {
        *self
            .edges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hook);
    }

    /// Waits until every shard drained and the profiling_complete boundary scrape is in (true), or
    /// `timeout` (false).
    pub async fn profiling_complete(&self, timeout: Duration) -> bool {
        let mut complete = self.complete.clone();
        let done = tokio::time::timeout(timeout, complete.wait_for(|c| *c))
            .await
            .is_ok_and(|r| r.is_ok());
        done
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

/// What the serve loop does at a global edge: the boundary scrape, then the edge's message.
pub(super) struct EdgeTaker {
    hook: EdgeScrapes,
    complete: watch::Sender<bool>,
}

impl EdgeTaker {
    /// Takes the edge's boundary scrape (when shard 0 scrapes), then lets the shards go on:
    /// `profile` to all, or the profiling_complete signal to shard 0.
    async fn at(&self, edge: Edge, members: &Members<'_>) {
        let hook = self
            .hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let boundary = match edge {
            Edge::Profile(_) => crate::metrics::scrape_log::Boundary::ProfilingStart,
            Edge::Complete => crate::metrics::scrape_log::Boundary::ProfilingComplete,
        };
        if let Some(take) = hook {
            take(boundary).await;
        }
        match edge {
            Edge::Profile(t0_ms) => members.broadcast(&Msg::Profile { t0_ms }),
            Edge::Complete => {
                self.complete.send_replace(true);
            }
        }
    }
}

pub(super) enum Event {
    Msg(usize, Msg),
    Closed(usize),
}

pub(super) async fn serve(
    listener: TcpListener,
    reference: Hello,
    auth: RendezvousAuth,
    timeout: Duration,
    edges: EdgeTaker,
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
    let run_id = reference
        .run_id
        .clone()
        .unwrap_or_else(crate::run::fresh_id);
    let conn_of: BTreeMap<u32, usize> = conns
        .index_of
        .iter()
        .enumerate()
        .filter_map(|(c, index)| index.map(|index| (index, c)))
        .collect();
    let members = Members {
        out: &conns.out,
        conn_of: &conn_of,
    };
    members.broadcast(&Msg::Welcome {
        run_id: run_id.clone(),
        seed: reference.seed,
    });
    tracing::info!(shards = count, run_id = %run_id, "rendezvous: every shard joined");

    // Phases 2 to 4: ready, warmup, profiling, done.
    let mut phases = Phases::default();
    let ready_deadline = tokio::time::Instant::now() + timeout;
    while phases.done.len() + phases.lost.len() < count {
        let event = if phases.ready < count {
            match tokio::time::timeout_at(ready_deadline, ev_rx.recv()).await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(_) => {
                    let message = format!(
                        "not every shard planned within --rendezvous-timeout {} s",
                        timeout.as_secs()
                    );
                    members.broadcast(&Msg::Refuse {
                        message: message.clone(),
                    });
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    bail!("{message}");
                }
            }
        } else {
            match ev_rx.recv().await {
                Some(event) => event,
                None => break,
            }
        };
        match event {
            Event::Msg(c, m) => {
                let Some(index) = conns.index_of.get(c).copied().flatten() else {
                    continue;
                };
                if let Some(edge) = phases.on_msg(index, m, &reference, &members) {
                    edges.at(edge, &members).await;
                }
            }
            Event::Closed(c) => {
                let Some(index) = conns.index_of.get(c).copied().flatten() else {
                    continue;
                };
                if let Some(edge) = phases.on_closed(index, count, &members) {
                    edges.at(edge, &members).await;
                }
            }
        }
    }
    edges.complete.send_replace(true);
    members.broadcast(&Msg::Bye);
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(CoordinatorReport {
        lost: phases.lost,
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
pub(super) struct Conns {
    /// Where to send to each connection.
    out: Vec<mpsc::UnboundedSender<Msg>>,
    peers: Vec<String>,
    /// conn -> shard index, once its hello was accepted.
    index_of: Vec<Option<u32>>,
}

/// The shards that joined, by index.
pub(super) struct Members<'c> {
    out: &'c [mpsc::UnboundedSender<Msg>],
    conn_of: &'c BTreeMap<u32, usize>,
}

impl Members<'_> {
    fn broadcast(&self, message: &Msg) {
        for connection in self.conn_of.values() {
            let _ = self.out[*connection].send(message.clone());
        }
    }
}

/// A connection whose hello proved the run's secret.
pub(super) struct Admitted {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    peer: SocketAddr,
    hello: Hello,
}

/// What admits a connection: the run's secret, and how long its hello may take.
pub(super) struct Gate {
    auth: RendezvousAuth,
    hello_timeout: Duration,
}

impl Gate {
    /// Reads a new connection's first line and admits it if it is a hello that proves the secret;
    /// otherwise logs why, tells a peer that speaks the protocol, and closes the connection.
    async fn admit(&self, stream: TcpStream, peer: SocketAddr) -> Option<Admitted> {
        let _ = stream.set_nodelay(true);
        let (reader_half, mut writer) = stream.into_split();
        let mut reader = BufReader::new(reader_half);
        let first = match tokio::time::timeout(self.hello_timeout, recv_first(&mut reader)).await {
            Ok(reader_half) => reader_half,
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
pub(super) fn spawn_conn(
    reader_half: BufReader<OwnedReadHalf>,
    mut writer: OwnedWriteHalf,
    id: usize,
    ev_tx: mpsc::UnboundedSender<Event>,
) -> mpsc::UnboundedSender<Msg> {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Msg>();
    let pong_tx = out_tx.clone();
    tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            if send(&mut writer, &message).await.is_err() {
                break;
            }
            if matches!(message, Msg::Bye | Msg::Refuse { .. }) {
                let _ = writer.shutdown().await;
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut reader_half = reader_half;
        loop {
            match recv(&mut reader_half).await {
                Ok(Some(Msg::Ping { t1 })) => {
                    let _ = pong_tx.send(Msg::Pong { t1, t2: wall_ns() });
                }
                Ok(Some(message)) => {
                    let _ = ev_tx.send(Event::Msg(id, message));
                }
                Ok(None) | Err(_) => {
                    let _ = ev_tx.send(Event::Closed(id));
                    break;
                }
            }
        }
    });
    out_tx
}

/// Phase 1: accepts connections until every shard said a hello that proves the run's secret and
/// agrees with shard 0's plan; each connection's hello is awaited in a task of its own, so a peer
/// that says nothing delays no one. A disagreement or the timeout refuses every admitted
/// connection and fails.
pub(super) async fn gather_hellos(
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
            accepted = listener.accept() => {
                match accepted {
                    Ok((stream, peer)) => {
                        let gate = gate.clone();
                        awaited.retain(|(_, handle)| !handle.is_finished());
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
                let Ok(Some(admitted)) = done else { continue };
                let id = conns.out.len();
                conns.out.push(spawn_conn(admitted.reader, admitted.writer, id, ev_tx.clone()));
                conns.peers.push(admitted.peer.to_string());
                conns.index_of.push(None);
                let hello = admitted.hello;
                {
                    let mut why = Vec::new();
                    if hello.index >= reference.count || hello.count != reference.count {
                        why.push(format!(
                            "shard {}/{} does not fit a run of {} shards (indices 0 to {})",
                            hello.index, hello.count, reference.count, reference.count - 1
                        ));
                    } else if hellos.contains_key(&hello.index) {
                        why.push(format!("shard {} joined twice (check --shard / SLURM_PROCID / JOB_COMPLETION_INDEX)", hello.index));
                    } else {
                        why.extend(hello.differences(reference));
                    }
                    if why.is_empty() {
                        conns.index_of[id] = Some(hello.index);
                        hellos.insert(hello.index, hello);
                    } else {
                        refusal = Some(format!(
                            "shard {} on {} disagrees with shard 0 on the plan: {}",
                            hello.index, hello.host, why.join("; ")
                        ));
                    }
                }
            }
            Some(ev) = ev_rx.recv() => match ev {
                Event::Msg(_, _) => {}
                Event::Closed(id) => {
                    if let Some(index) = conns.index_of[id].take() {
                        hellos.remove(&index);
                        tracing::warn!("rendezvous: shard {index} left before every shard joined");
                    }
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                let missing: Vec<String> = (0..reference.count)
                    .filter(|index| !hellos.contains_key(index))
                    .map(|index| index.to_string())
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
    for (peer, handle) in awaited.iter().filter(|(_, handle)| !handle.is_finished()) {
        handle.abort();
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
pub(super) struct Phases {
    ready: usize,
    warm_ok: usize,
    warm_fail: Option<String>,
    warm_seen: usize,
    done: std::collections::BTreeSet<u32>,
    drained: std::collections::BTreeSet<u32>,
    /// The profiling_complete edge passed.
    complete: bool,
    lost: Vec<u32>,
    tallies: BTreeMap<u32, (u64, u64, u64, u64)>,
    stopped: bool,
    /// The smallest hand-off offset the shards' warmups sent.
    t0_ms: Option<f64>,
}

impl Phases {
    /// The profiling_complete edge, when every shard drained or was lost (once).
    fn all_drained(&mut self, count: usize) -> Option<Edge> {
        let gone = self
            .lost
            .iter()
            .filter(|i| !self.drained.contains(i))
            .count();
        if self.complete || self.drained.len() + gone < count {
            return None;
        }
        self.complete = true;
        Some(Edge::Complete)
    }

    /// A message of shard `shard`: the global edge it completes, if any.
    fn on_msg(
        &mut self,
        shard: u32,
        msg: Msg,
        reference: &Hello,
        members: &Members<'_>,
    ) -> Option<Edge> {
        let count = reference.count as usize;
        match msg {
            Msg::Ready => {
                self.ready += 1;
                if self.ready == count {
                    members.broadcast(&Msg::Go {
                        at_ns: Some(wall_ns() + GO_LEAD.as_nanos() as u64),
                    });
                }
            }
            Msg::Warmup { ok, message, t0_ms } => {
                self.warm_seen += 1;
                if let Some(t0) = t0_ms.filter(|t0| t0.is_finite()) {
                    self.t0_ms = Some(self.t0_ms.map_or(t0, |m: f64| m.min(t0)));
                }
                if ok {
                    self.warm_ok += 1;
                } else if self.warm_fail.is_none() {
                    self.warm_fail =
                        Some(message.unwrap_or_else(|| format!("shard {shard} failed")));
                }
                if self.warm_seen == count {
                    match &self.warm_fail {
                        None if self.warm_ok == count => return Some(Edge::Profile(self.t0_ms)),
                        _ => {
                            self.stopped = true;
                            members.broadcast(&Msg::Stop {
                                reason: StopReason::WarmupFailed.as_str().into(),
                                message: self.warm_fail.clone().unwrap_or_default(),
                            });
                        }
                    }
                } else if !ok && !self.stopped {
                    // No shard profiles after a failed warmup: tell the others now.
                    self.stopped = true;
                    members.broadcast(&Msg::Stop {
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
                    .insert(shard, (requests, failed, overflows, cancelled));
                if let (Some(threshold), false) = (reference.failed_request_threshold, self.stopped)
                {
                    let (req, fail, over, canc) =
                        self.tallies.values().fold((0, 0, 0, 0), |sum, tally| {
                            (
                                sum.0 + tally.0,
                                sum.1 + tally.1,
                                sum.2 + tally.2,
                                sum.3 + tally.3,
                            )
                        });
                    let all = Tally {
                        requests: req,
                        failed: fail,
                        context_overflows: over,
                        cancelled: canc,
                        ..Tally::default()
                    };
                    if all.threshold_exceeded(threshold, u64::from(reference.concurrency)) {
                        self.stopped = true;
                        let judged = all.threshold_judged();
                        members.broadcast(&Msg::Stop {
                            reason: StopReason::ThresholdExceeded.as_str().into(),
                            message: format!(
                                "--failed-request-threshold {threshold} exceeded over all shards: {fail} of {judged} profiling requests failed; in-flight requests were cancelled"
                            ),
                        });
                    }
                }
            }
            Msg::Stop { reason, message } if !self.stopped => {
                self.stopped = true;
                members.broadcast(&Msg::Stop { reason, message });
            }
            Msg::Drained => {
                self.drained.insert(shard);
                return self.all_drained(count);
            }
            Msg::Done => {
                self.done.insert(shard);
            }
            _ => {}
        }
        None
    }

    /// Shard `shard`'s connection closed: the global edge that completes, if any.
    fn on_closed(&mut self, shard: u32, count: usize, members: &Members<'_>) -> Option<Edge> {
        if !self.done.contains(&shard) && !self.lost.contains(&shard) {
            self.lost.push(shard);
            tracing::error!("rendezvous: shard {shard} lost its connection before it was done");
            if !self.stopped {
                self.stopped = true;
                members.broadcast(&Msg::Stop {
                    reason: StopReason::Interrupted.as_str().into(),
                    message: format!(
                        "shard {shard} lost its connection to the rendezvous, so every shard stopped"
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
        self.all_drained(count)
    }
}

// ---------------------------------------------------------------- member (every shard)
