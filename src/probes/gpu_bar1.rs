//! `gpu.bar1`: each GPU's BAR1 aperture, against `expect.gpu_bar1_min_mib`.

use crate::dynlib::nvml::GpuFacts;
use crate::model::Limit;
use crate::probe::{
    CheckResult, Context, Explain, Findings, Kind, Measurement, Need, Probe, ProbeMeta,
};
use crate::probe::{FindingCode, Library, Remedy};
use crate::probes::shared::facts::NVML;
use crate::probes::shared::gpu::{judge_nvml, mib, shown, subject};

pub struct GpuBar1;

const ID: &str = "gpu.bar1";

const BAR1_SMALL: FindingCode = FindingCode {
    code: "GPU201",
    title: "BAR1 is smaller than the profile requires",
    explanation: "The GPU's BAR1 aperture (what peers and NICs can map for GPUDirect) is below `expect.gpu_bar1_min_mib`: enable large BARs / Resizable BAR in the BIOS (or the VM's MMIO window) and reboot.",
    step: Some(Remedy::Reboot),
};
const BAR1_UNKNOWN: FindingCode = FindingCode {
    code: "GPU202",
    title: "the BAR1 size is unknown",
    explanation: "An error: NVML did not answer the BAR1 memory info.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "BAR1 aperture per GPU (GPUDirect RDMA and GDS map GPU memory through it)",
    needs: &[Need::Gpu],
    kind: Kind::Library,
    libraries: &[Library::Nvml],
    facts: &[&NVML],
    explain: Explain {
        reads: "NVML nvmlDeviceGetBAR1MemoryInfo (total, used) per GPU",
        why: "A NIC or NVMe drive reaches GPU memory through the GPU's BAR1 window. A small BAR1 (256 MiB on \
              consumer boards, or a VM whose firmware did not map the large BAR) caps how much memory \
              GPUDirect RDMA and GDS can register at once; registrations beyond it fail or fall back to \
              staging through host memory.",
        fixes: &[(
            "BAR1 below expect.gpu_bar1_min_mib",
            "enable large/resizable BAR and above-4G decoding in the BIOS (or the hypervisor's MMIO window for a VM), \
             then reboot",
        )],
    },
    findings: &[
        &BAR1_SMALL,
        &BAR1_UNKNOWN,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GpuBar1 {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        judge_nvml(cx, ID, |facts, replayed| {
            let min_mib = cx.profile.expect.gpu_bar1_min_mib;
            facts
                .gpus
                .iter()
                .map(|g| judge(g, min_mib, replayed))
                .collect()
        })
    }
}

pub fn judge(g: &GpuFacts, min_mib: Option<u64>, replayed: bool) -> CheckResult {
    let total = match &g.bar1_total_bytes {
        Ok(t) => *t,
        Err(e) => {
            return CheckResult::error(ID, format!("BAR1 size unknown: {e}"))
                .subject(subject(g))
                .evidence("nvmlDeviceGetBAR1MemoryInfo", format!("<{e}>"))
                .code(&BAR1_UNKNOWN)
        }
    };
    let limit = Limit::new(None, min_mib.map(|m| m as f64));
    let mut f = Findings::default();
    f.coded(&BAR1_SMALL).add(
        limit.judge_min(mib(total) as f64),
        format!(
            "BAR1 {} MiB is below the required {} MiB",
            mib(total),
            min_mib.unwrap_or(0)
        ),
        "enable large/resizable BAR and above-4G decoding in the BIOS (or the hypervisor's MMIO window), then reboot",
    );
    let used = g.bar1_used_bytes.as_ref().map(|u| mib(*u));
    let summary = format!(
        "BAR1 {} MiB ({} GiB), {} MiB in use",
        mib(total),
        mib(total) / 1024,
        used.as_ref()
            .map(|u| u.to_string())
            .unwrap_or_else(|_| "?".into())
    );
    let mut r = f
        .result(ID, summary)
        .subject(subject(g))
        .evidence(
            "nvmlDeviceGetBAR1MemoryInfo.bar1Total",
            format!("{total} bytes"),
        )
        .evidence(
            "nvmlDeviceGetBAR1MemoryInfo.bar1Used",
            shown(&g.bar1_used_bytes),
        )
        .measure(
            Measurement::new("bar1_total", mib(total) as f64, "MiB")
                .judged_by(&limit)
                .replayed(replayed),
        );
    if let Ok(u) = used {
        r = r.measure(Measurement::new("bar1_used", u as f64, "MiB").replayed(replayed));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;

    fn gpu(total_mib: u64) -> GpuFacts {
        GpuFacts {
            index: 0,
            pci_bus_id: Ok("0000:00:06.0".into()),
            bar1_total_bytes: Ok(total_mib << 20),
            bar1_used_bytes: Ok(17 << 20),
            ..GpuFacts::default()
        }
    }

    #[test]
    fn bar1_256_gib_passes_64_gib_floor() {
        let r = judge(&gpu(262144), Some(65536), false);
        assert_eq!(r.status, Status::Pass);
        assert_eq!(r.summary, "BAR1 262144 MiB (256 GiB), 17 MiB in use");
        assert_eq!(r.measurements[0].fail, Some(65536.0));
    }

    #[test]
    fn bar1_256_mib_fails_64_gib_floor() {
        let r = judge(&gpu(256), Some(65536), false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("below the required 65536 MiB"));
    }

    #[test]
    fn bar1_without_floor_passes() {
        assert_eq!(judge(&gpu(256), None, false).status, Status::Pass);
    }

    #[test]
    fn bar1_unanswered_is_error() {
        let mut g = gpu(0);
        g.bar1_total_bytes = Err("nvmlDeviceGetBAR1MemoryInfo: not supported".into());
        assert_eq!(judge(&g, Some(1), false).status, Status::Error);
    }
}
