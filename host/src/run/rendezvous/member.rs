//! A shard's side of the rendezvous: joining, the clock offset, and the phases as this shard lives
//! them (warmup done, profiling, stops, the finish).

use super::*;

/// A shard's side of the rendezvous after `welcome`.
pub struct Member {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// The run's id, as shard 0 settled it.
    pub run_id: String,
    /// The run's seed, as shard 0 settled it.
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
        let started = tokio::time::Instant::now();
        let deadline = started + timeout;
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
        let (reader_half, mut writer) = stream.into_split();
        let mut reader = BufReader::new(reader_half);
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
            let sent_ns = wall_ns();
            send(&mut writer, &Msg::Ping { t1: sent_ns })
                .await
                .map_err(|e| lost(&e))?;
            loop {
                let message = tokio::time::timeout_at(deadline, recv(&mut reader))
                    .await
                    .map_err(|_| {
                        anyhow!("the rendezvous at {coordinator} did not answer a ping")
                    })??;
                match message {
                    Some(Msg::Pong { t1: back, t2 }) if back == sent_ns => {
                        let received_ns = wall_ns();
                        let rtt = received_ns.saturating_sub(sent_ns);
                        let offset =
                            i128::from(t2) - (i128::from(sent_ns) + i128::from(received_ns)) / 2;
                        if best.is_none_or(|(best_rtt, _)| rtt < best_rtt) {
                            best = Some((rtt, offset as i64));
                        }
                        break;
                    }
                    Some(Msg::Refuse { message }) => {
                        bail!("the rendezvous refused this run: {message}")
                    }
                    Some(Msg::Welcome { run_id, seed }) => welcome = Some((run_id, seed)),
                    Some(_) => {}
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
            joined_in: started.elapsed(),
        };
        if let Some(welcomed) = welcome {
            return Ok(joined(reader, writer, welcomed));
        }
        loop {
            let message = tokio::time::timeout_at(deadline, recv(&mut reader))
                .await
                .map_err(|_| {
                    anyhow!(
                        "not every shard joined the rendezvous at {coordinator} within --rendezvous-timeout {} s",
                        timeout.as_secs()
                    )
                })??;
            match message {
                Some(Msg::Welcome { run_id, seed }) => {
                    return Ok(joined(reader, writer, (run_id, seed)))
                }
                Some(Msg::Refuse { message }) => {
                    bail!("the rendezvous refused this run: {message}")
                }
                Some(_) => {}
                None => return Err(lost(&"end of stream")),
            }
        }
    }

    /// Says this shard has planned and waits until every shard has (`go`): returns the warmup's
    /// common start on this host's wall clock (ns since the epoch), if the coordinator named one.
    pub async fn ready(&mut self, timeout: Duration) -> anyhow::Result<Option<u64>> {
        send(&mut self.writer, &Msg::Ready).await?;
        loop {
            let message = tokio::time::timeout(timeout, recv(&mut self.reader))
                .await
                .map_err(|_| {
                    anyhow!(
                        "the other shards did not get ready within {} s",
                        timeout.as_secs()
                    )
                })??;
            match message {
                Some(Msg::Go { at_ns }) => {
                    // The coordinator's clock is this one's plus the offset.
                    let local = |a: u64| (i128::from(a) - i128::from(self.clock_offset_ns)).max(0);
                    return Ok(at_ns.map(|a| local(a) as u64));
                }
                Some(Msg::Refuse { message } | Msg::Stop { message, .. }) => {
                    bail!("the rendezvous stopped the run before warmup: {message}")
                }
                Some(_) => {}
                None => bail!("the rendezvous closed before warmup began"),
            }
        }
    }

    /// The replay's side of the link, and the task that carries it over the connection until the
    /// returned [`Finish`] is used.
    pub fn link(self, index: u32, count: u32) -> (ShardLink, Finish) {
        let (warm_tx, warm_rx) = oneshot::channel::<Result<Option<f64>, String>>();
        let (profile_tx, profile_rx) = oneshot::channel::<Result<Option<f64>, String>>();
        let (stop_tx, stop_rx) = watch::channel::<Option<(StopReason, String)>>(None);
        let (tally_tx, mut tally_rx) = watch::channel(Tally::default());
        let (local_tx, mut local_rx) = mpsc::unbounded_channel::<(StopReason, String)>();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<()>();
        let (drained_tx, mut drained_rx) = mpsc::unbounded_channel::<()>();
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
                let message = recv(&mut reader).await.ok().flatten();
                let end = message.is_none();
                if in_tx.send(message).is_err() || end {
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
            let mut said_drained = false;
            loop {
                tokio::select! {
                    r = async { warm_rx.as_mut().expect("guarded").await }, if warm_rx.is_some() => {
                        warm_rx = None;
                        let message = match r {
                            Ok(Ok(t0_ms)) => Msg::Warmup { ok: true, message: None, t0_ms },
                            Ok(Err(e)) => Msg::Warmup { ok: false, message: Some(e), t0_ms: None },
                            Err(_) => Msg::Warmup { ok: false, message: Some(format!("shard {index} ended before its warmup returned")), t0_ms: None },
                        };
                        if send(&mut writer, &message).await.is_err() { break; }
                    }
                    message = in_rx.recv() => match message.flatten() {
                        Some(Msg::Profile { t0_ms }) => {
                            if let Some(tx) = profile_tx.take() { let _ = tx.send(Ok(t0_ms)); }
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
                        let tally = tally_rx.borrow_and_update().clone();
                        if (tally.requests, tally.failed) != sent_tally {
                            sent_tally = (tally.requests, tally.failed);
                            let message = Msg::Tally { requests: tally.requests, failed: tally.failed, overflows: tally.context_overflows, cancelled: tally.cancelled };
                            if send(&mut writer, &message).await.is_err() { break; }
                        }
                    }
                    Some((reason, message)) = local_rx.recv() => {
                        let message = Msg::Stop { reason: reason.as_str().into(), message };
                        if send(&mut writer, &message).await.is_err() { break; }
                    }
                    Some(()) = drained_rx.recv(), if !said_drained => {
                        said_drained = true;
                        if send(&mut writer, &Msg::Drained).await.is_err() { break; }
                    }
                    Some(()) = done_rx.recv(), if !said_done => {
                        said_done = true;
                        if !said_drained {
                            said_drained = true;
                            if send(&mut writer, &Msg::Drained).await.is_err() { break; }
                        }
                        // The last counts first, so the threshold sees them.
                        let tally = tally_rx.borrow().clone();
                        let _ = send(&mut writer, &Msg::Tally { requests: tally.requests, failed: tally.failed, overflows: tally.context_overflows, cancelled: tally.cancelled }).await;
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
                drained: drained_tx,
                task,
            },
        )
    }
}

/// Tells the rendezvous this shard is done and waits for the end of the run.
pub struct Finish {
    done: mpsc::UnboundedSender<()>,
    drained: mpsc::UnboundedSender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Finish {
    /// Sends `drained`: this shard's replay returned (the coordinator takes the profiling_complete
    /// boundary scrape when every shard did).
    pub fn drained(&self) {
        let _ = self.drained.send(());
    }

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
