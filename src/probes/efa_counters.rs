//! `efa.counters`: EFA's own error counters, by name, against the profile's `rdma_error_count` limits. Port
//! level (`ports/1/hw_counters/`): `rx_drops`, `rdma_read_wr_err`, `rdma_write_wr_err`,
//! `retrans_timeout_events`, `unresponsive_remote_events`, `impaired_remote_conn_events`; device level
//! (`hw_counters/`): `cmds_err`, `no_completion_cmds` and every `*_err`. An EFA whose directories hold none of
//! them is not called healthy: nothing was judged, and it says so.

use crate::host::ReadError;
use crate::model::{worst, Limit};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Measurement, Probe, ProbeMeta, Remedy,
    Status,
};
use crate::sysfs::efa::{self, EfaCounter};

pub struct EfaCounters;

const ID: &str = "efa.counters";
/// Without a profile limit: any error is worth a warning, none is worth a failure on its own (as rdma.counters).
const DEFAULT_LIMIT: Limit = Limit::new(Some(0.0), None);

const FIX: &str = "work-request errors and SRD events count since the driver loaded: compare two reads a minute apart \
(`rdma -p statistic show`); rising `rdma_*_wr_err` / `unresponsive_remote_events` / `impaired_remote_conn_events` point \
at peers or the fabric path (AWS support with the instance id), `cmds_err` / `no_completion_cmds` at the device \
(stop/start the instance moves it to other hardware)";

const RAISED: FindingCode = FindingCode {
    code: "EFA201",
    title: "EFA error counters raised",
    explanation: "The efa driver's hw_counters count errors (rdma read/write errors, retransmits over the limit): a failing interface. Stop and start the instance to move to other hardware if they grow.",
    step: Some(Remedy::ServiceRma),
};
const NO_COUNTERS: FindingCode = FindingCode {
    code: "EFA202",
    title: "no EFA error counter under hw_counters/",
    explanation:
        "A skip: an efa driver without statistics exposes no error counter, so nothing is judged.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "AWS EFA error counters (work-request errors, SRD retransmit/unresponsive/impaired events, admin command errors) within limits",
    explain: Explain {
        reads: "/sys/class/infiniband/<efa>/ports/1/hw_counters/* and /sys/class/infiniband/<efa>/hw_counters/* \
                (names from the kernel's EFA_DEFINE_PORT_STATS / EFA_DEFINE_DEVICE_STATS)",
        why: "EFA has no PMA counters and its port state never changes, so these are the device's only health \
              signal. AWS's own node agent watches the same names.",
        fixes: &[("EFA error counters above the limit", FIX)],
    },
    findings: &[
        &RAISED,
        &NO_COUNTERS,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for EfaCounters {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let devices = efa::read_rdma_devices(cx.host)?;
    if devices.is_empty() {
        return Ok(vec![CheckResult::skip(
            ID,
            "no EFA RDMA device on this host",
        )
        .code(&common::ABSENT)]);
    }
    let limit = cx
        .profile
        .thresholds
        .rdma_error_count
        .unwrap_or_default()
        .or(DEFAULT_LIMIT);
    Ok(devices
        .iter()
        .map(|d| match efa::read_error_counters(cx.host, d) {
            Ok(c) => judge(&c, &limit).subject(d.clone()),
            Err(e) => CheckResult::read_error(ID, &e).subject(d.clone()),
        })
        .collect())
}

pub fn judge(counters: &[EfaCounter], limit: &Limit) -> CheckResult {
    if counters.is_empty() {
        return CheckResult::skip(
            ID,
            "no EFA error counter found under hw_counters/: nothing judged (an efa driver without statistics)",
        ).code(&NO_COUNTERS);
    }
    let mut statuses = Vec::new();
    let mut raised = Vec::new();
    let mut unread = Vec::new();
    let mut measurements = Vec::new();
    let mut evidence = Vec::new();
    for c in counters {
        match &c.value {
            Ok(v) => {
                evidence.push(format!("{} = {v}", c.path));
                let s = limit.judge_max(*v as f64);
                if s != Status::Pass {
                    raised.push(format!("{} {v}", c.name));
                    measurements
                        .push(Measurement::new(&c.name, *v as f64, "count").judged_by(limit));
                }
                statuses.push(s);
            }
            Err(e) => {
                evidence.push(format!("{} = {e}", c.path));
                unread.push(c.name.clone());
            }
        }
    }
    let status = worst(statuses);
    let mut r = if !unread.is_empty() && status == Status::Pass {
        CheckResult::error(
            ID,
            format!(
                "{} counter(s) could not be read: {}",
                unread.len(),
                unread.join(", ")
            ),
        )
        .code(&common::UNREAD)
    } else if status == Status::Pass {
        CheckResult::pass(ID, format!("{} error counters at zero", counters.len()))
    } else {
        CheckResult::new(
            ID,
            status,
            format!("error counters raised: {}", raised.join(", ")),
        )
        .fix(FIX)
        .code(&RAISED)
    };
    r.evidence = evidence;
    r.measurements = measurements;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, v: Result<u64, &str>) -> EfaCounter {
        EfaCounter {
            name: name.into(),
            path: format!("/sys/class/infiniband/rdmap68s0/ports/1/hw_counters/{name}"),
            value: v.map_err(str::to_string),
        }
    }

    #[test]
    fn by_name_against_the_limits() {
        let zero = [c("rdma_read_wr_err", Ok(0)), c("cmds_err", Ok(0))];
        assert_eq!(judge(&zero, &DEFAULT_LIMIT).status, Status::Pass);
        let raised = [c("rdma_read_wr_err", Ok(14)), c("cmds_err", Ok(0))];
        let r = judge(&raised, &DEFAULT_LIMIT);
        assert_eq!(r.status, Status::Warn);
        assert!(r.summary.contains("rdma_read_wr_err 14"), "{}", r.summary);
        let r = judge(&raised, &Limit::new(Some(0.0), Some(10.0)));
        assert_eq!(r.status, Status::Fail);
        assert_eq!(judge(&[], &DEFAULT_LIMIT).status, Status::Skip);
        let r = judge(&[c("rx_drops", Err("<permission denied>"))], &DEFAULT_LIMIT);
        assert_eq!(r.status, Status::Error, "an unread counter is no zero");
    }
}
