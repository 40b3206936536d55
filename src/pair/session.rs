//! The TCP side of `pair`: a listener that accepts exactly one peer holding the job token, a connector that
//! retries until the listener is up, and the framed control channel between them. Every read and write is
//! bounded by the run's deadline; every error names the peer. The listening socket is closed as soon as the
//! peer is accepted (or the deadline passes), so nothing is left listening.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::measure::rc::{fail, Failure};
use crate::measure::rdma_pair::{Channel, Sync};
use crate::pair::wire::{self, Message, NoPorts, PortInfo, WireError, HEADER_LEN};

/// One handshake may take at most this long, so a slow or silent client cannot hold the listener.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(5);
const RETRY_EVERY: Duration = Duration::from_millis(200);
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// What this node tells its peer about itself.
#[derive(Debug, Clone)]
pub struct Local {
    pub node: String,
    pub ports: Vec<PortInfo>,
    pub no_ports: Option<NoPorts>,
    /// Listener in a ring: the one node name it accepts (its predecessor), so a wrong rank is refused, not
    /// measured as if it were the neighbour.
    pub accept_only: Option<String>,
}

/// The accepted or reached peer.
#[derive(Debug)]
pub struct Peer {
    stream: TcpStream,
    pub node: String,
    pub addr: SocketAddr,
    pub ports: Vec<PortInfo>,
    pub no_ports: Option<NoPorts>,
    deadline: Instant,
    /// Set by `Channel` calls: which port pair the synchronisation belongs to.
    pub port_pair: u32,
}

/// Why no peer (or a broken one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionError(pub String);

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn left(deadline: Instant) -> Option<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    (!d.is_zero()).then_some(d)
}

/// Why a frame could not be read.
#[derive(Debug)]
enum ReadFail {
    Wire(WireError),
    Closed,
    TimedOut,
    Io(std::io::Error),
}

impl std::fmt::Display for ReadFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFail::Wire(e) => write!(f, "{e}"),
            ReadFail::Closed => f.write_str("closed the connection"),
            ReadFail::TimedOut => f.write_str("sent nothing complete before the deadline"),
            ReadFail::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Fills `buf` before `deadline`; checks the header after every read so garbage is refused at once.
fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
    header: bool,
) -> Result<(), ReadFail> {
    let mut got = 0;
    while got < buf.len() {
        let Some(t) = left(deadline) else {
            return Err(ReadFail::TimedOut);
        };
        stream.set_read_timeout(Some(t)).map_err(ReadFail::Io)?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(ReadFail::Closed),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ReadFail::TimedOut)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Err(ReadFail::Closed),
            Err(e) => return Err(ReadFail::Io(e)),
        }
        if header {
            match wire::check_header(&buf[..got]) {
                Ok(_) | Err(WireError::Incomplete { .. }) => {}
                Err(e) => return Err(ReadFail::Wire(e)),
            }
        }
    }
    Ok(())
}

fn read_message(stream: &mut TcpStream, deadline: Instant) -> Result<Message, ReadFail> {
    let mut header = [0u8; HEADER_LEN];
    read_full(stream, &mut header, deadline, true)?;
    let len = wire::check_header(&header).map_err(ReadFail::Wire)?;
    let mut body = vec![0u8; len];
    read_full(stream, &mut body, deadline, false)?;
    wire::decode_body(&body).map_err(ReadFail::Wire)
}

fn write_message(stream: &mut TcpStream, msg: &Message, deadline: Instant) -> std::io::Result<()> {
    let t = left(deadline).ok_or_else(|| std::io::Error::from(ErrorKind::TimedOut))?;
    stream.set_write_timeout(Some(t))?;
    stream.write_all(&wire::encode(msg))
}

/// Waits for exactly one peer with `token` on `bind` until `deadline`. Connections that fail the handshake
/// (garbage, oversized, slow, half-open, wrong token or version) are refused and listed in the error if no
/// good peer comes. The listening socket is gone when this returns.
pub fn listen(
    bind: SocketAddr,
    token: &str,
    local: &Local,
    deadline: Instant,
    on_refused: &mut dyn FnMut(&str),
) -> Result<Peer, SessionError> {
    let listener = TcpListener::bind(bind)
        .map_err(|e| SessionError(format!("cannot listen on {bind}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| SessionError(format!("listen on {bind}: {e}")))?;
    let mut refused = Vec::new();
    loop {
        if let Some(signal) = crate::interrupt::requested() {
            return Err(SessionError(format!(
                "interrupted by {signal} while waiting for a peer on {bind}"
            )));
        }
        if left(deadline).is_none() {
            let mut msg =
                format!("no peer with the job token connected to {bind} before the deadline");
            if !refused.is_empty() {
                msg.push_str(&format!("; refused: {}", refused.join("; ")));
            }
            return Err(SessionError(msg));
        }
        match listener.accept() {
            Ok((stream, addr)) => match greet(stream, addr, token, local, deadline) {
                Ok(peer) => return Ok(peer),
                Err(reason) => {
                    let line = format!("{addr}: {reason}");
                    on_refused(&line);
                    refused.push(line);
                }
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) => return Err(SessionError(format!("accept on {bind}: {e}"))),
        }
    }
}

/// The listener's side of one handshake.
fn greet(
    mut stream: TcpStream,
    addr: SocketAddr,
    token: &str,
    local: &Local,
    deadline: Instant,
) -> Result<Peer, String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let started = Instant::now();
    let limit = deadline.min(started + HANDSHAKE_LIMIT);
    let refuse = |stream: &mut TcpStream, reason: String| {
        let _ = write_message(
            stream,
            &Message::Refused {
                reason: reason.clone(),
            },
            limit,
        );
        reason
    };
    let hello = match read_message(&mut stream, limit) {
        Ok(m) => m,
        Err(ReadFail::TimedOut) => {
            return Err(format!(
                "no complete handshake within {:.1} s (slow or half-open connection)",
                started.elapsed().as_secs_f64()
            ))
        }
        Err(ReadFail::Wire(e)) => return Err(refuse(&mut stream, e.to_string())),
        Err(e) => return Err(format!("handshake: {e}")),
    };
    match hello {
        Message::Hello {
            token: given,
            node,
            ports,
            no_ports,
        } => {
            if !wire::token_matches(token, &given) {
                return Err(refuse(
                    &mut stream,
                    "job token does not match (both ends need the same --token / FABRIC_PREFLIGHT_TOKEN)".into(),
                ));
            }
            if let Some(want) = local.accept_only.as_ref().filter(|w| **w != node) {
                return Err(refuse(
                    &mut stream,
                    format!("this ring node expects its predecessor {want}, not {node}: check the ranks and peer lists"),
                ));
            }
            write_message(
                &mut stream,
                &Message::Welcome {
                    node: local.node.clone(),
                    ports: local.ports.clone(),
                    no_ports: local.no_ports.clone(),
                },
                limit,
            )
            .map_err(|e| format!("sending welcome: {e}"))?;
            Ok(Peer::greeted(stream, addr, node, ports, no_ports, deadline))
        }
        other => Err(refuse(
            &mut stream,
            format!("expected a hello, got {}", kind(&other)),
        )),
    }
}

fn kind(m: &Message) -> &'static str {
    match m {
        Message::Hello { .. } => "hello",
        Message::Welcome { .. } => "welcome",
        Message::Refused { .. } => "refused",
        Message::Sync { .. } => "sync",
        Message::Bye => "bye",
    }
}

/// Connects to `target` (HOST:PORT), retrying until the listener is up or `deadline` passes, then greets it.
pub fn connect(
    target: &str,
    token: &str,
    local: &Local,
    deadline: Instant,
) -> Result<Peer, SessionError> {
    let mut last = String::from("never tried");
    let (mut stream, addr) = loop {
        if let Some(signal) = crate::interrupt::requested() {
            return Err(SessionError(format!(
                "interrupted by {signal} while reaching {target}"
            )));
        }
        let Some(t) = left(deadline) else {
            return Err(SessionError(format!(
                "could not reach {target} before the deadline (last: {last})"
            )));
        };
        match target.to_socket_addrs() {
            Ok(addrs) => {
                let mut reached = None;
                for a in addrs {
                    match TcpStream::connect_timeout(&a, t.min(Duration::from_secs(2))) {
                        Ok(s) => {
                            reached = Some((s, a));
                            break;
                        }
                        Err(e) => last = format!("{a}: {e}"),
                    }
                }
                if let Some(r) = reached {
                    break r;
                }
            }
            // Names of pods or nodes that are still starting may not resolve yet: retry like a refused connect.
            Err(e) => last = format!("resolving {target}: {e}"),
        }
        std::thread::sleep(RETRY_EVERY.min(left(deadline).unwrap_or_default()));
    };
    let _ = stream.set_nodelay(true);
    let limit = deadline.min(Instant::now() + HANDSHAKE_LIMIT);
    write_message(
        &mut stream,
        &Message::Hello {
            token: token.into(),
            node: local.node.clone(),
            ports: local.ports.clone(),
            no_ports: local.no_ports.clone(),
        },
        limit,
    )
    .map_err(|e| SessionError(format!("sending hello to {addr}: {e}")))?;
    match read_message(&mut stream, limit) {
        Ok(Message::Welcome {
            node,
            ports,
            no_ports,
        }) => Ok(Peer::greeted(stream, addr, node, ports, no_ports, deadline)),
        Ok(Message::Refused { reason }) => Err(SessionError(format!(
            "{target} ({addr}) refused the handshake: {reason}"
        ))),
        Ok(other) => Err(SessionError(format!(
            "{target} ({addr}) answered the hello with {}",
            kind(&other)
        ))),
        Err(e) => Err(SessionError(format!(
            "{target} ({addr}) {e} during the handshake"
        ))),
    }
}

/// A greeted peer handed to a child process: the connected socket is inherited as descriptor `fd`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Handoff {
    fd: RawFd,
    node: String,
    addr: SocketAddr,
    ports: Vec<PortInfo>,
    no_ports: Option<NoPorts>,
    #[serde(with = "crate::child::deadline")]
    deadline: Instant,
    port_pair: u32,
}

impl Peer {
    /// This peer for a child process: a duplicate of the socket (close-on-exec, so no other child gets it; the
    /// caller clears the flag for its one child only) and what the child needs to rebuild the peer.
    pub fn handoff(&self) -> std::io::Result<(Handoff, OwnedFd)> {
        let dup = self.stream.as_fd().try_clone_to_owned()?;
        let handoff = Handoff {
            fd: dup.as_raw_fd(),
            node: self.node.clone(),
            addr: self.addr,
            ports: self.ports.clone(),
            no_ports: self.no_ports.clone(),
            deadline: self.deadline,
            port_pair: self.port_pair,
        };
        Ok((handoff, dup))
    }

    /// The child's side of [`Peer::handoff`].
    ///
    /// # Safety
    /// `h.fd` must be the inherited socket, open in this process and owned by nothing else.
    pub unsafe fn adopt(h: Handoff) -> Peer {
        // Inherited without close-on-exec; set it again so a helper a library execs in this child (libcuda's
        // nvidia-modprobe) does not hold the control connection open past the measurement.
        libc::fcntl(h.fd, libc::F_SETFD, libc::FD_CLOEXEC);
        Peer {
            stream: TcpStream::from(OwnedFd::from_raw_fd(h.fd)),
            node: h.node,
            addr: h.addr,
            ports: h.ports,
            no_ports: h.no_ports,
            deadline: h.deadline,
            port_pair: h.port_pair,
        }
    }

    /// The peer as its handshake message (hello or welcome) announced it.
    fn greeted(
        stream: TcpStream,
        addr: SocketAddr,
        node: String,
        ports: Vec<PortInfo>,
        no_ports: Option<NoPorts>,
        deadline: Instant,
    ) -> Peer {
        Peer {
            stream,
            node,
            addr,
            ports,
            no_ports,
            deadline,
            port_pair: 0,
        }
    }

    pub fn name(&self) -> String {
        format!("{} ({})", self.node, self.addr)
    }

    /// The peer closed its end (its process ended): a peek that finds end-of-stream. Waiting bytes or nothing
    /// yet mean it is still there.
    pub fn is_gone(&mut self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let mut b = [0u8; 1];
        let gone = match self.stream.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != ErrorKind::WouldBlock,
        };
        let _ = self.stream.set_nonblocking(false);
        gone
    }

    pub fn send(&mut self, msg: &Message) -> Result<(), Failure> {
        write_message(&mut self.stream, msg, self.deadline)
            .map_err(|e| fail("control", format!("sending to peer {}: {e}", self.name())))
    }

    pub fn recv(&mut self, during: &str) -> Result<Message, Failure> {
        read_message(&mut self.stream, self.deadline).map_err(|e| {
            fail(
                &format!("peer: {during}"),
                format!("peer {} {e} during {during}", self.name()),
            )
        })
    }
}

impl Channel for Peer {
    fn peer_gone(&mut self) -> bool {
        self.is_gone()
    }

    fn send(&mut self, step: Sync) -> Result<(), Failure> {
        let msg = Message::Sync {
            port_pair: self.port_pair,
            step,
        };
        Peer::send(self, &msg)
    }

    fn recv(&mut self, during: &str) -> Result<Sync, Failure> {
        match Peer::recv(self, during)? {
            Message::Sync { port_pair, step } if port_pair == self.port_pair => Ok(step),
            other => Err(fail(
                "control",
                format!(
                    "peer {} sent {} for port pair {} during {during}",
                    self.name(),
                    kind(&other),
                    self.port_pair
                ),
            )),
        }
    }
}

/// A connected pair of peers over loopback: the listener's side ("lsn") and the connector's ("cnx").
#[cfg(test)]
pub(crate) fn connected_peers(deadline: Instant) -> (Peer, Peer) {
    let local = |node: &str| Local {
        node: node.into(),
        ports: vec![],
        no_ports: None,
        accept_only: None,
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let lsn = local("lsn");
    let server =
        std::thread::spawn(move || listen(bind, "tok", &lsn, deadline, &mut |_| {}).unwrap());
    let client = connect(&format!("127.0.0.1:{port}"), "tok", &local("cnx"), deadline).unwrap();
    (server.join().unwrap(), client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_that_dies_mid_transfer_is_named_not_waited_for() {
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut listener_side, connector_side) = connected_peers(deadline);
        assert_eq!(listener_side.node, "cnx");
        drop(connector_side);
        let t = Instant::now();
        let err = Channel::recv(&mut listener_side, "RDMA WRITE").unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(err.stage, "peer: RDMA WRITE");
        assert!(
            err.message.starts_with("peer cnx (127.0.0.1:")
                && err
                    .message
                    .ends_with("closed the connection during RDMA WRITE"),
            "{}",
            err.message
        );
        assert!(listener_side.is_gone());
    }

    #[test]
    fn a_silent_peer_ends_at_the_deadline() {
        let deadline = Instant::now() + Duration::from_secs(2);
        let (mut a, _b) = connected_peers(deadline);
        assert!(!a.is_gone());
        let err = Channel::recv(&mut a, "latency").unwrap_err();
        assert!(err
            .message
            .contains("sent nothing complete before the deadline"));
        assert!(Instant::now() < deadline + Duration::from_secs(1));
    }
}
