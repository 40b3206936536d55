//! `gdr.loopback`: for each GPU and its nearest RDMA port, the loopback of `rdma.loopback` (RDMA WRITE, RDMA
//! READ, SEND/RECV between two queue pairs of that port) once through GPU memory (DMA-BUF registration, else
//! `ibv_reg_mr` on the device pointer = peermem) and once through host memory, reported side by side. Host fast
//! and GPU slow or refused: the GDR path is the culprit; both slow: the link.

use super::shared::set_aside::SetAside;
use std::time::Duration;

use crate::host::{Host, ReadError};
use crate::measure::gdr::{self, PairRun};
use crate::measure::rdma_loopback::{Leg, Plan, PortTarget};
use crate::model::limit::PORT_RATE_PCT;
use crate::model::{worst, Limit};
use crate::probe::{common, FindingCode, Library, Remedy};
use crate::probe::{CheckResult, Context, Explain, Kind, Need, Probe, ProbeMeta, Status};
use crate::probes::shared::facts::VERBS_DEVICES;
use crate::probes::shared::gpu::gpu_survey;
use crate::rules::presence::{Stack, Survey};
use crate::rules::topology::PcieDistance;
use crate::rules::topology::{nearest, PciTree, GPU_NIC_PATHS};
use crate::rules::transfer_verdict::{
    gbps_text, judge_leg, Culprit, LegRule, LinkRate, Percentile,
};
use crate::sysfs::infiniband::{self, PortAttrs};
use crate::sysfs::nvidia;

pub struct GdrLoopback;

const ID: &str = "gdr.loopback";
const LOOPBACK_KEY: &str = "verbs.gdr_loopback";
const VERBS_ABI: &str = "/sys/class/infiniband_verbs/abi_version";
/// perftest practice for GDR health checks (Azure `check_ib_bw_gdr`): 8 MiB messages; 4 in flight (32 MiB)
/// is far past a 400 Gb/s port's bandwidth-delay product. Up to 256 per phase or 2 s; 1000 round trips.
const PLAN: Plan = Plan {
    message_bytes: 8 << 20,
    depth: 4,
    bw_messages: 256,
    phase_time: Duration::from_secs(2),
    lat_iterations: 1000,
};

const FIX_GDR: &str = "load nvidia_peermem (`modprobe nvidia-peermem`) or use DMA-BUF (open kernel module, kernel >= 5.12, \
rdma-core >= 34); check ACS/IOMMU on the GPU-NIC path";
const FIX_LINK: &str = "check rdma.link (rate, state), the cable and the firmware";

const GPU_EXPECTED: FindingCode = FindingCode {
    code: "GDR101",
    title: "the profile expects GPUDirect RDMA but the driver lists no GPU",
    explanation: "No NVIDIA GPU is listed by the driver, while the profile expects GPUDirect RDMA (`expect.gdr`): the GPUs are missing or their driver is not loaded (see gpu.inventory).",
    step: Some(Remedy::ServiceRma),
};
const NONE_ACTIVE: FindingCode = FindingCode {
    code: "GDR102",
    title: "RDMA devices are present but no port is ACTIVE",
    explanation: "Nothing can be looped back: bring a port up (cable; a subnet manager for InfiniBand). A failure where the profile expects GPUDirect RDMA, else a warning.",
    step: Some(Remedy::ServiceRma),
};
const NO_GID: FindingCode = FindingCode {
    code: "GDR103",
    title: "the port nearest a GPU is RoCE without a RoCE v2 GID: nothing was measured",
    explanation: "RDMA CM needs a RoCE v2 GID to address the port: give its netdev an IP address and bring it up (rdma.roce).",
    step: Some(Remedy::Reconfigure),
};
const GPU_PATH_SHORT: FindingCode = FindingCode {
    code: "GDR104",
    title: "GPU memory is slow or fails through the NIC while host memory is fast: the GPUDirect path",
    explanation: "The same port moves host memory at speed but GPU memory slower, or not at all: the GPUDirect RDMA path is at fault (nvidia_peermem or DMA-BUF, the PCIe placement of GPU and NIC, ACS or the IOMMU). See gdr.kernel_path, topo.gpu_nic, pcie.acs, pcie.iommu.",
    step: Some(Remedy::LoadModule),
};
const LINK_SHORT: FindingCode = FindingCode {
    code: "GDR105",
    title: "both GPU and host memory loopbacks fall short: the port or the link",
    explanation: "Host memory is slow or corrupt too, so the port or its link is at fault, not the GPU path: see rdma.link and rdma.counters, then the cable and the NIC.",
    step: Some(Remedy::ServiceRma),
};
const HOST_LEG_FAILED: FindingCode = FindingCode {
    code: "GDR106",
    title: "the host-memory loopback failed too: nothing to compare with",
    explanation: "The control transfer through host memory failed as well: check the port, rdma-core and memlock (rdma.memlock).",
    step: Some(Remedy::Reconfigure),
};
const SHORT: FindingCode = FindingCode {
    code: "GDR107",
    title: "the GPU loopback fell short of its limits",
    explanation: "Bandwidth below the share of the link rate or latency above the limit, without a culprit the comparison names (the summary says which).",
    step: Some(Remedy::ServiceRma),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "GPUDirect RDMA loopback per GPU and nearest port: WRITE/READ Gb/s and SEND latency, GPU and host memory side by side",
    needs: &[Need::Gpu, Need::RdmaDevice],
    kind: Kind::Active,
    libraries: &[Library::Verbs, Library::Cuda],
    facts: &[&VERBS_DEVICES],
    timeout: Duration::from_secs(60),
    explain: Explain {
        reads: "ibv_get_device_list through sideway/rdma-mummy-sys (libibverbs dlopened at run time), \
                /sys/class/infiniband/<dev>/ports/<n>/{state,link_layer,rate,lid,gids,gid_attrs/types}, \
                the PCIe tree under /sys/devices (nvidia-smi topo distance, to pair each GPU with its nearest port), \
                libcuda (cuMemAlloc, cuMemGetHandleForAddressRange), ibv_reg_dmabuf_mr / ibv_reg_mr, two RC QPs \
                on one port, RDMA WRITE then RDMA READ of 8 MiB x 4 in flight (up to 256 each or 2 s), \
                8-byte SEND/RECV x 1000; the same through host memory",
        why: "A GDR path can exist on paper (peermem loaded) and still run at a fraction of the link: wrong \
              NUMA/PCIe placement, ACS redirecting peer traffic through the root complex, an IOMMU in \
              translation mode. Only moving bytes shows it; the host-memory run tells a bad GDR path from a bad \
              link.",
        fixes: &[
            ("GPU memory registration refused", FIX_GDR),
            ("GPU loopback slow, host loopback fast", "the GPU-NIC PCIe path: check ACS (`setpci ECAP_ACS+6.w`), IOMMU passthrough, NUMA placement"),
            ("both loopbacks slow", "the port or link: see rdma.link rate and counters, cable, firmware"),
            ("no RDMA device", "install the HCA driver (mlx5_core/mlx5_ib) and rdma-core; in containers pass /dev/infiniband"),
        ],
    },
    findings: &[
        &GPU_EXPECTED,
        &NONE_ACTIVE,
        &NO_GID,
        &GPU_PATH_SHORT,
        &LINK_SHORT,
        &HOST_LEG_FAILED,
        &SHORT,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GdrLoopback {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let expect_gdr = cx.profile.expect.gdr == Some(true);
    let gpu = gpu_survey(cx);
    if let Some(r) = gpu.gate_if_unusable(ID, expect_gdr) {
        return Ok(vec![r]);
    }
    let rdma = Survey::read(cx.host, Stack::Rdma);
    // What the GPU survey could not read stays an error beside a verdict on the NICs.
    if let Some(r) = rdma.gate_if_unusable(ID, expect_gdr) {
        return Ok(gpu.completed(ID, vec![r]));
    }
    // EFA refuses RC queue pairs (efa.gdr registers GPU memory on them instead); management devices carry
    // no job's data: both are left alone.
    let aside = SetAside::read(ID, cx.host, &rdma.driver_devices)?;
    if aside.covers(&rdma.driver_devices) {
        return Ok(gpu.completed(ID, rdma.completed(ID, aside.results)));
    }
    let abi = crate::host::optional(cx.host.read(VERBS_ABI))?;
    let mut evidence = vec![format!(
        "{VERBS_ABI} = {}",
        abi.as_deref().unwrap_or("<missing>")
    )];
    let devices: Vec<String> = match rdma.verbs_devices(cx.answers, ID, expect_gdr) {
        Ok(d) => d.into_iter().filter(|d| !aside.contains(d)).collect(),
        Err(r) => return Ok(vec![*r]),
    };
    evidence.push(format!("ibv_get_device_list = [{}]", devices.join(", ")));
    let gpus = nvidia::read_driver_gpus(cx.host)?;
    let absent = if expect_gdr {
        Status::Fail
    } else {
        Status::Skip
    };
    if gpus.is_empty() {
        let mut r = CheckResult::new(
            ID,
            absent,
            "no NVIDIA GPU listed by the driver: nothing to loop back through",
        )
        .code(if absent == Status::Fail {
            &GPU_EXPECTED
        } else {
            &common::ABSENT
        });
        r.evidence = evidence;
        return Ok(vec![r]);
    }
    // Which port is nearest each GPU decides what is measured: both must be read.
    let tree = PciTree::read(cx.host)?;
    let all_ports = infiniband::read_all_ports(cx.host)?;
    // A `device` link that cannot be resolved leaves the port's place unknown (SYS to every GPU would pair
    // the GPUs with other ports): the error, never a device without a PCI function.
    let mut ports: Vec<(PortAttrs, Option<String>)> = Vec::new();
    for (d, dev_ports) in all_ports.into_iter().filter(|(d, _)| devices.contains(d)) {
        let bdf = infiniband::device_bdf(cx.host, &d)?;
        ports.extend(
            dev_ports
                .into_iter()
                .filter(PortAttrs::is_active)
                .map(|p| (p, bdf.clone())),
        );
    }
    if ports.is_empty() {
        let mut r = CheckResult::new(ID, absent.max(Status::Warn), "RDMA devices present but no port is ACTIVE")
            .fix("bring a port up (cable, subnet manager for IB: `systemctl start opensm` or the fabric's SM)").code(&NONE_ACTIVE);
        r.evidence = evidence;
        return Ok(vec![r]);
    }
    let bdfs: Vec<String> = gpus.iter().map(|g| g.bdf.clone()).collect();
    let pairings = pair_gpus(cx.host, &bdfs, &ports, Some(&tree))?;
    let jobs: Vec<(String, PortTarget)> = pairings
        .iter()
        .flatten()
        .map(|p| (p.gpu.clone(), p.target.clone()))
        .collect();
    let deadline = cx.deadline;
    let obtained = cx
        .answers
        .obtain(LOOPBACK_KEY, || gdr::run_pairs(&jobs, PLAN, deadline));
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
        .gdr_bandwidth_pct_of_link
        .unwrap_or_default()
        .or(PORT_RATE_PCT);
    let lat = cx.profile.thresholds.gdr_latency_us.unwrap_or_default();
    let mut runs = runs.iter();
    let results = pairings
        .into_iter()
        .map(|pairing| {
            let p = match pairing {
                Ok(p) => p,
                Err(unaddressable) => return *unaddressable,
            };
            let mut r = match runs.next() {
                Some(run) => judge(
                    run,
                    p.port.parsed_rate().map(|r| r.gbps),
                    &pct,
                    &lat,
                    replayed,
                ),
                None => CheckResult::error(ID, "the recording holds fewer loopback runs than GPUs")
                    .code(&common::RECORDING_SHORT),
            };
            r.subject = Some(format!(
                "GPU {} <-> {}/{}",
                p.gpu, p.target.device, p.target.port
            ));
            let mut ev = evidence.clone();
            ev.extend(
                p.port
                    .evidence()
                    .into_iter()
                    .map(|(k, v)| format!("{k} = {v}")),
            );
            ev.push(format!(
                "GPU {} to {}: PCIe distance {:?}",
                p.gpu, p.target.device, p.distance
            ));
            if let Some((i, _)) = p.target.roce_gid {
                ev.push(format!("RoCE v2 GID index = {i}"));
            }
            ev.append(&mut r.evidence);
            r.evidence = ev;
            r
        })
        .collect();
    let mut results: Vec<CheckResult> = results;
    results.extend(aside.results);
    Ok(tree.completed(ID, GPU_NIC_PATHS, results))
}

/// A GPU and the nearest ACTIVE port it is measured through.
struct Pairing {
    gpu: String,
    target: PortTarget,
    port: PortAttrs,
    distance: PcieDistance,
}

/// Each GPU (by bus id) with its nearest ACTIVE port (`ports` non-empty, each with its NIC's bus id). A GPU whose
/// nearest port cannot be addressed (RoCE without a RoCE v2 GID) gets its own failing result, never a gap.
fn pair_gpus(
    host: &Host,
    gpus: &[String],
    ports: &[(PortAttrs, Option<String>)],
    tree: Option<&PciTree>,
) -> Result<Vec<Result<Pairing, Box<CheckResult>>>, ReadError> {
    let mut pairings = Vec::new();
    for gpu in gpus {
        let distances: Vec<PcieDistance> = ports
            .iter()
            .map(|(_, nic)| distance(tree, gpu, nic.as_deref()))
            .collect();
        let Some(i) = nearest(&distances) else {
            continue;
        };
        let port = ports[i].0.clone();
        pairings.push(match PortTarget::of(host, &port)? {
            Some(target) => Ok(Pairing {
                gpu: gpu.clone(),
                target,
                port,
                distance: distances[i],
            }),
            None => {
                let mut r = CheckResult::fail(
                    ID,
                    format!(
                        "the port nearest this GPU ({}) is RoCE without a RoCE v2 GID: queue pairs cannot be addressed, nothing was measured",
                        port.subject()
                    ),
                )
                .fix("give the netdev an IP address and bring it up (see rdma.roce)").code(&NO_GID);
                r.subject = Some(format!("GPU {gpu} <-> {}", port.subject()));
                Err(Box::new(r))
            }
        });
    }
    Ok(pairings)
}

/// `nvidia-smi topo` distance between the GPU and a NIC; SYS when either is not in the PCI tree.
fn distance(tree: Option<&PciTree>, gpu: &str, nic: Option<&str>) -> PcieDistance {
    tree.zip(nic)
        .and_then(|(t, nic)| t.distance_between(gpu, nic))
        .unwrap_or(PcieDistance::SYS)
}

/// One pair's verdict: each leg through the shared leg rule, the GPU leg judged, the host leg beside it as
/// the control; the comparison of the two names the culprit.
pub fn judge(
    run: &PairRun,
    rate_gbps: Option<f64>,
    pct: &Limit,
    lat: &Limit,
    replayed: bool,
) -> CheckResult {
    let rate = match rate_gbps {
        Some(r) if r > 0.0 => LinkRate::Gbps(r),
        _ => LinkRate::Unreadable("the port's rate file gave no rate".into()),
    };
    let mut ev = Vec::new();
    let mut measurements = Vec::new();
    let mut statuses = Vec::new();
    let mut parts = Vec::new();
    let mut fast = [false; 2];
    let mut numbers = [None, None];
    for (i, (label, key, leg)) in [
        ("GPU memory", "gdr_", &run.gpu_memory),
        ("host memory", "host_", &run.host_memory),
    ]
    .into_iter()
    .enumerate()
    {
        match leg {
            Leg::Done { outcome, verified } => {
                let rule = LegRule {
                    pct,
                    latency: lat,
                    latency_by: Percentile::P50,
                    prefix: key,
                    latency_name: "send_latency",
                    replayed,
                };
                let n = outcome.numbers(*verified);
                let v = judge_leg(&n, &rate, &rule, i == 0);
                numbers[i] = Some(n);
                // What the culprit comparison uses: bandwidth not shown slow, and the data verified.
                fast[i] = v.bandwidth_ok(pct) && *verified;
                statuses.push(v.status);
                measurements.extend(v.measurements);
                ev.push(format!("{label}: {} = ok", outcome.registration.call));
                ev.extend(
                    outcome
                        .registration
                        .refused
                        .iter()
                        .map(|r| format!("{label}: {r}")),
                );
                parts.push(format!(
                    "{label} WRITE {}, READ {}, SEND p50 {:.2} us{}",
                    gbps_text(outcome.write.gbps, &rate),
                    gbps_text(outcome.read.gbps, &rate),
                    outcome.latency.p50_us,
                    v.problems
                        .iter()
                        .map(|p| format!(", {p}"))
                        .collect::<String>()
                ));
            }
            Leg::Failed {
                stage,
                message,
                refused,
            } => {
                statuses.push(Status::Fail);
                ev.extend(refused.iter().map(|r| format!("{label}: {r}")));
                parts.push(format!("{label} failed at {stage}: {message}"));
            }
        }
    }
    let culprit = Culprit::of(fast[0], fast[1], numbers[1].as_ref());
    let fix = culprit.map(|c| match c {
        Culprit::GpuDirectPath => FIX_GDR,
        Culprit::Link(_) => FIX_LINK,
        Culprit::HostLegFailed => "the host-memory loopback failed too: check the port, rdma-core and memlock (rdma.memlock)",
    });
    let fix = fix.or(matches!(rate, LinkRate::Unreadable(_)).then_some(FIX_LINK));
    let status = worst(statuses);
    let summary = format!(
        "{}{}",
        parts.join(" | "),
        culprit
            .and_then(Culprit::words)
            .map(|c| format!(" — {c}"))
            .unwrap_or_default()
    );
    let mut r = CheckResult::new(ID, status, summary);
    r.measurements = measurements;
    r.evidence = ev;
    if status != Status::Pass {
        r.remediation = fix.map(str::to_string);
    }
    r.code(match culprit {
        Some(Culprit::GpuDirectPath) => &GPU_PATH_SHORT,
        Some(Culprit::Link(_)) => &LINK_SHORT,
        Some(Culprit::HostLegFailed) => &HOST_LEG_FAILED,
        None => &SHORT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rdma_loopback::{leg_failed, Latency, Outcome, Registration, Throughput};

    #[test]
    fn nearest_port_wins_and_first_of_equals() {
        use PcieDistance::*;
        assert_eq!(nearest(&[SYS, PXB, PIX, PIX]), Some(2));
        assert_eq!(nearest(&[NODE, NODE]), Some(0));
        assert_eq!(nearest(&[]), None);
        assert_eq!(distance(None, "0000:17:00.0", Some("0000:18:00.0")), SYS);
    }

    /// A GPU whose nearest port is RoCE without a RoCE v2 GID: before, it was dropped from the results without a
    /// word (the check passed on the other GPUs).
    #[test]
    fn a_gpu_whose_nearest_port_cannot_be_addressed_fails_by_name() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::at(root.path()).unwrap();
        let port = |device: &str, link_layer: &str| PortAttrs {
            device: device.into(),
            port: 1,
            state: Ok("4: ACTIVE".into()),
            phys_state: Ok("5: LinkUp".into()),
            rate: Ok("400 Gb/sec (4X NDR)".into()),
            link_layer: Ok(link_layer.into()),
            lid: Ok("0x1".into()),
            sm_lid: Ok("0x1".into()),
        };
        let ports = [
            (port("mlx5_0", "Ethernet"), None),
            (port("mlx5_1", "InfiniBand"), None),
        ];
        let gpus = ["0000:17:00.0".to_string(), "0000:5e:00.0".to_string()];
        // No PCI tree: every distance is SYS, so each GPU takes the first port, the RoCE one without a GID.
        let pairings = pair_gpus(&host, &gpus, &ports, None).unwrap();
        assert_eq!(pairings.len(), 2);
        for (p, gpu) in pairings.iter().zip(&gpus) {
            let r = p.as_ref().err().expect("no target");
            assert_eq!(r.status, Status::Fail);
            assert_eq!(
                r.subject.as_deref(),
                Some(format!("GPU {gpu} <-> mlx5_0/1").as_str())
            );
            assert!(r.summary.contains("without a RoCE v2 GID"), "{}", r.summary);
        }
        let ib = pair_gpus(&host, &gpus[..1], &ports[1..], None).unwrap();
        assert!(matches!(&ib[..], [Ok(p)] if p.target.device == "mlx5_1"));
    }

    /// Reproduced: a port whose `device` link could not be resolved was placed at SYS from every GPU, so the
    /// GPUs were paired with other ports without a word.
    #[test]
    fn an_unresolvable_device_link_is_an_error_not_a_far_port() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let names: Vec<String> = (0..8).map(|i| format!("mlx5_{i}")).collect();
        std::fs::write(
            dir.path().join(crate::recording::ANSWERS_FILE),
            serde_json::json!({ crate::dynlib::verbs::DEVICE_LIST_KEY: { "Devices": names } })
                .to_string(),
        )
        .unwrap();
        let link = std::fs::canonicalize(dir.path().join("sys/class/infiniband/mlx5_3"))
            .unwrap()
            .join("device");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("device", &link).unwrap();
        let r = crate::probes::testing::run_on_root(&GdrLoopback, dir.path(), "generic");
        assert_eq!(r.len(), 1, "{r:#?}");
        assert_eq!(r[0].status, Status::Error, "{r:#?}");
        assert!(r[0].summary.contains("mlx5_3/device"), "{}", r[0].summary);
    }

    fn phase(gbps: f64) -> Throughput {
        Throughput {
            gbps,
            bytes: 1 << 31,
            transfers: 256,
            checked: 0,
            mismatched: 0,
            slots_equal: None,
        }
    }

    fn done(gbps: f64, lat: f64) -> Leg {
        Leg::Done {
            outcome: Outcome {
                registration: Registration {
                    call: "ibv_reg_dmabuf_mr".into(),
                    refused: vec![],
                },
                path_mtu: 4096,
                write: phase(gbps),
                read: phase(gbps + 1.0),
                latency: Latency {
                    samples: 1000,
                    p50_us: lat,
                    p99_us: lat * 2.0,
                    mismatched: 0,
                },
                cut_short: false,
            },
            verified: true,
        }
    }

    #[test]
    fn slow_gpu_fast_host_blames_gdr_path() {
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: done(180.0, 3.0),
            host_memory: done(385.0, 2.0),
        };
        let r = judge(&run, Some(400.0), &PORT_RATE_PCT, &Limit::default(), false);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary.contains("GPUDirect RDMA path is the culprit"),
            "{}",
            r.summary
        );
        assert!(r
            .measurements
            .iter()
            .any(|m| m.name == "gdr_write_pct_of_link" && (m.value - 45.0).abs() < 1e-9));
    }

    #[test]
    fn both_slow_blames_link() {
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: done(300.0, 3.0),
            host_memory: done(310.0, 2.0),
        };
        let r = judge(&run, Some(400.0), &PORT_RATE_PCT, &Limit::default(), false);
        assert_eq!(r.status, Status::Warn);
        assert!(r.summary.contains("port or link"), "{}", r.summary);
    }

    #[test]
    fn healthy_pair_passes_and_latency_is_judged() {
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: done(390.0, 4.0),
            host_memory: done(392.0, 2.0),
        };
        let r = judge(
            &run,
            Some(400.0),
            &PORT_RATE_PCT,
            &Limit::new(None, Some(3.0)),
            true,
        );
        assert_eq!(r.status, Status::Fail, "latency 4 us over a 3 us ceiling");
        let r = judge(&run, Some(400.0), &PORT_RATE_PCT, &Limit::default(), true);
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert!(r.measurements.iter().all(|m| m.replayed));
    }

    #[test]
    fn refused_gpu_registration_is_named() {
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: Leg::Failed {
                stage: "register memory".into(),
                message: "ibv_reg_mr = failed to register memory region: Bad address".into(),
                refused: vec!["ibv_reg_dmabuf_mr = Operation not supported".into()],
            },
            host_memory: done(385.0, 2.0),
        };
        let r = judge(&run, Some(400.0), &PORT_RATE_PCT, &Limit::default(), false);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary.contains("GPU memory failed at register memory"),
            "{}",
            r.summary
        );
        assert!(r
            .evidence
            .iter()
            .any(|e| e.contains("ibv_reg_dmabuf_mr = Operation not supported")));
        assert!(r.remediation.as_deref().unwrap().contains("nvidia_peermem"));
    }

    /// GPU memory that did not hold what was sent, beside a host leg that did: the GPUDirect path, with its fix.
    /// Before, a GPU leg at full bandwidth counted as fine, so this FAIL named no culprit and gave no fix.
    #[test]
    fn corrupted_gpu_data_beside_a_clean_host_leg_blames_the_gdr_path() {
        let mut gpu_memory = done(390.0, 2.0);
        if let Leg::Done { verified, .. } = &mut gpu_memory {
            *verified = false;
        }
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory,
            host_memory: done(392.0, 2.0),
        };
        let r = judge(&run, Some(400.0), &PORT_RATE_PCT, &Limit::default(), false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("DATA MISMATCH"), "{}", r.summary);
        assert!(
            r.summary.contains("GPUDirect RDMA path is the culprit"),
            "{}",
            r.summary
        );
        assert!(r.remediation.as_deref().unwrap().contains("nvidia_peermem"));
    }

    #[test]
    fn pair_run_round_trips_through_json() {
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: done(390.0, 4.0),
            host_memory: leg_failed("x", "y"),
        };
        let back: PairRun = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();
        assert_eq!(back, run);
    }

    #[test]
    fn unknown_port_rate_is_an_error_not_a_pass() {
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: done(12.0, 2.0),
            host_memory: done(12.0, 2.0),
        };
        let r = judge(&run, None, &PORT_RATE_PCT, &Limit::default(), true);
        assert_eq!(r.status, Status::Error, "{}", r.summary);
        assert!(
            r.summary.contains("port rate is unreadable"),
            "{}",
            r.summary
        );
        // Without a rate nothing shows either leg slow: before, both counted as slow and the summary said
        // "host memory is slow too: the port or link is the culprit", and a refused GPU registration beside a
        // working host leg blamed the link instead of the GPUDirect path.
        assert!(!r.summary.contains("culprit"), "{}", r.summary);
        assert!(r.remediation.as_deref().unwrap().contains("rdma.link"));
        let refused = PairRun {
            gpu_memory: leg_failed("register memory", "ibv_reg_mr = Bad address"),
            ..run
        };
        let r = judge(&refused, None, &PORT_RATE_PCT, &Limit::default(), true);
        assert!(
            r.summary.contains("GPUDirect RDMA path is the culprit"),
            "{}",
            r.summary
        );
    }
}
