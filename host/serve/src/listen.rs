//! The connections in front of the API: the accept loop, hyper's HTTP/1
//! connection with a header-read timer, and the connection caps.
//!
//! A request's own time limit (`[http] request_timeout_seconds`) starts
//! only once its head is parsed, so without these a stranger, no token
//! needed, could hold descriptors for ever with idle or slowly trickling
//! sockets. Here every connection must deliver each request head within
//! `header_read_timeout_seconds`, may buffer at most `max_head_bytes` of
//! it, and is refused at once beyond `max_connections_per_ip` from its
//! peer or `max_connections` in all.
//!
//! Refusals hyper writes itself (a head it cannot parse, too long or too
//! large) carry the same JSON error body as every other refusal
//! ([`JsonRefusals`]).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::api::error_object;
use super::config::HttpConfig;

/// Open connections, per peer and in all.
pub struct ConnectionLimits {
    per_peer: usize,
    total: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_connections` are open.
    Total(usize),
    /// `max_connections_per_ip` are open from this peer.
    Peer(usize),
}

impl Refusal {
    fn message(self) -> String {
        match self {
            Refusal::Total(n) => {
                format!("the server has {n} connections open (max_connections); retry later")
            }
            Refusal::Peer(n) => format!(
                "your address has {n} connections open (max_connections_per_ip); close some"
            ),
        }
    }
}

/// A connection counted against the limits until dropped.
pub struct Admitted {
    limits: Arc<ConnectionLimits>,
    peer: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().expect("connection counts");
        open.total -= 1;
        if let Some(n) = open.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.by_peer.remove(&self.peer);
            }
        }
    }
}

impl ConnectionLimits {
    /// At most `per_peer` connections from one peer, `total` in all.
    pub fn new(per_peer: usize, total: usize) -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits {
            per_peer,
            total,
            open: Mutex::default(),
        })
    }

    /// Count a new connection from `peer`, or refuse it.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Refusal> {
        let peer = peer_key(peer);
        let mut open = self.open.lock().expect("connection counts");
        if open.total >= self.total {
            return Err(Refusal::Total(self.total));
        }
        let from_peer = open.by_peer.entry(peer).or_default();
        if *from_peer >= self.per_peer {
            return Err(Refusal::Peer(self.per_peer));
        }
        *from_peer += 1;
        open.total += 1;
        Ok(Admitted {
            limits: self.clone(),
            peer,
        })
    }
}

/// What a peer is counted as: its IPv4 address, or its IPv6 /64 (one
/// host is usually given a whole /64).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Serve `app` on `listener` until `stop`; then stop accepting, let open
/// connections finish their requests for up to `request_timeout_seconds`,
/// and close the rest.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    http: HttpConfig,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let limits = ConnectionLimits::new(http.max_connections_per_ip, http.max_connections);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(http.header_read_timeout_seconds))
        .max_header_size(http.max_head_bytes)
        .max_buf_size(http.max_head_bytes.max(super::config::MIN_HEAD_BYTES));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors, typically: retrying at once would
                // spin on the same error while connections close.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = match limits.admit(peer.ip()) {
            Ok(a) => a,
            Err(refusal) => {
                refuse(stream, refusal);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(JsonRefusals::new(stream, http.max_head_bytes, admitted));
        let conn = builder.serve_connection(io, TowerToHyperService::new(app.clone()));
        let mut stop = stop.clone();
        connections.spawn(async move {
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection from {peer}: {e}");
                    }
                    return;
                }
                _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    drop(listener);
    let grace = Duration::from_secs(http.request_timeout_seconds);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!("closing {} connection(s) still open", connections.len());
    }
}

/// Answer a refused connection with a JSON 503 and close it, without
/// reading its request (nor waiting for the answer to be read: the
/// answer fits in the socket's buffer, and a peer that already sent its
/// request may get a reset instead).
fn refuse(stream: TcpStream, refusal: Refusal) {
    let body = serde_json::json!({
        "error": error_object("too_many_connections", &refusal.message())
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// A connection whose automatic answers from hyper (400, 414 and 431 for
/// heads it cannot parse or buffer, written with an empty body) are
/// replaced, as they are written, by the same answers with a JSON error
/// body. The router never answers these statuses without a
/// `content-type`, so such a head can only be hyper's.
///
/// Hyper drops a connection it refused with the rest of the request
/// unread, which makes the kernel reset it, and a reset can destroy the
/// answer before the client reads it; so a connection whose answer was
/// replaced is closed the way web servers do (a "lingering close"): its
/// writing half first, then what the client still sends is read and
/// discarded, for at most [`LINGER`] and `max_head_bytes`, still counted
/// against the connection caps.
pub struct JsonRefusals<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> {
    inner: Option<T>,
    max_head_bytes: usize,
    replacing: Option<Replacement>,
    replaced: bool,
    admitted: Option<Admitted>,
}

/// How long a refused connection is read before it is closed.
pub const LINGER: Duration = Duration::from_secs(2);

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Drop for JsonRefusals<T> {
    fn drop(&mut self) {
        let (Some(mut inner), true) = (self.inner.take(), self.replaced) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let admitted = self.admitted.take();
        let bound = self.max_head_bytes;
        runtime.spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _admitted = admitted;
            let _ = inner.shutdown().await;
            let mut scratch = vec![0u8; 8 << 10];
            let mut read = 0;
            let _ = tokio::time::timeout(LINGER, async {
                while read < bound {
                    match inner.read(&mut scratch).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                }
            })
            .await;
        });
    }
}

struct Replacement {
    bytes: Vec<u8>,
    written: usize,
    /// The length of hyper's head, reported written once ours is.
    replaces: usize,
}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> JsonRefusals<T> {
    /// Wrap `inner`, counted as `admitted` until closed; `max_head_bytes`
    /// is named in 431 answers.
    pub fn new(inner: T, max_head_bytes: usize, admitted: Admitted) -> JsonRefusals<T> {
        JsonRefusals {
            inner: Some(inner),
            max_head_bytes,
            replacing: None,
            replaced: false,
            admitted: Some(admitted),
        }
    }

    fn inner(&mut self) -> Pin<&mut T> {
        Pin::new(self.inner.as_mut().expect("open until dropped"))
    }
}

/// The JSON answer replacing `buf`, when `buf` starts with a whole
/// automatic answer from hyper; with the length of that answer.
fn replacement(buf: &[u8], max_head_bytes: usize) -> Option<Replacement> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let rest = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))?;
    let status: u16 = rest.get(..3)?.parse().ok()?;
    if lines.any(|l| l.to_ascii_lowercase().starts_with("content-type:")) {
        return None;
    }
    let (reason, code, message) = match status {
        400 => (
            "Bad Request",
            "bad_request",
            "the request is not valid HTTP/1.1".to_string(),
        ),
        414 => (
            "URI Too Long",
            "uri_too_long",
            "the request target is longer than 65534 bytes".to_string(),
        ),
        431 => (
            "Request Header Fields Too Large",
            "headers_too_large",
            format!(
                "the request's head is larger than {max_head_bytes} bytes (max_head_bytes) or has more than 100 headers"
            ),
        ),
        _ => return None,
    };
    let body = serde_json::json!({"error": error_object(code, &message)}).to_string();
    let bytes = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    Some(Replacement {
        bytes,
        written: 0,
        replaces: end,
    })
}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> JsonRefusals<T> {
    /// Write the replacement under way; then report hyper's head written.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut r = self.replacing.take().expect("a replacement under way");
        while r.written < r.bytes.len() {
            match self.inner().poll_write(cx, &r.bytes[r.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => r.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.replacing = Some(r);
                    return Poll::Pending;
                }
            }
        }
        self.replaced = true;
        Poll::Ready(Ok(r.replaces))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for JsonRefusals<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().inner().poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for JsonRefusals<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replacing.is_none() {
            this.replacing = replacement(buf, this.max_head_bytes);
        }
        if this.replacing.is_some() {
            return this.poll_replacement(cx);
        }
        this.inner().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replacing.is_none()
            && let Some(first) = bufs.iter().find(|b| !b.is_empty())
        {
            this.replacing = replacement(first, this.max_head_bytes);
        }
        if this.replacing.is_some() {
            return this.poll_replacement(cx);
        }
        this.inner().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().inner().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().inner().poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_capped_apart_and_together_and_released_on_drop() {
        let limits = ConnectionLimits::new(2, 3);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let a1 = limits.admit(a).unwrap();
        let _a2 = limits.admit(a).unwrap();
        assert_eq!(limits.admit(a).err(), Some(Refusal::Peer(2)));
        let _b1 = limits.admit(b).unwrap();
        assert_eq!(limits.admit(b).err(), Some(Refusal::Total(3)));
        drop(a1);
        let _a3 = limits.admit(a).unwrap();
        // One IPv6 host's addresses share its /64.
        let limits = ConnectionLimits::new(1, 10);
        let _v6 = limits.admit("2001:db8::1".parse().unwrap()).unwrap();
        assert_eq!(
            limits.admit("2001:db8::2".parse().unwrap()).err(),
            Some(Refusal::Peer(1))
        );
        limits.admit("2001:db8:0:1::1".parse().unwrap()).unwrap();
    }

    #[tokio::test]
    async fn hypers_empty_refusals_get_a_json_body_and_others_pass_through() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = ConnectionLimits::new(1, 1);
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let mut out = JsonRefusals::new(ours, 1000, limits.admit(peer).unwrap());
        out.write_all(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n")
            .await
            .unwrap();
        drop(out);
        let mut got = Vec::new();
        theirs.read_to_end(&mut got).await.unwrap();
        let text = String::from_utf8(got).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 "), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "uri_too_long");
        // Closed for writing, still read: still counted until the peer
        // closes too.
        assert!(limits.admit(peer).is_err());
        theirs.write_all(b"the rest of the request").await.unwrap();
        drop(theirs);
        tokio::time::timeout(LINGER, async {
            while limits.admit(peer).is_err() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the lingering connection was never closed");

        let ours: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        let (inner, mut theirs) = tokio::io::duplex(1 << 16);
        let mut out = JsonRefusals::new(
            inner,
            1000,
            ConnectionLimits::new(1, 1).admit(peer).unwrap(),
        );
        out.write_all(ours).await.unwrap();
        drop(out);
        let mut got = Vec::new();
        theirs.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, ours);
    }
}
