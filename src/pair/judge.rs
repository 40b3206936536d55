//! Verdicts of `pair`: one result per port pair (`pair.rdma`), the handshake (`pair.handshake`), and in a ring
//! the node common to the failing pairs (`pair.ring`). Pure functions of what was measured.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::measure::rc::{Failure, Registration};
use crate::measure::rdma_pair::PairOutcome;
use crate::model::{common, worst, CheckResult, FindingCode, Limit, Measurement, Status};
use crate::pair::findings;
use crate::pair::wire::PortMemory;
use crate::rules::transfer_verdict::{
    gbps_text, judge_leg, Culprit, LegRule, LinkRate, Percentile,
};

pub const ID_HANDSHAKE: &str = "pair.handshake";
pub const ID_RDMA: &str = "pair.rdma";
pub const ID_RING: &str = "pair.ring";

/// ngc_multinode_perf passes a port at 90% of its link rate, as `gdr.loopback` does.
pub const DEFAULT_PCT: Limit = Limit::new(Some(90.0), Some(75.0));

/// How one leg of a port pair ended: what the measuring child sends back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LegRun {
    Done(PairOutcome),
    /// It stopped at `failure`; `peer_gone`: the peer's process had ended by then.
    Failed {
        failure: Failure,
        peer_gone: bool,
    },
    /// Not started, and why (the peer was already gone).
    NotRun(String),
}

/// A port pair's legs and what each end brought to them.
#[derive(Debug, Clone, PartialEq)]
pub struct PairLegs {
    /// `name (addr)` of the peer, for errors; its node name for the memory lines.
    pub peer_name: String,
    pub peer_node: String,
    pub mine: PortMemory,
    pub theirs: PortMemory,
    /// Host memory at both ends: always, the control.
    pub host: LegRun,
    /// Present when either end brought GPU memory.
    pub gpu: Option<LegRun>,
}

const FIX_LINK: &str = "compare both ends' rdma.link (rate, MTU, GID index), then the cable and switch port between them; `ib_write_bw` between the same ports confirms";
const FIX_GDR: &str = "on the end with GPU memory: load nvidia_peermem (`modprobe nvidia-peermem`) or use DMA-BUF (open kernel module, kernel >= 5.12, rdma-core >= 34); check ACS/IOMMU and the GPU-NIC PCIe placement (gdr.loopback, pcie.acs, topo.gpu_nic)";

impl PairLegs {
    /// `GPU memory here (0000:17:00.0), host memory on vm-b`.
    fn gpu_label(&self) -> String {
        format!(
            "{} here, {} on {}",
            self.mine.describe(),
            self.theirs.describe(),
            self.peer_node
        )
    }
}

/// One leg's part of the verdict.
struct LegPart {
    status: Status,
    /// Passed every rule but the deadline's (what the culprit comparison uses).
    healthy: bool,
    /// What it measured, where it ran to the end.
    numbers: Option<crate::rules::transfer_verdict::LegNumbers>,
    /// Not run, or ended by the peer going away: it says nothing about the path (no culprit from it).
    cut_off: bool,
    /// What decided a status other than a pass, before the two legs are compared.
    code: &'static FindingCode,
    clause: String,
    measurements: Vec<Measurement>,
    evidence: Vec<String>,
    fix: Option<String>,
}

impl LegPart {
    fn stopped(
        status: Status,
        cut_off: bool,
        code: &'static FindingCode,
        clause: String,
        evidence: Vec<String>,
        fix: Option<String>,
    ) -> Self {
        LegPart {
            status,
            healthy: false,
            numbers: None,
            cut_off,
            code,
            clause,
            measurements: vec![],
            evidence,
            fix,
        }
    }
}

/// What the two ends agreed to judge a leg by.
struct Judging<'a> {
    rate: &'a LinkRate,
    pct: &'a Limit,
    lat: &'a Limit,
    peer_name: &'a str,
}

/// `label: text`, or the text alone where one leg needs no label.
fn labelled(label: &str, text: String) -> String {
    if label.is_empty() {
        text
    } else {
        format!("{label}: {text}")
    }
}

/// One leg through the shared leg rule; `label` names it where there are two (empty: the host leg alone).
fn judge_leg_run(run: &LegRun, label: &str, prefix: &str, j: &Judging) -> LegPart {
    let peer_name = j.peer_name;
    let outcome = match run {
        LegRun::Done(o) => o,
        LegRun::NotRun(why) => {
            return LegPart::stopped(
                Status::Error,
                true,
                &findings::NOT_MEASURED,
                labelled(label, format!("not run ({why})")),
                vec![],
                None,
            )
        }
        // A broken path (completion errors, refused registration while the peer is alive) fails; a peer that
        // went away or a call that could not be made is an error, naming the peer.
        LegRun::Failed { failure, peer_gone } => {
            let text = format!("{}: {}", failure.stage, failure.message);
            let (status, code, clause, fix) = if *peer_gone {
                (
                    Status::Error,
                    &findings::NOT_MEASURED,
                    format!("peer {peer_name} went away mid-transfer ({text})"),
                    Some(
                        "see why fabric-preflight on the peer stopped (its own report or log)"
                            .into(),
                    ),
                )
            } else if crate::measure::rdma_pair::breaks_path(failure) {
                (
                    Status::Fail,
                    &findings::SHORT,
                    format!("transfer with {peer_name} failed: {text}"),
                    None,
                )
            } else {
                (
                    Status::Error,
                    &common::LIBRARY_UNANSWERED,
                    format!("with {peer_name}: {text}"),
                    None,
                )
            };
            let evidence = failure
                .refused_registrations
                .iter()
                .map(|r| labelled(label, format!("refused {r}")))
                .collect();
            return LegPart::stopped(
                status,
                *peer_gone,
                code,
                labelled(label, clause),
                evidence,
                fix,
            );
        }
    };
    let rule = LegRule {
        pct: j.pct,
        latency: j.lat,
        latency_by: Percentile::P99,
        prefix,
        latency_name: "latency",
        replayed: false,
    };
    let numbers = outcome.numbers();
    let v = judge_leg(&numbers, j.rate, &rule, true);
    // What the culprit comparison uses: every rule but the deadline's (a cut phase says nothing about the path,
    // and the GPU leg, run second, is the one a tight deadline cuts).
    let uncut = crate::rules::transfer_verdict::LegNumbers {
        cut_short: false,
        ..numbers
    };
    let healthy = judge_leg(&uncut, j.rate, &rule, true).status == Status::Pass;
    let mut clause = format!(
        "WRITE {}, READ {}, latency p50 {:.2} us p99 {:.2} us",
        gbps_text(outcome.write_gbps, j.rate),
        gbps_text(outcome.read_gbps, j.rate),
        outcome.latency_p50_us,
        outcome.latency_p99_us
    );
    let mut problems = v.problems.clone();
    for (op, ok) in [
        ("RDMA WRITE", outcome.write_verified),
        ("RDMA READ", outcome.read_verified),
    ] {
        if !ok {
            problems.push(format!("{op} data did not arrive intact"));
        }
    }
    if outcome.echoes_mismatched > 0 {
        problems.push(format!(
            "{} SEND/RECV echo(es) did not carry the ping sent",
            outcome.echoes_mismatched
        ));
    }
    if !problems.is_empty() {
        clause.push_str(&format!("; {}", problems.join("; ")));
    }
    let clause = labelled(label, clause);
    let registration = |who: &str, r: &Registration| {
        let mut line = format!("memory registration {who} = {}", r.call);
        if !r.refused.is_empty() {
            line.push_str(&format!(" (refused first: {})", r.refused.join("; ")));
        }
        labelled(label, line)
    };
    LegPart {
        status: v.status,
        healthy,
        numbers: Some(numbers),
        cut_off: false,
        // A leg errs only where the port rate it is judged against could not be read.
        code: if v.status == Status::Error {
            &common::UNREAD
        } else {
            &findings::SHORT
        },
        clause,
        measurements: v.measurements,
        evidence: vec![
            registration("here", &outcome.registration),
            registration("on the peer", &outcome.peer_registration),
            labelled(
                label,
                format!(
                    "data verified: WRITE {}, READ {}",
                    outcome.write_verified, outcome.read_verified
                ),
            ),
            labelled(
                label,
                format!(
                    "pings = {}, echoes mismatched = {}",
                    outcome.pings, outcome.echoes_mismatched
                ),
            ),
        ],
        fix: None,
    }
}

/// One port pair's verdict: the host leg (the control) and, where either end brought GPU memory, the GPU leg
/// beside it, each through the shared leg rule; GPU leg failing and host fine blames the GPUDirect path, both
/// failing the link (a GPU leg the peer cut off blames nothing). An end whose GPU memory was due but unusable
/// fails or errors by the presence rule.
/// `rate` is what both ends can carry (`LinkRate::common`): an unreadable one makes the bandwidth an error
/// (with a bandwidth limit set), a software device's placeholder leaves it shown but not judged.
pub fn judge(legs: &PairLegs, rate: LinkRate, pct: &Limit, lat: &Limit) -> CheckResult {
    let j = Judging {
        rate: &rate,
        pct,
        lat,
        peer_name: &legs.peer_name,
    };
    let host_label = if legs.gpu.is_some() {
        "host memory"
    } else {
        ""
    };
    let host = judge_leg_run(&legs.host, host_label, "", &j);
    let gpu = legs
        .gpu
        .as_ref()
        .map(|run| judge_leg_run(run, &format!("GPU leg ({})", legs.gpu_label()), "gpu_", &j));
    let mut statuses = vec![host.status];
    // What decided each part: (status, code, words), coded once the legs are compared.
    let mut decided = Vec::new();
    let mut clauses = Vec::new();
    let mut evidence = host.evidence.clone();
    let mut measurements = host.measurements.clone();
    let mut fix = host.fix.clone();
    if let PortMemory::Unusable { status, why } = &legs.mine {
        statuses.push(*status);
        clauses.push(format!("GPU memory unusable here: {why}"));
        decided.push((
            *status,
            gpu_unusable_code(*status),
            format!("GPU memory unusable here: {why}"),
        ));
        fix = fix.or(Some(
            "see gpu.inventory and driver.nvidia on this node (`fabric-preflight run`)".into(),
        ));
    }
    match &gpu {
        Some(g) => {
            clauses.push(g.clause.clone());
            clauses.push(host.clause.clone());
            statuses.push(g.status);
            evidence.extend(g.evidence.iter().cloned());
            measurements.extend(g.measurements.iter().cloned());
            let culprit = if g.cut_off {
                None
            } else {
                Culprit::of(g.healthy, host.healthy, host.numbers.as_ref())
            };
            if let Some(words) = culprit.and_then(Culprit::words) {
                clauses.push(words.to_string());
            }
            let (gpu_code, host_code) = match culprit {
                Some(Culprit::GpuDirectPath) => (&findings::GPU_PATH_SHORT, host.code),
                Some(Culprit::Link(_)) => (&findings::LINK_SHORT, &findings::LINK_SHORT),
                Some(Culprit::HostLegFailed) => (&findings::HOST_LEG_FAILED, host.code),
                None => (g.code, host.code),
            };
            decided.push((g.status, gpu_code, g.clause.clone()));
            decided.push((host.status, host_code, host.clause.clone()));
            fix = match culprit {
                Some(Culprit::GpuDirectPath) => Some(FIX_GDR.into()),
                _ => fix.or(g.fix.clone()),
            };
        }
        None => {
            clauses.push(host.clause.clone());
            decided.push((host.status, host.code, host.clause.clone()));
            evidence.push(format!(
                "GPU memory: not tested (here: {}; on {}: {})",
                legs.mine.why(),
                legs.peer_node,
                legs.theirs.why()
            ));
        }
    }
    if let PortMemory::Unusable { why, .. } = &legs.theirs {
        evidence.push(format!("GPU memory unusable on {}: {why}", legs.peer_node));
    }
    evidence.push(match &rate {
        LinkRate::Gbps(r) => format!("link rate judged against = {r} Gb/s (lower end)"),
        LinkRate::NotMeaningful(why) => format!("link rate = not judged: {why}"),
        LinkRate::Unreadable(why) => format!("link rate = unreadable: {why}"),
    });
    let status = worst(statuses);
    let mut summary = clauses.join(" | ");
    match &rate {
        LinkRate::Gbps(_) => {}
        LinkRate::NotMeaningful(_) => {
            summary.push_str(" (no meaningful link rate: bandwidth not judged against it)")
        }
        LinkRate::Unreadable(_) => {
            summary.push_str(" (a port rate is unreadable: bandwidth not judged against it)")
        }
    }
    let mut r = CheckResult::new(ID_RDMA, status, summary);
    r.measurements = measurements;
    r.evidence = evidence;
    decided.sort_by_key(|(status, _, _)| std::cmp::Reverse(*status));
    for (status, code, words) in decided {
        if status != Status::Pass && !r.findings.iter().any(|f| f.code == code.code) {
            r = r.finding(code, status, words);
        }
    }
    if matches!(status, Status::Fail | Status::Error) {
        r = r.fix(fix.unwrap_or_else(|| FIX_LINK.into()));
    }
    r
}

/// The code of GPU memory due at an end but unusable there: a failure is a driver not loaded or a CUDA that
/// lists no GPU; an error is a library that could not be asked.
pub fn gpu_unusable_code(status: Status) -> &'static FindingCode {
    if status == Status::Error {
        &common::LIBRARY_UNANSWERED
    } else {
        &findings::GPU_MEMORY_UNUSABLE
    }
}

/// The nodes common to every failing pair (both ends of one failing pair when only one failed: no single node).
pub fn common_nodes(failing: &[(String, String)]) -> Vec<String> {
    if failing.len() < 2 {
        return Vec::new();
    }
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for (a, b) in failing {
        *count.entry(a).or_default() += 1;
        if b != a {
            *count.entry(b).or_default() += 1;
        }
    }
    count
        .into_iter()
        .filter(|(_, n)| *n == failing.len())
        .map(|(node, _)| node.to_string())
        .collect()
}

/// A ring summary over `links` (one node's two, or every node's with `--summarize`): which failed and which
/// node they share, else which warned. `scope` names what was covered.
pub fn ring_summary(scope: &str, links: &[(String, String, Status)]) -> CheckResult {
    let failing: Vec<(String, String)> = links
        .iter()
        .filter(|(_, _, s)| matches!(s, Status::Fail | Status::Error))
        .map(|(a, b, _)| (a.clone(), b.clone()))
        .collect();
    let warned: Vec<String> = links
        .iter()
        .filter(|(_, _, s)| *s == Status::Warn)
        .map(|(a, b, _)| format!("{a} <-> {b}"))
        .collect();
    // A skipped link moved no data (no RDMA hardware at one end): it proves nothing, so it never counts as a pass.
    let unmeasured: Vec<String> = links
        .iter()
        .filter(|(_, _, s)| *s == Status::Skip)
        .map(|(a, b, _)| format!("{a} <-> {b}"))
        .collect();
    let mut r = match (failing.len(), common_nodes(&failing).as_slice()) {
        (0, _) if unmeasured.len() == links.len() => CheckResult::skip(
            ID_RING,
            format!("no ring link of {scope} was measured (their pair.rdma results say why)"),
        )
        .code(&findings::LINKS_UNMEASURED),
        (0, _) if !unmeasured.is_empty() && warned.is_empty() => CheckResult::warn(
            ID_RING,
            format!(
                "no ring link of {scope} fails, but {} moved no data: {} (their pair.rdma results say why)",
                unmeasured.len(),
                unmeasured.join(", ")
            ),
        )
        .code(&findings::LINKS_UNMEASURED),
        (0, _) if warned.is_empty() => CheckResult::pass(
            ID_RING,
            format!("every ring link of {scope} passes"),
        ),
        (0, _) => CheckResult::warn(
            ID_RING,
            format!(
                "no ring link of {scope} fails, but {} warn(s): {} (their pair.rdma results say why)",
                warned.len(),
                warned.join(", ")
            ),
        )
        .code(&findings::LINKS_WARN),
        (_, [node]) => CheckResult::fail(
            ID_RING,
            format!("{node} is common to every failing pair: suspect it (its port, cable or switch port)"),
        )
        .code(&findings::COMMON_NODE),
        _ => CheckResult::fail(
            ID_RING,
            format!(
                "{} failing link(s) without a single common node: the link {} itself, or one of its ends (the neighbours' reports decide)",
                failing.len(),
                failing.iter().map(|(a, b)| format!("{a} <-> {b}")).collect::<Vec<_>>().join(", ")
            ),
        )
        .code(&findings::LINKS_FAIL),
    };
    r.evidence = links
        .iter()
        .map(|(a, b, s)| format!("{a} <-> {b} = {s}"))
        .collect();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::judge`], held to the finding rule: a result other than a pass carries a code of `pair.rdma` (or
    /// a common one) with the status that decided it, and a step where that code has one.
    fn judge(legs: &PairLegs, rate: LinkRate, pct: &Limit, lat: &Limit) -> CheckResult {
        let r = super::judge(legs, rate, pct, lat);
        let own: Vec<&str> = findings::FINDINGS
            .iter()
            .filter(|(id, _)| *id == ID_RDMA)
            .flat_map(|(_, codes)| codes.iter())
            .chain(common::ALL)
            .map(|c| c.code)
            .collect();
        for f in &r.findings {
            assert!(own.contains(&f.code.as_str()), "{} on {r:?}", f.code);
        }
        assert!(
            r.status == Status::Pass || r.deciding_code().is_some(),
            "uncoded: {r:?}"
        );
        r
    }

    /// soft-RoCE's rate: a placeholder.
    fn soft() -> LinkRate {
        LinkRate::NotMeaningful("rate `10 Gb/s` is a software device's fixed placeholder".into())
    }

    fn outcome() -> PairOutcome {
        let reg = Registration {
            call: "ibv_reg_mr".into(),
            refused: vec![],
        };
        PairOutcome {
            registration: reg.clone(),
            peer_registration: reg,
            write_gbps: 380.0,
            writes: 256,
            write_verified: true,
            read_gbps: 370.0,
            reads: 256,
            read_verified: true,
            latency_p50_us: 1.8,
            latency_p99_us: 2.4,
            pings: 1000,
            echoes_mismatched: 0,
            cut_short: false,
        }
    }

    fn host_why() -> PortMemory {
        PortMemory::Host {
            why: "no NVIDIA GPU on this host".into(),
        }
    }

    fn gpu_here() -> PortMemory {
        PortMemory::Gpu {
            bus_id: "0000:17:00.0".into(),
            why: "the GPU nearest this port in the PCI tree (PIX)".into(),
        }
    }

    /// Host memory at both ends only.
    fn host_only(o: PairOutcome) -> PairLegs {
        PairLegs {
            peer_name: "vm-b (10.0.0.2:18515)".into(),
            peer_node: "vm-b".into(),
            mine: host_why(),
            theirs: host_why(),
            host: LegRun::Done(o),
            gpu: None,
        }
    }

    /// GPU memory here, host memory on the peer.
    fn with_gpu(host: LegRun, gpu: LegRun) -> PairLegs {
        PairLegs {
            mine: gpu_here(),
            host,
            gpu: Some(gpu),
            ..host_only(outcome())
        }
    }

    #[test]
    fn judged_against_the_lower_real_rate() {
        let (fast, slow) = (LinkRate::Gbps(400.0), LinkRate::Gbps(200.0));
        assert_eq!(LinkRate::common(&fast, &slow, "b"), slow);
        let soft = LinkRate::NotMeaningful("rxe".into());
        assert!(matches!(
            LinkRate::common(&fast, &soft, "b"),
            LinkRate::NotMeaningful(_)
        ));
        let r = judge(
            &host_only(outcome()),
            LinkRate::Gbps(400.0),
            &DEFAULT_PCT,
            &Limit::new(Some(5.0), Some(10.0)),
        );
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        let slow = PairOutcome {
            write_gbps: 200.0,
            ..outcome()
        };
        assert_eq!(
            judge(
                &host_only(slow),
                LinkRate::Gbps(400.0),
                &DEFAULT_PCT,
                &Limit::default()
            )
            .status,
            Status::Fail
        );
    }

    /// Either end's unreadable rate leaves the bandwidth unjudged: an error, never the pass a software
    /// device's placeholder gives.
    #[test]
    fn an_unreadable_rate_at_either_end_is_an_error() {
        let fast = LinkRate::Gbps(400.0);
        let unreadable = LinkRate::Unreadable("the device link: <symlink loop>".into());
        for (here, there) in [
            (&unreadable, &fast),
            (&fast, &unreadable),
            (&unreadable, &soft()),
        ] {
            let rate = LinkRate::common(here, there, "b");
            assert!(matches!(rate, LinkRate::Unreadable(_)), "{rate:?}");
            let r = judge(&host_only(outcome()), rate, &DEFAULT_PCT, &Limit::default());
            assert_eq!(r.status, Status::Error, "{}", r.summary);
            assert!(r.summary.contains("rate is unreadable"), "{}", r.summary);
        }
    }

    #[test]
    fn software_rate_is_not_judged() {
        // soft-RoCE: a few Gb/s against a placeholder rate must not fail; only the data and latency count.
        let slow = PairOutcome {
            write_gbps: 0.9,
            read_gbps: 0.8,
            ..outcome()
        };
        let r = judge(&host_only(slow), soft(), &DEFAULT_PCT, &Limit::default());
        assert_eq!(r.status, Status::Pass);
        assert!(r.summary.contains("no meaningful link rate"));
        assert!(!r
            .measurements
            .iter()
            .any(|m| m.name.ends_with("pct_of_link")));
        // The VM stage reads these names and lines.
        for name in ["write_gbits_per_sec", "latency_p50_us", "latency_p99_us"] {
            assert!(r.measurements.iter().any(|m| m.name == name), "{name}");
        }
        assert!(r
            .evidence
            .iter()
            .any(|e| e.contains("data verified: WRITE true, READ true")));
        assert!(
            r.evidence
                .iter()
                .any(|e| e.starts_with("GPU memory: not tested")),
            "{:?}",
            r.evidence
        );
    }

    #[test]
    fn corrupted_data_and_latency_ceiling_fail() {
        let bad = PairOutcome {
            read_verified: false,
            ..outcome()
        };
        let r = judge(&host_only(bad), soft(), &DEFAULT_PCT, &Limit::default());
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("RDMA READ data did not arrive intact"));
        let r = judge(
            &host_only(outcome()),
            soft(),
            &DEFAULT_PCT,
            &Limit::new(None, Some(2.0)),
        );
        assert_eq!(r.status, Status::Fail);
    }

    /// Item 6 of issue 13: an echo that does not carry the ping's sequence number fails the leg.
    #[test]
    fn wrong_echo_fails() {
        let bad = PairOutcome {
            echoes_mismatched: 3,
            ..outcome()
        };
        let r = judge(&host_only(bad), soft(), &DEFAULT_PCT, &Limit::default());
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("3 SEND/RECV echo(es)"), "{}", r.summary);
    }

    #[test]
    fn no_round_trip_is_not_a_passing_latency() {
        let none = PairOutcome {
            latency_p50_us: 0.0,
            latency_p99_us: 0.0,
            pings: 0,
            ..outcome()
        };
        let r = judge(
            &host_only(none),
            soft(),
            &DEFAULT_PCT,
            &Limit::new(Some(5.0), Some(10.0)),
        );
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("latency not measured"), "{}", r.summary);
        assert!(!r.measurements.iter().any(|m| m.name.starts_with("latency")));
    }

    #[test]
    fn slow_gpu_leg_with_a_fast_host_leg_blames_the_gpudirect_path() {
        let slow = PairOutcome {
            write_gbps: 150.0,
            read_gbps: 140.0,
            ..outcome()
        };
        let r = judge(
            &with_gpu(LegRun::Done(outcome()), LegRun::Done(slow.clone())),
            LinkRate::Gbps(400.0),
            &DEFAULT_PCT,
            &Limit::default(),
        );
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary
                .starts_with("GPU leg (GPU memory (0000:17:00.0) here, host memory on vm-b)"),
            "{}",
            r.summary
        );
        assert!(
            r.summary.contains("GPUDirect RDMA path is the culprit"),
            "{}",
            r.summary
        );
        assert!(r.remediation.as_deref().unwrap().contains("nvidia_peermem"));
        assert_eq!(r.deciding_code(), Some("PAR121"));
        // Both legs side by side, the GPU one under its own names.
        for name in [
            "write_pct_of_link",
            "gpu_write_pct_of_link",
            "gpu_latency_p99_us",
        ] {
            assert!(r.measurements.iter().any(|m| m.name == name), "{name}");
        }
        // Both slow: the link.
        let r = judge(
            &with_gpu(LegRun::Done(slow.clone()), LegRun::Done(slow)),
            LinkRate::Gbps(400.0),
            &DEFAULT_PCT,
            &Limit::default(),
        );
        assert!(
            r.summary.contains("the port or link is the culprit"),
            "{}",
            r.summary
        );
        assert_eq!(r.deciding_code(), Some("PAR122"));
    }

    #[test]
    fn refused_dmabuf_is_named_and_unverified_gpu_data_never_passes() {
        let gpu = PairOutcome {
            registration: Registration {
                call: "ibv_reg_mr".into(),
                refused: vec!["ibv_reg_dmabuf_mr = Operation not supported (os error 95)".into()],
            },
            write_verified: false,
            ..outcome()
        };
        let r = judge(
            &with_gpu(LegRun::Done(outcome()), LegRun::Done(gpu)),
            soft(),
            &DEFAULT_PCT,
            &Limit::default(),
        );
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
        assert!(r.summary.contains("RDMA WRITE data did not arrive intact"));
        assert!(
            r.evidence.iter().any(|e| e.contains(
                "memory registration here = ibv_reg_mr (refused first: ibv_reg_dmabuf_mr = Operation not supported"
            )),
            "{:?}",
            r.evidence
        );
        // A refused registration at both paths fails the GPU leg and names both.
        let refused = LegRun::Failed {
            failure: Failure {
                stage: "register memory".into(),
                message: "ibv_reg_mr = Bad address".into(),
                refused_registrations: vec![
                    "DMA-BUF export = CUDA_ERROR_NOT_SUPPORTED".into(),
                    "ibv_reg_mr = Bad address".into(),
                ],
            },
            peer_gone: false,
        };
        let r = judge(
            &with_gpu(LegRun::Done(outcome()), refused),
            soft(),
            &DEFAULT_PCT,
            &Limit::default(),
        );
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary.contains("GPUDirect RDMA path is the culprit"),
            "{}",
            r.summary
        );
        assert!(r
            .evidence
            .iter()
            .any(|e| e.contains("refused DMA-BUF export = CUDA_ERROR_NOT_SUPPORTED")));
    }

    /// A failure relayed from the peer gets the verdict the peer gives it: a registration the peer's NIC refused
    /// or a CUDA call that failed there failed the path at both ends (before, an exact match on the stage made
    /// "peer: register memory" an error here and a fail there).
    #[test]
    fn a_relayed_failure_gets_the_verdict_the_peer_gives_it() {
        for (stage, message) in [
            ("register memory", "ibv_reg_mr = Bad address"),
            ("CUDA", "cuMemAlloc = CUDA_ERROR_OUT_OF_MEMORY"),
            ("RDMA READ completion", "work completion status 10"),
            ("ibv_modify_qp(RTR)", "Invalid argument"),
        ] {
            let theirs = crate::measure::rc::fail(stage, message);
            let verdict = |failure: Failure| {
                judge(
                    &with_gpu(
                        LegRun::Done(outcome()),
                        LegRun::Failed {
                            failure,
                            peer_gone: false,
                        },
                    ),
                    soft(),
                    &DEFAULT_PCT,
                    &Limit::default(),
                )
                .status
            };
            let (there, here) = (
                verdict(theirs.clone()),
                verdict(crate::measure::rdma_pair::relayed(&theirs)),
            );
            assert_eq!(here, there, "{stage}");
        }
    }

    #[test]
    fn unusable_gpu_memory_here_is_never_a_host_only_pass() {
        let legs = PairLegs {
            mine: PortMemory::Unusable {
                status: Status::Fail,
                why: "1 NVIDIA GPU(s) on the PCI bus without the NVIDIA kernel driver".into(),
            },
            ..host_only(outcome())
        };
        let r = judge(&legs, soft(), &DEFAULT_PCT, &Limit::default());
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary.starts_with("GPU memory unusable here"),
            "{}",
            r.summary
        );
    }

    /// A leg the peer ended by going away mid-WRITE.
    fn peer_gone() -> LegRun {
        LegRun::Failed {
            failure: Failure {
                stage: "peer: RDMA WRITE".into(),
                message: "closed".into(),
                refused_registrations: vec![],
            },
            peer_gone: true,
        }
    }

    #[test]
    fn a_peer_gone_is_an_error_naming_it() {
        let legs = PairLegs {
            host: peer_gone(),
            ..host_only(outcome())
        };
        let r = judge(&legs, soft(), &DEFAULT_PCT, &Limit::default());
        assert_eq!(r.status, Status::Error);
        assert!(
            r.summary.contains("peer vm-b (10.0.0.2:18515) went away"),
            "{}",
            r.summary
        );
    }

    /// A GPU leg that never ran, or whose peer died in it, says nothing about the GPUDirect path: before, a
    /// healthy host leg beside it blamed peermem/DMA-BUF for a peer that went away.
    #[test]
    fn a_gpu_leg_cut_off_by_its_peer_blames_no_path() {
        let not_run = LegRun::NotRun("the peer went away after the host-memory leg".into());
        for gpu in [peer_gone(), not_run] {
            let r = judge(
                &with_gpu(LegRun::Done(outcome()), gpu),
                soft(),
                &DEFAULT_PCT,
                &Limit::default(),
            );
            assert_eq!(r.status, Status::Error, "{}", r.summary);
            assert!(!r.summary.contains("culprit"), "{}", r.summary);
            assert!(
                !r.remediation.as_deref().unwrap().contains("nvidia_peermem"),
                "{:?}",
                r.remediation
            );
        }
    }

    /// The GPU leg runs after the host leg, so it is the one a tight deadline cuts: that is no verdict on the
    /// GPUDirect path. Before, a cut GPU leg beside a healthy host leg was called the culprit.
    #[test]
    fn a_gpu_leg_cut_by_the_deadline_blames_no_path() {
        let cut = PairOutcome {
            cut_short: true,
            ..outcome()
        };
        let r = judge(
            &with_gpu(LegRun::Done(outcome()), LegRun::Done(cut)),
            LinkRate::Gbps(400.0),
            &DEFAULT_PCT,
            &Limit::default(),
        );
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        assert!(
            r.summary.contains("the deadline cut a phase short"),
            "{}",
            r.summary
        );
        assert!(!r.summary.contains("culprit"), "{}", r.summary);
    }

    #[test]
    fn common_node_of_failing_pairs() {
        let p = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(common_nodes(&[p("n1", "n2"), p("n2", "n3")]), ["n2"]);
        assert!(common_nodes(&[p("n1", "n2")]).is_empty());
        assert!(common_nodes(&[p("n1", "n2"), p("n3", "n4")]).is_empty());
        let links = vec![
            ("n1".to_string(), "n2".to_string(), Status::Fail),
            ("n2".to_string(), "n3".to_string(), Status::Error),
        ];
        let r = ring_summary("n2", &links);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.starts_with("n2 is common"));
        assert_eq!(r.evidence[0], "n1 <-> n2 = fail");
        let one = ring_summary("n2", &links[..1]);
        assert!(one.summary.contains("without a single common node"));
    }

    /// A ring with no failing link but one that warned (the deadline cut a phase short, a port without a
    /// counterpart) warns, naming it: before, it passed as "every ring link passes", and `--summarize`, whose
    /// report is the ring summary alone, lost the warning.
    #[test]
    fn a_warning_link_is_no_passing_ring() {
        let links = vec![
            ("n1".to_string(), "n2".to_string(), Status::Pass),
            ("n2".to_string(), "n3".to_string(), Status::Warn),
        ];
        let r = ring_summary("n2", &links);
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        assert!(r.summary.contains("n2 <-> n3"), "{}", r.summary);
        assert_eq!(r.evidence[1], "n2 <-> n3 = warn");
        assert_eq!(ring_summary("n2", &links[..1]).status, Status::Pass);
    }

    /// Links that skipped (no RDMA hardware at an end) moved no data: a ring of them is a skip, and one beside
    /// passing links a warning naming it, never "every ring link passes" (which it said before).
    #[test]
    fn skipped_links_are_no_passing_ring() {
        let links = vec![
            ("n1".to_string(), "n2".to_string(), Status::Skip),
            ("n2".to_string(), "n3".to_string(), Status::Skip),
        ];
        let r = ring_summary("n2", &links);
        assert_eq!(r.status, Status::Skip, "{}", r.summary);
        let mixed = vec![links[0].clone(), ("n2".into(), "n3".into(), Status::Pass)];
        let r = ring_summary("n2", &mixed);
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        assert!(r.summary.contains("n1 <-> n2"), "{}", r.summary);
    }
}
