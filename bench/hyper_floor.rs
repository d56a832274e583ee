//! The least a streaming client built on agentx's own HTTP stack (tokio's multi-thread runtime and
//! hyper-util's pooled client, as `agentx::client` sets it up) spends per token: N concurrent tasks,
//! each posting the same small streaming chat completion as `bench/floor.c` and reading the response
//! body frame by frame with no SSE decoding, no JSON, no timestamps and no records; the next request
//! goes out when the body ends. `bench/compare.py --hyper-floor` runs it beside `bench/floor.c`, so the
//! table separates what the stack costs from what agentx adds on top of it.
//!
//!   agentx-bench-hyper-floor PORT CONNECTIONS SECONDS

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const BODY: &str = concat!(
    r#"{"model":"bench-model","messages":[{"role":"user","content":"hello"}],"#,
    r#""max_tokens":300,"stream":true,"ignore_eos":true,"stream_options":{"include_usage":true}}"#
);

fn usage() -> ExitCode {
    eprintln!("usage: agentx-bench-hyper-floor PORT CONNECTIONS SECONDS");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port, conns, secs] = args.as_slice() else {
        return usage();
    };
    let (Ok(port), Ok(conns), Ok(secs)) = (
        port.parse::<u16>(),
        conns.parse::<usize>(),
        secs.parse::<f64>(),
    ) else {
        return usage();
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hyper-floor: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let uri = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let failed = rt.block_on(async move {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .build(http);
        let tasks: Vec<_> = (0..conns)
            .map(|_| {
                let (client, uri) = (client.clone(), uri.clone());
                tokio::spawn(async move {
                    while Instant::now() < end {
                        let req = Request::post(uri.as_str())
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                            .map_err(|e| e.to_string())?;
                        let mut body = client
                            .request(req)
                            .await
                            .map_err(|e| e.to_string())?
                            .into_body();
                        while let Some(frame) = body.frame().await {
                            frame.map_err(|e| e.to_string())?;
                        }
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        let mut failed = None;
        for t in tasks {
            match t.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed = Some(e),
                Err(e) => failed = Some(e.to_string()),
            }
        }
        failed
    });
    match failed {
        Some(e) => {
            eprintln!("hyper-floor: a request failed: {e}");
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}
