//! `gdr.loopback`: for each GPU and its nearest RDMA port, RDMA WRITE between two queue pairs of that port,
//! once through GPU memory (DMA-BUF registration, else `ibv_reg_mr` on the device pointer = peermem) and once
//! through host memory. Host fast and GPU slow or refused: the GDR path is the culprit; both slow: the link.

use std::time::{Duration, Instant};

use crate::dynlib::verbs::{self, Discovery};
use crate::measure::gdr::{self, PairRun};
use crate::measure::rdma_write::{Leg, Plan, PortTarget};
use crate::probe::{CheckResult, Context, Explain, Kind, Measurement, Need, Probe, Status};
use crate::profile::PcieDistance;
use crate::sysfs::infiniband::{self, PortAttrs, CLASS_INFINIBAND};
use crate::sysfs::nvidia;
use crate::threshold::{worst, Limit};
use crate::topology::PciTree;

pub struct GdrLoopback;

const ID: &str = "gdr.loopback";
const DEVICES_KEY: &str = "verbs.device_list";
const LOOPBACK_KEY: &str = "verbs.gdr_loopback";
const VERBS_ABI: &str = "/sys/class/infiniband_verbs/abi_version";
/// perftest practice for GDR health checks (Azure `check_ib_bw_gdr`): 8 MiB messages.
const MESSAGE_BYTES: usize = 8 << 20;
const BW_MESSAGES: u32 = 256;
const QUEUE_DEPTH: u32 = 16;
const LAT_ITERATIONS: u32 = 1000;
/// NVIDIA ngc_multinode_perf passes a port at 90% of its link rate.
const DEFAULT_PCT: Limit = Limit::new(Some(90.0), Some(75.0));

const FIX_GDR: &str = "load nvidia_peermem (`modprobe nvidia-peermem`) or use DMA-BUF (open kernel module, kernel >= 5.12, \
rdma-core >= 34); check ACS/IOMMU on the GPU-NIC path";

impl Probe for GdrLoopback {
    fn id(&self) -> &'static str {
        ID
    }
    fn title(&self) -> &'static str {
        "GPUDirect RDMA loopback per GPU and nearest port: RDMA WRITE Gb/s and latency, GPU vs host memory"
    }
    fn needs(&self) -> &'static [Need] {
        &[Need::Gpu, Need::RdmaDevice]
    }
    fn kind(&self) -> Kind {
        Kind::Active
    }
    fn default_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn explain(&self) -> Explain {
        Explain {
            reads: "ibv_get_device_list through sideway/rdma-mummy-sys (libibverbs dlopened at run time), \
                    /sys/class/infiniband/<dev>/ports/<n>/{state,link_layer,rate,lid,gids,gid_attrs/types}, \
                    the PCIe tree under /sys/devices (nvidia-smi topo distance, to pair each GPU with its nearest port), \
                    libcuda (cuMemAlloc, cuMemGetHandleForAddressRange), ibv_reg_dmabuf_mr / ibv_reg_mr, two RC QPs \
                    on one port, RDMA WRITE 8 MiB x 256 and 8 B x 1000",
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
        }
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let expect_gdr = cx.profile.expect.gdr == Some(true);
        let absent = if expect_gdr {
            Status::Fail
        } else {
            Status::Skip
        };
        let read = || -> Result<_, crate::host::ReadError> {
            Ok((
                infiniband::read_device_names(cx.host)?,
                crate::host::optional(cx.host.read(VERBS_ABI))?,
            ))
        };
        let (sysfs_devices, abi) = match read() {
            Ok(r) => r,
            Err(e) => return vec![CheckResult::read_error(ID, &e)],
        };
        let mut evidence = vec![
            format!(
                "{CLASS_INFINIBAND} = {}",
                if sysfs_devices.is_empty() {
                    "<no devices>".into()
                } else {
                    sysfs_devices.join(" ")
                }
            ),
            format!("{VERBS_ABI} = {}", abi.as_deref().unwrap_or("<missing>")),
        ];
        let discovery = match cx.answers.obtain(DEVICES_KEY, verbs::discover) {
            Ok(d) => d.value,
            Err(e) => return vec![CheckResult::error(ID, e)],
        };
        let devices = match discovery {
            Discovery::Failed { errno, message } => {
                evidence.push(format!(
                    "ibv_get_device_list = NULL, errno {errno} ({message})"
                ));
                let reason = verbs::explain_discovery_errno(errno);
                let mut r = CheckResult::new(ID, absent, format!("no RDMA device usable: {reason}"))
                    .fix("install rdma-core (libibverbs1 + provider, e.g. `apt install rdma-core ibverbs-providers`)");
                r.evidence = evidence;
                return vec![r];
            }
            Discovery::Devices(d) => d,
        };
        evidence.push(format!("ibv_get_device_list = [{}]", devices.join(", ")));
        if devices.is_empty() {
            let mut r = CheckResult::new(
                ID,
                absent,
                "no RDMA device: GPUDirect RDMA loopback not possible",
            );
            if expect_gdr {
                r = r.fix("the profile requires GDR: install the HCA and its driver (mlx5_core, mlx5_ib); in containers pass /dev/infiniband/uverbs*");
            }
            r.evidence = evidence;
            return vec![r];
        }
        let gpus = match nvidia::read_driver_gpus(cx.host) {
            Ok(g) => g,
            Err(e) => return vec![CheckResult::read_error(ID, &e)],
        };
        if gpus.is_empty() {
            let mut r = CheckResult::new(
                ID,
                absent,
                "no NVIDIA GPU listed by the driver: nothing to loop back through",
            );
            r.evidence = evidence;
            return vec![r];
        }
        // Which port is nearest each GPU decides what is measured: both must be read.
        let (tree, all_ports) = match (PciTree::read(cx.host), infiniband::read_all_ports(cx.host))
        {
            (Ok(t), Ok(p)) => (t, p),
            (Err(e), _) | (_, Err(e)) => return vec![CheckResult::read_error(ID, &e)],
        };
        let ports: Vec<(PortAttrs, Option<String>)> = all_ports
            .into_iter()
            .filter(|(d, _)| devices.contains(&d.name))
            .flat_map(|(d, ports)| {
                let bdf = infiniband::read_device_bdf(cx.host, &d.name);
                ports
                    .into_iter()
                    .filter(PortAttrs::is_active)
                    .map(move |p| (p, bdf.clone()))
            })
            .collect();
        if ports.is_empty() {
            let mut r = CheckResult::new(ID, absent.max(Status::Warn), "RDMA devices present but no port is ACTIVE")
                .fix("bring a port up (cable, subnet manager for IB: `systemctl start opensm` or the fabric's SM)");
            r.evidence = evidence;
            return vec![r];
        }
        let targets: Vec<(String, PortTarget, PortAttrs, PcieDistance)> = gpus
            .iter()
            .filter_map(|g| {
                let distances: Vec<PcieDistance> = ports
                    .iter()
                    .map(|(_, nic)| distance(Some(&tree), &g.bdf, nic.as_deref()))
                    .collect();
                let i = nearest(&distances)?;
                let info = ports[i].0.clone();
                let roce_gid = if info.is_ethernet() {
                    roce_v2_gid(cx, &info)
                } else {
                    None
                };
                let t = PortTarget {
                    device: info.device.clone(),
                    port: info.port as u8,
                    roce_gid,
                };
                Some((g.bdf.clone(), t, info, distances[i]))
            })
            .collect();
        let jobs: Vec<(String, PortTarget)> = targets
            .iter()
            .map(|(g, t, _, _)| (g.clone(), t.clone()))
            .collect();
        let deadline = cx.deadline;
        let obtained = cx
            .answers
            .obtain(LOOPBACK_KEY, || gdr::run_pairs(&jobs, plan(deadline)));
        let (runs, replayed) = match obtained {
            Ok(o) => (o.value, o.replayed),
            Err(e) => return vec![CheckResult::error(ID, e)],
        };
        let pct = cx
            .profile
            .thresholds
            .gdr_bandwidth_pct_of_link
            .unwrap_or_default()
            .or(DEFAULT_PCT);
        let lat = cx.profile.thresholds.gdr_latency_us.unwrap_or_default();
        let results = targets
            .iter()
            .zip(runs.iter())
            .map(|((gpu, target, info, distance), run)| {
                let mut r = judge(
                    run,
                    info.parsed_rate().map(|r| r.gbps),
                    &pct,
                    &lat,
                    replayed,
                );
                r.subject = Some(format!("GPU {gpu} <-> {}/{}", target.device, target.port));
                let mut ev = evidence.clone();
                ev.extend(
                    info.evidence()
                        .into_iter()
                        .map(|(k, v)| format!("{k} = {v}")),
                );
                ev.push(format!(
                    "GPU {gpu} to {}: PCIe distance {distance:?}",
                    target.device
                ));
                if let Some((i, _)) = target.roce_gid {
                    ev.push(format!("RoCE v2 GID index = {i}"));
                }
                ev.append(&mut r.evidence);
                r.evidence = ev;
                r
            })
            .collect();
        tree.completed(ID, results)
    }
}

/// `nvidia-smi topo` distance between the GPU and a NIC; SYS when either is not in the PCI tree.
fn distance(tree: Option<&PciTree>, gpu: &str, nic: Option<&str>) -> PcieDistance {
    match (tree, nic) {
        (Some(t), Some(nic)) => match (t.find(gpu), t.find(nic)) {
            (Some(a), Some(b)) => t.distance(a, b),
            _ => PcieDistance::SYS,
        },
        _ => PcieDistance::SYS,
    }
}

/// Index of the nearest port (PIX < PXB < PHB < NODE < SYS); the first of equals.
pub fn nearest(distances: &[PcieDistance]) -> Option<usize> {
    distances
        .iter()
        .enumerate()
        .min_by_key(|(i, d)| (**d, *i))
        .map(|(i, _)| i)
}

/// The port's RoCE v2 GID (index and bytes), an IPv4-mapped one first: what NCCL and perftest pick.
fn roce_v2_gid(cx: &Context<'_>, port: &PortAttrs) -> Option<(u32, [u8; 16])> {
    let (dev, p) = (&port.device, port.port);
    let mut found: Vec<(u32, String)> = infiniband::read_gid_indices(cx.host, dev, p)
        .into_iter()
        .filter(|&i| {
            infiniband::read_gid_type(cx.host, dev, p, i)
                .ok()
                .flatten()
                .is_some_and(|t| t == "RoCE v2")
        })
        .filter_map(|i| Some((i, infiniband::read_gid(cx.host, dev, p, i).ok()??)))
        .collect();
    found.sort_by_key(|(i, gid)| (infiniband::gid_ipv4(gid).is_none(), *i));
    found
        .into_iter()
        .find_map(|(i, gid)| infiniband::parse_gid_bytes(&gid).map(|raw| (i, raw)))
}

/// perftest-like sizes, cut off at `deadline` (the whole run's; each leg gets its share).
fn plan(deadline: Instant) -> Plan {
    Plan {
        message_bytes: MESSAGE_BYTES,
        bw_messages: BW_MESSAGES,
        queue_depth: QUEUE_DEPTH,
        lat_iterations: LAT_ITERATIONS,
        deadline,
    }
}

/// One pair's verdict.
pub fn judge(
    run: &PairRun,
    rate_gbps: Option<f64>,
    pct: &Limit,
    lat: &Limit,
    replayed: bool,
) -> CheckResult {
    let mut ev = Vec::new();
    let mut measurements = Vec::new();
    let mut statuses = Vec::new();
    let mut parts = Vec::new();
    let pct_of = |gbps: f64| rate_gbps.filter(|r| *r > 0.0).map(|r| 100.0 * gbps / r);
    for (label, leg) in [
        ("GPU memory", &run.gpu_memory),
        ("host memory", &run.host_memory),
    ] {
        let key = if label == "GPU memory" { "gdr" } else { "host" };
        match leg {
            Leg::Done { outcome, verified } => {
                measurements.push(
                    Measurement::new(
                        &format!("{key}_write_gbits_per_sec"),
                        outcome.bandwidth_gbps,
                        "Gb/s",
                    )
                    .replayed(replayed),
                );
                let share = pct_of(outcome.bandwidth_gbps);
                if key == "gdr" {
                    // The limit is a share of the port's rate: without the rate there is nothing to pass.
                    let status = pct.judge_min_of(share);
                    if share.is_none() && status == Status::Error {
                        parts.push(format!(
                            "the port rate was not read, so {:.1} Gb/s cannot be judged against the link",
                            outcome.bandwidth_gbps
                        ));
                    }
                    statuses.push(status);
                }
                if let Some(p) = share {
                    let mut m = Measurement::new(&format!("{key}_write_pct_of_link"), p, "%")
                        .replayed(replayed);
                    if key == "gdr" {
                        m = m.judged_by(pct);
                    }
                    measurements.push(m);
                }
                let mut l =
                    Measurement::new(&format!("{key}_write_latency_us"), outcome.latency_us, "us")
                        .replayed(replayed);
                if key == "gdr" {
                    l = l.judged_by(lat);
                    statuses.push(lat.judge_max(outcome.latency_us));
                }
                measurements.push(l);
                if !verified {
                    statuses.push(Status::Fail);
                }
                if outcome.cut_short {
                    statuses.push(Status::Warn);
                }
                ev.push(format!("{label}: {} = ok", outcome.registration.call));
                ev.extend(
                    outcome
                        .registration
                        .refused
                        .iter()
                        .map(|r| format!("{label}: {r}")),
                );
                parts.push(format!(
                    "{label} {:.1} Gb/s{}, {:.2} us{}",
                    outcome.bandwidth_gbps,
                    pct_of(outcome.bandwidth_gbps)
                        .map(|p| format!(" ({p:.0}% of link)"))
                        .unwrap_or_default(),
                    outcome.latency_us,
                    if *verified { "" } else { ", DATA MISMATCH" }
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
    let gpu_gbps = match &run.gpu_memory {
        Leg::Done { outcome, .. } => Some(outcome.bandwidth_gbps),
        _ => None,
    };
    let host_gbps = match &run.host_memory {
        Leg::Done { outcome, .. } => Some(outcome.bandwidth_gbps),
        _ => None,
    };
    let host_ok = host_gbps
        .and_then(pct_of)
        .is_some_and(|p| pct.judge_min(p) == Status::Pass);
    let gpu_ok = gpu_gbps
        .and_then(pct_of)
        .is_some_and(|p| pct.judge_min(p) == Status::Pass);
    let (culprit, fix) = match (gpu_ok, host_ok, host_gbps.is_some()) {
        (true, _, _) => (None, None),
        (false, true, _) => (Some("host memory is fast and GPU memory is not: the GPUDirect RDMA path is the culprit"), Some(FIX_GDR)),
        (false, false, true) => (Some("host memory is slow too: the port or link is the culprit"), Some("check rdma.link (rate, state), the cable and the firmware")),
        (false, false, false) => (None, Some("the host-memory loopback failed too: check the port, rdma-core and memlock (rdma.memlock)")),
    };
    let status = worst(statuses);
    let summary = format!(
        "{}{}",
        parts.join("; "),
        culprit.map(|c| format!(" — {c}")).unwrap_or_default()
    );
    let mut r = CheckResult::new(ID, status, summary);
    r.measurements = measurements;
    r.evidence = ev;
    if status != Status::Pass {
        r.remediation = fix.map(str::to_string);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rdma_write::{leg_failed, Outcome, Registration};

    #[test]
    fn nearest_port_wins_and_first_of_equals() {
        use PcieDistance::*;
        assert_eq!(nearest(&[SYS, PXB, PIX, PIX]), Some(2));
        assert_eq!(nearest(&[NODE, NODE]), Some(0));
        assert_eq!(nearest(&[]), None);
        assert_eq!(distance(None, "0000:17:00.0", Some("0000:18:00.0")), SYS);
    }

    fn done(gbps: f64, lat: f64) -> Leg {
        Leg::Done {
            outcome: Outcome {
                registration: Registration {
                    call: "ibv_reg_dmabuf_mr".into(),
                    refused: vec![],
                },
                bandwidth_gbps: gbps,
                bytes_written: 1 << 31,
                latency_us: lat,
                lat_samples: 1000,
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
        let r = judge(&run, Some(400.0), &DEFAULT_PCT, &Limit::default(), false);
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

    /// Reproduced: with the port `rate` unparsable no share of the link was computed and 12 Gb/s passed under
    /// `hgx-h100-ib`.
    #[test]
    fn unknown_port_rate_is_an_error_not_a_pass() {
        let profile = crate::profile::load("hgx-h100-ib", &crate::probes::ids()).unwrap();
        let pct = profile
            .thresholds
            .gdr_bandwidth_pct_of_link
            .unwrap_or_default()
            .or(DEFAULT_PCT);
        let lat = profile.thresholds.gdr_latency_us.unwrap_or_default();
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: done(12.0, 2.0),
            host_memory: done(12.0, 2.0),
        };
        let r = judge(&run, None, &pct, &lat, true);
        assert_eq!(r.status, Status::Error, "{}", r.summary);
        assert!(
            r.summary.contains("port rate was not read"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn both_slow_blames_link() {
        let run = PairRun {
            gpu: "g".into(),
            gpu_memory: done(300.0, 3.0),
            host_memory: done(310.0, 2.0),
        };
        let r = judge(&run, Some(400.0), &DEFAULT_PCT, &Limit::default(), false);
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
            &DEFAULT_PCT,
            &Limit::new(None, Some(3.0)),
            true,
        );
        assert_eq!(r.status, Status::Fail, "latency 4 us over a 3 us ceiling");
        let r = judge(&run, Some(400.0), &DEFAULT_PCT, &Limit::default(), true);
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
        let r = judge(&run, Some(400.0), &DEFAULT_PCT, &Limit::default(), false);
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
}
