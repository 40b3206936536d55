//! `fabric-preflight pair`: a fabric test between two nodes (or each node and its ring neighbours). `wire` is
//! the control protocol, `session` the TCP handshake and channel, `ring` finds rank and peers from the launcher,
//! `judge` turns outcomes into results; the verbs transfers are in `measure::rdma_pair`.

pub mod judge;
pub mod ring;
pub mod session;
pub mod wire;
