//! `gpu.copy_bandwidth`: pinned host↔device copy bandwidth per GPU with host memory on the GPU's own CPUs,
//! device↔device bandwidth per peer pair, and a data check of every direction.

use std::time::Duration;

use crate::dynlib::nvml::Answer;
use crate::host::{optional, Host, ReadError, ReadErrorKind};
use crate::measure::copy::{
    self, gbytes_per_sec, median, CopyFacts, CopyPlan, DataCheck, GpuCopy, PeerCopy,
};
use crate::model::Limit;
use crate::probe::{common, FindingCode, Library, Remedy};
use crate::probe::{
    CheckResult, Context, Explain, Findings, Kind, Measurement, Need, Probe, ProbeMeta, Status,
};
use crate::probes::shared::gpu::{expects_gpus, gpu_survey, mark_replayed};
use crate::profile::Profile;
use crate::sysfs::pci::{device_dir, read_hex, read_numa_node, VENDOR_NVIDIA};
use crate::sysfs::pci_device::{attr_path, parse_cpulist, PCI_DEVICES};

pub struct GpuCopyBandwidth;

const ID: &str = "gpu.copy_bandwidth";
/// Per host↔device transfer: large enough that launch overhead is noise (issue: at least 256 MiB).
const COPY_BYTES: usize = 512 << 20;
const PEER_BYTES: usize = 256 << 20;
const REPS: usize = 10;
const WARMUP: usize = 2;
/// Time kept back from the deadline for tearing down buffers and replying.
const TEARDOWN: Duration = Duration::from_secs(5);

const FIX_SLOW: &str = "check the link with `gpu.pcie` (generation/width under load), that host memory is on the GPU's \
NUMA node (`nvidia-smi topo -m`), and for `dmesg` AER/Xid errors; a GPU below the fleet's floor should be drained";
const FIX_CORRUPT: &str =
    "data arrived corrupted: drain the node, check `dmesg` for Xid 48/63/64/94 and AER errors, \
reseat or RMA the GPU";
const FIX_NO_CUDA: &str =
    "install the NVIDIA driver (libcuda.so.1) and load nvidia + nvidia_uvm; in a container, run \
with the NVIDIA container toolkit (`--gpus all`)";

const DATA_CORRUPTED: FindingCode = FindingCode {
    code: "GPU501",
    title: "data copied to or from the GPU arrived corrupted",
    explanation: "The copied buffer differs from what was written (the summary names the first differing byte): a failing GPU, link or host memory. Drain the node; check dmesg for Xid and AER errors.",
    step: Some(Remedy::ServiceRma),
};
const DATA_CHECK_FAILED: FindingCode = FindingCode {
    code: "GPU502",
    title: "the copy's data check could not run",
    explanation:
        "An error: reading the copied buffer back failed, so whether the data is intact is unknown.",
    step: None,
};
const H2D_D2H_SLOW: FindingCode = FindingCode {
    code: "GPU503",
    title: "host↔GPU copy bandwidth below the limit",
    explanation: "Host-to-device or device-to-host copies run below `thresholds` (a share of the PCIe link): a downtrained link (gpu.pcie, pcie.link), a far NUMA node, or a slow riser.",
    step: Some(Remedy::ServiceRma),
};
const NOT_MEASURED: FindingCode = FindingCode {
    code: "GPU504",
    title: "a copy direction could not be measured",
    explanation: "An error: CUDA failed the copy, so its bandwidth is unknown.",
    step: None,
};
const NO_PEER_ACCESS: FindingCode = FindingCode {
    code: "GPU505",
    title: "no peer access between a GPU pair: copies are staged through host memory",
    explanation: "cuDeviceCanAccessPeer = 0: see gpu.p2p, pcie.acs and the fabric manager. A failure where the profile expects NVLink.",
    step: Some(Remedy::Reboot),
};
const PEER_UNKNOWN: FindingCode = FindingCode {
    code: "GPU506",
    title: "peer access between a GPU pair is unknown",
    explanation: "An error: CUDA did not answer cuDeviceCanAccessPeer.",
    step: None,
};
const D2D_SLOW: FindingCode = FindingCode {
    code: "GPU507",
    title: "GPU-to-GPU copy bandwidth below the limit",
    explanation: "Peer copies run below the limit: NVLink links down or degraded (`nvidia-smi nvlink -s`), or the fabric manager. Reset the GPUs; check gpu.nvlink.",
    step: Some(Remedy::ResetGpu),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "Pinned host<->device and peer device<->device copy bandwidth, NUMA-local, with a data check",
    needs: &[Need::Gpu],
    kind: Kind::Active,
    libraries: &[Library::Cuda],
    facts: &[],
    timeout: Duration::from_secs(90),
    explain: Explain {
        reads: "/sys/bus/pci/devices/<gpu>/{local_cpulist,numa_node,vendor,class}; CUDA driver API (libcuda.so.1): \
                cuMemHostRegister'd host buffers first-touched by a thread pinned to the GPU's local CPUs, \
                512 MiB cuMemcpyHtoDAsync/DtoHAsync copies timed with events (2 warm-ups, median of 10), \
                cuMemcpyPeerAsync between peer-capable GPUs (256 MiB), and a checksum compare of every direction",
        why: "A GPU that trained at a lower PCIe generation or width, sits behind a congested switch, or gets host \
              memory from the far socket moves data at a fraction of the rate; loading data, checkpointing and \
              GPUDirect paths all slow down while every status command says the GPU is fine. A link can also be \
              fast and wrong, so the copied data is compared.",
        fixes: &[
            ("H2D/D2H below thresholds.h2d_gbytes_per_sec / d2h_gbytes_per_sec", FIX_SLOW),
            ("D2D below thresholds.d2d_gbytes_per_sec or no peer access", "check `gpu.p2p`, `nvidia-smi nvlink -s` and the fabric manager"),
            ("data mismatch", FIX_CORRUPT),
            ("CUDA driver unavailable", FIX_NO_CUDA),
        ],
    },
    findings: &[
        &DATA_CORRUPTED,
        &DATA_CHECK_FAILED,
        &H2D_D2H_SLOW,
        &NOT_MEASURED,
        &NO_PEER_ACCESS,
        &PEER_UNKNOWN,
        &D2D_SLOW,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GpuCopyBandwidth {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let locality = read_gpu_locality(cx.host)?;
    let plan = CopyPlan {
        bytes: COPY_BYTES,
        peer_bytes: PEER_BYTES,
        reps: REPS,
        warmup: WARMUP,
        deadline: cx.deadline.checked_sub(TEARDOWN).unwrap_or(cx.deadline),
        cpus_for: locality
            .iter()
            .filter_map(|l| l.cpus.clone().map(|c| (l.bdf.clone(), c)))
            .collect(),
    };
    let obtained = match cx
        .answers
        .obtain(copy::ANSWERS_KEY, || copy::measure(&plan))
    {
        Ok(o) => o,
        Err(e) => {
            return Ok(vec![
                CheckResult::error(ID, e).code(&common::LIBRARY_UNANSWERED)
            ])
        }
    };
    let facts = &obtained.value;
    let presence = match &facts.cuda_error {
        Some(e) => Some(gpu_survey(cx).library_failed(ID, e, expects_gpus(cx))),
        None if facts.gpus.is_empty() => Some(gpu_survey(cx).library_lists_none(
            ID,
            Library::Cuda,
            "cuDeviceGetCount",
            expects_gpus(cx),
        )),
        None => None,
    };
    if let Some(r) = presence {
        return Ok(vec![mark_replayed(r, obtained.replayed)]);
    }
    Ok(judge(facts, cx.profile, &locality, obtained.replayed)
        .into_iter()
        .map(|r| mark_replayed(r, obtained.replayed))
        .collect())
}

/// Where an NVIDIA GPU's host memory should come from, per sysfs.
#[derive(Debug, Clone, PartialEq)]
pub struct Locality {
    pub bdf: String,
    pub cpulist: String,
    pub cpus: Option<Vec<usize>>,
    pub numa_node: Option<u32>,
}

/// NVIDIA display/3D controllers (vendor 0x10de, class 0x03xxxx) and their local CPUs. A file that exists but
/// cannot be read or parsed is an error: a GPU missed here is measured with unplaced host memory, and nothing
/// would say so.
pub fn read_gpu_locality(host: &Host) -> Result<Vec<Locality>, ReadError> {
    let Some(names) = optional(host.read_dir(PCI_DEVICES))? else {
        return Ok(vec![]);
    };
    let hex = |bdf: &str, attr: &str| read_hex(host, &attr_path(bdf, attr));
    let mut gpus = Vec::new();
    for bdf in names {
        if hex(&bdf, "vendor")? != u32::from(VENDOR_NVIDIA) || hex(&bdf, "class")? >> 16 != 0x03 {
            continue;
        }
        let cpulist_path = attr_path(&bdf, "local_cpulist");
        let cpulist = optional(host.read(&cpulist_path))?.unwrap_or_default();
        let cpus = parse_cpulist(&cpulist);
        if cpus.is_none() && !cpulist.is_empty() {
            return Err(ReadError {
                path: cpulist_path,
                kind: ReadErrorKind::Other(format!("not a CPU list: {cpulist:?}")),
            });
        }
        let numa_node = read_numa_node(host, &device_dir(&bdf))?;
        gpus.push(Locality {
            cpus,
            numa_node,
            cpulist,
            bdf,
        });
    }
    Ok(gpus)
}

pub fn judge(
    facts: &CopyFacts,
    profile: &Profile,
    locality: &[Locality],
    replayed: bool,
) -> Vec<CheckResult> {
    let t = &profile.thresholds;
    let h2d = t.h2d_gbytes_per_sec.unwrap_or_default();
    let d2h = t.d2h_gbytes_per_sec.unwrap_or_default();
    let d2d = t.d2d_gbytes_per_sec.unwrap_or_default();
    let mut results: Vec<CheckResult> = facts
        .gpus
        .iter()
        .map(|g| judge_gpu(g, facts.bytes, &h2d, &d2h, locality, replayed))
        .collect();
    let expect_nvlink = profile.expect.nvlink.unwrap_or(false);
    for p in &facts.pairs {
        results.push(judge_pair(facts, p, &d2d, expect_nvlink, replayed));
    }
    results
}

/// Median GB/s of a series of timings, with the evidence line.
fn rate(bytes: u64, times: &Answer<Vec<f64>>) -> Result<(f64, String), String> {
    let times = times.as_ref().map_err(Clone::clone)?;
    let ms = median(times).ok_or_else(|| "no timed transfer completed".to_string())?;
    let shown: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
    Ok((
        gbytes_per_sec(bytes, ms),
        format!("{} ms (median {ms:.3} ms)", shown.join(" ")),
    ))
}

fn check_problem(f: &mut Findings, what: &str, check: &Answer<DataCheck>) -> String {
    match check {
        Ok(c) if c.ok() => format!("{} bytes, checksum {} matches", c.bytes, c.expected),
        Ok(c) => {
            f.coded(&DATA_CORRUPTED).fail(
                format!(
                    "{what} data corrupted: first difference at byte {}",
                    c.first_mismatch.unwrap_or(0)
                ),
                FIX_CORRUPT,
            );
            format!(
                "{} bytes, expected checksum {}, received {}, first difference at byte {}",
                c.bytes,
                c.expected,
                c.received,
                c.first_mismatch.unwrap_or(0)
            )
        }
        Err(e) => {
            f.coded(&DATA_CHECK_FAILED).add(
                Status::Error,
                format!("{what} data check failed: {e}"),
                "",
            );
            format!("<{e}>")
        }
    }
}

fn judge_gpu(
    g: &GpuCopy,
    bytes: u64,
    h2d_limit: &Limit,
    d2h_limit: &Limit,
    locality: &[Locality],
    replayed: bool,
) -> CheckResult {
    let mut f = Findings::default();
    let subject = g
        .pci_bus_id
        .clone()
        .unwrap_or_else(|_| format!("CUDA device {}", g.ordinal));
    let mut evidence = Vec::new();
    let mut measurements = Vec::new();
    let mut parts = Vec::new();
    for (dir, times, limit, call) in [
        ("H2D", &g.h2d_ms, h2d_limit, "cuMemcpyHtoDAsync_v2"),
        ("D2H", &g.d2h_ms, d2h_limit, "cuMemcpyDtoHAsync_v2"),
    ] {
        match rate(bytes, times) {
            Ok((gbs, line)) => {
                f.coded(&H2D_D2H_SLOW).add(
                    limit.judge_min(gbs),
                    format!("{dir} {gbs:.1} GB/s below {}", floor_text(limit, gbs)),
                    FIX_SLOW,
                );
                parts.push(format!("{dir} {gbs:.1} GB/s"));
                evidence.push(format!(
                    "{call} x{} of {bytes} bytes = {line}",
                    times.as_ref().map_or(0, Vec::len)
                ));
                measurements.push(
                    Measurement::new(
                        &format!("{}_bandwidth", dir.to_lowercase()),
                        round2(gbs),
                        "GB/s",
                    )
                    .judged_by(limit)
                    .replayed(replayed),
                );
            }
            Err(e) => {
                f.coded(&NOT_MEASURED)
                    .add(Status::Error, format!("{dir} not measured: {e}"), "");
                evidence.push(format!("{call} = <{e}>"));
            }
        }
    }
    evidence.push(format!(
        "D2H of a device memset pattern = {}",
        check_problem(&mut f, "D2H", &g.d2h_check)
    ));
    evidence.push(format!(
        "H2D then D2H of a host pattern = {}",
        check_problem(&mut f, "round-trip", &g.roundtrip_check)
    ));
    let place = locality
        .iter()
        .find(|l| Ok(&l.bdf) == g.pci_bus_id.as_ref());
    if let Some(l) = place {
        evidence.push(format!(
            "{} = {}",
            attr_path(&l.bdf, "local_cpulist"),
            l.cpulist
        ));
        evidence.push(format!(
            "{} = {}",
            attr_path(&l.bdf, "numa_node"),
            l.numa_node.map_or("-1".to_string(), |n| n.to_string())
        ));
    }
    let placement = if g.pinned_cpus.is_empty() {
        let why = g.pinning_note.clone().unwrap_or_default();
        evidence.push(format!("host buffer placement = not pinned ({why})"));
        "host memory not placed (CPUs unknown)".to_string()
    } else {
        let cpus = place.map_or_else(
            || format!("{} CPUs", g.pinned_cpus.len()),
            |l| l.cpulist.clone(),
        );
        format!("host memory first-touched on CPUs {cpus}")
    };
    let all_checks_ok =
        matches!((&g.d2h_check, &g.roundtrip_check), (Ok(a), Ok(b)) if a.ok() && b.ok());
    let summary = format!(
        "{} ({} MiB x median of {}), {}{}",
        if parts.is_empty() {
            "not measured".to_string()
        } else {
            parts.join(", ")
        },
        bytes >> 20,
        g.h2d_ms.as_ref().map_or(0, Vec::len),
        placement,
        if all_checks_ok {
            ", data verified both ways"
        } else {
            ""
        }
    );
    let mut r = f.result(ID, summary).subject(subject);
    r.evidence.extend(evidence);
    r.measurements = measurements;
    r
}

fn judge_pair(
    facts: &CopyFacts,
    p: &PeerCopy,
    limit: &Limit,
    expect_nvlink: bool,
    replayed: bool,
) -> CheckResult {
    let bus = |ordinal: usize| {
        facts
            .gpus
            .iter()
            .find(|g| g.ordinal == ordinal)
            .and_then(|g| g.pci_bus_id.clone().ok())
            .unwrap_or_else(|| format!("CUDA device {ordinal}"))
    };
    let subject = format!("{} -> {}", bus(p.src), bus(p.dst));
    let mut f = Findings::default();
    match &p.can_access_peer {
        Ok(true) => {}
        Ok(false) => {
            let status = if expect_nvlink || limit.fail.is_some() {
                Status::Fail
            } else {
                Status::Warn
            };
            f.coded(&NO_PEER_ACCESS).add(
                status,
                "no peer access (cuDeviceCanAccessPeer = 0): copies are staged through host memory",
                "check `gpu.p2p`, `nvidia-smi topo -p2p r` and the fabric manager",
            );
            return f
                .result(ID, "device-to-device not measured")
                .subject(subject)
                .evidence("cuDeviceCanAccessPeer", 0);
        }
        Err(e) => {
            return CheckResult::error(ID, format!("peer access unknown: {e}"))
                .subject(subject)
                .evidence("cuDeviceCanAccessPeer", format!("<{e}>"))
                .code(&PEER_UNKNOWN);
        }
    }
    let mut r_evidence = vec!["cuDeviceCanAccessPeer = 1".to_string()];
    let mut measurements = Vec::new();
    let summary = match rate(facts.peer_bytes, &p.ms) {
        Ok((gbs, line)) => {
            f.coded(&D2D_SLOW).add(
                limit.judge_min(gbs),
                format!("D2D {gbs:.1} GB/s below {}", floor_text(limit, gbs)),
                "check `nvidia-smi nvlink -s` (links down or degraded) and the fabric manager",
            );
            r_evidence.push(format!(
                "cuMemcpyPeerAsync of {} bytes = {line}",
                facts.peer_bytes
            ));
            measurements.push(
                Measurement::new("d2d_bandwidth", round2(gbs), "GB/s")
                    .judged_by(limit)
                    .replayed(replayed),
            );
            format!("D2D {gbs:.1} GB/s ({} MiB)", facts.peer_bytes >> 20)
        }
        Err(e) => {
            f.coded(&NOT_MEASURED)
                .add(Status::Error, format!("D2D not measured: {e}"), "");
            r_evidence.push(format!("cuMemcpyPeerAsync = <{e}>"));
            "D2D not measured".to_string()
        }
    };
    r_evidence.push(format!(
        "peer copy then D2H of a host pattern = {}",
        check_problem(&mut f, "D2D", &p.check)
    ));
    let mut r = f.result(ID, summary).subject(subject);
    r.evidence.extend(r_evidence);
    r.measurements = measurements;
    r
}

/// The floor `gbs` fell below: the fail limit when it failed, else the warn limit.
fn floor_text(limit: &Limit, gbs: f64) -> String {
    match (limit.fail, limit.warn) {
        (Some(fail), _) if gbs < fail => format!("{fail} GB/s"),
        (_, Some(warn)) => format!("{warn} GB/s"),
        _ => "the floor".into(),
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::copy::DataCheck;

    fn check(ok: bool) -> Answer<DataCheck> {
        Ok(DataCheck {
            bytes: 1 << 29,
            expected: "00000000000000aa".into(),
            received: if ok {
                "00000000000000aa"
            } else {
                "00000000000000bb"
            }
            .into(),
            first_mismatch: (!ok).then_some(4096),
        })
    }

    /// 512 MiB in `ms` milliseconds per transfer.
    fn gpu(ordinal: usize, ms: f64) -> GpuCopy {
        GpuCopy {
            ordinal,
            pci_bus_id: Ok(format!("0000:{:02x}:00.0", 0x18 + ordinal)),
            name: Ok("NVIDIA H100 80GB HBM3".into()),
            pinned_cpus: vec![0, 1, 2, 3],
            pinning_note: None,
            h2d_ms: Ok(vec![ms, ms * 1.01, ms * 0.99]),
            d2h_ms: Ok(vec![ms; 3]),
            d2h_check: check(true),
            roundtrip_check: check(true),
        }
    }

    fn facts(gpus: Vec<GpuCopy>, pairs: Vec<PeerCopy>) -> CopyFacts {
        CopyFacts {
            cuda_error: None,
            cuda_driver_version: Ok(13000),
            bytes: 512 << 20,
            peer_bytes: 256 << 20,
            gpus,
            pairs,
        }
    }

    fn h100_profile() -> Profile {
        crate::profile::load("hgx-h100-ib", &crate::probes::ids()).unwrap()
    }

    #[test]
    fn h2d_at_55_gbs_passes_gen5_floor() {
        // 512 MiB at 55.3 GB/s = 9.708 ms.
        let out = judge(
            &facts(vec![gpu(0, 9.708)], vec![]),
            &h100_profile(),
            &[],
            false,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, Status::Pass, "{}", out[0].summary);
        assert_eq!(out[0].measurements[0].name, "h2d_bandwidth");
        assert!((out[0].measurements[0].value - 55.3).abs() < 0.05);
        assert!(out[0].summary.contains("data verified both ways"));
    }

    #[test]
    fn h2d_at_gen4_rate_fails_gen5_floor() {
        // 25 GB/s: a Gen5 GPU trained at Gen4.
        let ms = (512u64 << 20) as f64 / 25e9 * 1000.0;
        let out = judge(
            &facts(vec![gpu(0, ms)], vec![]),
            &h100_profile(),
            &[],
            false,
        );
        assert_eq!(out[0].status, Status::Fail);
        assert!(
            out[0].summary.contains("H2D 25.0 GB/s below 48 GB/s"),
            "{}",
            out[0].summary
        );
    }

    #[test]
    fn corrupted_roundtrip_fails_even_when_fast() {
        let mut g = gpu(0, 9.7);
        g.roundtrip_check = check(false);
        let out = judge(&facts(vec![g], vec![]), &h100_profile(), &[], false);
        assert_eq!(out[0].status, Status::Fail);
        assert!(out[0]
            .summary
            .contains("round-trip data corrupted: first difference at byte 4096"));
    }

    #[test]
    fn peer_pair_below_d2d_floor_fails_and_missing_peer_access_fails_nvlink_profile() {
        // 256 MiB at 300 GB/s.
        let slow_ms = (256u64 << 20) as f64 / 300e9 * 1000.0;
        let pairs = vec![
            PeerCopy {
                src: 0,
                dst: 1,
                can_access_peer: Ok(true),
                ms: Ok(vec![slow_ms; 5]),
                check: check(true),
            },
            PeerCopy {
                src: 1,
                dst: 0,
                can_access_peer: Ok(false),
                ms: Err("not measured".into()),
                check: Err("not measured".into()),
            },
        ];
        let out = judge(
            &facts(vec![gpu(0, 9.7), gpu(1, 9.7)], pairs),
            &h100_profile(),
            &[],
            true,
        );
        assert_eq!(out.len(), 4);
        assert_eq!(
            out[2].subject.as_deref(),
            Some("0000:18:00.0 -> 0000:19:00.0")
        );
        assert_eq!(out[2].status, Status::Fail, "{}", out[2].summary);
        assert!(out[2].measurements[0].replayed);
        assert_eq!(out[3].status, Status::Fail);
        assert!(out[3].summary.contains("no peer access"));
    }

    #[test]
    fn locality_reads_only_nvidia_display_functions() {
        let dir = tempfile::tempdir().unwrap();
        let dev = |bdf: &str, vendor: &str, class: &str| {
            let d = dir.path().join("sys/bus/pci/devices").join(bdf);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
            std::fs::write(d.join("local_cpulist"), "0-3\n").unwrap();
            std::fs::write(d.join("numa_node"), "-1\n").unwrap();
        };
        dev("0000:00:06.0", "0x10de", "0x030200");
        dev("0000:00:03.0", "0x1af4", "0x020000");
        let host = Host::at(dir.path()).unwrap();
        let l = read_gpu_locality(&host).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].bdf, "0000:00:06.0");
        assert_eq!(l[0].cpus, Some(vec![0, 1, 2, 3]));
        assert_eq!(l[0].numa_node, None);
    }
}
