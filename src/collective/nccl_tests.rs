//! The output of nccl-tests (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
//! `sendrecv_perf`, …) and of the built-in torch workload, which prints the same lines. Pure: text in, the
//! header, the result table and the summary lines out.
//!
//! Shapes, from nccl-tests' `src/common.cu` and `src/util.cu`:
//! ```text
//! # nThread 1 nGpus 1 minBytes 8388608 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 …
//! #  Rank  0 Group  0 Pid  82102 on    gpu-a01 device  0 [0x18] NVIDIA H100 80GB HBM3
//! #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//!      8388608       2097152     float     sum      -1    98.11   85.50  160.31      0    97.43   86.10  161.43      0
//! # Out of bounds values : 0 OK
//! # Avg bus bandwidth    : 161.2
//! ```
//! A row is `%12li  %12li  %8s  %6s  %6s` then, per placement (out-of-place, in-place), `%7s %6s %6s %6g` with
//! `N/A` for `#wrong` when checking is off (`-c 0`). Older releases print the rank lines without `Group`.
//!
//! Split runs (`NCCL_TESTS_SPLIT="MOD 8"`, one communicator per rail) print the color of each rank as its
//! `Group`, and still one table: each process times its own communicator, and the row's time is the mean of
//! all processes' (`-a 1`, the default), rank 0's (`-a 0`), the fastest (`-a 2`) or the slowest (`-a 3`), with
//! busbw per communicator (nccl-tests' `common.cu`, `BenchTime`; its README: "the reported bandwidth is per
//! group"). No line says which communicator a number is. The built-in workload prints one table per
//! communicator instead, each after a `# Group 3 : ranks 3,11` line, which nccl-tests never prints.
//! Launchers put prefixes before lines (`0: `, `[1,0]<stdout>:`): rows are read from their last 13 fields and
//! header lines from their `#`.

use std::collections::BTreeMap;

use serde::Serialize;

/// One rank as the header lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankLine {
    pub rank: u32,
    pub pid: u32,
    pub host: String,
    /// CUDA device index on that host.
    pub device: u32,
    /// PCI bus of the GPU (`0x18`), as printed.
    pub bus: String,
    pub model: String,
    /// The communicator (color) of a split run; 0 for all when not split, absent before nccl-tests 2.13.
    pub group: Option<u32>,
}

/// Time, bandwidths and errors of one placement (out-of-place or in-place) of one size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Placement {
    pub time_us: f64,
    pub algbw_gbytes_per_sec: f64,
    pub busbw_gbytes_per_sec: f64,
    /// Wrong elements; None when the run did not check (`-c 0` prints `N/A`).
    pub wrong: Option<u64>,
}

/// One row of the result table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub bytes: u64,
    pub count: u64,
    pub dtype: String,
    pub redop: String,
    pub out_of_place: Option<Placement>,
    pub in_place: Placement,
    /// `file:line` of the row.
    pub line: u64,
    /// The communicator of the `# Group N` section it was printed in (the built-in workload's split runs).
    pub group: Option<u32>,
}

/// Everything nccl-tests printed that the verdict uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TestOutput {
    /// `all_reduce` (from `# Collective test starting: all_reduce_perf`, else from the program's name).
    pub collective: Option<String>,
    /// `nGpus` of the header: devices driven by each rank.
    pub gpus_per_rank: Option<u32>,
    pub ranks: Vec<RankLine>,
    pub rows: Vec<Row>,
    pub avg_busbw_gbytes_per_sec: Option<f64>,
    pub out_of_bounds: Option<u64>,
    /// nccl-tests' own failure lines (`Test NCCL failure common.cu:… 'unhandled system error'`).
    pub failures: Vec<String>,
    /// The `# Group N` section being read.
    #[serde(skip)]
    section: Option<u32>,
}

impl TestOutput {
    /// The hosts of the ranks, in order of first appearance.
    pub fn hosts(&self) -> Vec<&str> {
        let mut hosts: Vec<&str> = Vec::new();
        for r in &self.ranks {
            if !hosts.contains(&r.host.as_str()) {
                hosts.push(&r.host);
            }
        }
        hosts
    }

    /// The row of the largest size (the last one printed of that size).
    pub fn largest(&self) -> Option<&Row> {
        self.rows.iter().rev().max_by_key(|r| r.bytes)
    }

    /// The communicators with a table of their own, and their rows.
    pub fn groups(&self) -> BTreeMap<u32, Vec<&Row>> {
        let mut groups: BTreeMap<u32, Vec<&Row>> = BTreeMap::new();
        for row in &self.rows {
            if let Some(g) = row.group {
                groups.entry(g).or_default().push(row);
            }
        }
        groups
    }
}

/// How nccl-tests combines the processes' times into a row (`-a`/`--average`; 1, the mean, when not given).
pub fn average_of(args: &[String]) -> u8 {
    let mut value = None;
    for (i, a) in args.iter().enumerate() {
        let text = match a.as_str() {
            "-a" | "--average" => args.get(i + 1).map(String::as_str),
            other => other
                .strip_prefix("--average=")
                .or_else(|| other.strip_prefix("-a").filter(|v| !v.is_empty())),
        };
        if let Some(v) = text.and_then(|t| t.parse().ok()) {
            value = Some(v);
        }
    }
    value.unwrap_or(1)
}

/// `all_reduce` for `all_reduce_perf`, `/opt/nccl-tests/build/all_reduce_perf_mpi`, `all_reduce`.
pub fn collective_of_program(program: &str) -> Option<String> {
    let name = program.rsplit('/').next()?;
    let base = name
        .strip_suffix("_perf_mpi")
        .or_else(|| name.strip_suffix("_perf"))?;
    (!base.is_empty()).then(|| base.to_string())
}

/// Reads `text` (the merged output of the run).
pub fn parse(text: &str) -> TestOutput {
    let mut out = TestOutput::default();
    for (i, line) in text.lines().enumerate() {
        out.read_line(line, i as u64 + 1);
    }
    out
}

impl TestOutput {
    /// Takes in one line of the output (numbered from 1).
    pub fn read_line(&mut self, line: &str, line_no: u64) {
        read_line(self, line.trim_end_matches('\r'), line_no);
    }
}

fn read_line(out: &mut TestOutput, line: &str, line_no: u64) {
    if let Some(at) = line
        .find("Test NCCL failure")
        .or_else(|| line.find("Test CUDA failure"))
    {
        push_bounded(&mut out.failures, line[at..].trim().to_string());
        return;
    }
    if let Some(at) = line.find('#') {
        let header = &line[at + 1..];
        read_header(out, header.trim());
        return;
    }
    if let Some(mut row) = read_row(line, line_no) {
        row.group = out.section;
        out.rows.push(row);
    }
}

fn push_bounded(list: &mut Vec<String>, item: String) {
    const MAX_FAILURES: usize = 32;
    if list.len() < MAX_FAILURES {
        list.push(item);
    }
}

fn read_header(out: &mut TestOutput, h: &str) {
    let words: Vec<&str> = h.split_whitespace().collect();
    if let Some(rest) = h.strip_prefix("Collective test starting:") {
        out.collective = collective_of_program(rest.trim()).or(out.collective.take());
    } else if words.first() == Some(&"nThread") {
        out.gpus_per_rank = value_after(&words, "nGpus");
    } else if words.first() == Some(&"Group") {
        out.section = words.get(1).and_then(|g| g.parse().ok());
    } else if words.first() == Some(&"Rank") {
        if let Some(rank) = read_rank(&words) {
            if !out.ranks.iter().any(|r| r.rank == rank.rank) {
                out.ranks.push(rank);
            }
        }
    } else if let Some(rest) = h.strip_prefix("Avg bus bandwidth") {
        out.avg_busbw_gbytes_per_sec = first_number(rest.trim_start_matches([' ', ':']));
    } else if let Some(rest) = h.strip_prefix("Out of bounds values") {
        out.out_of_bounds = first_number(rest.trim_start_matches([' ', ':'])).map(|v| v as u64);
    }
}

fn value_after<T: std::str::FromStr>(words: &[&str], key: &str) -> Option<T> {
    let at = words.iter().position(|w| *w == key)?;
    words.get(at + 1)?.parse().ok()
}

fn first_number(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
}

/// `Rank 0 Group 0 Pid 82102 on gpu-a01 device 0 [0x18] NVIDIA H100 80GB HBM3` (`Group` absent before 2.13).
fn read_rank(words: &[&str]) -> Option<RankLine> {
    let rank = value_after(words, "Rank")?;
    let pid = value_after(words, "Pid")?;
    let host = words
        .get(words.iter().position(|w| *w == "on")? + 1)?
        .to_string();
    let dev_at = words.iter().position(|w| *w == "device")?;
    let device = words.get(dev_at + 1)?.parse().ok()?;
    let bus = words
        .get(dev_at + 2)
        .map(|b| b.trim_matches(['[', ']']).to_string())
        .unwrap_or_default();
    let group = value_after(words, "Group");
    let model = words
        .get(dev_at + 3..)
        .map(|m| m.join(" "))
        .unwrap_or_default();
    Some(RankLine {
        rank,
        pid,
        host,
        device,
        bus,
        model,
        group,
    })
}

/// A result row from its last fields: `size count type redop root` and two placements, or one (in-place only,
/// trace replays leave the out-of-place columns blank).
fn read_row(line: &str, line_no: u64) -> Option<Row> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (lead, placements) =
        if words.len() >= 13 && placement(&words[words.len() - 8..words.len() - 4]).is_some() {
            (
                &words[words.len() - 13..words.len() - 8],
                &words[words.len() - 8..],
            )
        } else if words.len() >= 9 {
            (
                &words[words.len() - 9..words.len() - 4],
                &words[words.len() - 4..],
            )
        } else {
            return None;
        };
    let bytes = lead[0].parse().ok()?;
    let count = lead[1].parse().ok()?;
    let dtype = lead[2];
    if !dtype.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || dtype.parse::<f64>().is_ok()
    {
        return None;
    }
    lead[4].parse::<i64>().ok()?;
    let (out_of_place, in_place) = if placements.len() == 8 {
        (
            Some(placement(&placements[..4])?),
            placement(&placements[4..])?,
        )
    } else {
        (None, placement(placements)?)
    };
    Some(Row {
        bytes,
        count,
        dtype: dtype.to_string(),
        redop: lead[3].to_string(),
        out_of_place,
        in_place,
        line: line_no,
        group: None,
    })
}

fn placement(fields: &[&str]) -> Option<Placement> {
    let number = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
    let wrong = match fields[3] {
        "N/A" => None,
        w => Some(number(w)? as u64),
    };
    Some(Placement {
        time_us: number(fields[0])?,
        algbw_gbytes_per_sec: number(fields[1])?,
        busbw_gbytes_per_sec: number(fields[2])?,
        wrong,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8388608 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  30211 on    gpu-a01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  30212 on    gpu-a02 device  0 [0x18] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608       2097152     float     sum      -1    98.11   85.50   85.50      0    97.43   86.10   86.10      0
0:  4294967296    1073741824     float     sum      -1  22876.3  187.75  187.75      3  22850.1  187.96  187.96      0
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 136.83
#
";

    #[test]
    fn header_rows_and_summary_are_read_through_launcher_prefixes() {
        let t = parse(RUN);
        assert_eq!(t.collective.as_deref(), Some("all_reduce"));
        assert_eq!(t.gpus_per_rank, Some(1));
        assert_eq!(t.hosts(), ["gpu-a01", "gpu-a02"]);
        assert_eq!(t.ranks[1].pid, 30212);
        assert_eq!(t.ranks[0].bus, "0x18");
        assert_eq!(t.ranks[0].model, "NVIDIA H100 80GB HBM3");
        assert_eq!(t.rows.len(), 2);
        let big = t.largest().unwrap();
        assert_eq!(big.bytes, 4294967296);
        assert_eq!(big.out_of_place.unwrap().wrong, Some(3));
        assert_eq!(big.in_place.busbw_gbytes_per_sec, 187.96);
        assert_eq!(t.avg_busbw_gbytes_per_sec, Some(136.83));
        assert_eq!(t.out_of_bounds, Some(3));
    }

    #[test]
    fn unchecked_runs_old_rank_lines_and_in_place_only_rows() {
        let t = parse(
            "#   Rank  3 Pid   4711 on gpu-c12 device  3 [0x3d] NVIDIA A100-SXM4-80GB\n\
             \x20   1048576        262144     float     sum      -1    40.12   26.13   45.73    N/A    39.80   26.35   46.11    N/A\n\
             \x20   2097152        524288     float    none      -1                                     51.0   41.12   41.12      0\n",
        );
        assert_eq!(t.ranks[0].rank, 3);
        assert_eq!(t.ranks[0].host, "gpu-c12");
        assert_eq!(t.rows[0].in_place.wrong, None);
        assert_eq!(t.rows[1].out_of_place, None);
        assert_eq!(t.rows[1].in_place.wrong, Some(0));
    }

    #[test]
    fn other_lines_are_not_rows() {
        for line in [
            "gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "srun: error: gpu-a02: task 5: Segmentation fault (core dumped)",
            "1 2 3 4 5 6 7 8 9 10 11 12 13",
            "",
        ] {
            assert!(parse(line).rows.is_empty(), "{line}");
        }
        let t = parse("gpu-a01: Test NCCL failure common.cu:1279 'remote process exited or there was a network error / '\n");
        assert_eq!(t.failures.len(), 1);
    }

    #[test]
    fn split_runs_give_each_rank_its_group_and_each_section_its_rows() {
        let t = parse(
            "#  Rank  3 Group  3 Pid   4003 on gpu-a01 device  3 [0x4b] NVIDIA H100 80GB HBM3\n\
             # Group  3 : ranks 3,11\n\
             \x20 1073741824     268435456     float     sum      -1  23000.0   46.68   46.68      0  23000.0   46.68   46.68      0\n",
        );
        assert_eq!(t.ranks[0].group, Some(3));
        assert_eq!(t.rows[0].group, Some(3));
        assert_eq!(t.groups()[&3].len(), 1);
        assert!(parse(RUN).groups().is_empty());
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(average_of(&args(&["all_reduce_perf", "-g", "1"])), 1);
        assert_eq!(average_of(&args(&["all_reduce_perf", "-a", "3"])), 3);
        assert_eq!(average_of(&args(&["x", "-a3"])), 3);
        assert_eq!(average_of(&args(&["x", "--average=0"])), 0);
    }

    #[test]
    fn collective_names_come_from_program_names() {
        assert_eq!(
            collective_of_program("/opt/nccl-tests/build/alltoall_perf").as_deref(),
            Some("alltoall")
        );
        assert_eq!(
            collective_of_program("sendrecv_perf_mpi").as_deref(),
            Some("sendrecv")
        );
        assert_eq!(collective_of_program("python3"), None);
    }
}
