//! The egress proxy: a jailed process (the external coder) that must
//! reach its model endpoint, and nothing else of the network.
//!
//! bubblewrap offers a network namespace of its own (loopback only) or the
//! host's whole network; it cannot narrow the host's to one endpoint. The
//! proxy gives the jail its own namespace and forwards TCP for the named
//! endpoints only:
//!
//! - on the host, [`EgressProxy::start`] listens on one Unix socket per endpoint in
//!   a private directory and connects each accepted stream to the endpoint
//!   (resolved on the host);
//! - inside the jail, this executable's hidden `__jail-egress` mode
//!   ([`forwarder_main`]) listens on `127.0.0.1:PORT` for each endpoint,
//!   forwards every connection to its Unix socket, and runs the jailed
//!   command as its child (so the listeners are up before it starts);
//! - the jail's `/etc/hosts` maps each endpoint's host name to `127.0.0.1`,
//!   so the agent's unchanged URL (`https://api.example.com/v1`) reaches the
//!   forward; TLS passes through untouched (the name still matches the
//!   certificate).
//!
//! Anything else — another host, another port, a local service such as a
//! database on the host's loopback — is unreachable: the jail's loopback is
//! its own.

use std::ffi::{OsStr, OsString};
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The first argument that runs this executable as the in-jail forwarder.
pub const FORWARDER_ARG: &str = "__jail-egress";

/// Most connections the proxy forwards at once (each costs the host two
/// threads): more are closed at once, so a jailed agent opening thousands
/// cannot exhaust the host's threads.
pub const MAX_OPEN_CONNECTIONS: usize = 64;

/// One endpoint the jailed process may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address, as the agent's URL names it.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// An endpoint text that is neither `HOST:PORT` nor an `http(s)://` URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "endpoint `{0}` is not HOST:PORT or an http(s):// URL (e.g. `api.openai.com:443`, `http://127.0.0.1:8080/v1`)"
)]
pub struct BadEndpoint(pub String);

impl std::str::FromStr for Endpoint {
    type Err = BadEndpoint;

    fn from_str(text: &str) -> Result<Self, BadEndpoint> {
        let bad = || BadEndpoint(text.to_string());
        let (default_port, rest) = if let Some(r) = text.strip_prefix("https://") {
            (Some(443), r)
        } else if let Some(r) = text.strip_prefix("http://") {
            (Some(80), r)
        } else {
            (None, text)
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p.parse::<u16>().map_err(|_| bad())?)),
            None => (authority, None),
        };
        let port = port.or(default_port).ok_or_else(bad)?;
        let valid = !host.is_empty()
            && port != 0
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !valid {
            return Err(bad());
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
        })
    }
}

/// `HOST:PORT`, the form `from_str` reads back.
impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The host side of the egress proxy: one Unix socket per endpoint, forwarded while
/// the proxy lives.
pub struct EgressProxy {
    dir: crate::process::Scratch,
    endpoints: Vec<Endpoint>,
    stop: Arc<AtomicBool>,
}

impl EgressProxy {
    /// Listen for the jail's connections to `endpoints` (at least one; a
    /// port may appear once).
    pub fn start(endpoints: &[Endpoint]) -> io::Result<EgressProxy> {
        let dir = crate::process::Scratch::new("egress").map_err(io::Error::other)?;
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut hosts = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for (i, ep) in endpoints.iter().enumerate() {
            let listener = UnixListener::bind(dir.path().join(format!("{i}.sock")))?;
            let (target, stop, open) = (ep.clone(), stop.clone(), open.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(inside) = conn else { continue };
                    if open.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN_CONNECTIONS {
                        open.fetch_sub(1, Ordering::SeqCst);
                        tracing::warn!("egress proxy: too many open connections; one refused");
                        continue;
                    }
                    let (target, open) = (target.clone(), open.clone());
                    std::thread::spawn(move || {
                        match TcpStream::connect((target.host.as_str(), target.port)) {
                            Ok(outside) => splice(inside, outside),
                            Err(e) => {
                                tracing::warn!(host = %target.host, port = target.port, error = %e, "egress proxy: endpoint unreachable")
                            }
                        }
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
            if ep.host.parse::<std::net::IpAddr>().is_err() {
                hosts.push_str(&format!("127.0.0.1 {}\n", ep.host));
            }
        }
        std::fs::write(dir.path().join("hosts"), hosts)?;
        Ok(EgressProxy {
            dir,
            endpoints: endpoints.to_vec(),
            stop,
        })
    }

    /// The directory the jail must bind (read-write: connecting to a Unix
    /// socket needs write permission on it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The jail's `/etc/hosts`: each endpoint's host name at `127.0.0.1`.
    pub fn hosts_file(&self) -> PathBuf {
        self.dir.path().join("hosts")
    }

    /// Whether a port below 1024 must be bound inside the jail (needs
    /// `CAP_NET_BIND_SERVICE` there).
    pub fn needs_low_ports(&self) -> bool {
        self.endpoints.iter().any(|e| e.port < 1024)
    }

    /// The forwarder's arguments before the jailed command:
    /// `__jail-egress --listen PORT=SOCKET … --`.
    pub fn forwarder_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from(FORWARDER_ARG)];
        for (i, ep) in self.endpoints.iter().enumerate() {
            let mut a = OsString::from(format!("{}=", ep.port));
            a.push(self.dir.path().join(format!("{i}.sock")));
            args.push("--listen".into());
            args.push(a);
        }
        args.push("--".into());
        args
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake each accept loop so it sees the flag and ends.
        for i in 0..self.endpoints.len() {
            let _ = UnixStream::connect(self.dir.path().join(format!("{i}.sock")));
        }
    }
}

/// Copy both ways until either side closes.
fn splice<A, B>(a: A, b: B)
where
    A: io::Read + io::Write + TryCloneShutdown + Send + 'static,
    B: io::Read + io::Write + TryCloneShutdown + Send + 'static,
{
    let (Ok(mut a2), Ok(mut b2)) = (a.try_clone_stream(), b.try_clone_stream()) else {
        return;
    };
    let (mut a, mut b) = (a, b);
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut a, &mut b2);
        b2.shutdown_write();
    });
    let _ = io::copy(&mut b, &mut a2);
    a2.shutdown_write();
    let _ = up.join();
}

/// The stream operations [`splice`] needs from TCP and Unix streams.
trait TryCloneShutdown: Sized {
    fn try_clone_stream(&self) -> io::Result<Self>;
    fn shutdown_write(&self);
}

impl TryCloneShutdown for TcpStream {
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl TryCloneShutdown for UnixStream {
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// The in-jail forwarder, when this executable was started as
/// `__jail-egress --listen PORT=SOCKET … -- PROGRAM ARGS…`: `None` otherwise.
/// Listens on `127.0.0.1:PORT` for each pair, runs the program as its
/// child and exits with its status.
pub fn forwarder_main() -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().map(OsString::as_os_str) != Some(OsStr::new(FORWARDER_ARG)) {
        return None;
    }
    Some(match forward_and_run(&args[1..]) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ecdysis egress proxy: {e}");
            ExitCode::from(125)
        }
    })
}

fn forward_and_run(args: &[OsString]) -> io::Result<ExitCode> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    let mut rest = args;
    let mut pairs = Vec::new();
    while let [flag, value, tail @ ..] = rest {
        if flag != "--listen" {
            break;
        }
        let text = value.to_str().ok_or_else(|| bad("--listen is not UTF-8"))?;
        let (port, socket) = text
            .split_once('=')
            .ok_or_else(|| bad("--listen wants PORT=SOCKET"))?;
        let port: u16 = port.parse().map_err(|_| bad("--listen: bad port"))?;
        pairs.push((port, PathBuf::from(socket)));
        rest = tail;
    }
    let [dashdash, program, program_args @ ..] = rest else {
        return Err(bad("expected `-- PROGRAM [ARGS…]`"));
    };
    if dashdash != "--" {
        return Err(bad("expected `--` before the program"));
    }
    for (port, socket) in pairs {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(inside) = conn else { continue };
                let socket = socket.clone();
                std::thread::spawn(move || {
                    if let Ok(outside) = UnixStream::connect(&socket) {
                        splice(inside, outside);
                    }
                });
            }
        });
    }
    let status = std::process::Command::new(program)
        .args(program_args)
        .status()?;
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server answering every connection with `hi` and keeping it open
    /// until the peer closes.
    fn server() -> u16 {
        use std::io::{Read, Write};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let _ = conn.write_all(b"hi");
                    let _ = conn.read(&mut [0u8; 1]);
                });
            }
        });
        port
    }

    #[test]
    fn the_proxy_forwards_a_bounded_number_of_connections() {
        use std::io::Read;
        let port = server();
        let proxy = EgressProxy::start(&[Endpoint {
            host: "127.0.0.1".into(),
            port,
        }])
        .unwrap();
        let socket = proxy.dir().join("0.sock");
        let read_two = |s: &mut UnixStream| {
            let mut buf = [0u8; 2];
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            s.read(&mut buf)
                .map(|n| buf[..n].to_vec())
                .unwrap_or_default()
        };
        // Hostile: past the cap, connections are closed unforwarded.
        let mut held: Vec<UnixStream> = (0..MAX_OPEN_CONNECTIONS)
            .map(|_| UnixStream::connect(&socket).unwrap())
            .collect();
        for s in &mut held {
            assert_eq!(read_two(s), b"hi");
        }
        let mut extra = UnixStream::connect(&socket).unwrap();
        assert_eq!(read_two(&mut extra), b"");
        // Positive control: once they close, the endpoint is reachable again.
        drop(held);
        let started = std::time::Instant::now();
        loop {
            let mut s = UnixStream::connect(&socket).unwrap();
            if read_two(&mut s) == b"hi" {
                break;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(proxy.hosts_file().is_file() && !proxy.needs_low_ports());
    }

    #[test]
    fn endpoints_parse_from_host_port_and_urls() {
        let ep = |s: &str| s.parse::<Endpoint>();
        assert_eq!(
            ep("https://api.example.com/v1"),
            Ok(Endpoint {
                host: "api.example.com".into(),
                port: 443
            })
        );
        assert_eq!(ep("http://127.0.0.1:8080/v1").unwrap().port, 8080);
        assert_eq!(ep("http://localhost").unwrap().port, 80);
        assert_eq!(ep("llm.local:9000").unwrap().host, "llm.local");
        for bad in [
            "",
            "api.example.com",
            "ftp://x:1",
            "h:0",
            "h:99999",
            "a b:1",
            "x/y:1",
        ] {
            assert!(ep(bad).is_err(), "{bad}");
        }
    }
}
