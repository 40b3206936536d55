//! `rdma.loopback`: on every ACTIVE RDMA port, with or without GPUs, two RC queue pairs of that port move data
//! through host memory: RDMA WRITE and RDMA READ bandwidth, SEND/RECV latency (p50, p99), every transfer
//! checked. Bandwidth is judged against the port's rate where the rate is the hardware's (a soft-RoCE port
//! reports a fixed 2.5 Gb/s placeholder). It is the control run of `gdr.loopback`: a port fault shows here too.

use super::shared::set_aside::SetAside;
use std::time::{Duration, Instant};

use crate::host::ReadError;
use crate::measure::rdma_loopback::{self, guarded, Leg, Plan, PortTarget};
use crate::model::limit::PORT_RATE_PCT;
use crate::model::Limit;
use crate::probe::{common, FindingCode, Library, Remedy};
use crate::probe::{CheckResult, Context, Explain, Kind, Need, Probe, ProbeMeta, Status};
use crate::probes::shared::facts::VERBS_DEVICES;
use crate::rules::presence::{Stack, Survey};
use crate::rules::transfer_verdict::{gbps_text, judge_leg, LegRule, LinkRate, Percentile};
use crate::sysfs::infiniband::{self, PortAttrs};

pub struct RdmaLoopback;

const ID: &str = "rdma.loopback";
const LOOPBACK_KEY: &str = "verbs.rdma_loopback";
const PLAN: Plan = rdma_loopback::HOST_LOOPBACK;

const NONE_ACTIVE: FindingCode = FindingCode {
    code: "RDM501",
    title: "RDMA devices are present but no port is ACTIVE: no transfer is possible",
    explanation: "Every RDMA port is down: bring one up (netdev up and carrier for RoCE; cable and subnet manager for InfiniBand). rdma.link names each port's state.",
    step: Some(Remedy::ServiceRma),
};
const LEG_FAILED: FindingCode = FindingCode {
    code: "RDM502",
    title: "the loopback transfer failed at a stage (open, register, connect, transfer)",
    explanation: "A queue pair over the port could not be set up or a transfer failed; the summary names the stage and the library's answer. Memory registration failures point at memlock (rdma.memlock); the rest at the port's state, GID and MTU (rdma.link, rdma.roce), then the cable and firmware.",
    step: Some(Remedy::Reconfigure),
};
const SHORT: FindingCode = FindingCode {
    code: "RDM503",
    title: "the loopback fell short: bandwidth below the link's share, latency above the limit, or data not intact",
    explanation: "WRITE and READ through the port's own loopback moved less than `thresholds.rdma_bandwidth_pct_of_link` of its rate, SEND/RECV latency exceeded the limit, or a transfer's data did not arrive intact (the summary says which). A degraded link, cable or NIC.",
    step: Some(Remedy::ServiceRma),
};
const NO_GID: FindingCode = FindingCode {
    code: "RDM504",
    title: "a RoCE port without a RoCE v2 GID: its queue pairs cannot be addressed",
    explanation: "RDMA CM needs a RoCE v2 GID to address the port: give its netdev an IP address and bring it up (rdma.roce).",
    step: Some(Remedy::Reconfigure),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "RDMA loopback per ACTIVE port in host memory: WRITE/READ Gb/s, SEND/RECV latency p50/p99, data checked",
    needs: &[Need::RdmaDevice],
    kind: Kind::Active,
    libraries: &[Library::Verbs],
    facts: &[&VERBS_DEVICES],
    timeout: Duration::from_secs(30),
    explain: Explain {
        reads: "ibv_get_device_list through sideway/rdma-mummy-sys (libibverbs dlopened at run time), \
                /sys/class/infiniband/<dev>/{device,ports/<n>/{state,link_layer,rate,gids,gid_attrs/types}}; \
                then per ACTIVE port: ibv_reg_mr on 4 MiB of host memory, two RC QPs connected to each other \
                (RoCE v2 GID or LID), RDMA WRITE and RDMA READ of 256 KiB x 8 in flight (up to 4096 each or \
                1 s), 8-byte SEND/RECV ping-pong x 1000 (half the round trip, as ib_send_lat); every \
                transfer's sequence stamps checked on completion and every slot compared after each phase",
        why: "A port can be ACTIVE and still not move data: a missing provider library, a memlock limit that \
              refuses registration, a RoCE GID on a dead netdev, a firmware that drops RDMA READs. Only \
              moving bytes proves the path; the host-memory run is also the control that tells a GPUDirect \
              fault (gdr.loopback) from a port fault.",
        fixes: &[
            ("registration refused", "raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK (see rdma.memlock)"),
            ("no completion / transport retry exceeded", "the port drops RDMA traffic: check rdma.link, rdma.roce (GID, MTU, PFC), cable and firmware"),
            ("bandwidth below the profile's fraction of the port rate", "check the PCIe link of the NIC (pcie.link), NUMA placement, firmware; compare with `ib_write_bw` between two ports"),
            ("data mismatch", "a NIC or memory fault: reset the device, update firmware, replace the HCA if it persists"),
        ],
    },
    findings: &[
        &NONE_ACTIVE,
        &LEG_FAILED,
        &SHORT,
        &NO_GID,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for RdmaLoopback {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    // A measuring check: it goes on with the devices the driver did take (rdma.devices names the others).
    let expected = cx.profile.expect.rdma_device_count.is_some_and(|n| n > 0);
    let rdma = Survey::read(cx.host, Stack::Rdma);
    if let Some(r) = rdma.gate_if_unusable(ID, expected) {
        return Ok(vec![r]);
    }
    // EFA and management devices are left alone, before libibverbs is asked anything.
    let aside = SetAside::read(ID, cx.host, &rdma.driver_devices)?;
    if aside.covers(&rdma.driver_devices) {
        return Ok(rdma.completed(ID, aside.results));
    }
    let devices: Vec<String> = match rdma.verbs_devices(cx.answers, ID, expected) {
        Ok(d) => d.into_iter().filter(|d| !aside.contains(d)).collect(),
        Err(r) => return Ok(vec![*r]),
    };
    let all_ports = infiniband::read_all_ports(cx.host)?;
    // A device without a PCI function is software (its rate a placeholder, not judged); one whose `device`
    // link cannot be resolved is not known to be software.
    let mut ports: Vec<(PortAttrs, bool)> = Vec::new();
    for (d, dev_ports) in all_ports.into_iter().filter(|(d, _)| devices.contains(d)) {
        let software = infiniband::device_bdf(cx.host, &d)?.is_none();
        ports.extend(dev_ports.into_iter().map(|p| (p, software)));
    }
    let active: Vec<&(PortAttrs, bool)> = ports.iter().filter(|(p, _)| p.is_active()).collect();
    if active.is_empty() {
        let mut r = CheckResult::fail(
            ID,
            format!(
                "{} RDMA port(s), none ACTIVE: no RDMA transfer is possible",
                ports.len()
            ),
        )
        .fix("bring a port up: netdev up and carrier for RoCE, cable and subnet manager for IB (see rdma.link)").code(&NONE_ACTIVE);
        for (p, _) in &ports {
            for (k, v) in p.evidence().into_iter().take(2) {
                r = r.evidence(&k, v);
            }
        }
        return Ok(vec![r]);
    }
    // Each active port's target; a RoCE port without a RoCE v2 GID cannot be addressed.
    let targets: Vec<Option<PortTarget>> = active
        .iter()
        .map(|(p, _)| PortTarget::of(cx.host, p))
        .collect::<Result<_, _>>()?;
    let jobs: Vec<PortTarget> = targets.iter().flatten().cloned().collect();
    let deadline = cx.deadline;
    let obtained = cx
        .answers
        .obtain(LOOPBACK_KEY, || run_ports(&jobs, deadline));
    let (runs, replayed) = match obtained {
        Ok(o) => (o.value, o.replayed),
        Err(e) => {
            return Ok(vec![
                CheckResult::error(ID, e).code(&common::LIBRARY_UNANSWERED)
            ])
        }
    };
    let pct = cx
        .profile
        .thresholds
        .rdma_bandwidth_pct_of_link
        .unwrap_or_default()
        .or(PORT_RATE_PCT);
    let mut runs = runs.into_iter();
    let results = active
        .iter()
        .zip(targets)
        .map(|((port, software), target)| {
            let mut r = match (target, runs.next()) {
                (Some(_), Some(leg)) => {
                    judge(&leg, LinkRate::of_port(port, *software), &pct, replayed)
                }
                (Some(_), None) => {
                    CheckResult::error(ID, "the recording holds fewer loopback runs than ports")
                        .code(&common::RECORDING_SHORT)
                }
                (None, _) => CheckResult::fail(
                    ID,
                    "RoCE port without a RoCE v2 GID: queue pairs cannot be addressed",
                )
                .fix("give the netdev an IP address and bring it up (see rdma.roce)")
                .code(&NO_GID),
            };
            r.subject = Some(port.subject());
            let mut ev: Vec<String> = port
                .evidence()
                .into_iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            ev.append(&mut r.evidence);
            r.evidence = ev;
            r
        })
        .collect();
    let mut results: Vec<CheckResult> = results;
    results.extend(aside.results);
    // The survey's gap (bus or module table unread) stays an error beside the measured ports.
    Ok(rdma.completed(ID, results))
}

/// Ports one after the other (two loopbacks never share a link), each with an equal share of the time left.
fn run_ports(jobs: &[PortTarget], deadline: Instant) -> Vec<Leg> {
    jobs.iter()
        .enumerate()
        .map(|(i, target)| {
            let left = deadline.saturating_duration_since(Instant::now());
            let share = Instant::now() + left / (jobs.len() - i) as u32;
            guarded(|| rdma_loopback::host_memory(target, PLAN, share))
        })
        .collect()
}

/// One port's verdict through the shared leg rule ([`judge_leg`]): never a pass without data moved in both
/// directions, every transfer checked and the latency measured.
pub fn judge(leg: &Leg, rate: LinkRate, pct: &Limit, replayed: bool) -> CheckResult {
    let (outcome, verified) = match leg {
        Leg::Failed {
            stage,
            message,
            refused,
        } => {
            let mut r = CheckResult::fail(ID, format!("failed at {stage}: {message}"))
                .fix(if stage == "register memory" {
                    "raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK (see rdma.memlock)"
                } else {
                    "check rdma.link and rdma.roce for this port (state, GID, MTU), then the cable and the firmware"
                }).code(&LEG_FAILED);
            for line in refused {
                r = r.note(line.clone());
            }
            return r;
        }
        Leg::Done { outcome, verified } => (outcome, *verified),
    };
    let (w, rd, lat) = (&outcome.write, &outcome.read, &outcome.latency);
    let rule = LegRule {
        pct,
        latency: &Limit::default(),
        latency_by: Percentile::P99,
        prefix: "",
        latency_name: "send_latency",
        replayed,
    };
    let v = judge_leg(&outcome.numbers(verified), &rate, &rule, true);
    let mut r = CheckResult::new(
        ID,
        v.status,
        format!(
            "WRITE {}, READ {}, SEND/RECV p50 {:.1} us p99 {:.1} us; {} transfers{}{}",
            gbps_text(w.gbps, &rate),
            gbps_text(rd.gbps, &rate),
            lat.p50_us,
            lat.p99_us,
            u64::from(w.transfers) + u64::from(rd.transfers) + u64::from(lat.samples),
            if verified { ", every one checked" } else { "" },
            if v.problems.is_empty() {
                String::new()
            } else {
                format!(" — {}", v.problems.join("; "))
            }
        ),
    )
    .code(&SHORT);
    r.measurements = v.measurements;
    for note in v.notes {
        r = r.note(note);
    }
    r = r
        .evidence(
            "registration",
            format!("{} = ok", outcome.registration.call),
        )
        .evidence(
            "RDMA WRITE",
            format!(
                "{} x {} bytes, {} stamped transfers checked, {} mismatched, slots equal after: {}",
                w.transfers,
                PLAN.message_bytes,
                w.checked,
                w.mismatched,
                yes_no(w.slots_equal)
            ),
        )
        .evidence(
            "RDMA READ",
            format!(
                "{} x {} bytes, {} stamped transfers checked, {} mismatched, slots equal after: {}",
                rd.transfers,
                PLAN.message_bytes,
                rd.checked,
                rd.mismatched,
                yes_no(rd.slots_equal)
            ),
        )
        .evidence(
            "SEND/RECV",
            format!(
                "{} round trips of 8 bytes, {} mismatched, path MTU {}",
                lat.samples, lat.mismatched, outcome.path_mtu
            ),
        );
    let moved = w.transfers > 0 && rd.transfers > 0 && lat.samples > 0;
    if v.status != Status::Pass {
        r = r.fix(if !verified {
            "a NIC or memory fault: reset the device, update firmware, replace the HCA if it persists"
        } else if !moved {
            "the port moves almost nothing: check rdma.link and rdma.roce, the cable and the firmware"
        } else if matches!(rate, LinkRate::Unreadable(_)) {
            "the port's rate could not be read: see rdma.link for /sys/class/infiniband/<dev>/ports/<n>/rate"
        } else if outcome.cut_short {
            "the run's deadline ended a phase: raise the check's timeout in the profile"
        } else {
            "check the NIC's PCIe link (pcie.link), NUMA placement and firmware; compare with `ib_write_bw`"
        });
    }
    r
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "not compared",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynlib::verbs::DEVICE_LIST_KEY;
    use crate::measure::rdma_loopback::{Latency, Outcome, Registration, Throughput};
    use crate::probes::testing::{run_on, verdicts};

    /// Reproduced: on p6-b200 the EFAs were set aside (no RC) and the two NVLink switch management ports were
    /// what remained to loop back. Both are left alone now, before libibverbs is asked, each said why.
    #[test]
    fn nvlink_management_ports_are_never_looped_back() {
        for scenario in ["aws-p6-b200", "aws-p6-b200-vpd-unread"] {
            for r in [
                run_on(&RdmaLoopback, scenario, "generic"),
                run_on(
                    &super::super::gdr_loopback::GdrLoopback,
                    scenario,
                    "generic",
                ),
            ] {
                assert_eq!(
                    r.iter().map(|x| x.status).collect::<Vec<_>>(),
                    [Status::Skip, Status::Skip],
                    "{scenario}: {r:#?}"
                );
                assert!(r[0].summary.contains("8 EFA device(s)"), "{}", r[0].summary);
                assert!(
                    r[1].summary
                        .starts_with("2 management device(s) left alone"),
                    "{}",
                    r[1].summary
                );
                assert!(
                    r[1].evidence.iter().any(|e| e.starts_with("ibp124s0f0 = ")),
                    "{:#?}",
                    r[1].evidence
                );
            }
        }
    }

    fn phase(gbps: f64, transfers: u32) -> Throughput {
        Throughput {
            gbps,
            bytes: u64::from(transfers) * PLAN.message_bytes as u64,
            transfers,
            checked: transfers,
            mismatched: 0,
            slots_equal: Some(true),
        }
    }

    fn done(write: f64, read: f64) -> Leg {
        Leg::Done {
            outcome: Outcome {
                registration: Registration {
                    call: "ibv_reg_mr".into(),
                    refused: vec![],
                },
                path_mtu: 4096,
                write: phase(write, 4096),
                read: phase(read, 4096),
                latency: Latency {
                    samples: 1000,
                    p50_us: 2.1,
                    p99_us: 3.5,
                    mismatched: 0,
                },
                cut_short: false,
            },
            verified: true,
        }
    }

    #[test]
    fn recorded_rxe_port_passes_with_bandwidth_shown_not_judged() {
        // Recorded in the soft-RoCE VM: real transfers, rate 2.5 Gb/s is rxe's placeholder.
        let r = run_on(&RdmaLoopback, "rxe-vm", "roce-400g");
        assert_eq!(verdicts(&r), [("rxe0/1".to_string(), Status::Pass)]);
        assert!(
            r[0].summary.contains("every one checked"),
            "{}",
            r[0].summary
        );
        assert!(
            r[0].evidence
                .iter()
                .any(|e| e.contains("fixed placeholder")),
            "{:?}",
            r[0].evidence
        );
        assert!(r[0]
            .measurements
            .iter()
            .all(|m| m.replayed && !m.name.contains("pct")));
        let names: Vec<&str> = r[0].measurements.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "write_gbits_per_sec",
                "read_gbits_per_sec",
                "send_latency_p50_us",
                "send_latency_p99_us"
            ]
        );
    }

    #[test]
    fn hardware_rate_judges_the_slower_direction() {
        let r = judge(
            &done(390.0, 280.0),
            LinkRate::Gbps(400.0),
            &PORT_RATE_PCT,
            false,
        );
        assert_eq!(
            r.status,
            Status::Fail,
            "READ at 70% of the link: {}",
            r.summary
        );
        assert!(
            r.summary.contains("READ 280.0 Gb/s (70% of link)"),
            "{}",
            r.summary
        );
        let r = judge(
            &done(390.0, 380.0),
            LinkRate::Gbps(400.0),
            &PORT_RATE_PCT,
            false,
        );
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert!(r
            .measurements
            .iter()
            .any(|m| m.name == "read_pct_of_link" && m.fail == Some(75.0)));
    }

    #[test]
    fn unreadable_rate_of_a_hardware_port_is_an_error() {
        let r = judge(
            &done(390.0, 380.0),
            LinkRate::Unreadable("<missing>".into()),
            &PORT_RATE_PCT,
            false,
        );
        assert_eq!(r.status, Status::Error);
        assert!(r.summary.contains("rate is unreadable"), "{}", r.summary);
    }

    #[test]
    fn never_a_pass_without_moving_data() {
        let mut leg = done(1.0, 1.0);
        if let Leg::Done { outcome, .. } = &mut leg {
            outcome.read.transfers = 0;
        }
        let r = judge(
            &leg,
            LinkRate::NotMeaningful("2.5 Gb/sec (1X SDR)".into()),
            &PORT_RATE_PCT,
            false,
        );
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("moved too little"), "{}", r.summary);
    }

    #[test]
    fn a_mismatched_transfer_fails() {
        let mut leg = done(390.0, 380.0);
        if let Leg::Done { outcome, verified } = &mut leg {
            outcome.write.mismatched = 1;
            *verified = false;
        }
        let r = judge(&leg, LinkRate::Gbps(400.0), &PORT_RATE_PCT, false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("DATA MISMATCH"), "{}", r.summary);
    }

    #[test]
    fn refused_registration_points_at_memlock() {
        let leg = Leg::Failed {
            stage: "register memory".into(),
            message: "ibv_reg_mr = failed to register memory region: Cannot allocate memory (os error 12)".into(),
            refused: vec![],
        };
        let r = judge(&leg, LinkRate::Gbps(400.0), &PORT_RATE_PCT, false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.remediation.as_deref().unwrap().contains("rdma.memlock"));
    }

    #[test]
    fn ports_without_an_active_one_fail_and_no_device_skips() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let state = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/ports/1/state");
        std::fs::write(&state, "1: DOWN\n").unwrap();
        let r = crate::probes::testing::run_on_root(&RdmaLoopback, dir.path(), "generic");
        assert_eq!(verdicts(&r), [(String::new(), Status::Fail)]);
        assert!(r[0].summary.contains("none ACTIVE"), "{}", r[0].summary);
        let r = run_on(&RdmaLoopback, "h200-vm-snapshot", "generic");
        assert_eq!(verdicts(&r), [(String::new(), Status::Skip)]);
    }

    /// Reproduced: an RDMA device whose `device` link could not be resolved was taken for a software one, so
    /// its bandwidth went unjudged and the port passed.
    #[test]
    fn an_unresolvable_device_link_is_an_error_not_a_software_device() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let link = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/device");
        assert!(std::fs::symlink_metadata(&link).is_err());
        std::os::unix::fs::symlink("device", &link).unwrap();
        let r = crate::probes::testing::run_on_root(&RdmaLoopback, dir.path(), "roce-400g");
        assert_eq!(verdicts(&r), [(String::new(), Status::Error)], "{r:#?}");
        assert!(r[0].summary.contains("rxe0/device"), "{}", r[0].summary);
    }

    /// A copy of `scenario` whose `/sys/class/infiniband` cannot be listed (a link to itself: ELOOP).
    fn class_unreadable(scenario: &str) -> tempfile::TempDir {
        let dir = crate::probes::testing::copy_scenario(scenario);
        let class = dir.path().join("sys/class/infiniband");
        let _ = std::fs::remove_dir_all(&class);
        std::os::unix::fs::symlink("infiniband", &class).unwrap();
        dir
    }

    /// Never a pass or a silent skip on data not read: an unreadable device list is an error, with or without
    /// a device behind it (it was a FAIL "0 RDMA port(s), none ACTIVE" on rxe, a SKIP on the H200 VM).
    #[test]
    fn an_unreadable_device_list_is_an_error() {
        for scenario in ["rxe-vm", "h200-vm-snapshot"] {
            let dir = class_unreadable(scenario);
            let r = crate::probes::testing::run_on_root(&RdmaLoopback, dir.path(), "generic");
            assert_eq!(
                verdicts(&r),
                [(String::new(), Status::Error)],
                "{scenario}: {r:?}"
            );
            assert!(
                r[0].summary.contains("/sys/class/infiniband"),
                "{scenario}: {}",
                r[0].summary
            );
        }
    }

    /// The rxe recording with its `verbs.device_list` answer replaced.
    fn rxe_with_device_list(answer: serde_json::Value) -> tempfile::TempDir {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let path = dir.path().join(crate::recording::ANSWERS_FILE);
        let mut answers: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        answers[DEVICE_LIST_KEY] = answer;
        std::fs::write(&path, answers.to_string()).unwrap();
        dir
    }

    #[test]
    fn kernel_devices_that_libibverbs_cannot_open_fail() {
        let dir = rxe_with_device_list(serde_json::json!({"Devices": []}));
        let r = crate::probes::testing::run_on_root(&RdmaLoopback, dir.path(), "generic");
        assert_eq!(verdicts(&r), [(String::new(), Status::Fail)]);
        assert!(
            r[0].summary.contains("libibverbs.so.1 lists no device"),
            "{}",
            r[0].summary
        );
    }

    #[test]
    fn libibverbs_that_cannot_load_next_to_a_device_is_an_error_naming_the_call() {
        let dir =
            rxe_with_device_list(serde_json::json!({"Failed": {"errno": 95, "message": "x"}}));
        let r = crate::probes::testing::run_on_root(&RdmaLoopback, dir.path(), "generic");
        assert_eq!(verdicts(&r), [(String::new(), Status::Error)]);
        assert!(
            r[0].summary
                .contains("libibverbs.so.1 cannot be loaded: rdma-core is not installed"),
            "{}",
            r[0].summary
        );
        assert!(
            r[0].evidence
                .iter()
                .any(|e| e.contains("ibv_get_device_list = NULL, errno 95")),
            "{:?}",
            r[0].evidence
        );
    }
}
