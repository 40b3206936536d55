//! A stand-in fleet for the planner's scale benchmark (`cargo bench --bench isolate_scale`) and its tests: a
//! fault map (bad nodes, a bad link, a slow node that still completes, a rail below its floor) decides what each
//! group's job prints, in nccl-tests' format with NCCL INFO lines per rank, and the printed table is parsed back
//! by `collective`'s own parser and judged against the floor, as a real group's job would be.

use std::fmt::Write as _;

use super::plan::{NodeId, Planner, Verdict};
use crate::collective::nccl_tests;

/// busbw of a healthy group in the stand-in (GB/s), and the floor it is judged against.
pub const HEALTHY_BUSBW: f64 = 385.0;
pub const FLOOR: f64 = 331.0;
/// Ranks per node and NICs (rails) per node in the stand-in.
const RAILS: usize = 8;

/// What is wrong in the stand-in fleet.
#[derive(Debug, Clone, Default)]
pub struct FaultMap {
    /// Nodes whose jobs fail (NCCL error, non-zero exit).
    pub bad: Vec<NodeId>,
    /// Two nodes whose traffic between them fails (a bad cable or switch port between them only).
    pub link: Option<(NodeId, NodeId)>,
    /// Nodes that complete at this fraction of the healthy busbw.
    pub slow: Vec<(NodeId, f64)>,
    /// Nodes one of whose rails (NIC index) runs at a quarter of its bandwidth.
    pub weak_rail: Vec<(NodeId, usize)>,
}

/// A group's job as its report would judge it.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub passed: bool,
    pub busbw: Option<f64>,
    pub rail: Option<String>,
    pub transport: String,
    pub detail: String,
}

impl FaultMap {
    /// The merged output and exit code of an all_reduce_perf job over `members`, as nccl-tests and NCCL print it.
    pub fn job(&self, names: &[String], members: &[NodeId]) -> (i32, String) {
        let mut out = String::from(
            "# nThread 1 nGpus 1 minBytes 8388608 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20\n\
             # Collective test starting: all_reduce_perf\n",
        );
        for (i, &m) in members.iter().enumerate() {
            for local in 0..RAILS {
                let rank = i * RAILS + local;
                let _ = writeln!(
                    out,
                    "#  Rank {rank:2} Group  0 Pid {pid:6} on {host:>10} device {local:2} [0x18] NVIDIA H100 80GB HBM3",
                    pid = 4000 + rank,
                    host = names[m]
                );
                let _ = writeln!(
                    out,
                    "{host}:{pid}:{pid} [{local}] NCCL INFO Channel 00/0 : {rank}[{local}] -> {next}[{local}] [send] via NET/IB/{local}/GDRDMA",
                    host = names[m],
                    pid = 4000 + rank,
                    next = (rank + RAILS) % (members.len() * RAILS)
                );
            }
        }
        let bad = members.iter().find(|m| self.bad.contains(m));
        let link = self
            .link
            .filter(|(a, b)| members.contains(a) && members.contains(b));
        if let Some(&m) = bad {
            let _ = writeln!(
                out,
                "{}:4000:4000 [0] NCCL WARN NET/IB : Got completion from peer with error 12, opcode 0, len 0, vendor err 129\n\
                 {}: Test NCCL failure common.cu:1005 'remote process exited or there was a network error'",
                names[m], names[m]
            );
            return (1, out);
        }
        if let Some((a, b)) = link {
            let _ = writeln!(
                out,
                "{}:4000:4000 [0] NCCL WARN NET/IB : Got completion from peer {} with error 12 (retry exceeded)\n\
                 {}: Test NCCL failure common.cu:1005 'remote process exited or there was a network error'",
                names[a], names[b], names[a]
            );
            return (1, out);
        }
        let slow = members
            .iter()
            .filter_map(|m| self.slow.iter().find(|s| s.0 == *m).map(|s| s.1))
            .fold(1.0, f64::min);
        // A rail at a quarter of its share: the job's total hides it, the per-rail line (one run per rail) shows it.
        let weak = members
            .iter()
            .find_map(|m| self.weak_rail.iter().find(|w| w.0 == *m).copied());
        let busbw = HEALTHY_BUSBW * slow;
        out.push_str("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n");
        for shift in 0..10u32 {
            let bytes = 8u64 << (20 + shift);
            let bw = busbw * (0.5 + f64::from(shift) / 18.0);
            let _ = writeln!(
                out,
                "{bytes:12}  {count:12}     float     sum      -1  {t:7.2} {bw:6.2} {bw:6.2}      0  {t:7.2} {bw:6.2} {bw:6.2}      0",
                count = bytes / 4,
                t = bytes as f64 / bw / 1e3,
            );
        }
        if let Some((m, rail)) = weak {
            let _ = writeln!(
                out,
                "# Rail {rail} (mlx5_{rail}) on {}: busbw {:.2}",
                names[m],
                busbw / RAILS as f64 / 4.0
            );
        }
        let _ = writeln!(
            out,
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {busbw:.2}"
        );
        (0, out)
    }
}

/// Judges a job's exit code and output against `floor`: nccl-tests' table read by `collective`'s parser (the
/// largest size's busbw), each `# Rail` line against the floor per rail (floor ÷ rails).
pub fn judge(exit: i32, output: &str, floor: f64) -> Judged {
    let parsed = nccl_tests::parse(output);
    let busbw = parsed.largest().map(|r| r.in_place.busbw_gbytes_per_sec);
    let transport = if output.contains("via NET/IB/") && output.contains("/GDRDMA") {
        "NET/IB/GDRDMA"
    } else {
        "unknown"
    }
    .to_string();
    let rail = output.lines().find_map(|l| {
        let rest = l.strip_prefix("# Rail ")?;
        let bw: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        (bw < floor / RAILS as f64).then(|| rest.to_string())
    });
    let (passed, detail) = match (exit, busbw, &rail) {
        (0, Some(bw), None) if bw >= floor => (true, format!("busbw {bw:.2} GB/s meets {floor}")),
        (0, Some(bw), None) => (false, format!("busbw {bw:.2} GB/s below {floor}")),
        (0, Some(_), Some(rail)) => (false, format!("rail below its floor: {rail}")),
        (0, None, _) => (false, "no result table".to_string()),
        (code, _, _) => (
            false,
            parsed
                .failures
                .first()
                .cloned()
                .unwrap_or_else(|| format!("exit {code}")),
        ),
    };
    Judged {
        passed,
        busbw,
        rail,
        transport,
        detail,
    }
}

/// What one simulated search did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub rounds: usize,
    pub tests: usize,
    pub verdicts: Vec<Verdict>,
    /// Time spent in the planner alone (planning rounds, applying results), the jobs' simulation left out.
    pub planner_time: std::time::Duration,
}

/// Runs the whole search over `n` stand-in nodes with `faults`, every group's job judged by [`judge`].
pub fn run(n: usize, topology: &[Vec<NodeId>], faults: &FaultMap) -> Outcome {
    let names: Vec<String> = (0..n).map(|i| format!("node{i:04}")).collect();
    let clock = std::time::Instant::now();
    let mut planner = Planner::new(n, topology, 64);
    let mut tests = 0;
    let mut simulating = std::time::Duration::ZERO;
    while let Some(round) = planner.next_round() {
        let jobs = std::time::Instant::now();
        let results: Vec<bool> = round
            .iter()
            .map(|t| {
                let (exit, output) = faults.job(&names, &t.members);
                judge(exit, &output, FLOOR).passed
            })
            .collect();
        simulating += jobs.elapsed();
        tests += results.len();
        planner.record(&results);
    }
    let verdicts = planner.verdicts();
    Outcome {
        rounds: planner.rounds().len(),
        tests,
        verdicts,
        planner_time: clock.elapsed().saturating_sub(simulating),
    }
}

/// `count` distinct nodes of `0..n`, spread by a fixed multiplicative step (deterministic, no RNG crate); a node
/// already picked moves on to the next free one, so small `n` cannot cycle forever.
pub fn spread(n: usize, count: usize, seed: usize) -> Vec<NodeId> {
    let mut picked: Vec<NodeId> = Vec::new();
    let mut x = seed % n.max(1);
    while picked.len() < count.min(n) {
        x = (x * 7919 + 104_729) % n;
        let mut y = x;
        while picked.contains(&y) {
            y = (y + 1) % n;
        }
        picked.push(y);
    }
    picked
}
