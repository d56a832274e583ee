//! [`Client`] as the replay's [`Transport`]: the production side of the seam the replay's unit tests
//! fill with a scripted one.

use tokio::sync::watch;

use agentx_protocol::transport::{Sending, Transport};

use crate::{Client, JsonBody, RequestIds};

impl Transport for Client {
    fn send<'a>(
        &'a self,
        body: JsonBody,
        ids: RequestIds<'a>,
        keep_text: bool,
        cancel: &'a mut watch::Receiver<bool>,
    ) -> Sending<'a> {
        Box::pin(Client::send(self, body, ids, keep_text, cancel))
    }

    fn end_session(&self, correlation_id: &str) {
        Client::end_session(self, correlation_id);
    }
}
