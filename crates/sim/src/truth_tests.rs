//! The routers and the truth of each miss, over real HTTP: a session's child lands on its parent's
//! engine, round-robin spreads, the `x-sim-miss-*` headers add up to the uncached prompt tokens, and
//! a replay of the same chains through the cache model predicts every hit and eviction count.

use std::collections::HashMap;
use std::net::SocketAddr;

use agentx_metrics::kvmodel::Lru;
use agentx_protocol::headers::{
    SIM_ADMIT_SEQ_HEADER, SIM_CACHED_TOKENS_HEADER, SIM_ENGINE_HEADER, SIM_MISS_CAPACITY_HEADER,
    SIM_MISS_COLD_HEADER, SIM_MISS_ROUTING_HEADER, SIM_PROMPT_TOKENS_HEADER,
};
use agentx_tokens::blocks::{chain_of, hash_str};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderMap;

use crate::{spawn, Eviction, Router, SimConfig, SimHandle};

/// What the simulator said about one chat request, from its `x-sim-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Said {
    engine: usize,
    prompt: u64,
    cached: u64,
    admit_seq: u64,
    cold: u64,
    capacity: u64,
    routing: u64,
}

impl Said {
    fn of(headers: &HeaderMap) -> Said {
        let number = |name: &str| -> u64 {
            headers
                .get(name)
                .unwrap_or_else(|| panic!("no {name} header"))
                .to_str()
                .unwrap()
                .parse()
                .unwrap()
        };
        Said {
            engine: number(SIM_ENGINE_HEADER) as usize,
            prompt: number(SIM_PROMPT_TOKENS_HEADER),
            cached: number(SIM_CACHED_TOKENS_HEADER),
            admit_seq: number(SIM_ADMIT_SEQ_HEADER),
            cold: number(SIM_MISS_COLD_HEADER),
            capacity: number(SIM_MISS_CAPACITY_HEADER),
            routing: number(SIM_MISS_ROUTING_HEADER),
        }
    }

    /// The truth adds up: every uncached prompt token has exactly one cause.
    fn check_sum(&self) {
        assert_eq!(
            self.cold + self.capacity + self.routing,
            self.prompt - self.cached,
            "{self:?}"
        );
    }
}

/// Sends one non-streamed chat request whose user messages are `texts`, with `headers`.
async fn chat(addr: SocketAddr, texts: &[&str], headers: &[(&str, &str)]) -> Said {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let messages: Vec<serde_json::Value> = texts
        .iter()
        .map(|text| serde_json::json!({"role": "user", "content": text}))
        .collect();
    let body = serde_json::json!({"model": "m", "max_tokens": 1, "messages": messages});
    let mut request = hyper::Request::post("/v1/chat/completions")
        .header("host", "sim")
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let said = Said::of(response.headers());
    response.into_body().collect().await.unwrap();
    said.check_sum();
    said
}

fn words(n: usize, tag: &str) -> String {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(tag);
        text.push_str(&i.to_string());
        text.push(' ');
    }
    text
}

/// The value of the series `key` (its name and labels exactly as printed) on the metrics page.
fn series(sim: &SimHandle, key: &str) -> f64 {
    let page = sim.metrics_text();
    page.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {key} on the page\n{page}"))
        .parse()
        .unwrap()
}

fn config(engines: u32, router: Router) -> SimConfig {
    let mut config = SimConfig::max();
    config.engines = engines;
    config.router = router;
    config
}

#[tokio::test]
async fn session_router_binds_a_child_to_its_parents_engine() {
    let sim = spawn(config(8, Router::Session)).unwrap();
    let addr = sim.addr();
    let root = chat(addr, &["hello"], &[("x-dynamo-session-id", "root-1")]).await;
    assert_eq!(root.engine as u64, hash_str("root-1") % 8);
    let mut elsewhere_by_hash = 0;
    for i in 0..8 {
        let child = format!("root-1::sa:{i}");
        let headers = [
            ("x-dynamo-session-id", child.as_str()),
            ("x-dynamo-parent-session-id", "root-1"),
        ];
        let first = chat(addr, &["task"], &headers).await;
        assert_eq!(first.engine, root.engine, "{child}");
        // Later turns stay, with or without the parent header.
        let later = chat(addr, &["task more"], &headers[..1]).await;
        assert_eq!(later.engine, root.engine, "{child}");
        if (hash_str(&child) % 8) as usize != root.engine {
            elsewhere_by_hash += 1;
        }
    }
    assert!(
        elsewhere_by_hash > 0,
        "the binding, not the hash, placed them"
    );
    // A child of a parent never seen goes by its own hash.
    let orphan = chat(
        addr,
        &["x"],
        &[
            ("x-dynamo-session-id", "orphan"),
            ("x-dynamo-parent-session-id", "nobody"),
        ],
    )
    .await;
    assert_eq!(orphan.engine as u64, hash_str("orphan") % 8);
    // Other session headers do not key this router: round-robin, counted.
    let unkeyed_before = series(
        &sim,
        "agentx_sim:router_unkeyed_total{model_name=\"agentx-sim\"}",
    );
    assert_eq!(unkeyed_before, 0.0);
    let a = chat(addr, &["y"], &[("x-correlation-id", "c")]).await;
    let b = chat(addr, &["y"], &[("x-correlation-id", "c")]).await;
    assert_eq!((a.engine + 1) % 8, b.engine, "round-robin without the key");
    assert_eq!(
        series(
            &sim,
            "agentx_sim:router_unkeyed_total{model_name=\"agentx-sim\"}"
        ),
        2.0
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn round_robin_spreads_and_least_loaded_takes_the_lowest_idle_engine() {
    let sim = spawn(config(4, Router::RoundRobin)).unwrap();
    let mut engines = Vec::new();
    for _ in 0..8 {
        let pinned = [("x-dynamo-session-id", "s"), ("x-correlation-id", "s")];
        engines.push(chat(sim.addr(), &["a b c"], &pinned).await.engine);
    }
    assert_eq!(engines, [0, 1, 2, 3, 0, 1, 2, 3], "headers are ignored");
    sim.shutdown().await;

    // One request at a time: every engine idle, so the tie goes to engine 0.
    let sim = spawn(config(4, Router::LeastLoaded)).unwrap();
    for i in 0..4 {
        let session = format!("s{i}");
        let said = chat(sim.addr(), &["a"], &[("x-correlation-id", &session)]).await;
        assert_eq!(said.engine, 0);
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn each_miss_has_its_cause_and_the_counters_add_them_up() {
    // Two engines in turn, blocks of 4 tokens, room for 4 blocks each.
    let mut c = config(2, Router::RoundRobin);
    c.block_size = 4;
    c.cache_capacity_tokens = 16;
    let sim = spawn(c).unwrap();
    let (p, q) = (words(10, "p"), words(20, "q"));
    let mut said = Vec::new();
    for prompt in [&p, &p, &p, &q, &q, &p] {
        said.push(chat(sim.addr(), &[prompt.as_str()], &[]).await);
    }
    let truth: Vec<(usize, u64, u64, u64, u64)> = said
        .iter()
        .map(|s| (s.engine, s.cached, s.cold, s.capacity, s.routing))
        .collect();
    assert_eq!(
        truth,
        [
            (0, 0, 10, 0, 0), // p is new everywhere
            (1, 0, 2, 0, 8),  // engine 0 holds p's two usable blocks
            (0, 8, 2, 0, 0),  // a hit; the tail is cold by construction
            (1, 0, 20, 0, 0), // q is new; engine 1 evicts p's blocks and q's last
            (0, 0, 4, 0, 16), // engine 1 holds q's four usable blocks
            (1, 0, 2, 8, 0),  // p was cached (twice) and evicted everywhere
        ]
    );
    let order: Vec<u64> = said.iter().map(|s| s.admit_seq).collect();
    assert_eq!(order, [1, 2, 3, 4, 5, 6]);
    let page = |engine: usize, cause: &str| {
        series(
            &sim,
            &format!(
                "agentx_sim:prompt_miss_tokens_total{{engine=\"{engine}\",cause=\"{cause}\"}}"
            ),
        ) as u64
    };
    for engine in [0, 1] {
        let mine = || said.iter().filter(|s| s.engine == engine);
        assert_eq!(page(engine, "cold"), mine().map(|s| s.cold).sum::<u64>());
        assert_eq!(
            page(engine, "capacity"),
            mine().map(|s| s.capacity).sum::<u64>()
        );
        assert_eq!(
            page(engine, "routing"),
            mine().map(|s| s.routing).sum::<u64>()
        );
    }
    let evicted = |engine: usize| {
        series(
            &sim,
            &format!(
                "agentx_sim:kv_evicted_blocks_total{{engine=\"{engine}\",cause=\"capacity\"}}"
            ),
        )
    };
    // Engine 0 evicts p's two blocks and q's last at request 5; engine 1 three at request 4 and
    // two of q's at request 6.
    assert_eq!((evicted(0), evicted(1)), (3.0, 5.0));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_replay_through_the_cache_model_predicts_every_hit_and_eviction() {
    let mut c = config(2, Router::Session);
    c.block_size = 4;
    c.cache_capacity_tokens = 64;
    c.eviction = Eviction::Lru;
    let sim = spawn(c).unwrap();
    // Three conversations of six turns, interleaved; each turn resends the history.
    let mut histories: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut sent: Vec<(Said, Vec<String>)> = Vec::new();
    for turn in 0..6 {
        for (session, history) in histories.iter_mut().enumerate() {
            history.push(words(
                5 + 3 * turn + session,
                &format!("s{session}t{turn}w"),
            ));
            let texts: Vec<&str> = history.iter().map(String::as_str).collect();
            let key = format!("conv-{session}");
            let said = chat(sim.addr(), &texts, &[("x-dynamo-session-id", &key)]).await;
            sent.push((said, history.clone()));
        }
    }
    sent.sort_by_key(|(said, _)| said.admit_seq);
    let mut model: HashMap<usize, Lru> = HashMap::new();
    let mut hits = 0;
    for (said, texts) in &sent {
        let chain = chain_of(texts.iter().map(String::as_str), 4);
        assert_eq!(chain.tokens, said.prompt);
        let lru = model.entry(said.engine).or_insert_with(|| Lru::new(16));
        let usable = ((chain.tokens - 1) / 4) as usize;
        let lookup = lru.lookup_and_insert(&chain.hashes, usable);
        assert_eq!(lookup.hit_blocks as u64 * 4, said.cached, "{said:?}");
        hits += lookup.hit_blocks;
    }
    assert!(hits > 0, "the workload hits");
    let mut evictions = 0;
    for engine in [0, 1] {
        let key =
            format!("agentx_sim:kv_evicted_blocks_total{{engine=\"{engine}\",cause=\"capacity\"}}");
        let predicted = model.get(&engine).map_or(0, Lru::evicted_total);
        assert_eq!(series(&sim, &key) as u64, predicted, "engine {engine}");
        evictions += predicted;
    }
    assert!(evictions > 0, "the workload evicts");
    sim.shutdown().await;
}

/// A body past the size the server parses on its reactor (a 60,000-word prompt, about 470 KB)
/// is read as a small one is: its exact prompt count, its blocks cached for its repeat, and a small
/// request sent beside it answered too.
#[tokio::test]
async fn a_long_prompt_parsed_off_the_worker_counts_and_caches_as_a_short_one() {
    let mut c = config(1, Router::RoundRobin);
    c.block_size = 16;
    let sim = spawn(c).unwrap();
    let long = words(60_000, "w");
    assert!(long.len() > super::prep::PREPARE_INLINE_BYTES);
    let short = words(40, "s");
    let (long_prompt, short_prompt) = ([long.as_str()], [short.as_str()]);
    let (first, beside) = tokio::join!(
        chat(sim.addr(), &long_prompt, &[]),
        chat(sim.addr(), &short_prompt, &[])
    );
    assert_eq!((first.prompt, first.cached), (60_000, 0));
    assert_eq!(beside.prompt, 40);
    let again = chat(sim.addr(), &[long.as_str()], &[]).await;
    assert_eq!(
        (again.prompt, again.cached),
        (60_000, 60_000 / 16 * 16 - 16)
    );
    sim.shutdown().await;
}
