//! `rdma.counters`: port error counters (PMA `counters/`, and the `hw_counters/` of mlx5 and rxe judged by name)
//! against the profile's limits; a counter stuck at its bit-width maximum is saturated and says so. A port whose
//! counters hold none of these names is not called healthy: it is skipped, saying nothing was judged.

use crate::host::{Host, ReadError};
use crate::model::{worst, Limit};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Measurement, Need, Probe, ProbeMeta,
    Remedy, Status,
};
use crate::rules::presence::{Stack, Survey};
use crate::sysfs::infiniband::{
    counter_width, is_saturated, read_all_port_ids, read_counters, Counter, CounterValue,
};

pub struct RdmaCounters;

const ID: &str = "rdma.counters";

/// Counters that only move when something is wrong with the link or the transport. `hw_counters/` names are the
/// driver's own: mlx5 (ConnectX) and rxe (soft-RoCE, which has no PMA `counters/` at all) name the same events
/// differently (mlx5 `local_ack_timeout_err` = rxe `completer_retry_err`, `packet_seq_err` = `rcvd_seq_err`).
const ERROR_COUNTERS: &[&str] = &[
    "counters/symbol_error",
    "counters/link_downed",
    "counters/link_error_recovery",
    "counters/port_rcv_errors",
    "counters/port_rcv_remote_physical_errors",
    "counters/port_xmit_discards",
    "counters/local_link_integrity_errors",
    "counters/excessive_buffer_overrun_errors",
    "hw_counters/local_ack_timeout_err",
    "hw_counters/packet_seq_err",
    "hw_counters/req_cqe_error",
    "hw_counters/resp_cqe_error",
    "hw_counters/rnr_nak_retry_err",
    "hw_counters/out_of_sequence",
    "hw_counters/implied_nak_seq_err",
    // rxe (drivers/infiniband/sw/rxe/rxe_hw_counters.c)
    "hw_counters/link_downed",
    "hw_counters/rcvd_seq_err",
    "hw_counters/out_of_seq_request",
    "hw_counters/completer_retry_err",
    "hw_counters/retry_exceeded_err",
    "hw_counters/retry_rnr_exceeded_err",
    "hw_counters/send_err",
];

/// Without a profile limit: any error is worth a warning, none is worth a failure on its own.
const DEFAULT_LIMIT: Limit = Limit::new(Some(0.0), None);

const ERROR_COUNTS: FindingCode = FindingCode {
    code: "RDM301",
    title: "RDMA port error counters above the limit",
    explanation: "Symbol errors, link downs, receive errors or discards counted since the counters were last cleared, above `thresholds.rdma_error_count`: a marginal cable, transceiver or switch port. Reseat or replace it; clear the counters (`perfquery -x -R`) and watch whether they grow.",
    step: Some(Remedy::ServiceRma),
};
const SATURATED: FindingCode = FindingCode {
    code: "RDM302",
    title: "an RDMA port counter is saturated: its true value is unknown",
    explanation: "A 16- or 32-bit PMA counter at its maximum stops counting: the real count is unknown. Clear the counters (`perfquery -x -R`) and run again.",
    step: Some(Remedy::Reconfigure),
};
const NO_PMA: FindingCode = FindingCode {
    code: "RDM303",
    title: "no RDMA error counter value could be read (no PMA)",
    explanation: "A skip: the driver exposes no Performance Management Agent (iWARP RNICs, ConnectX-3 VFs), so no counter is judged. Watch the link with the vendor's tools.",
    step: None,
};
const UNKNOWN_COUNTERS: FindingCode = FindingCode {
    code: "RDM304",
    title: "none of the exposed counters is an error counter this check knows",
    explanation: "A skip: the port exposes counters, but none by a name this check judges.",
    step: None,
};
const NO_COUNTERS: FindingCode = FindingCode {
    code: "RDM305",
    title: "the port exposes no counters",
    explanation: "A skip: the driver has no PMA, so there is nothing to judge.",
    step: None,
};
const EFA_ELSEWHERE: FindingCode = FindingCode {
    code: "RDM306",
    title: "EFA devices are judged by efa.counters",
    explanation: "A skip: EFA's error counters are judged by efa.counters.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "RDMA port error counters (symbol errors, link downs, discards, transport errors) within limits; saturation flagged",
    needs: &[Need::RdmaDevice],
    explain: Explain {
        reads: "/sys/class/infiniband/<dev>/ports/<n>/counters/* and hw_counters/* (read once: some platforms log \
                a firmware message per PPCNT read)",
        why: "Symbol errors and link-integrity errors mean a marginal cable or transceiver that will flap under \
              load; link_downed counts flaps that already happened; transport errors (local ACK timeouts, \
              sequence errors) stall NCCL. PMA counters are 4–32 bits wide and stop at their maximum: a \
              saturated counter hides how bad things are.",
        fixes: &[
            ("error counters above the limit", "inspect the link (`mlxlink -d <dev> -m -e`), reseat or replace the cable/transceiver, then clear counters (`perfquery -x -R`) and watch whether they grow"),
            ("counter saturated", "clear the counters (`perfquery -x -R` or a port reset) so the next reading means something"),
        ],
    },
    findings: &[
        &ERROR_COUNTS,
        &SATURATED,
        &NO_PMA,
        &UNKNOWN_COUNTERS,
        &NO_COUNTERS,
        &EFA_ELSEWHERE,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for RdmaCounters {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let limit = cx
            .profile
            .thresholds
            .rdma_error_count
            .unwrap_or(DEFAULT_LIMIT);
        CheckResult::or_read_error(ID, Facts::read(cx.host).map(|facts| judge(&facts, &limit)))
    }
}

/// What the check reads, before it judges.
struct Facts {
    /// Each port (`device/port`) with the counters read from it.
    ports: Vec<(String, Vec<Counter>)>,
    /// Read only when no port is listed: whether RDMA hardware is there without its driver.
    survey: Option<Survey>,
    /// EFA devices, left to efa.counters: none of their counters has a name this check knows.
    efa: Vec<String>,
}

impl Facts {
    fn read(host: &Host) -> Result<Facts, ReadError> {
        // Counters need no port attribute: none is read.
        let ports = read_all_port_ids(host)?;
        let survey = ports.is_empty().then(|| Survey::read(host, Stack::Rdma));
        let mut names: Vec<String> = ports.iter().map(|(d, _)| d.clone()).collect();
        names.dedup();
        let (_, efa) = crate::sysfs::efa::split_efa(host, &names)?;
        let ports = ports
            .into_iter()
            .filter(|(dev, _)| !efa.contains(dev))
            .map(|(dev, port)| {
                (
                    format!("{dev}/{port}"),
                    read_counters(host, &dev, port, is_read),
                )
            })
            .collect();
        Ok(Facts { ports, survey, efa })
    }
}

fn judge(facts: &Facts, limit: &Limit) -> Vec<CheckResult> {
    if let Some(survey) = &facts.survey {
        // No port listed is not absence: a NIC on the bus without its driver is the presence rule's verdict.
        if let Some(r) = survey.gate(ID, false) {
            return vec![r];
        }
        return vec![CheckResult::skip(ID, "no RDMA port").code(&common::ABSENT)];
    }
    let mut results: Vec<CheckResult> = facts
        .ports
        .iter()
        .map(|(subject, counters)| judge_port(subject, counters, limit))
        .collect();
    if !facts.efa.is_empty() {
        results.push(
            CheckResult::skip(
                ID,
                format!("{} EFA device(s) judged by efa.counters", facts.efa.len()),
            )
            .evidence("EFA devices", facts.efa.join(", "))
            .code(&EFA_ELSEWHERE),
        );
    }
    results
}

/// Read: the error counters, and the PMA counters whose width makes saturation visible.
fn is_read(name: &str) -> bool {
    ERROR_COUNTERS.contains(&name)
        || name
            .strip_prefix("counters/")
            .is_some_and(|n| counter_width(n).is_some())
}

fn judge_port(subject: &str, counters: &[Counter], limit: &Limit) -> CheckResult {
    if counters.is_empty() {
        return CheckResult::skip(ID, "no counters exposed (driver without a PMA)")
            .subject(subject)
            .code(&NO_COUNTERS);
    }
    // A counter directory that could not be listed (no `/` in its name) may hold any error counter.
    let is_judged =
        |c: &Counter| ERROR_COUNTERS.contains(&c.name.as_str()) || !c.name.contains('/');
    let known = counters.iter().filter(|c| is_judged(c)).count();
    if known == 0 {
        let names: Vec<&str> = counters.iter().map(|c| c.name.as_str()).collect();
        return CheckResult::skip(
            ID,
            format!(
                "nothing judged: none of the {} counters exposed is an error counter this check knows by name",
                counters.len()
            ),
        )
        .subject(subject)
        .note(format!("counters exposed: {}", names.join(" "))).code(&UNKNOWN_COUNTERS);
    }
    let mut statuses = vec![Status::Pass];
    let mut findings: Vec<String> = Vec::new();
    let mut r = CheckResult::pass(ID, "").subject(subject);
    let mut total = 0u64;
    let mut unreadable = 0usize;
    // Error counters whose file reads `N/A (no PMA)`: no value was read, so they are not judged.
    let mut not_available: Vec<&str> = Vec::new();
    for c in counters {
        let judged = is_judged(c);
        let short = c.name.rsplit('/').next().unwrap_or(&c.name);
        match &c.value {
            CounterValue::Value(v) => {
                if c.name.starts_with("counters/") && is_saturated(short, *v) {
                    statuses.push(Status::Warn);
                    let text = format!("{short} saturated at {v} (true value unknown)");
                    r = r.evidence(&c.path, format!("{v} (saturated)")).finding(
                        &SATURATED,
                        Status::Warn,
                        &text,
                    );
                    findings.push(text);
                } else if judged && *v > 0 {
                    total += v;
                    let status = limit.judge_max(*v as f64);
                    statuses.push(status);
                    if status != Status::Pass {
                        let text = format!("{short} = {v}");
                        r = r.finding(&ERROR_COUNTS, status, &text);
                        findings.push(text);
                    }
                    r = r
                        .evidence(&c.path, v)
                        .measure(Measurement::new(short, *v as f64, "count").judged_by(limit));
                }
            }
            CounterValue::NotAvailable(text) if judged => {
                not_available.push(short);
                r = r.evidence(&c.path, format!("{text} (not available)"));
            }
            CounterValue::Unreadable(why) => {
                unreadable += 1;
                r = r.evidence(&c.path, why);
            }
            _ => {}
        }
    }
    not_available.sort_unstable();
    let valued = counters
        .iter()
        .filter(|c| matches!(c.value, CounterValue::Value(_)))
        .count();
    let judged = known - not_available.len();
    // A counter that cannot be read is not a zero: the port's health is unknown.
    if unreadable > 0 {
        statuses.push(Status::Error);
        let text = format!("{unreadable} error counter(s) unreadable: their counts are unknown");
        r = r.finding(&common::UNREAD, Status::Error, &text);
        findings.push(text);
    } else if judged == 0 {
        r.status = Status::Skip;
        r.summary = format!(
            "no counter value read: {} error counter(s) read N/A (no PMA), so none is judged",
            not_available.len()
        );
        return r.code(&NO_PMA).note("the driver exposes no PMA (iWARP RNICs, ConnectX-3 VFs): watch the link with the vendor's tools, or require rdma.counters in the profile to fail such nodes");
    }
    let status = worst(statuses);
    r.status = status;
    let unjudged = if not_available.is_empty() {
        String::new()
    } else {
        format!(
            "; {} not read (N/A): {}",
            not_available.len(),
            not_available.join(", ")
        )
    };
    r.summary = if findings.is_empty() {
        format!("no error counts ({valued} counters read, {judged} judged{unjudged})")
    } else {
        format!("{}{unjudged}", findings.join(", "))
    };
    r = r.measure(Measurement::new(
        "error_counts_total",
        total as f64,
        "count",
    ));
    if status != Status::Pass {
        r = r.fix("inspect the link with `mlxlink -d <dev> -m -e`; reseat/replace the cable or transceiver; clear counters with `perfquery -x -R` and re-check");
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::testing::{run_on, verdicts};

    #[test]
    fn hgx_clean_counters_pass() {
        let r = run_on(&RdmaCounters, "hgx-healthy", "generic");
        assert_eq!(r.len(), 8);
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
    }

    /// Reproduced: RDMA NICs on the PCI bus whose driver is not loaded (no /sys/class/infiniband) gave SKIP
    /// "no RDMA port".
    #[test]
    fn nics_on_the_bus_without_their_driver_fail_not_skip() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        std::fs::remove_dir_all(dir.path().join("sys/class/infiniband")).unwrap();
        let r = crate::probes::testing::run_on_root(&RdmaCounters, dir.path(), "generic");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, Status::Fail, "{:#?}", r[0]);
        assert!(
            r[0].summary.contains("on the PCI bus without"),
            "{}",
            r[0].summary
        );
    }

    #[test]
    fn saturated_link_downed_warns_naming_the_port() {
        let r = run_on(&RdmaCounters, "ib-port-down", "hgx-h100-ib");
        let bad: Vec<_> = verdicts(&r)
            .into_iter()
            .filter(|(_, s)| *s != Status::Pass)
            .collect();
        assert_eq!(bad, [("mlx5_3/1".to_string(), Status::Warn)]);
        let port = r.iter().find(|x| x.status == Status::Warn).unwrap();
        assert!(
            port.summary.contains("link_downed saturated at 255"),
            "{}",
            port.summary
        );
        assert!(
            port.summary.contains("symbol_error = 12"),
            "{}",
            port.summary
        );
    }

    #[test]
    fn unreadable_error_counter_is_an_error_not_a_pass() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let counter = dir
            .path()
            .join("sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error");
        let counter = std::fs::canonicalize(counter).unwrap();
        std::fs::remove_file(&counter).unwrap();
        std::fs::create_dir(&counter).unwrap();
        let r = crate::probes::testing::run_on_root(&RdmaCounters, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Error, "{:#?}", r[0]);
        assert!(
            r[0].summary.contains("1 error counter(s) unreadable"),
            "{}",
            r[0].summary
        );
        assert!(r[0]
            .evidence
            .iter()
            .any(|e| e.ends_with("symbol_error = <is a directory>")));
        assert_eq!(r[1].status, Status::Pass);
    }

    #[test]
    fn rxe_hw_counters_are_judged_by_name() {
        // Recorded in the soft-RoCE VM after ibv_rc_pingpong traffic: no counters/ directory, rxe's own names.
        let r = run_on(&RdmaCounters, "rxe-vm", "generic");
        assert_eq!(verdicts(&r), [("rxe0/1".to_string(), Status::Warn)]);
        assert!(
            r[0].summary.contains("completer_retry_err = 40"),
            "{}",
            r[0].summary
        );
        assert!(r[0]
            .measurements
            .iter()
            .any(|m| m.name == "completer_retry_err"));
    }

    #[test]
    fn counters_of_unknown_names_are_not_called_healthy() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let hw = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/ports/1/hw_counters");
        for entry in std::fs::read_dir(&hw).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if ERROR_COUNTERS.contains(&format!("hw_counters/{name}").as_str()) {
                std::fs::remove_file(path).unwrap();
            }
        }
        let r = crate::probes::testing::run_on_root(&RdmaCounters, dir.path(), "generic");
        assert_eq!(r[0].status, Status::Skip, "{:#?}", r[0]);
        assert!(
            r[0].summary.starts_with("nothing judged"),
            "{}",
            r[0].summary
        );
        assert!(
            r[0].evidence[0].contains("hw_counters/rdma_sends"),
            "{:?}",
            r[0].evidence
        );
    }
}
