//! What the replay needs from a client: send one request and read its response to the end, and
//! end a session that stops before its final turn. the client crate's `Client` is the production transport; the
//! replay's unit tests put a scripted one in its place.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

use crate::{Exchange, JsonBody, RequestIds};

/// The future of one [`Transport::send`].
pub type Sending<'a> = Pin<Box<dyn Future<Output = Exchange> + Send + 'a>>;

/// The replay's side of the HTTP client.
pub trait Transport: Send + Sync {
    /// Posts `body` and reads the response to its end, or until `cancel` turns true. `keep_text`
    /// collects the reply text. Every outcome, failures included, is an [`Exchange`].
    fn send<'a>(
        &'a self,
        body: JsonBody,
        ids: RequestIds<'a>,
        keep_text: bool,
        cancel: &'a mut watch::Receiver<bool>,
    ) -> Sending<'a>;

    /// Ends a session that stops before its final turn (its sticky connection, if any, closes).
    fn end_session(&self, correlation_id: &str);
}
