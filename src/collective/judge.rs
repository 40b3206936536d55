//! The verdict of a `collective` run: pure functions from what was read (the COMMAND's ending, nccl-tests'
//! table, the NCCL summary, the rank map, this host's PCI tree) to results in `run`'s report format.
//!
//! Results: `collective.command` (how the COMMAND ended; a hang names each rank's last NCCL line),
//! `collective.busbw` (one per collective and size class, the largest size judged against the profile),
//! `collective.data` (`#wrong`), `collective.transport` (the data path against `--expect`),
//! `collective.errors` (NCCL's failures), `collective.ranks` (every rank seen) and `collective.rails` (each
//! local rank's NIC against the NIC nearest its GPU). The runs of `--mode nic-loopback` and `--mode per-rail`
//! replace the busbw or transport verdict with their own ([`super::paths`]).

use super::launch::{Ending, Ran};
use super::nccl_tests::{Row, TestOutput};
use super::paths;
use super::ranks::{short_host, Process, RankMap};
use super::variant::Variant;
use crate::child::fmt_secs;
use crate::model::{CheckResult, FindingCode, Limit, Measurement, Remedy, Status};
use crate::nccl::{self, Judgement, Summary, Verdict};
use crate::profile::{BusbwLimits, NcclExpect};
use crate::rules::topology::{nearest, PciTree, PcieDistance, Role};

pub const ID_COMMAND: &str = "collective.command";
pub const ID_BUSBW: &str = "collective.busbw";
pub const ID_DATA: &str = "collective.data";
pub const ID_TRANSPORT: &str = "collective.transport";
pub const ID_ERRORS: &str = "collective.errors";
pub const ID_RANKS: &str = "collective.ranks";
pub const ID_RAILS: &str = "collective.rails";

const COMMAND_LEFT_PROCESSES: FindingCode = FindingCode {
    code: "COL001",
    title: "the COMMAND exited 0 but left processes running outside its process group",
    explanation: "Something the job started daemonized (setsid, a double fork) and would have outlived it; fabric-preflight ended it. Stop it in the job, so that the node is left as it was found.",
    step: Some(Remedy::Reconfigure),
};
const COMMAND_NOT_STARTED: FindingCode = FindingCode {
    code: "COL002",
    title: "the COMMAND did not start",
    explanation:
        "The launcher or benchmark could not be executed: give it by its path, or put it on PATH.",
    step: Some(Remedy::Reconfigure),
};
const COMMAND_FAILED: FindingCode = FindingCode {
    code: "COL003",
    title: "the COMMAND failed, hung or was interrupted",
    explanation: "It exited non-zero, died of a signal, was still running at --timeout (a hang: each rank's last NCCL line names where it stopped) or was interrupted. The first rank to fail is the one to look at: `fabric-preflight run` and `pair` on its node.",
    step: None,
};
const NO_TABLE: FindingCode = FindingCode {
    code: "COL101",
    title: "the COMMAND printed no nccl-tests result table: no bandwidth was measured",
    explanation: "A bandwidth never measured is never a pass: run an nccl-tests benchmark or `--workload torch` as the COMMAND.",
    step: Some(Remedy::Reconfigure),
};
const UNNAMED: FindingCode = FindingCode {
    code: "COL102",
    title: "the collective could not be named, so its bandwidth is not judged",
    explanation: "Which floor applies depends on the collective: name it with --collective.",
    step: Some(Remedy::Reconfigure),
};
const SIZE_NOT_JUDGED: FindingCode = FindingCode {
    code: "COL103",
    title: "bandwidth at smaller sizes is shown, not judged",
    explanation: "A skip: the profile judges the largest size only.",
    step: None,
};
const BUSBW_LOW: FindingCode = FindingCode {
    code: "COL104",
    title: "bus bandwidth below the profile's floor",
    explanation: "busbw at the largest size is below `thresholds.nccl_busbw_gbytes_per_sec.<collective>.<scope>` (a warning below 128 MiB, where bandwidth has not levelled off). Look at the transport and rails results, then run `fabric-preflight run` and `pair` on the nodes.",
    step: Some(Remedy::ServiceRma),
};
const BUSBW_UNJUDGED: FindingCode = FindingCode {
    code: "COL105",
    title: "bus bandwidth measured but the profile sets no floor for it",
    explanation:
        "A warning: a number judged against nothing is never a pass. Set the floor in the profile.",
    step: Some(Remedy::Reconfigure),
};
const DATA_NO_TABLE: FindingCode = FindingCode {
    code: "COL201",
    title: "no result table: no element was checked",
    explanation:
        "An error: without nccl-tests' table nothing says whether the data arrived intact.",
    step: None,
};
const DATA_CORRUPTED: FindingCode = FindingCode {
    code: "COL202",
    title: "the collective corrupted data (#wrong or out-of-bounds values)",
    explanation: "Corruption without an error is a hardware fault until shown otherwise: run `fabric-preflight run` on every node (PCIe AER, GPU row remaps, NIC counters), then bisect the nodes with smaller jobs.",
    step: Some(Remedy::ServiceRma),
};
const DATA_UNCHECKED: FindingCode = FindingCode {
    code: "COL203",
    title: "results were not checked (nccl-tests -c 0)",
    explanation: "#wrong is N/A: drop `-c 0` so that every result is checked.",
    step: Some(Remedy::Reconfigure),
};
const SINGLE_NODE: FindingCode = FindingCode {
    code: "COL301",
    title: "single node, no NET channel: the expected transport does not apply",
    explanation:
        "A skip: the expectation applies to traffic through the NICs; run across nodes to judge it.",
    step: None,
};
const TRANSPORT_NOT_MET: FindingCode = FindingCode {
    code: "COL302",
    title: "NCCL carried the data over another transport than expected",
    explanation: "Sockets where RDMA was expected, or no GPUDirect RDMA where GDR was: the fix quotes NCCL's own advice. See nccl.env, gdr.kernel_path and rdma.link on the nodes.",
    step: Some(Remedy::Reconfigure),
};
const TRANSPORT_UNPROVEN: FindingCode = FindingCode {
    code: "COL303",
    title: "the data path cannot be proven from the NCCL logs",
    explanation: "An error: the logs lack the channel lines (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET) or disagree.",
    step: None,
};
const NCCL_FAILED: FindingCode = FindingCode {
    code: "COL401",
    title: "NCCL reported a failure",
    explanation: "NCCL logged a fatal error (or nccl-tests a failure line): the summary quotes the first. Read it and the rank's log.",
    step: Some(Remedy::Reconfigure),
};
const TEST_FAILURES: FindingCode = FindingCode {
    code: "COL402",
    title: "nccl-tests printed failure lines",
    explanation: "The benchmark itself reported failures: the summary quotes the first.",
    step: Some(Remedy::Reconfigure),
};
const RECOVERY_UNKNOWN: FindingCode = FindingCode {
    code: "COL403",
    title: "whether NCCL recovered from its errors cannot be told",
    explanation: "An error: NCCL logged errors and the logs do not show whether it recovered.",
    step: None,
};
const NO_NCCL_LINE: FindingCode = FindingCode {
    code: "COL501",
    title: "no NCCL line from any rank",
    explanation: "NCCL did not log, or the COMMAND ran no NCCL: check that the launcher passes NCCL_DEBUG and NCCL_DEBUG_FILE to the ranks.",
    step: Some(Remedy::Reconfigure),
};
const RANKS_SILENT: FindingCode = FindingCode {
    code: "COL502",
    title: "some ranks printed no NCCL line",
    explanation: "A completed run lost their logs (a launcher that does not pass the environment, or output not forwarded): a warning. A run that did not complete: these ranks are the first to look at (an error).",
    step: Some(Remedy::Reconfigure),
};
const INIT_INCOMPLETE: FindingCode = FindingCode {
    code: "COL503",
    title: "processes never completed NCCL init",
    explanation: "An error: ranks that stopped before `Init COMPLETE` wait for a peer or a NIC.",
    step: None,
};
const NO_NET: FindingCode = FindingCode {
    code: "COL601",
    title: "no RDMA NET channel from this host's ranks: nothing to align",
    explanation: "A skip: the rail map applies to ranks that send through NICs.",
    step: None,
};
const TREE_UNREAD: FindingCode = FindingCode {
    code: "COL602",
    title: "this host's PCI tree could not be read: the rail map cannot be checked",
    explanation: "A skip: which NIC is nearest each GPU is unknown.",
    step: None,
};
const RAILS_CROSSED: FindingCode = FindingCode {
    code: "COL603",
    title: "ranks send through a NIC other than the one nearest their GPU",
    explanation: "A topology-misaligned NCCL_IB_HCA or GPU binding costs about 29% of all-reduce bandwidth: leave NCCL_IB_HCA unset or list the NICs in GPU order; check the launcher's GPU binding.",
    step: Some(Remedy::Reconfigure),
};
const RANKS_UNPLACED: FindingCode = FindingCode {
    code: "COL604",
    title: "none of this host's ranks could be placed on its PCI tree",
    explanation: "A skip: the GPU bus ids are not in the log.",
    step: None,
};

/// Every finding this file's results can carry, by check id (gathered by `commands::findings`).
pub const FINDINGS: &[(&str, &[&FindingCode])] = &[
    (
        ID_COMMAND,
        &[
            &COMMAND_LEFT_PROCESSES,
            &COMMAND_NOT_STARTED,
            &COMMAND_FAILED,
        ],
    ),
    (
        ID_BUSBW,
        &[
            &NO_TABLE,
            &UNNAMED,
            &SIZE_NOT_JUDGED,
            &BUSBW_LOW,
            &BUSBW_UNJUDGED,
        ],
    ),
    (ID_DATA, &[&DATA_NO_TABLE, &DATA_CORRUPTED, &DATA_UNCHECKED]),
    (
        ID_TRANSPORT,
        &[&SINGLE_NODE, &TRANSPORT_NOT_MET, &TRANSPORT_UNPROVEN],
    ),
    (
        ID_ERRORS,
        &[&NCCL_FAILED, &TEST_FAILURES, &RECOVERY_UNKNOWN],
    ),
    (ID_RANKS, &[&NO_NCCL_LINE, &RANKS_SILENT, &INIT_INCOMPLETE]),
    (
        ID_RAILS,
        &[&NO_NET, &TREE_UNREAD, &RAILS_CROSSED, &RANKS_UNPLACED],
    ),
];

/// Below this size a collective is latency-bound; at or above [`PLATEAU_BYTES`] its bus bandwidth has reached
/// what the links give (nccl-tests' plots flatten from a few hundred MiB on NVLink and NDR).
const SMALL_BYTES: u64 = 1 << 20;
const PLATEAU_BYTES: u64 = 128 << 20;
/// Ranks named one by one in a hang report; the rest are counted.
const MAX_RANKS_SHOWN: usize = 64;
/// Public figure for a rank that crosses rails (NVIDIA-NeMo/RL#3670: 34.5 vs 44.6 GB/s on 2x8 H100).
const MISALIGNED_COST: &str =
    "a topology-misaligned NCCL_IB_HCA costs about 29% of all-reduce bus bandwidth \
     in public reports (NVIDIA-NeMo/RL#3670)";

/// What the verdict is made from.
pub struct Facts<'a> {
    pub ran: &'a Ran,
    /// The COMMAND as the user gave it, for the report.
    pub command: &'a str,
    pub tests: &'a TestOutput,
    pub ranks: &'a RankMap,
    pub summary: &'a Summary,
    pub expect: NcclExpect,
    /// Where `expect` came from (`--expect`, `profile hgx-h100-ib`, `default`).
    pub expect_from: &'a str,
    pub profile: &'a str,
    pub limits: Option<&'a BusbwLimits>,
    /// This host's name (NCCL's short form is compared) and PCI tree, for the rail map.
    pub hostname: &'a str,
    pub tree: Option<&'a PciTree>,
    /// The COMMAND's merged output, named in evidence.
    pub output: &'a str,
    /// Which run of the COMMAND this is: its floor and transport rule.
    pub variant: Variant,
    /// nccl-tests' `-a` (how a split run's table combines the communicators' times).
    pub average: u8,
}

/// All results of the run.
pub fn judge(f: &Facts<'_>) -> Vec<CheckResult> {
    let mut results = vec![command(f)];
    match f.variant {
        Variant::PerRail { rails } => results.extend(paths::rail_busbw(f, rails)),
        _ => results.extend(busbw(f)),
    }
    results.push(data(f));
    results.push(match f.variant {
        Variant::NicLoopback => paths::loopback_transport(f),
        Variant::NvlinkOnly => paths::nvlink_transport(f),
        _ => transport(f),
    });
    results.push(errors(f));
    results.push(ranks(f));
    results.push(rails(f));
    results
}

/// Whether NCCL's traffic crossed nodes: more than one node by NCCL's count or nccl-tests' host list, or any
/// NET channel (NET between the GPUs of one host is judged like inter-node traffic too).
pub fn multi_node(f: &Facts<'_>) -> bool {
    f.summary.nnodes.is_some_and(|n| n > 1)
        || f.tests.hosts().len() > 1
        || f.summary.net_channels.total > 0
}

fn completed(ran: &Ran) -> bool {
    ran.ending == Ending::Exited(0)
}

fn command(f: &Facts<'_>) -> CheckResult {
    let after = fmt_secs(f.ran.elapsed);
    let base = |status, summary: String| {
        CheckResult::new(ID_COMMAND, status, summary)
            .evidence("command", f.command)
            .evidence("output", f.output)
            .code(&COMMAND_LEFT_PROCESSES)
            .code(&COMMAND_NOT_STARTED)
    };
    let left = (!f.ran.survivors.is_empty()).then(|| {
        format!(
            "it left {} process(es) running outside its process group, ended by fabric-preflight: {}",
            f.ran.survivors.len(),
            f.ran.survivors.join(", ")
        )
    });
    let stopped_at = f
        .ran
        .stopped
        .as_ref()
        .map(|s| (fmt_secs(s.at), s.describe(f.ran.elapsed)));
    match &f.ran.ending {
        Ending::Exited(0) if left.is_none() => base(
            Status::Pass,
            format!("the COMMAND exited 0 after {after} s"),
        ),
        Ending::Exited(0) => base(
            Status::Error,
            format!("the COMMAND exited 0 after {after} s, but {}", left.unwrap_or_default()),
        )
        .fix(
            "something the job started daemonized (setsid, a double fork) and would have outlived it: stop it \
             in the job (or run the launcher in the foreground), so that the node is left as it was found",
        ),
        Ending::NotStarted(why) => base(Status::Error, format!("the COMMAND did not start: {why}"))
            .fix("give the launcher or benchmark by its path, or put it on PATH"),
        ending => {
            let how = match ending {
                Ending::Exited(code) => format!("the COMMAND exited with status {code} after {after} s"),
                Ending::Signaled(sig) => format!("the COMMAND died of signal {sig} after {after} s"),
                Ending::TimedOut => match &stopped_at {
                    Some((at, how)) => format!("hang: the COMMAND was still running at --timeout ({at} s); {how}"),
                    None => format!("hang: the COMMAND was still running at --timeout ({after} s)"),
                },
                Ending::Interrupted(sig) => match &stopped_at {
                    Some((at, how)) => format!("interrupted by {sig} at {at} s; {how}"),
                    None => format!("interrupted by {sig} after {after} s"),
                },
                Ending::NotStarted(_) => unreachable!("handled above"),
            };
            let culprit = stalled(f.ranks);
            let mut summary = match &culprit {
                Some(c) => format!("{how}; {c}"),
                None => how,
            };
            if let Some(left) = &left {
                summary = format!("{summary}; {left}");
            }
            let mut r = base(Status::Error, summary).code(&COMMAND_FAILED);
            for line in rank_lines(f.ranks) {
                r = r.evidence(&line.0, line.1);
            }
            let fix = if *ending == Ending::TimedOut {
                "look at the named rank's host first (its last NCCL line says how far it got: before `Init COMPLETE` it \
                 waits for a peer or a NIC, after the channel lines for the data path); `fabric-preflight run` and \
                 `fabric-preflight pair` on that node; rerun with a longer --timeout only if the sizes were large"
            } else {
                "read the COMMAND's output (named above) from its first error; a rank that died takes the others \
                 down with `Connection closed by remote peer`: the first rank to fail is the one to look at"
            };
            r.fix(fix)
        }
    }
}

/// `rank 5 on gpu-a01 (pid 4711)` = `` `Channel 03/0 : …` (nccl.gpu-a01.4711.log:37) `` for each process, and
/// the ranks no process claims.
fn rank_lines(map: &RankMap) -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = Vec::new();
    let procs = map.by_rank();
    for p in procs.iter().take(MAX_RANKS_SHOWN) {
        let key = format!("{} on {} (pid {})", p.who(), p.host, p.pid);
        let value = match &p.last_line {
            Some(s) => format!("stopped after `{}` ({}:{})", s.text, s.source, s.line),
            None => "printed no NCCL line".to_string(),
        };
        lines.push((key, value));
    }
    if procs.len() > MAX_RANKS_SHOWN {
        lines.push((
            "more".into(),
            format!("{} processes not listed", procs.len() - MAX_RANKS_SHOWN),
        ));
    }
    let unseen = map.unseen_ranks();
    if !unseen.is_empty() {
        lines.push((
            format!("ranks {}", nccl::ranges(&unseen)),
            "printed no NCCL line and are not in the header".into(),
        ));
    }
    lines
}

/// How far each process got: 0 no NCCL line, 1 lines but no `Init COMPLETE`, 2 init complete.
fn stage(p: &Process) -> u8 {
    match (p.nccl_lines, p.init_complete) {
        (0, _) => 0,
        (_, false) => 1,
        (_, true) => 2,
    }
}

/// The ranks that stopped first, in words: the ones at the earliest stage when not all are there, else the
/// ones whose last line differs from what most ranks last printed.
fn stalled(map: &RankMap) -> Option<String> {
    let procs = map.by_rank();
    let unseen = map.unseen_ranks();
    if procs.is_empty() && unseen.is_empty() {
        return Some("no rank printed an NCCL line".into());
    }
    let describe = |p: &Process| match &p.last_line {
        Some(s) => format!("{} on {} stopped after `{}`", p.who(), p.host, s.text),
        None => format!(
            "{} on {} (pid {}) printed no NCCL line",
            p.who(),
            p.host,
            p.pid
        ),
    };
    let name = |list: Vec<&Process>, rest: usize| {
        let mut text: Vec<String> = list.iter().take(4).map(|p| describe(p)).collect();
        if list.len() > 4 {
            text.push(format!("{} more like them", list.len() - 4));
        }
        format!("{}; {rest} other rank(s) got further", text.join("; "))
    };
    let unseen_text = (!unseen.is_empty())
        .then(|| format!("ranks {} printed no NCCL line", nccl::ranges(&unseen)));
    let earliest = procs.iter().map(|p| stage(p)).min()?;
    let behind: Vec<&Process> = procs
        .iter()
        .copied()
        .filter(|p| stage(p) == earliest)
        .collect();
    if let Some(text) = unseen_text {
        return Some(text);
    }
    if behind.len() < procs.len() {
        let rest = procs.len() - behind.len();
        return Some(name(behind, rest));
    }
    // All at one stage: the odd last lines out.
    let shape = |p: &Process| p.last_line.as_ref().map(|s| without_digits(&s.text));
    let mut counts: Vec<(Option<String>, usize)> = Vec::new();
    for p in &procs {
        let s = shape(p);
        match counts.iter_mut().find(|(k, _)| *k == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s, 1)),
        }
    }
    let common = counts
        .iter()
        .max_by_key(|(_, n)| *n)
        .map(|(k, _)| k.clone())?;
    let odd: Vec<&Process> = procs
        .iter()
        .copied()
        .filter(|p| shape(p) != common)
        .collect();
    if odd.is_empty() || odd.len() * 2 > procs.len() {
        let p = procs[0];
        return Some(format!(
            "every rank stopped at the same point, e.g. {}",
            describe(p)
        ));
    }
    Some(name(odd.clone(), procs.len() - odd.len()))
}

/// A line's shape: digit runs as `#` (channel numbers and ranks differ between ranks at the same point).
fn without_digits(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

/// `1 GiB`, `8 MiB`, `512 B`.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} B")
}

fn size_class(bytes: u64) -> (&'static str, u8) {
    if bytes < SMALL_BYTES {
        ("< 1 MiB", 0)
    } else if bytes < PLATEAU_BYTES {
        ("1 MiB to 128 MiB", 1)
    } else {
        (">= 128 MiB", 2)
    }
}

/// The bus bandwidth a row stands for: out-of-place (the column people quote), else in-place.
pub(super) fn row_busbw(r: &Row) -> f64 {
    r.out_of_place
        .map_or(r.in_place.busbw_gbytes_per_sec, |p| p.busbw_gbytes_per_sec)
}

pub(super) fn busbw(f: &Facts<'_>) -> Vec<CheckResult> {
    let named = f.tests.collective.clone();
    let collective = named.clone().unwrap_or_else(|| "collective".into());
    let Some(largest) = f.tests.largest() else {
        return vec![CheckResult::error(
            ID_BUSBW,
            "the COMMAND printed no nccl-tests result table: no bandwidth was measured, which is never a pass",
        )
        .subject(collective)
        .evidence("output", f.output)
        .fix("run an nccl-tests benchmark (`all_reduce_perf -b 8M -e 4G -f 2 -g 1`) or `--workload torch` as the COMMAND").code(&NO_TABLE)];
    };
    if named.is_none() {
        // Which floor applies depends on the collective: a number judged against none is never a pass.
        return vec![CheckResult::error(
            ID_BUSBW,
            format!(
                "busbw {:.2} GB/s at {} not judged: the collective could not be named (no `# Collective test \
                 starting:` line in the output, no nccl-tests program in the COMMAND)",
                row_busbw(largest),
                size_text(largest.bytes)
            ),
        )
        .subject(collective)
        .evidence("output", f.output)
        .fix(format!(
            "name it: --collective {}",
            BusbwLimits::COLLECTIVES.join("|")
        )).code(&UNNAMED)];
    }
    let scope = f.variant.scope(multi_node(f));
    let limit = floor(f, &collective, scope);
    let mut classes: Vec<(&str, u8)> = f.tests.rows.iter().map(|r| size_class(r.bytes)).collect();
    classes.sort_by_key(|c| c.1);
    classes.dedup();
    let judged_class = size_class(largest.bytes).1;
    classes
        .into_iter()
        .map(|(label, class)| {
            let rows: Vec<&Row> = f.tests.rows.iter().filter(|r| size_class(r.bytes).1 == class).collect();
            let subject = format!("{collective} {label}");
            if class == judged_class {
                judged_busbw(f, &collective, &subject, largest, limit, scope)
            } else {
                let best = rows.iter().map(|r| row_busbw(r)).fold(0.0, f64::max);
                let sizes = format!("{} to {}", size_text(rows[0].bytes), size_text(rows[rows.len() - 1].bytes));
                CheckResult::new(
                    ID_BUSBW,
                    Status::Skip,
                    format!("busbw up to {best:.2} GB/s over {} size(s), {sizes} (shown, not judged: the profile judges the largest size)", rows.len()),
                )
                .subject(subject)
                .measure(Measurement::new("busbw", best, "GB/s")).code(&SIZE_NOT_JUDGED)
            }
        })
        .collect()
}

/// The profile's floor for `collective` in `scope` (empty where it sets none).
pub(super) fn floor(f: &Facts<'_>, collective: &str, scope: &str) -> Limit {
    f.limits
        .and_then(|l| l.of(collective))
        .and_then(|s| s.get(scope))
        .unwrap_or_default()
}

pub(super) fn judged_busbw(
    f: &Facts<'_>,
    collective: &str,
    subject: &str,
    row: &Row,
    limit: Limit,
    scope: &str,
) -> CheckResult {
    let value = row_busbw(row);
    let size = size_text(row.bytes);
    let key = format!("thresholds.nccl_busbw_gbytes_per_sec.{collective}.{scope}");
    let mut status = limit.judge_min(value);
    let mut summary = match status {
        // Measured but judged against nothing: said, never passed.
        Status::Pass if limit.is_empty() => {
            status = Status::Warn;
            if BusbwLimits::COLLECTIVES.contains(&collective) {
                format!(
                    "busbw {value:.2} GB/s at {size} not judged: profile {} sets no {key}",
                    f.profile
                )
            } else {
                format!(
                    "busbw {value:.2} GB/s at {size} not judged: profiles set floors for {} only, not {collective}",
                    BusbwLimits::COLLECTIVES.join(", ")
                )
            }
        }
        Status::Pass => format!(
            "busbw {value:.2} GB/s at {size} meets {}",
            limit_text(&limit)
        ),
        _ => format!(
            "busbw {value:.2} GB/s at {size} is below {}",
            limit_text(&limit)
        ),
    };
    if !limit.is_empty() && status != Status::Pass && row.bytes < PLATEAU_BYTES {
        // A low number at a small size is what small sizes give, not a fault.
        status = Status::Warn;
        summary = format!(
            "{summary}, but {size} is below 128 MiB where bus bandwidth has not levelled off: not failed; sweep to a larger size"
        );
    }
    let mut r = CheckResult::new(ID_BUSBW, status, summary)
        .code(if limit.is_empty() {
            &BUSBW_UNJUDGED
        } else {
            &BUSBW_LOW
        })
        .subject(subject)
        .measure(Measurement::new("busbw", value, "GB/s").judged_by(&limit))
        .evidence(
            "size",
            format!(
                "{} B, {} elements of {} (line {})",
                row.bytes, row.count, row.dtype, row.line
            ),
        )
        .evidence("scope", scope.replace('_', " "));
    if let Some(p) = row.out_of_place {
        r = r.evidence(
            "out-of-place",
            format!(
                "time {} us, algbw {} GB/s, busbw {} GB/s",
                p.time_us, p.algbw_gbytes_per_sec, p.busbw_gbytes_per_sec
            ),
        );
    }
    let p = row.in_place;
    r = r.evidence(
        "in-place",
        format!(
            "time {} us, algbw {} GB/s, busbw {} GB/s",
            p.time_us, p.algbw_gbytes_per_sec, p.busbw_gbytes_per_sec
        ),
    );
    if let Some(avg) = f.tests.avg_busbw_gbytes_per_sec {
        r = r.evidence(
            "avg bus bandwidth (all sizes, as nccl-tests prints it)",
            format!("{avg} GB/s"),
        );
    }
    if !limit.is_empty() {
        r = r.evidence("limit", format!("{key} of profile {}", f.profile));
    }
    if limit.is_empty() {
        r = r.fix(format!(
            "set the floor for this node type in its profile ({key}: {{warn: …, fail: …}}; checks/hgx-h100-ib.yaml \
             has one for each collective), or pick a profile that has it with --profile"
        ));
    } else if matches!(r.status, Status::Fail | Status::Warn) {
        r = r.fix(
            "compare with the transport and rail results below: a Socket fallback or a rank off its rail explains most \
             shortfalls; else `fabric-preflight pair` between the nodes and `fabric-preflight run` on each",
        );
    }
    r
}

fn limit_text(limit: &Limit) -> String {
    match (limit.warn, limit.fail) {
        (Some(w), Some(fl)) => format!("warn {w} / fail {fl} GB/s"),
        (Some(w), None) => format!("warn {w} GB/s"),
        (None, Some(fl)) => format!("fail {fl} GB/s"),
        (None, None) => "no limit".into(),
    }
}

fn data(f: &Facts<'_>) -> CheckResult {
    if f.tests.rows.is_empty() {
        return CheckResult::error(ID_DATA, "no result table: no element was checked")
            .code(&DATA_NO_TABLE);
    }
    let mut wrong_sizes = Vec::new();
    let mut checked = 0;
    let mut wrong_total = 0u64;
    for r in &f.tests.rows {
        for (placement, p) in [
            ("out-of-place", r.out_of_place),
            ("in-place", Some(r.in_place)),
        ] {
            let Some(w) = p.and_then(|p| p.wrong) else {
                continue;
            };
            checked += 1;
            if w > 0 {
                wrong_total += w;
                wrong_sizes.push(format!(
                    "{} {placement}: {w} wrong (line {})",
                    size_text(r.bytes),
                    r.line
                ));
            }
        }
    }
    let oob = f.tests.out_of_bounds.unwrap_or(0);
    if !wrong_sizes.is_empty() || oob > 0 {
        let mut r = CheckResult::fail(
            ID_DATA,
            format!("{wrong_total} wrong element(s) in the results (#wrong), out of bounds values {oob}: the collective corrupted data"),
        ).code(&DATA_CORRUPTED);
        for w in wrong_sizes.iter().take(16) {
            r = r.evidence("#wrong", w);
        }
        return r.fix(
            "corruption without an error is a hardware fault until shown otherwise: run `fabric-preflight run` on every \
             node (PCIe AER, GPU row remaps, NIC counters), then bisect the nodes with smaller jobs",
        );
    }
    if checked == 0 {
        return CheckResult::warn(
            ID_DATA,
            "results were not checked (#wrong is N/A: nccl-tests -c 0)",
        )
        .fix("drop `-c 0` so that every result is checked")
        .code(&DATA_UNCHECKED);
    }
    CheckResult::pass(
        ID_DATA,
        format!("#wrong = 0 in all {checked} checked result(s)"),
    )
}

fn transport(f: &Facts<'_>) -> CheckResult {
    if !multi_node(f) {
        return with_transport_evidence(
            f,
            CheckResult::skip(
                ID_TRANSPORT,
                format!(
                    "single node, no NET channel: {} (expected {} applies to traffic through the NICs; run across nodes to judge it)",
                    match f.summary.verdict {
                        Verdict::IntraNodeOnly => "every channel is intra-node (P2P/SHM)",
                        _ => "no channel line (one rank connects to nothing)",
                    },
                    nccl::expect_name(f.expect)
                ),
            ).code(&SINGLE_NODE),
        );
    }
    with_transport_evidence(f, judged_transport(f))
}

/// The shared analysis' judgement of the data path against `--expect`, in words.
pub(super) fn judged_transport(f: &Facts<'_>) -> CheckResult {
    let s = f.summary;
    let expected = nccl::expect_name(f.expect);
    let measured = measured(f);
    match nccl::judge::judge_transport(s, f.expect) {
        Judgement::Met => CheckResult::pass(
            ID_TRANSPORT,
            format!(
                "NCCL carried the data over {}{measured}, meeting expected {expected}",
                s.verdict_named()
            ),
        ),
        Judgement::NotMet(why) => {
            let mut r = CheckResult::fail(
                ID_TRANSPORT,
                format!(
                    "NCCL carried the data over {}{measured}: {why}",
                    s.verdict_named()
                ),
            )
            .code(&TRANSPORT_NOT_MET);
            if let Some(fix) = nccl::advice(s.verdict).or_else(|| nccl::advice(Verdict::Socket)) {
                r = r.fix(fix);
            }
            r
        }
        Judgement::Undetermined(why) => {
            CheckResult::error(ID_TRANSPORT, format!("cannot prove the data path: {why}"))
                .fix(nccl::advice(Verdict::Undetermined).unwrap_or_default())
                .code(&TRANSPORT_UNPROVEN)
        }
    }
}

/// ` (busbw 385.20 GB/s at 4 GiB)`, or nothing without a table.
pub(super) fn measured(f: &Facts<'_>) -> String {
    f.tests.largest().map_or(String::new(), |r| {
        format!(
            " (busbw {:.2} GB/s at {})",
            row_busbw(r),
            size_text(r.bytes)
        )
    })
}

/// The busbw beside a transport verdict, what was expected, what NCCL selected and listed, and every
/// transport's channel count.
pub(super) fn with_transport_evidence(f: &Facts<'_>, mut r: CheckResult) -> CheckResult {
    let s = f.summary;
    if let Some(row) = f.tests.largest() {
        r = r.measure(Measurement::new("busbw", row_busbw(row), "GB/s"));
    }
    let expected = match f.variant {
        // The network is off: --expect is for the NIC runs.
        Variant::NvlinkOnly => "P2P over NVLink only (NCCL_P2P_LEVEL=NVL)".to_string(),
        _ => format!("{} ({})", nccl::expect_name(f.expect), f.expect_from),
    };
    r = r
        .evidence("expected", expected)
        .evidence("verdict", s.verdict_named())
        .evidence("selected", or_none(&s.network_selected))
        .evidence("net devices", or_none(&s.net_devices));
    for t in &s.transports {
        r = r.evidence(
            "channels",
            format!(
                "{} x{} (ranks {}, first {})",
                t.transport,
                t.channels,
                nccl::ranges(&t.ranks.iter().copied().collect::<Vec<_>>()),
                t.first_seen
            ),
        );
    }
    r
}

fn or_none(list: &[String]) -> String {
    if list.is_empty() {
        "-".into()
    } else {
        list.join(", ")
    }
}

/// NCCL's failures by the recovered-vs-fatal rule of the shared analysis (`nccl::judge_errors`): fatal ones
/// and nccl-tests' own failure lines fail, ones whose outcome the logs cannot show are an error, recovered ones
/// are listed and do not count.
fn errors(f: &Facts<'_>) -> CheckResult {
    let s = f.summary;
    let failures = &f.tests.failures;
    let line = |e: &nccl::summary::Failure| {
        (
            format!("{}:{}", e.source, e.line),
            format!(
                "{} {} {} {} ({})",
                e.kind.as_str(),
                e.host.as_deref().unwrap_or("-"),
                e.location.as_deref().unwrap_or("-"),
                e.message,
                e.why
            ),
        )
    };
    let mut r = match (nccl::judge_errors(s), failures.first()) {
        (Judgement::NotMet(why), _) => CheckResult::fail(ID_ERRORS, why).code(&NCCL_FAILED),
        (_, Some(first)) => CheckResult::fail(
            ID_ERRORS,
            format!("{} nccl-tests failure line(s), first: {first}", failures.len()),
        ).code(&TEST_FAILURES),
        (Judgement::Undetermined(why), None) => CheckResult::error(
            ID_ERRORS,
            format!("cannot tell whether NCCL recovered: {why}"),
        ).code(&RECOVERY_UNKNOWN),
        (Judgement::Met, None) => CheckResult::pass(
            ID_ERRORS,
            match s.recovered_errors_total {
                0 => format!(
                    "no NCCL error in {} NCCL line(s) of {} log(s)",
                    s.input.nccl_records,
                    s.input.files.len()
                ),
                n => format!("no fatal NCCL error; {n} error(s) NCCL recovered from (init completed after them)"),
            },
        ),
    };
    for e in s.errors.iter().take(16) {
        let (k, v) = line(e);
        r = r.evidence(&format!("fatal {k}"), v);
    }
    for e in s.unknown_errors.iter().take(8) {
        let (k, v) = line(e);
        r = r.evidence(&format!("unresolved {k}"), v);
    }
    for e in s.recovered_errors.iter().take(8) {
        let (k, v) = line(e);
        r = r.evidence(&format!("recovered {k}"), v);
    }
    for l in failures.iter().take(8) {
        r = r.evidence("nccl-tests", l);
    }
    if matches!(r.status, Status::Fail | Status::Error) {
        if let Some(fix) = nccl::advice_for(s) {
            r = r.fix(fix);
        }
    }
    r
}

fn ranks(f: &Facts<'_>) -> CheckResult {
    let procs = f.ranks.by_rank();
    let silent: Vec<&Process> = procs
        .iter()
        .copied()
        .filter(|p| p.nccl_lines == 0)
        .collect();
    let unseen = f.ranks.unseen_ranks();
    let hosts: std::collections::BTreeSet<&str> = procs.iter().map(|p| p.host.as_str()).collect();
    let nranks = f.ranks.nranks.unwrap_or(procs.len() as u32);
    let not_init = procs
        .iter()
        .filter(|p| p.nccl_lines > 0 && !p.init_complete)
        .count();
    let mut missing: Vec<String> = silent
        .iter()
        .map(|p| format!("{} on {} (pid {})", p.who(), p.host, p.pid))
        .collect();
    if !unseen.is_empty() {
        missing.push(format!("ranks {}", nccl::ranges(&unseen)));
    }
    let mut r = if procs.is_empty() {
        CheckResult::error(ID_RANKS, "no NCCL line from any rank: NCCL did not log (or the COMMAND ran no NCCL)")
            .fix("check that the launcher passes NCCL_DEBUG and NCCL_DEBUG_FILE to the ranks (Open MPI: `mpirun -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS -x NCCL_DEBUG_FILE`)").code(&NO_NCCL_LINE)
    } else if !missing.is_empty() {
        let status = if completed(f.ran) {
            Status::Warn
        } else {
            Status::Error
        };
        let why = if completed(f.ran) {
            "the run completed, so their logs were lost (a launcher that does not pass the environment, or output not forwarded)"
        } else {
            "the run did not complete: these are the first to look at"
        };
        CheckResult::new(
            ID_RANKS,
            status,
            format!("{} printed no NCCL line: {why}", missing.join(", ")),
        )
        .code(&RANKS_SILENT)
    } else if not_init > 0 && !completed(f.ran) {
        CheckResult::error(
            ID_RANKS,
            format!(
                "{not_init} of {} process(es) never completed NCCL init",
                procs.len()
            ),
        )
        .code(&INIT_INCOMPLETE)
    } else {
        CheckResult::pass(
            ID_RANKS,
            format!(
                "{nranks} rank(s) on {} host(s), every one printed its NCCL lines",
                hosts.len()
            ),
        )
    };
    for (key, value) in rank_lines(f.ranks).into_iter().take(MAX_RANKS_SHOWN) {
        r = r.evidence(&key, value);
    }
    r
}

fn rails(f: &Facts<'_>) -> CheckResult {
    let me = short_host(f.hostname);
    let local: Vec<&Process> = f
        .ranks
        .by_rank()
        .into_iter()
        .filter(|p| p.host == me)
        .collect();
    let with_net: Vec<&Process> = local
        .iter()
        .copied()
        .filter(|p| !p.net_used.is_empty())
        .collect();
    if with_net.is_empty() {
        return CheckResult::skip(
            ID_RAILS,
            format!(
                "no RDMA NET channel from this host's ranks ({me}: {} process(es) in the log): nothing to align",
                local.len()
            ),
        ).code(&NO_NET);
    }
    let Some(tree) = f.tree else {
        return CheckResult::skip(
            ID_RAILS,
            "this host's PCI tree could not be read: the rail map cannot be checked",
        )
        .code(&TREE_UNREAD);
    };
    let nics = tree.rdma_nics();
    let mut crossing = Vec::new();
    let mut evidence = Vec::new();
    let mut unplaced = 0;
    for p in &with_net {
        let Some(gpu) = p.gpu.and_then(|addr| {
            tree.with_role(Role::Gpu)
                .into_iter()
                .find(|&i| addr.matches(&tree.nodes[i].bdf))
        }) else {
            unplaced += 1;
            evidence.push((
                format!("{} (pid {})", p.who(), p.pid),
                format!(
                    "uses {}; its GPU is not in this host's PCI tree",
                    p.used_nics().join(",")
                ),
            ));
            continue;
        };
        let distances: Vec<PcieDistance> = nics.iter().map(|&n| tree.distance(gpu, n)).collect();
        let Some(best) = nearest(&distances) else {
            unplaced += 1;
            continue;
        };
        let best_name = nic_name(tree, nics[best]);
        let mut used_text = Vec::new();
        for used in p.used_nics() {
            match nics
                .iter()
                .position(|&n| tree.nodes[n].rdma_devices.contains(&used))
            {
                Some(k) => {
                    used_text.push(format!("{used} ({:?})", distances[k]));
                    if distances[k] > distances[best] {
                        crossing.push(format!(
                            "{} ({} {}) sends through {used} ({:?}) while {best_name} is nearest ({:?})",
                            p.who(),
                            tree.short_name(gpu),
                            tree.nodes[gpu].bdf,
                            distances[k],
                            distances[best]
                        ));
                    }
                }
                None => used_text.push(format!("{used} (not in this host's PCI tree)")),
            }
        }
        evidence.push((
            format!(
                "{} {} {}",
                p.who(),
                tree.short_name(gpu),
                tree.nodes[gpu].bdf
            ),
            format!(
                "uses {}; nearest {best_name} ({:?})",
                used_text.join(", "),
                distances[best]
            ),
        ));
    }
    let mut r = if !crossing.is_empty() {
        CheckResult::warn(ID_RAILS, format!("{}: {MISALIGNED_COST}", crossing.join("; "))).fix(
            "leave NCCL_IB_HCA unset (NCCL picks each GPU's nearest NIC) or list the NICs in GPU order; check the \
             launcher's GPU binding (`--gpus-per-task`, CUDA_VISIBLE_DEVICES) against `fabric-preflight topo`",
        ).code(&RAILS_CROSSED)
    } else if unplaced == with_net.len() {
        CheckResult::skip(ID_RAILS, "none of this host's ranks could be placed on its PCI tree (GPU bus ids not in the log)").code(&RANKS_UNPLACED)
    } else {
        CheckResult::pass(
            ID_RAILS,
            format!(
                "{} local rank(s) send through the NIC nearest their GPU",
                with_net.len() - unplaced
            ),
        )
    };
    for (k, v) in evidence {
        r = r.evidence(&k, v);
    }
    r
}

fn nic_name(tree: &PciTree, i: usize) -> String {
    tree.nodes[i]
        .rdma_devices
        .first()
        .cloned()
        .unwrap_or_else(|| tree.short_name(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::nccl_tests;
    use crate::profile::BusbwScopes;

    fn facts_for<'a>(
        ran: &'a Ran,
        tests: &'a TestOutput,
        ranks: &'a RankMap,
        summary: &'a Summary,
        limits: &'a BusbwLimits,
    ) -> Facts<'a> {
        Facts {
            ran,
            command: "all_reduce_perf",
            tests,
            ranks,
            summary,
            expect: NcclExpect::Gdrdma,
            expect_from: "default",
            profile: "test",
            limits: Some(limits),
            hostname: "gpu-a01",
            tree: None,
            output: "output.log",
            variant: Variant::Job,
            average: 1,
        }
    }

    fn table(largest_bytes: u64, busbw: f64) -> TestOutput {
        let mut t = nccl_tests::parse(&format!(
            "{largest_bytes} {} float sum -1 10.0 {busbw} {busbw} 0 10.0 {busbw} {busbw} 0\n",
            largest_bytes / 4
        ));
        t.collective = Some("all_reduce".into());
        t
    }

    #[test]
    fn a_low_busbw_fails_at_the_plateau_and_only_warns_below_it() {
        let ran = Ran {
            ending: Ending::Exited(0),
            elapsed: std::time::Duration::from_secs(1),
            stopped: None,
            survivors: vec![],
        };
        let limits = BusbwLimits {
            all_reduce: Some(BusbwScopes {
                single_node: Some(Limit::new(None, Some(460.0))),
                ..Default::default()
            }),
            ..Default::default()
        };
        let summary = crate::nccl::analyze_text("");
        let ranks = RankMap::new();
        for (bytes, want) in [(4u64 << 30, Status::Fail), (64 << 20, Status::Warn)] {
            let t = table(bytes, 300.0);
            let r = busbw(&facts_for(&ran, &t, &ranks, &summary, &limits));
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].status, want, "{bytes}: {}", r[0].summary);
        }
        let t = table(4 << 30, 470.0);
        assert_eq!(
            busbw(&facts_for(&ran, &t, &ranks, &summary, &limits))[0].status,
            Status::Pass
        );
    }

    #[test]
    fn sizes_and_line_shapes_read_as_people_write_them() {
        assert_eq!(size_text(4 << 30), "4 GiB");
        assert_eq!(size_text(8 << 20), "8 MiB");
        assert_eq!(size_text(1000), "1000 B");
        assert_eq!(
            without_digits("Channel 03/0 : 5[5] -> 6[6] via NET/IB/3/GDRDMA"),
            "Channel #/# : #[#] -> #[#] via NET/IB/#/GDRDMA"
        );
    }
}
