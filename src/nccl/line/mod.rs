//! One line of `NCCL_DEBUG=INFO` output → the NCCL records it holds. Pure: no I/O, no state, no allocation
//! except when the line carries ANSI colour codes.
//!
//! The NCCL prefix (`host:pid:tid [dev] NCCL INFO`) is found by scanning *backwards* from the `NCCL INFO` /
//! `NCCL WARN` token, so whatever a launcher put in front of it (mpirun `[1,0]<stdout>:`, torchrun `[rank0]:`,
//! Ray `(RayWorkerWrapper pid=…, ip=…)`, Slurm `3: `, timestamps, markdown `> `) is skipped without knowing
//! the launcher. Several records glued on one line (ranks writing to one stream) are split at each token.
//! Grammar: `shared/reference/nccl-log-formats.md`.
//!
//! Split by job: [`record`] (the types), [`framing`] (tokens, prefixes, segments), [`classify`] (message →
//! event), [`channel`] (the channel grammar, general and fast paths side by side), [`memo`] (what dense
//! blocks remember), [`text`] (field scanning).

mod channel;
mod classify;
mod framing;
mod memo;
mod record;
#[cfg(test)]
mod tests;
mod text;

pub use classify::{classify, classify_ofi, is_ofi_refusal, nccl_error, result_name};
pub use framing::{parse_line, parse_line_from, parse_plain_line_from, Ids};
pub use memo::LineMemo;
pub use record::{
    Channel, ChannelKind, CommStage, Direction, Endpoint, Event, NetFamily, Record, Transport,
};

/// Longest line looked at; the rest of a longer line is skipped. NCCL formats each message into 1024 bytes
/// and launchers add a few dozen, so only torn or binary lines reach this.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
