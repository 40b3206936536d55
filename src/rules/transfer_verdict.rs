//! One rule for judging a transfer leg (RDMA WRITE and READ bandwidth plus SEND/RECV latency through one kind
//! of memory), shared by `rdma.loopback`, `gdr.loopback` and `pair` so they cannot drift: never a pass for a
//! leg that moved nothing, whose data was not verified, or whose bandwidth could not be set against a link rate
//! a limit asks for; bandwidth as a % of the link where the rate is the hardware's; a latency ceiling.

use serde::{Deserialize, Serialize};

use crate::model::{worst, Limit, Measurement, Status};
use crate::sysfs::infiniband::PortAttrs;

/// What a leg measured, whatever ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct LegNumbers {
    pub write_gbps: f64,
    pub read_gbps: f64,
    pub writes: u32,
    pub reads: u32,
    pub round_trips: u32,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    /// Every check that could be made on the data passed (and at least one was made).
    pub verified: bool,
    /// The deadline ended a phase early.
    pub cut_short: bool,
}

/// The link rate bandwidth is set against (also what `pair` announces for each port).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkRate {
    Gbps(f64),
    /// A software device's fixed placeholder (soft-RoCE) or no comparable rate: shown, not judged.
    NotMeaningful(String),
    /// A hardware port's rate that could not be read: with a bandwidth limit set, an error.
    Unreadable(String),
}

impl LinkRate {
    /// The rate of `port` to judge bandwidth by, read strictly: the hardware's where it is a rate; a software
    /// device's (`software`: its `device` link is absent, no PCI function behind it, as on soft-RoCE) is a fixed
    /// placeholder, shown but not judged. A hardware rate that cannot be read or is no rate is `Unreadable`, never
    /// taken for a software device's. Whether the device is software is the caller's strict read
    /// (`infiniband::device_bdf`): a `device` link that cannot be resolved is no answer.
    pub fn of_port(port: &PortAttrs, software: bool) -> LinkRate {
        let text = match &port.rate {
            Ok(t) => t.clone(),
            Err(e) => return LinkRate::Unreadable(e.reason()),
        };
        match port.parsed_rate() {
            _ if software => LinkRate::NotMeaningful(format!(
                "rate `{text}` is a software device's fixed placeholder (no PCI function behind it)"
            )),
            Some(r) if r.gbps > 0.0 => LinkRate::Gbps(r.gbps),
            _ => LinkRate::Unreadable(text),
        }
    }

    /// The rate both ends of a pair can carry: the lower of two hardware rates. Either end's unreadable rate
    /// makes it unreadable (naming that end), else either end's placeholder makes it not meaningful.
    pub fn common(here: &LinkRate, there: &LinkRate, peer: &str) -> LinkRate {
        match (here, there) {
            (LinkRate::Gbps(a), LinkRate::Gbps(b)) => LinkRate::Gbps(a.min(*b)),
            (LinkRate::Unreadable(why), _) => LinkRate::Unreadable(format!("here: {why}")),
            (_, LinkRate::Unreadable(why)) => LinkRate::Unreadable(format!("on {peer}: {why}")),
            (LinkRate::NotMeaningful(why), _) => LinkRate::NotMeaningful(format!("here: {why}")),
            (_, LinkRate::NotMeaningful(why)) => {
                LinkRate::NotMeaningful(format!("on {peer}: {why}"))
            }
        }
    }

    /// `400 Gb/s`, or what stands in for the rate and why.
    pub fn describe(&self) -> String {
        match self {
            LinkRate::Gbps(r) => format!("{r} Gb/s"),
            LinkRate::NotMeaningful(why) => format!("not meaningful ({why})"),
            LinkRate::Unreadable(why) => format!("unreadable ({why})"),
        }
    }

    pub fn pct_of(&self, gbps: f64) -> Option<f64> {
        match self {
            LinkRate::Gbps(r) if *r > 0.0 => Some(100.0 * gbps / r),
            _ => None,
        }
    }
}

/// Which latency statistic the ceiling applies to (each check's profile key documents its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Percentile {
    P50,
    P99,
}

/// How a leg is judged and named.
#[derive(Debug, Clone, Copy)]
pub struct LegRule<'a> {
    /// Bandwidth as a % of the link rate (higher is better).
    pub pct: &'a Limit,
    /// Latency ceiling in µs (lower is better).
    pub latency: &'a Limit,
    pub latency_by: Percentile,
    /// Measurement names: `{prefix}write_gbits_per_sec`, `{prefix}{latency_name}_p50_us`, …
    pub prefix: &'a str,
    pub latency_name: &'a str,
    /// Measured from a recording.
    pub replayed: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LegVerdict {
    pub status: Status,
    pub measurements: Vec<Measurement>,
    /// Why the status is not a pass, each a short clause.
    pub problems: Vec<String>,
    /// Said but not held against the leg (bandwidth not judged against a placeholder rate).
    pub notes: Vec<String>,
    /// The slower direction's share of the link, where the rate is known.
    pub pct_of_link: Option<f64>,
}

impl LegVerdict {
    /// Nothing shows the bandwidth below the limit: a known rate at or above the fail and warn marks, or no rate
    /// to set it against (then the leg is not called slow; the rule reports the missing rate itself).
    pub fn bandwidth_ok(&self, pct: &Limit) -> bool {
        self.pct_of_link
            .is_none_or(|p| pct.judge_min(p) == Status::Pass)
    }
}

/// The verdict of one leg. `judged`: its bandwidth and latency count against the limits (a control leg is
/// shown only); a leg that moved nothing or whose data did not verify fails either way.
pub fn judge_leg(n: &LegNumbers, rate: &LinkRate, rule: &LegRule, judged: bool) -> LegVerdict {
    let measure = |name: &str, value: f64, unit: &str| {
        Measurement::new(&format!("{}{name}", rule.prefix), value, unit).replayed(rule.replayed)
    };
    let mut statuses = vec![Status::Pass];
    let mut measurements = Vec::new();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    for (op, gbps) in [("write", n.write_gbps), ("read", n.read_gbps)] {
        measurements.push(measure(&format!("{op}_gbits_per_sec"), gbps, "Gb/s"));
    }
    for (op, gbps) in [("write", n.write_gbps), ("read", n.read_gbps)] {
        if let Some(p) = rate.pct_of(gbps) {
            let mut m = measure(&format!("{op}_pct_of_link"), p, "%");
            if judged {
                m = m.judged_by(rule.pct);
                statuses.push(rule.pct.judge_min(p));
            }
            measurements.push(m);
        }
    }
    match rate {
        LinkRate::Gbps(_) => {}
        LinkRate::NotMeaningful(why) => notes.push(format!("bandwidth not judged: {why}")),
        // The limit is a share of the port's rate: without the rate there is nothing to pass.
        LinkRate::Unreadable(why) if judged && !rule.pct.is_empty() => {
            statuses.push(Status::Error);
            problems.push(format!(
                "bandwidth not judged: the port rate is unreadable ({why})"
            ));
        }
        LinkRate::Unreadable(why) => notes.push(format!(
            "bandwidth not judged: the port rate is unreadable ({why})"
        )),
    }
    if n.round_trips == 0 {
        // The percentiles are placeholders (0), not a latency that could pass.
        statuses.push(Status::Fail);
        problems.push("no SEND/RECV round trip completed: latency not measured".into());
    } else {
        let (p50, p99) = (
            measure(
                &format!("{}_p50_us", rule.latency_name),
                n.latency_p50_us,
                "us",
            ),
            measure(
                &format!("{}_p99_us", rule.latency_name),
                n.latency_p99_us,
                "us",
            ),
        );
        let (judged_value, p50, p99) = match rule.latency_by {
            Percentile::P50 => (n.latency_p50_us, p50.judged_by(rule.latency), p99),
            Percentile::P99 => (n.latency_p99_us, p50, p99.judged_by(rule.latency)),
        };
        if judged {
            statuses.push(rule.latency.judge_max(judged_value));
        }
        measurements.extend([p50, p99]);
    }
    if n.writes == 0 || n.reads == 0 {
        statuses.push(Status::Fail);
        problems.push(format!(
            "moved too little to judge ({} WRITEs, {} READs)",
            n.writes, n.reads
        ));
    }
    if !n.verified {
        statuses.push(Status::Fail);
        problems.push(
            "DATA MISMATCH: what arrived is not what was sent, or could not be read back".into(),
        );
    }
    if n.cut_short {
        statuses.push(Status::Warn);
        problems.push("the deadline cut a phase short".into());
    }
    let slower = n.write_gbps.min(n.read_gbps);
    LegVerdict {
        status: worst(statuses),
        measurements,
        problems,
        notes,
        pct_of_link: rate.pct_of(slower),
    }
}

/// What a GPU-memory leg and its host-memory control say together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Culprit {
    /// GPU memory slow or failed, host memory fast: peermem/DMA-BUF, PCIe placement, ACS/IOMMU.
    GpuDirectPath,
    /// Both unhealthy: the port or the link; how the host leg failed.
    Link(HostFault),
    /// The control failed too: nothing to compare with.
    HostLegFailed,
}

/// What was wrong with a measured host-memory leg that is not healthy, for the culprit's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFault {
    /// Its data did not arrive intact (or could not be read back).
    DataMismatch,
    /// A direction moved nothing, or no round trip completed.
    MovedTooLittle,
    /// It moved verified data, too slowly (bandwidth or latency).
    Slow,
}

impl HostFault {
    /// The fault of a host leg that is not healthy, worst first.
    pub fn of(n: &LegNumbers) -> HostFault {
        if !n.verified {
            HostFault::DataMismatch
        } else if n.writes == 0 || n.reads == 0 || n.round_trips == 0 {
            HostFault::MovedTooLittle
        } else {
            HostFault::Slow
        }
    }
}

impl Culprit {
    /// None when the GPU leg is fast (nothing to blame). `host`: the host leg's numbers, if it was measured.
    pub fn of(gpu_fast: bool, host_fast: bool, host: Option<&LegNumbers>) -> Option<Culprit> {
        match (gpu_fast, host_fast, host) {
            (true, _, _) => None,
            (false, true, _) => Some(Culprit::GpuDirectPath),
            (false, false, Some(n)) => Some(Culprit::Link(HostFault::of(n))),
            (false, false, None) => Some(Culprit::HostLegFailed),
        }
    }

    pub fn words(self) -> Option<&'static str> {
        match self {
            Culprit::GpuDirectPath => Some("host memory is fast and GPU memory is not: the GPUDirect RDMA path is the culprit (peermem/DMA-BUF, PCIe placement, ACS/IOMMU)"),
            Culprit::Link(HostFault::Slow) => Some("host memory is slow too: the port or link is the culprit"),
            Culprit::Link(HostFault::DataMismatch) => Some("host memory's data did not arrive intact either: the port or link is the culprit"),
            Culprit::Link(HostFault::MovedTooLittle) => Some("host memory's transfers did not complete either: the port or link is the culprit"),
            Culprit::HostLegFailed => None,
        }
    }
}

/// `380.0 Gb/s (95% of link)`; three significant figures for slow links (soft-RoCE under emulation).
pub fn gbps_text(gbps: f64, rate: &LinkRate) -> String {
    let value = if gbps < 10.0 {
        format!("{gbps:.3}")
    } else {
        format!("{gbps:.1}")
    };
    match rate.pct_of(gbps) {
        Some(p) => format!("{value} Gb/s ({p:.0}% of link)"),
        None => format!("{value} Gb/s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers() -> LegNumbers {
        LegNumbers {
            write_gbps: 380.0,
            read_gbps: 370.0,
            writes: 256,
            reads: 256,
            round_trips: 1000,
            latency_p50_us: 2.0,
            latency_p99_us: 4.0,
            verified: true,
            cut_short: false,
        }
    }

    const PCT: Limit = Limit::new(Some(90.0), Some(75.0));

    fn rule(latency: &Limit) -> LegRule<'_> {
        LegRule {
            pct: &PCT,
            latency,
            latency_by: Percentile::P99,
            prefix: "",
            latency_name: "latency",
            replayed: false,
        }
    }

    #[test]
    fn healthy_leg_passes_and_the_chosen_percentile_is_judged() {
        let lat = Limit::new(None, Some(3.0));
        let v = judge_leg(&numbers(), &LinkRate::Gbps(400.0), &rule(&lat), true);
        assert_eq!(v.status, Status::Fail, "p99 4 us over a 3 us ceiling");
        let p50 = LegRule {
            latency_by: Percentile::P50,
            ..rule(&lat)
        };
        let v = judge_leg(&numbers(), &LinkRate::Gbps(400.0), &p50, true);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!((v.pct_of_link.unwrap() - 92.5).abs() < 1e-9);
    }

    #[test]
    fn unverified_data_never_passes_judged_or_not() {
        let n = LegNumbers {
            verified: false,
            ..numbers()
        };
        for judged in [true, false] {
            let v = judge_leg(
                &n,
                &LinkRate::NotMeaningful("x".into()),
                &rule(&Limit::default()),
                judged,
            );
            assert_eq!(v.status, Status::Fail);
            assert!(v.problems.iter().any(|p| p.contains("DATA MISMATCH")));
        }
    }

    #[test]
    fn nothing_moved_or_no_round_trip_fails() {
        let n = LegNumbers {
            reads: 0,
            round_trips: 0,
            ..numbers()
        };
        let v = judge_leg(&n, &LinkRate::Gbps(400.0), &rule(&Limit::default()), false);
        assert_eq!(v.status, Status::Fail);
        assert!(!v.measurements.iter().any(|m| m.name.contains("latency")));
    }

    #[test]
    fn unreadable_rate_errors_only_where_judged() {
        let rate = LinkRate::Unreadable("<missing>".into());
        let v = judge_leg(&numbers(), &rate, &rule(&Limit::default()), true);
        assert_eq!(v.status, Status::Error);
        let v = judge_leg(&numbers(), &rate, &rule(&Limit::default()), false);
        assert_eq!(v.status, Status::Pass);
        let slow = LegNumbers {
            write_gbps: 100.0,
            ..numbers()
        };
        let v = judge_leg(
            &slow,
            &LinkRate::NotMeaningful("soft-RoCE".into()),
            &rule(&Limit::default()),
            true,
        );
        assert_eq!(v.status, Status::Pass);
        assert_eq!(
            gbps_text(0.9, &LinkRate::Gbps(400.0)),
            "0.900 Gb/s (0% of link)"
        );
    }

    /// Both legs unhealthy blames the link in words from what the host leg did: "slow" only where it was slow
    /// (before, a host leg whose data did not arrive intact was called slow too).
    #[test]
    fn the_link_culprit_says_what_the_host_leg_did() {
        let slow = numbers();
        let bad_data = LegNumbers {
            verified: false,
            ..numbers()
        };
        let nothing = LegNumbers {
            reads: 0,
            ..numbers()
        };
        let words =
            |host: &LegNumbers| Culprit::of(false, false, Some(host)).and_then(Culprit::words);
        assert!(words(&slow).unwrap().contains("host memory is slow too"));
        for host in [&bad_data, &nothing] {
            let w = words(host).unwrap();
            assert!(!w.contains("slow"), "{w}");
            assert!(w.contains("port or link is the culprit"), "{w}");
        }
        assert!(words(&bad_data).unwrap().contains("did not arrive intact"));
        assert_eq!(
            Culprit::of(false, false, None),
            Some(Culprit::HostLegFailed)
        );
        assert_eq!(
            Culprit::of(false, true, Some(&slow)),
            Some(Culprit::GpuDirectPath)
        );
        assert_eq!(Culprit::of(true, false, Some(&slow)), None);
    }
}
