//! An OTLP/HTTP collector for tests: it listens on a free port and keeps every span it was sent,
//! decoded with the same message types the export encodes with. Always compiled (a few lines), so
//! the crate's unit tests and the run's integration tests use one receiver.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A running receiver.
pub struct Receiver {
    /// Its base URL (`http://127.0.0.1:PORT`), what `--otlp-endpoint` takes.
    pub url: String,
    /// Every span received so far, in arrival order.
    pub spans: Arc<Mutex<Vec<Span>>>,
    /// The `agentx.shard` resource attribute each span came under, in the same order.
    shards: Arc<Mutex<Vec<Option<i64>>>>,
}

/// What the receiver keeps of each export request.
#[derive(Clone)]
struct Kept {
    spans: Arc<Mutex<Vec<Span>>>,
    shards: Arc<Mutex<Vec<Option<i64>>>>,
}

impl Receiver {
    /// Starts one on the current runtime.
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free local port");
        let url = format!(
            "http://{}",
            listener.local_addr().expect("a bound listener")
        );
        let spans = Arc::new(Mutex::new(Vec::new()));
        let shards = Arc::new(Mutex::new(Vec::new()));
        let kept = Kept {
            spans: spans.clone(),
            shards: shards.clone(),
        };
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let kept = kept.clone();
                            async move { Ok::<_, std::convert::Infallible>(take(request, &kept).await) }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Receiver { url, spans, shards }
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans
            .lock()
            .map(|spans| spans.clone())
            .unwrap_or_default()
    }

    /// The `agentx.shard` resource attribute of each span of [`Receiver::spans`] (`None`: the
    /// resource had none), in the same order.
    pub fn span_shards(&self) -> Vec<Option<i64>> {
        let _spans = self.spans.lock();
        self.shards
            .lock()
            .map(|shards| shards.clone())
            .unwrap_or_default()
    }
}

/// Keeps the spans of one export request; 404 for another path, 400 for a body that does not decode.
async fn take(
    request: hyper::Request<hyper::body::Incoming>,
    kept: &Kept,
) -> hyper::Response<Full<Bytes>> {
    let status = |code: u16| {
        let mut response = hyper::Response::new(Full::new(Bytes::new()));
        *response.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or_default();
        response
    };
    if request.uri().path() != "/v1/traces" {
        return status(404);
    }
    let Ok(body) = request.into_body().collect().await else {
        return status(400);
    };
    let Ok(message) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return status(400);
    };
    // Both under the spans' lock, so the two lists stay in step.
    if let (Ok(mut spans), Ok(mut shards)) = (kept.spans.lock(), kept.shards.lock()) {
        for resource in message.resource_spans {
            let shard = resource.resource.as_ref().and_then(|resource| {
                resource
                    .attributes
                    .iter()
                    .find(|attribute| attribute.key == "agentx.shard")
                    .and_then(|attribute| attribute.value.as_ref()?.value.as_ref())
                    .and_then(|value| match value {
                        opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(
                            shard,
                        ) => Some(*shard),
                        _ => None,
                    })
            });
            for scope in resource.scope_spans {
                shards.extend(scope.spans.iter().map(|_| shard));
                spans.extend(scope.spans);
            }
        }
    }
    status(200)
}
