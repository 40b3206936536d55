//! The TCP side of `pair`: a listener that greets a bounded number of connections at once and accepts exactly
//! one peer holding the job token, a connector that retries until a listener greets it, and the framed control
//! channel between them. Every read and write is bounded by the run's deadline; every error names the peer. The listening socket is closed as soon as the
//! peer is accepted (or the deadline passes), so nothing is left listening.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::measure::rc::{fail, Failure};
use crate::measure::rdma_pair::{Channel, Sync};
use crate::pair::wire::{self, Message, NoPorts, PortInfo, WireError, HEADER_LEN};

/// One handshake may take at most this long, so a slow or silent client cannot hold a handshake slot.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(5);
/// Handshakes a listener runs at once: enough that idle sockets from a port scanner do not keep the peer out,
/// few enough that a flood of connections costs a bounded number of threads and descriptors.
pub const MAX_HANDSHAKES: usize = 16;
/// The connector's pause after a failed attempt, doubled after each up to [`RETRY_AT_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_AT_MOST: Duration = Duration::from_secs(1);
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

/// Waits for exactly one peer with `token` on `bind` until `deadline`. Up to [`MAX_HANDSHAKES`] connections are
/// greeted at once, each on its own thread and within its own [`HANDSHAKE_LIMIT`], so idle or slow clients cannot
/// keep the peer out; one beyond them is closed unread (its connector retries). Connections that fail the
/// handshake (garbage, oversized, slow, half-open, wrong token or version) are refused and summed up in the error
/// if no good peer comes. The listening socket is gone, and every other handshake cut short, when this returns.
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
    let (greeted, finished) = mpsc::channel::<(SocketAddr, Result<Peer, String>)>();
    std::thread::scope(|scope| {
        // A second handle on each connection being greeted, to cut its handshake short once the peer is chosen.
        let mut in_flight: HashMap<SocketAddr, TcpStream> = HashMap::new();
        let mut refused = Refusals::default();
        let mut refuse = |refused: &mut Refusals, addr: SocketAddr, reason: String| {
            on_refused(&format!("{addr}: {reason}"));
            refused.add(addr, reason);
        };
        let outcome = loop {
            if let Some(signal) = crate::interrupt::requested() {
                break Err(SessionError(format!(
                    "interrupted by {signal} while waiting for a peer on {bind}"
                )));
            }
            if left(deadline).is_none() {
                // The handshakes still in flight end by the deadline too: wait for their reasons.
                while !in_flight.is_empty() {
                    let Ok((addr, result)) = finished.recv_timeout(HANDSHAKE_LIMIT) else {
                        break;
                    };
                    in_flight.remove(&addr);
                    if let Err(reason) = result {
                        refuse(&mut refused, addr, reason);
                    }
                }
                break Err(SessionError(format!(
                    "no peer with the job token connected to {bind} before the deadline: {refused}"
                )));
            }
            match finished.try_recv() {
                Ok((addr, Ok(peer))) => {
                    in_flight.remove(&addr);
                    break Ok(peer);
                }
                Ok((addr, Err(reason))) => {
                    in_flight.remove(&addr);
                    refuse(&mut refused, addr, reason);
                    continue;
                }
                Err(_) => {}
            }
            match listener.accept() {
                Ok((_, addr)) if in_flight.len() >= MAX_HANDSHAKES => refuse(
                    &mut refused,
                    addr,
                    format!("closed unread: {MAX_HANDSHAKES} handshakes were already in flight"),
                ),
                Ok((stream, addr)) => match stream.try_clone() {
                    Ok(handle) => {
                        in_flight.insert(addr, handle);
                        let greeted = greeted.clone();
                        scope.spawn(move || {
                            let _ =
                                greeted.send((addr, greet(stream, addr, token, local, deadline)));
                        });
                    }
                    Err(e) => refuse(&mut refused, addr, format!("closed unread: {e}")),
                },
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
                Err(e) => break Err(SessionError(format!("accept on {bind}: {e}"))),
            }
        };
        drop(listener);
        for handle in in_flight.values() {
            let _ = handle.shutdown(Shutdown::Both);
        }
        outcome
    })
}

/// The connections a listener refused, for its error: how many for each reason and the first few addresses, in
/// memory that a flood of connections cannot grow.
#[derive(Default)]
struct Refusals {
    by_reason: Vec<Refused>,
    /// Connections whose reason was not among the first [`Refusals::REASONS`].
    other: usize,
}

struct Refused {
    reason: String,
    count: usize,
    from: Vec<SocketAddr>,
}

impl Refusals {
    const REASONS: usize = 8;
    const ADDRESSES: usize = 4;

    fn add(&mut self, addr: SocketAddr, reason: String) {
        if let Some(r) = self.by_reason.iter_mut().find(|r| r.reason == reason) {
            r.count += 1;
            if r.from.len() < Self::ADDRESSES {
                r.from.push(addr);
            }
        } else if self.by_reason.len() < Self::REASONS {
            self.by_reason.push(Refused {
                reason,
                count: 1,
                from: vec![addr],
            });
        } else {
            self.other += 1;
        }
    }
}

impl std::fmt::Display for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.by_reason.is_empty() {
            return f.write_str("nothing connected");
        }
        let total = self.by_reason.iter().map(|r| r.count).sum::<usize>() + self.other;
        write!(f, "refused {total} connection(s)")?;
        for r in &self.by_reason {
            let from: Vec<String> = r.from.iter().map(SocketAddr::to_string).collect();
            let more = match r.count - r.from.len() {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            write!(
                f,
                "; {} from {}{more}: {}",
                r.count,
                from.join(", "),
                r.reason
            )?;
        }
        if self.other > 0 {
            write!(f, "; {} for other reasons", self.other)?;
        }
        Ok(())
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
    let limit = deadline.min(Instant::now() + HANDSHAKE_LIMIT);
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
    let hello =
        match read_message(&mut stream, limit) {
            Ok(m) => m,
            Err(ReadFail::TimedOut) if limit < deadline => {
                return Err(format!(
                    "no complete handshake within {} s (idle, slow or half-open connection)",
                    HANDSHAKE_LIMIT.as_secs()
                ))
            }
            Err(ReadFail::TimedOut) => return Err(
                "no complete handshake before the deadline (idle, slow or half-open connection)"
                    .into(),
            ),
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

/// Connects to `target` (HOST:PORT) and greets it, retrying with a growing pause until `deadline`: while the
/// listener is not up yet, and while what answers is not a listener ready for this peer (a connection closed
/// or reset unread because the listener is busy, no answer in time, garbage). A refusal from a pair listener
/// (wrong token, version or ring rank) ends it at once: trying again cannot change the answer.
pub fn connect(
    target: &str,
    token: &str,
    local: &Local,
    deadline: Instant,
) -> Result<Peer, SessionError> {
    let mut handshakes = 0u32;
    let mut last = String::from("never tried");
    let mut pause = RETRY_FIRST;
    loop {
        if let Some(signal) = crate::interrupt::requested() {
            return Err(SessionError(format!(
                "interrupted by {signal} while reaching {target}"
            )));
        }
        if left(deadline).is_none() {
            return Err(SessionError(match handshakes {
                0 => format!("could not reach {target} before the deadline (last: {last})"),
                n => format!(
                    "reached {target} but completed no handshake before the deadline in {n} attempt(s) (last: {last})"
                ),
            }));
        }
        match reach(target, deadline) {
            Ok((stream, addr)) => {
                handshakes += 1;
                match hello(stream, addr, target, token, local, deadline) {
                    Ok(peer) => return Ok(peer),
                    Err(Attempt::Refused(why)) => return Err(SessionError(why)),
                    Err(Attempt::Failed(why)) => last = why,
                }
            }
            Err(why) => last = why,
        }
        std::thread::sleep(pause.min(left(deadline).unwrap_or_default()));
        pause = (pause * 2).min(RETRY_AT_MOST);
    }
}

/// Why one handshake attempt of the connector did not give a peer.
enum Attempt {
    /// A pair listener refused this peer, saying why.
    Refused(String),
    /// Anything else: worth another attempt.
    Failed(String),
}

/// A TCP connection to the first address of `target` that takes one, or why none did.
fn reach(target: &str, deadline: Instant) -> Result<(TcpStream, SocketAddr), String> {
    // Names of pods or nodes that are still starting may not resolve yet: retried like a refused connect.
    let addrs = target
        .to_socket_addrs()
        .map_err(|e| format!("resolving {target}: {e}"))?;
    let mut last = format!("{target} resolves to no address");
    for a in addrs {
        let Some(t) = left(deadline) else { break };
        match TcpStream::connect_timeout(&a, t.min(Duration::from_secs(2))) {
            Ok(s) => return Ok((s, a)),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

/// The connector's side of one handshake.
fn hello(
    mut stream: TcpStream,
    addr: SocketAddr,
    target: &str,
    token: &str,
    local: &Local,
    deadline: Instant,
) -> Result<Peer, Attempt> {
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
    .map_err(|e| Attempt::Failed(format!("sending hello to {addr}: {e}")))?;
    match read_message(&mut stream, limit) {
        Ok(Message::Welcome {
            node,
            ports,
            no_ports,
        }) => Ok(Peer::greeted(stream, addr, node, ports, no_ports, deadline)),
        Ok(Message::Refused { reason }) => Err(Attempt::Refused(format!(
            "{target} ({addr}) refused the handshake: {reason}"
        ))),
        Ok(other) => Err(Attempt::Failed(format!(
            "{target} ({addr}) answered the hello with {}",
            kind(&other)
        ))),
        Err(e) => Err(Attempt::Failed(format!(
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
        // At once, not at the 30 s deadline.
        assert!(t.elapsed() < Duration::from_secs(10));
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
        assert!(Instant::now() < deadline + Duration::from_secs(10));
    }
}
