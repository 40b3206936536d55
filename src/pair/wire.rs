//! The out-of-band control protocol of `pair`: frames of `FPPR`, a version byte, a big-endian u32 length and
//! at most [`MAX_BODY`] bytes of JSON. The header is checked before the body is read, so garbage and oversized
//! frames are refused after 9 bytes. Pure parsing here (fuzzed by `fuzz/fuzz_targets/pair_wire.rs`); sockets
//! and deadlines are in `session`.

use serde::{Deserialize, Serialize};

use crate::measure::rdma_pair::Sync;
use crate::rules::transfer_verdict::LinkRate;

pub const MAGIC: [u8; 4] = *b"FPPR";
/// Bumped on any incompatible change; both ends must speak the same one. 2: ports announce their memory,
/// endpoints their registration. 3: the responder re-stamps its source half with the READ pattern before it
/// answers `WriteChecked` (a version-2 end would fail every READ check against it). 4: a port's rate is
/// `rate` (the hardware's, not meaningful, or unreadable), replacing `rate_gbps`, which could not tell a software
/// device from a hardware port whose rate or `device` link was unreadable.
pub const VERSION: u8 = 4;
pub const HEADER_LEN: usize = 9;
/// Large enough for a node with dozens of ports, small enough that a peer cannot make us allocate much.
pub const MAX_BODY: usize = 16 * 1024;

/// One RDMA port as announced to the peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortInfo {
    pub device: String,
    pub port: u8,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: String,
    /// The negotiated rate: the hardware's, a software device's placeholder (not meaningful), or unreadable (a
    /// hardware port whose rate or `device` link could not be read): the peer judges nothing against the last
    /// two, and an unreadable one makes the pair's bandwidth an error, never a pass.
    pub rate: LinkRate,
    /// What this end brings to the GPU-memory leg through this port.
    pub memory: PortMemory,
}

impl PortInfo {
    pub fn name(&self) -> String {
        format!("{}/{}", self.device, self.port)
    }
}

/// The memory an end moves in a port pair's GPU leg. The leg runs when either end brings GPU memory; an end
/// without moves host memory in it. The host leg (host memory at both ends) always runs, as the control.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PortMemory {
    /// Host memory only, and why (`--memory host`, no NVIDIA GPU on this node).
    Host { why: String },
    /// The memory of the GPU at `bus_id`, and why that GPU (nearest the port, or CUDA's first).
    Gpu { bus_id: String, why: String },
    /// GPU memory was due but cannot be used (the presence rule's verdict, with its status): this end's
    /// results fail or error; it moves host memory in a GPU leg the peer asks for.
    Unusable {
        status: crate::probe::Status,
        why: String,
    },
}

/// Why a node has no port to test, with the verdict its own report gives that: `skip` where there is no RDMA
/// hardware, `fail`/`error` where hardware is there but unusable. The peer needs the status to tell an absent
/// fabric (skip) from an untestable link (error).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoPorts {
    pub status: crate::probe::Status,
    pub why: String,
}

impl PortMemory {
    pub fn gpu(&self) -> Option<&str> {
        match self {
            PortMemory::Gpu { bus_id, .. } => Some(bus_id),
            _ => None,
        }
    }

    /// `GPU memory (0000:17:00.0)` or `host memory`.
    pub fn describe(&self) -> String {
        match self.gpu() {
            Some(bus) => format!("GPU memory ({bus})"),
            None => "host memory".into(),
        }
    }

    /// The reason behind the choice.
    pub fn why(&self) -> &str {
        match self {
            PortMemory::Host { why }
            | PortMemory::Gpu { why, .. }
            | PortMemory::Unusable { why, .. } => why,
        }
    }
}

/// Whether a port pair has a GPU leg: either end brings GPU memory. Both ends decide from the same two
/// announcements, so they agree.
pub fn gpu_leg(mine: &PortMemory, theirs: &PortMemory) -> bool {
    mine.gpu().is_some() || theirs.gpu().is_some()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Connector → listener, first.
    Hello {
        token: String,
        node: String,
        ports: Vec<PortInfo>,
        /// Why this node has no port to test (no RDMA device, rdma-core missing), if so.
        no_ports: Option<NoPorts>,
    },
    /// Listener → connector: the token matched.
    Welcome {
        node: String,
        ports: Vec<PortInfo>,
        no_ports: Option<NoPorts>,
    },
    /// Listener → connector: refused, and why (then the listener closes the connection).
    Refused { reason: String },
    /// The measurement's own synchronisation (endpoints, phase ends, outcomes).
    Sync { port_pair: u32, step: Sync },
    /// The sender is finished; the connection closes after this.
    Bye,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The first bytes are not `FPPR`: not a fabric-preflight pair peer.
    BadMagic([u8; 4]),
    Version(u8),
    TooLarge(u64),
    /// Fewer bytes than the header or the body needs (the stream may still bring them).
    Incomplete {
        need: usize,
    },
    /// Well-framed, but not a message of this version.
    Body(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::BadMagic(m) => write!(
                f,
                "not a fabric-preflight pair handshake (first bytes {:02x?})",
                m
            ),
            WireError::Version(v) => write!(
                f,
                "peer speaks pair protocol version {v}, this binary speaks {VERSION}: run the same fabric-preflight version on both nodes"
            ),
            WireError::TooLarge(n) => write!(
                f,
                "message of {n} bytes exceeds the {MAX_BODY}-byte limit"
            ),
            WireError::Incomplete { need } => write!(f, "incomplete message ({need} more bytes needed)"),
            WireError::Body(e) => write!(f, "malformed message: {e}"),
        }
    }
}

impl std::error::Error for WireError {}

pub fn encode(msg: &Message) -> Vec<u8> {
    let body = serde_json::to_vec(msg).expect("messages serialize");
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The body length a header announces, or why the header is refused. Checks as few bytes as are there, so a
/// garbage prefix is refused before the rest arrives.
pub fn check_header(header: &[u8]) -> Result<usize, WireError> {
    let n = header.len().min(MAGIC.len());
    if header[..n] != MAGIC[..n] {
        let mut m = [0u8; 4];
        m[..n].copy_from_slice(&header[..n]);
        return Err(WireError::BadMagic(m));
    }
    if header.len() < HEADER_LEN {
        return Err(WireError::Incomplete {
            need: HEADER_LEN - header.len(),
        });
    }
    if header[4] != VERSION {
        return Err(WireError::Version(header[4]));
    }
    let len = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) as usize;
    if len > MAX_BODY {
        return Err(WireError::TooLarge(len as u64));
    }
    Ok(len)
}

pub fn decode_body(body: &[u8]) -> Result<Message, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError::Body(e.to_string()))
}

/// One whole frame at the start of `buf`: the message and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<(Message, usize), WireError> {
    let len = check_header(&buf[..buf.len().min(HEADER_LEN)])?;
    let end = HEADER_LEN + len;
    if buf.len() < end {
        return Err(WireError::Incomplete {
            need: end - buf.len(),
        });
    }
    Ok((decode_body(&buf[HEADER_LEN..end])?, end))
}

/// Compares tokens without an early exit, so response time does not leak how much of a guess was right.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Message {
        Message::Hello {
            token: "job-42.0".into(),
            node: "n1".into(),
            ports: vec![PortInfo {
                device: "mlx5_0".into(),
                port: 1,
                link_layer: "InfiniBand".into(),
                rate: LinkRate::Gbps(400.0),
                memory: PortMemory::Gpu {
                    bus_id: "0000:17:00.0".into(),
                    why: "nearest the port (PIX)".into(),
                },
            }],
            no_ports: None,
        }
    }

    #[test]
    fn round_trip() {
        let bytes = encode(&hello());
        assert_eq!(decode(&bytes).unwrap(), (hello(), bytes.len()));
    }

    #[test]
    fn garbage_is_refused_on_its_first_byte() {
        assert!(matches!(
            check_header(b"G"),
            Err(WireError::BadMagic([b'G', 0, 0, 0]))
        ));
        let e = decode(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
        assert!(e
            .to_string()
            .contains("not a fabric-preflight pair handshake"));
    }

    #[test]
    fn oversized_is_refused_from_the_header() {
        let mut h = MAGIC.to_vec();
        h.push(VERSION);
        h.extend_from_slice(&(u32::MAX).to_be_bytes());
        assert_eq!(check_header(&h), Err(WireError::TooLarge(u32::MAX as u64)));
    }

    #[test]
    fn other_version_is_named() {
        let mut bytes = encode(&hello());
        bytes[4] = 7;
        assert!(decode(&bytes)
            .unwrap_err()
            .to_string()
            .contains("version 7"));
    }

    #[test]
    fn truncated_and_malformed() {
        let bytes = encode(&hello());
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(WireError::Incomplete { need: 1 })
        ));
        let mut bad = MAGIC.to_vec();
        bad.push(VERSION);
        bad.extend_from_slice(&3u32.to_be_bytes());
        bad.extend_from_slice(b"{x}");
        assert!(matches!(decode(&bad), Err(WireError::Body(_))));
    }

    /// The announcement as it travels (the fuzz target's seeds are written in this form).
    #[test]
    fn port_memory_on_the_wire() {
        let body = r#"{"type":"welcome","node":"n2","no_ports":null,"ports":[
            {"device":"mlx5_0","port":1,"link_layer":"InfiniBand","rate":{"gbps":400.0},
             "memory":{"kind":"gpu","bus_id":"0000:17:00.0","why":"nearest"}},
            {"device":"mlx5_1","port":1,"link_layer":"InfiniBand","rate":{"unreadable":"<symlink loop>"},
             "memory":{"kind":"unusable","status":"fail","why":"no driver"}},
            {"device":"rxe0","port":1,"link_layer":"Ethernet","rate":{"not_meaningful":"soft-RoCE"},
             "memory":{"kind":"host","why":"--memory host"}}]}"#;
        let Message::Welcome { ports, .. } = decode_body(body.as_bytes()).unwrap() else {
            panic!("not a welcome")
        };
        assert_eq!(ports[0].memory.gpu(), Some("0000:17:00.0"));
        assert_eq!(ports[1].memory.describe(), "host memory");
        // Unreadable travels apart from not meaningful.
        assert_eq!(ports[1].rate, LinkRate::Unreadable("<symlink loop>".into()));
        assert!(matches!(ports[2].rate, LinkRate::NotMeaningful(_)));
        // A version-3 port (`rate_gbps`, null for both) is not a version-4 one.
        let v3 = r#"{"type":"welcome","node":"n2","no_ports":null,"ports":[
            {"device":"mlx5_1","port":1,"link_layer":"InfiniBand","rate_gbps":null,
             "memory":{"kind":"host","why":"x"}}]}"#;
        assert!(matches!(
            decode_body(v3.as_bytes()),
            Err(WireError::Body(_))
        ));
        // A version-1 port (no memory) is not a version-2 one.
        let old = r#"{"type":"welcome","node":"n2","no_ports":null,"ports":[
            {"device":"mlx5_0","port":1,"link_layer":"InfiniBand","rate_gbps":400.0}]}"#;
        assert!(matches!(
            decode_body(old.as_bytes()),
            Err(WireError::Body(_))
        ));
    }

    #[test]
    fn version_1_peers_are_refused_by_name() {
        // A version-1 binary announces no memory: refused from the header, before its body is parsed.
        let mut bytes = encode(&hello());
        bytes[4] = 1;
        assert_eq!(decode(&bytes).unwrap_err(), WireError::Version(1));
    }

    #[test]
    fn legs_agree_from_both_announcements() {
        let host = PortMemory::Host { why: "x".into() };
        let gpu = PortMemory::Gpu {
            bus_id: "0000:17:00.0".into(),
            why: "y".into(),
        };
        let unusable = PortMemory::Unusable {
            status: crate::probe::Status::Fail,
            why: "z".into(),
        };
        assert!(!gpu_leg(&host, &host));
        assert!(!gpu_leg(&unusable, &host));
        for (a, b) in [(&gpu, &host), (&gpu, &gpu), (&unusable, &gpu)] {
            assert!(gpu_leg(a, b) && gpu_leg(b, a), "{a:?} {b:?}");
        }
        for m in [&host, &gpu, &unusable] {
            let back: PortMemory =
                serde_json::from_str(&serde_json::to_string(m).unwrap()).unwrap();
            assert_eq!(&back, m);
        }
    }

    #[test]
    fn tokens_compare_exactly() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abc", "abd"));
        assert!(!token_matches("abc", "ab"));
        assert!(!token_matches("", "a"));
        assert!(!token_matches("abc", ""));
    }
}
