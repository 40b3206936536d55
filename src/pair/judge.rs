//! Verdicts of `pair`: one result per port pair (`pair.rdma`), the handshake (`pair.handshake`), and in a ring
//! the node common to the failing pairs (`pair.ring`). Pure functions of what was measured.

use std::collections::BTreeMap;

use crate::measure::rdma_pair::PairOutcome;
use crate::probe::{CheckResult, Measurement, Status};
use crate::threshold::{worst, Limit};

pub const ID_HANDSHAKE: &str = "pair.handshake";
pub const ID_RDMA: &str = "pair.rdma";
pub const ID_RING: &str = "pair.ring";

/// ngc_multinode_perf passes a port at 90% of its link rate, as `gdr.loopback` does.
pub const DEFAULT_PCT: Limit = Limit::new(Some(90.0), Some(75.0));

/// The link rate both ends can carry, where it means something: the lower of two real rates; `None` if either
/// end is a software device (soft-RoCE's `rate` file is a fixed placeholder) or unreadable.
pub fn comparable_rate(local: Option<f64>, remote: Option<f64>) -> Option<f64> {
    match (local, remote) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => Some(a.min(b)),
        _ => None,
    }
}

/// One port pair's verdict from the initiator's numbers.
pub fn judge(
    outcome: &PairOutcome,
    rate_gbps: Option<f64>,
    pct: &Limit,
    lat: &Limit,
) -> CheckResult {
    let mut statuses = Vec::new();
    let mut measurements = Vec::new();
    let mut notes = Vec::new();
    for (op, gbps) in [("write", outcome.write_gbps), ("read", outcome.read_gbps)] {
        measurements.push(Measurement::new(
            &format!("{op}_gbits_per_sec"),
            gbps,
            "Gb/s",
        ));
        if let Some(rate) = rate_gbps {
            let p = 100.0 * gbps / rate;
            measurements
                .push(Measurement::new(&format!("{op}_pct_of_link"), p, "%").judged_by(pct));
            statuses.push(pct.judge_min(p));
        }
    }
    // No round trip completed: the percentiles are placeholders (0), not a latency that could pass.
    if outcome.pings == 0 {
        statuses.push(Status::Fail);
        notes.push("no SEND/RECV round trip completed: latency not measured".into());
    } else {
        measurements.push(Measurement::new(
            "latency_p50_us",
            outcome.latency_p50_us,
            "us",
        ));
        measurements
            .push(Measurement::new("latency_p99_us", outcome.latency_p99_us, "us").judged_by(lat));
        statuses.push(lat.judge_max(outcome.latency_p99_us));
    }
    for (op, ok) in [
        ("RDMA WRITE", outcome.write_verified),
        ("RDMA READ", outcome.read_verified),
    ] {
        if !ok {
            statuses.push(Status::Fail);
            notes.push(format!("{op} data did not arrive intact"));
        }
    }
    if outcome.cut_short {
        statuses.push(Status::Warn);
        notes.push("the deadline cut a phase short (raise --timeout)".into());
    }
    let status = worst(statuses);
    let mut summary = format!(
        "WRITE {} Gb/s, READ {} Gb/s, latency p50 {:.2} us p99 {:.2} us",
        gbps_text(outcome.write_gbps),
        gbps_text(outcome.read_gbps),
        outcome.latency_p50_us,
        outcome.latency_p99_us
    );
    if rate_gbps.is_none() {
        summary.push_str(" (no meaningful link rate: bandwidth not judged against it)");
    }
    if !notes.is_empty() {
        summary.push_str(&format!("; {}", notes.join("; ")));
    }
    let mut r = CheckResult::new(ID_RDMA, status, summary);
    r.measurements = measurements;
    r.evidence.push(format!(
        "memory registration = {} (host memory)",
        outcome.registration.call
    ));
    r.evidence.push(format!(
        "data verified: WRITE {}, READ {}",
        outcome.write_verified, outcome.read_verified
    ));
    r.evidence.push(format!("pings = {}", outcome.pings));
    match rate_gbps {
        Some(rate) => r.evidence.push(format!("link rate judged against = {rate} Gb/s (lower end)")),
        None => r.evidence.push(
            "link rate = not judged (a software device's rate file is a placeholder, or unreadable)".into(),
        ),
    }
    if status == Status::Fail {
        r = r.fix("compare both ends' rdma.link (rate, MTU, GID index), then the cable and switch port between them; `ib_write_bw` between the same ports confirms");
    }
    r
}

/// Three significant figures for slow links (soft-RoCE under emulation), one decimal for real ones.
fn gbps_text(gbps: f64) -> String {
    if gbps < 10.0 {
        format!("{gbps:.3}")
    } else {
        format!("{gbps:.1}")
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
/// node they share. `scope` names what was covered.
pub fn ring_summary(scope: &str, links: &[(String, String, Status)]) -> CheckResult {
    let failing: Vec<(String, String)> = links
        .iter()
        .filter(|(_, _, s)| matches!(s, Status::Fail | Status::Error))
        .map(|(a, b, _)| (a.clone(), b.clone()))
        .collect();
    let mut r = match (failing.len(), common_nodes(&failing).as_slice()) {
        (0, _) => CheckResult::pass(
            ID_RING,
            format!("every ring link of {scope} passes"),
        ),
        (_, [node]) => CheckResult::fail(
            ID_RING,
            format!("{node} is common to every failing pair: suspect it (its port, cable or switch port)"),
        ),
        _ => CheckResult::fail(
            ID_RING,
            format!(
                "{} failing link(s) without a single common node: the link {} itself, or one of its ends (the neighbours' reports decide)",
                failing.len(),
                failing.iter().map(|(a, b)| format!("{a} <-> {b}")).collect::<Vec<_>>().join(", ")
            ),
        ),
    };
    r.evidence = links
        .iter()
        .map(|(a, b, s)| format!("{a} <-> {b} = {s}"))
        .collect();
    r
}

/// `A <-> B = status` evidence lines of the `pair.ring` results in node reports, each unordered pair once with
/// the worse of the two ends' statuses.
pub fn links_from_reports(reports: &[crate::report::RunReport]) -> Vec<(String, String, Status)> {
    let mut links: BTreeMap<(String, String), Status> = BTreeMap::new();
    for check in reports
        .iter()
        .flat_map(|r| &r.checks)
        .filter(|c| c.id == ID_RING)
    {
        for line in &check.evidence {
            let Some((pair, status)) = line.rsplit_once(" = ") else {
                continue;
            };
            let Some((a, b)) = pair.split_once(" <-> ") else {
                continue;
            };
            let Ok(status) =
                serde_json::from_value::<Status>(serde_json::Value::String(status.into()))
            else {
                continue;
            };
            let key = if a <= b {
                (a.to_string(), b.to_string())
            } else {
                (b.to_string(), a.to_string())
            };
            let e = links.entry(key).or_insert(status);
            *e = (*e).max(status);
        }
    }
    links.into_iter().map(|((a, b), s)| (a, b, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rc::Registration;

    fn outcome() -> PairOutcome {
        PairOutcome {
            registration: Registration {
                call: "ibv_reg_mr".into(),
                refused: vec![],
            },
            write_gbps: 380.0,
            write_verified: true,
            read_gbps: 370.0,
            read_verified: true,
            latency_p50_us: 1.8,
            latency_p99_us: 2.4,
            pings: 1000,
            cut_short: false,
        }
    }

    #[test]
    fn judged_against_the_lower_real_rate() {
        assert_eq!(comparable_rate(Some(400.0), Some(200.0)), Some(200.0));
        assert_eq!(comparable_rate(Some(400.0), None), None);
        let r = judge(
            &outcome(),
            Some(400.0),
            &DEFAULT_PCT,
            &Limit::new(Some(5.0), Some(10.0)),
        );
        assert_eq!(r.status, Status::Pass);
        let slow = PairOutcome {
            write_gbps: 200.0,
            ..outcome()
        };
        assert_eq!(
            judge(&slow, Some(400.0), &DEFAULT_PCT, &Limit::default()).status,
            Status::Fail
        );
    }

    #[test]
    fn software_rate_is_not_judged() {
        // soft-RoCE: a few Gb/s against a placeholder rate must not fail; only the data and latency count.
        let slow = PairOutcome {
            write_gbps: 0.9,
            read_gbps: 0.8,
            ..outcome()
        };
        let r = judge(&slow, None, &DEFAULT_PCT, &Limit::default());
        assert_eq!(r.status, Status::Pass);
        assert!(r.summary.contains("not judged"));
        assert!(!r
            .measurements
            .iter()
            .any(|m| m.name.ends_with("pct_of_link")));
    }

    #[test]
    fn corrupted_data_and_latency_ceiling_fail() {
        let bad = PairOutcome {
            read_verified: false,
            ..outcome()
        };
        let r = judge(&bad, None, &DEFAULT_PCT, &Limit::default());
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("RDMA READ data did not arrive intact"));
        let r = judge(&outcome(), None, &DEFAULT_PCT, &Limit::new(None, Some(2.0)));
        assert_eq!(r.status, Status::Fail);
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
            &none,
            None,
            &DEFAULT_PCT,
            &Limit::new(Some(5.0), Some(10.0)),
        );
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("latency not measured"), "{}", r.summary);
        assert!(!r.measurements.iter().any(|m| m.name.starts_with("latency")));
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
}
