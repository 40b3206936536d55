//! NCCL transport analysis: what a job's `NCCL_DEBUG=INFO` output proves about the data path.
//!
//! [`line`] turns one line into records (pure); [`analysis`] accumulates records from any number of logs into
//! a [`Summary`] with a [`Verdict`], and [`judge`]s it against an expected transport. Used by the `nccl`
//! command and the `nccl.transport` check.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub mod analysis;
pub mod env;
pub mod line;

pub use analysis::{expect_name, judge, Analyzer, Judgement, ReadStop, Summary, Verdict};

/// A log that could not be read to its end.
#[derive(Debug)]
pub struct LogError {
    pub path: String,
    pub stop: ReadStop,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read NCCL log {}: {}", self.path, self.stop)
    }
}

impl std::error::Error for LogError {}

/// Analyses `paths` as the logs of one job (`-` is standard input). These are the user's files, read
/// directly (not through a host root).
pub fn analyze_paths(paths: &[PathBuf], deadline: Option<Instant>) -> Result<Summary, LogError> {
    let mut analyzer = Analyzer::new();
    for path in paths {
        read_one(&mut analyzer, path, deadline)?;
    }
    Ok(analyzer.finish())
}

fn read_one(
    analyzer: &mut Analyzer,
    path: &Path,
    deadline: Option<Instant>,
) -> Result<(), LogError> {
    let name = path.display().to_string();
    let fail = |stop| LogError {
        path: name.clone(),
        stop,
    };
    if path.as_os_str() == "-" {
        return analyzer
            .read("<stdin>", std::io::stdin().lock(), deadline)
            .map_err(fail);
    }
    let file = std::fs::File::open(path).map_err(|e| fail(ReadStop::Io(e)))?;
    analyzer.read(&name, file, deadline).map_err(fail)
}

/// What to do about a verdict that is not what the node should give (`None`: nothing to fix).
pub fn advice(verdict: Verdict) -> Option<&'static str> {
    match verdict {
        Verdict::Socket | Verdict::MixedSocket => Some(
            "on the host(s) on Socket: `ibv_devinfo` must show ports PORT_ACTIVE, /dev/infiniband must be visible \
             (containers: mount it and add IPC_LOCK), `ulimit -l` unlimited, NCCL_IB_DISABLE and NCCL_NET=Socket unset, \
             NCCL_IB_HCA naming present devices (`fabric-preflight run --only nccl.env,rdma.memlock`)",
        ),
        Verdict::Ib | Verdict::Ofi | Verdict::PartialGdrdma => Some(
            "on the ranks without GDRDMA: `modprobe nvidia-peermem` (or DMA-BUF: open kernel module, NCCL >= 2.19, \
             NCCL_DMABUF_ENABLE=1), NCCL_NET_GDR_LEVEL / NCCL_NET_GDR_READ unset, GPU and NIC under one PCIe switch \
             (`nvidia-smi topo -m`; `fabric-preflight explain gdr.kernel_path`)",
        ),
        Verdict::Undetermined | Verdict::IntraNodeOnly => Some(
            "capture a run that completes a collective across nodes with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
             (e.g. nccl-tests `all_reduce_perf -b 1G -e 1G` on two nodes)",
        ),
        Verdict::IbGdrdma | Verdict::OfiGdrdma => None,
    }
}

/// Advice for a summary: with no data path in the log, a selection that already shows the fallback (Socket
/// selected, IB without device) gets the socket advice.
pub fn advice_for(s: &Summary) -> Option<&'static str> {
    let fell_back = s
        .network_selected
        .iter()
        .any(|n| line::NetFamily::of(n) == line::NetFamily::Socket)
        || s.no_device.iter().any(|n| n == "IB");
    match s.verdict {
        Verdict::Undetermined | Verdict::IntraNodeOnly if fell_back => advice(Verdict::Socket),
        v => advice(v),
    }
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
