//! When a request's bytes arrived at the server's socket: the kernel's receive timestamp of each
//! read (`SO_TIMESTAMPNS`, the time the last segment read came in), not the time the server got
//! round to reading them.
//!
//! A server whose one core is busy (parsing another long prompt, admitting another request to its
//! cache model) reads a request's last bytes late; stamped at the read, that wait would count as the
//! client's (`x-agentx-sim-request-received-ns` is where the client's part of a time to first token
//! ends). The kernel stamps each segment as it is received, whatever the server is doing, so the
//! server's own lateness counts as its own, as on a real server.
//!
//! [`RxStamped`] wraps an accepted connection and keeps the stamp of its latest read in an
//! [`RxClock`] the connection's requests share. Off Linux, or where the kernel gives no stamp, the
//! clock stays empty and the request is stamped when it was read.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The receive timestamp of a connection's latest read, in unix nanoseconds (0: none yet).
#[derive(Debug, Clone, Default)]
pub(crate) struct RxClock(Arc<AtomicU64>);

impl RxClock {
    /// When the bytes of the connection's latest read arrived, since the unix epoch.
    pub(crate) fn last(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    fn set(&self, unix_nanos: u64) {
        self.0.store(unix_nanos, Ordering::Relaxed);
    }
}

/// The bytes one read takes at most.
const SCRATCH_BYTES: usize = 64 << 10;

thread_local! {
    /// Where a read lands before it is copied to its caller: one per thread, not one per connection.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; SCRATCH_BYTES]);
}

/// An accepted connection that stamps its reads ([`RxClock`]).
pub(crate) struct RxStamped {
    stream: TcpStream,
    clock: RxClock,
    /// Room for one control message, kept across reads; empty when the kernel refused the option.
    control: Vec<u8>,
}

impl RxStamped {
    /// `stream`, asking the kernel to stamp what it receives; its clock.
    pub(crate) fn new(stream: TcpStream) -> (RxStamped, RxClock) {
        let clock = RxClock::default();
        let control = stamping::enable(&stream);
        let stamped = RxStamped {
            stream,
            clock: clock.clone(),
            control,
        };
        (stamped, clock)
    }
}

impl AsyncRead for RxStamped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.control.is_empty() {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        }
        loop {
            std::task::ready!(this.stream.poll_read_ready(cx))?;
            // Read into the thread's scratch and copied: the caller's buffer is uninitialised, and
            // zeroing all of it for each read costs more than copying what was read.
            let read = SCRATCH.with_borrow_mut(|scratch| {
                let room = buf.remaining().min(scratch.len());
                let read = this.stream.try_io(tokio::io::Interest::READABLE, || {
                    stamping::read(&this.stream, &mut scratch[..room], &mut this.control)
                });
                if let Ok((bytes, _)) = read {
                    buf.put_slice(&scratch[..bytes]);
                }
                read
            });
            match read {
                Ok((_, stamp)) => {
                    if let Some(unix_nanos) = stamp {
                        this.clock.set(unix_nanos);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for RxStamped {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(target_os = "linux")]
mod stamping {
    use std::io::{self, IoSliceMut};
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{
        recvmsg, setsockopt, sockopt::ReceiveTimestampns, ControlMessageOwned, MsgFlags,
    };
    use nix::sys::time::TimeSpec;
    use tokio::net::TcpStream;

    /// Turns the kernel's receive timestamps on for `stream`: the room for one stamp, or none
    /// when the kernel refused.
    pub(super) fn enable(stream: &TcpStream) -> Vec<u8> {
        match setsockopt(stream, ReceiveTimestampns, &true) {
            Ok(()) => nix::cmsg_space!(TimeSpec),
            Err(e) => {
                tracing::debug!("no receive timestamps on this connection: {e}");
                Vec::new()
            }
        }
    }

    /// One read into `into`: the bytes read and the stamp of the last segment among them.
    pub(super) fn read(
        stream: &TcpStream,
        into: &mut [u8],
        control: &mut [u8],
    ) -> io::Result<(usize, Option<u64>)> {
        let mut slices = [IoSliceMut::new(into)];
        let message = recvmsg::<()>(
            stream.as_raw_fd(),
            &mut slices,
            Some(control),
            MsgFlags::empty(),
        )?;
        let stamp = message.cmsgs().ok().and_then(|mut messages| {
            messages.find_map(|message| match message {
                ControlMessageOwned::ScmTimestampns(time) => {
                    let nanos =
                        i128::from(time.tv_sec()) * 1_000_000_000 + i128::from(time.tv_nsec());
                    u64::try_from(nanos).ok().filter(|&nanos| nanos > 0)
                }
                _ => None,
            })
        });
        Ok((message.bytes, stamp))
    }
}

#[cfg(not(target_os = "linux"))]
mod stamping {
    use std::io;

    use tokio::net::TcpStream;

    /// No receive timestamps here: reads go straight to the stream.
    pub(super) fn enable(_stream: &TcpStream) -> Vec<u8> {
        Vec::new()
    }

    pub(super) fn read(
        _stream: &TcpStream,
        _into: &mut [u8],
        _control: &mut [u8],
    ) -> io::Result<(usize, Option<u64>)> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Bytes read late carry the time they came in, not the time they were read.
    #[tokio::test]
    async fn a_late_read_carries_the_time_its_bytes_came() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let (mut server, clock) = RxStamped::new(accepted);
        assert_eq!(clock.last(), None);

        let unix_now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let before = unix_now();
        client.write_all(b"first").await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        client.write_all(b" second").await.unwrap();
        let after_writes = unix_now();
        std::thread::sleep(Duration::from_millis(60));

        let mut got = [0; 64];
        let mut read = 0;
        while read < 12 {
            read += server.read(&mut got[read..]).await.unwrap();
        }
        assert_eq!(&got[..read], b"first second");
        let stamp = clock.last().expect("Linux stamps what it receives");
        assert!(stamp >= before, "{stamp:?} before {before:?}");
        // The stamp is of the last segment read (the second write), long before the read.
        assert!(stamp <= after_writes, "{stamp:?} after {after_writes:?}");
        assert!(unix_now().checked_sub(stamp).unwrap() >= Duration::from_millis(60));

        // Writes go through as they are.
        server.write_all(b"answer").await.unwrap();
        let mut answer = [0; 6];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"answer");
    }
}
