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
        let kept = spans.clone();
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
        Receiver { url, spans }
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans
            .lock()
            .map(|spans| spans.clone())
            .unwrap_or_default()
    }
}

/// Keeps the spans of one export request; 404 for another path, 400 for a body that does not decode.
async fn take(
    request: hyper::Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Span>>,
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
    if let Ok(mut spans) = kept.lock() {
        for resource in message.resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    status(200)
}
