//! `fabric-preflight pair`, the engine: a fabric test between two nodes (or each node and its ring neighbours).
//! `inventory` lists this node's ports and GPUs, `child` runs the listing and each port pair's measurement in a
//! child process, `link` is one peer (handshake, port pairs, their verdicts), `supervise` runs the links under
//! the runner's deadline, signal and panic machinery, `summary` is `--summarize`; `wire` is the control
//! protocol, `session` the TCP handshake and channel, `ring` finds rank and peers from the launcher, `judge`
//! turns what was measured into results, `findings` holds the codes they carry. The verbs transfers are in `measure::rdma_pair`;
//! `commands/pair.rs` keeps the flags and the wiring.

pub mod child;
pub(crate) mod findings;
pub(crate) mod inventory;
pub(crate) mod judge;
pub(crate) mod link;
pub mod ring;
pub(crate) mod session;
pub(crate) mod summary;
pub(crate) mod supervise;
pub mod wire;
