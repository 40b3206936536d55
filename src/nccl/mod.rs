//! NCCL transport analysis: what a job's `NCCL_DEBUG=INFO` output proves about the data path.
//!
//! [`line`] turns one line into records (pure); the [`Reader`] reads a job's logs once and feeds their
//! numbered lines and records to [`Sink`]s; the [`Analyzer`] (`summary`) is the sink that accumulates them
//! into a [`Summary`] with a [`Verdict`]; [`judge`] weighs it against an expected transport. Used by the
//! `nccl` command, the `nccl.transport` check and `collective` (whose rank map and result table are sinks of
//! the same pass).

pub(crate) mod conf;
pub(crate) mod env;
pub(crate) mod judge;
pub mod line;
pub(crate) mod outcome;
mod positions;
pub(crate) mod reader;
pub(crate) mod sink;
pub(crate) mod summary;

pub use judge::{advice, advice_for, expect_name, judge, judge_errors, Judgement};
pub use reader::{analyze_paths, check_log_path, LogError, ReadStop, Reader};
pub use sink::Sink;
pub use summary::{
    Analyzer, ErrorOutcome, Failure, FailureKind, RankOutcome, RankState, Summary, Verdict,
};

/// Channel lines the unit tests share.
#[cfg(test)]
pub(crate) mod test_lines {
    pub const IB_GDR: &str =
        "gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA\n";
    pub const IB_NO_GDR: &str =
        "gpu-a02:3:4 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [receive] via NET/IB/1\n";
    pub const SOCKET: &str =
        "gpu-b07:5:6 [0] NCCL INFO Channel 00/0 : 3[3d000] -> 4[1b000] [send] via NET/Socket/0\n";
    pub const P2P: &str =
        "gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n";
}

/// The summary of `text` read as one log named `t.log` (tests).
#[cfg(test)]
pub(crate) fn analyze_text(text: &str) -> Summary {
    let (mut reader, mut a) = (Reader::new(), Analyzer::new());
    reader.read(&mut a, "t.log", text.as_bytes(), None).unwrap();
    a.finish(reader.into_input())
}

/// `0-7,9,12-13`: ranks or device indices for one line of text.
pub fn ranges(values: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < values.len() {
        let start = values[i];
        let mut end = start;
        while i + 1 < values.len() && values[i + 1] == end.saturating_add(1) {
            i += 1;
            end = values[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_collapse_runs() {
        assert_eq!(ranges(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(ranges(&[]), "");
        assert_eq!(
            ranges(&[u32::MAX - 1, u32::MAX]),
            format!("{}-{}", u32::MAX - 1, u32::MAX)
        );
    }
}
