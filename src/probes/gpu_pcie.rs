//! `gpu.pcie`: each GPU's PCIe link, current against maximum, read idle and again while a copy loop keeps every
//! GPU's link busy (GPUs lower their link speed when idle, so only a link still below its maximum under load
//! fails); NVML cross-checked with sysfs; the PCIe replay counter against its threshold.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dynlib::cuda;
use crate::dynlib::nvml::{self, Answer, GpuFacts, LinkSample, NvmlFacts};
use crate::host::Host;
use crate::measure::copy::while_busy;
use crate::probe::{common, FindingCode, Library, Remedy};
use crate::probe::{
    CheckResult, Context, Explain, Findings, Kind, Measurement, Need, Probe, ProbeMeta,
};
use crate::probes::shared::facts::NVML;
use crate::probes::shared::gpu::{judge_nvml, shown, subject};
use crate::profile::Profile;
use crate::sysfs::pci_device::LinkAttrs;

pub struct GpuPcie;

const ID: &str = "gpu.pcie";
/// Time the copy loops run before the links are sampled, so they have trained up from their idle state.
const SETTLE: Duration = Duration::from_millis(500);

const FIX_DEGRADED: &str =
    "reseat the GPU or its riser/cable, check the slot's BIOS setting (PCIe speed `Auto`/Gen5) \
and `dmesg` for AER errors; a link that trains down after a reseat needs the board or GPU replaced";

/// Link readings taken under load: what NVML and sysfs said while every GPU was copying.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnderLoad {
    /// Why no load could be generated (no CUDA driver) — the idle readings are then all there is.
    pub load_error: Option<String>,
    /// GPUs (CUDA ordinal) whose copy loop failed.
    pub loop_failures: Vec<(usize, String)>,
    pub nvml: Answer<Vec<LinkSample>>,
    /// `(bdf, current_link_speed, current_link_width)` read from sysfs at the same time.
    pub sysfs: Vec<(String, String, String)>,
}

const GEN_BELOW_PROFILE: FindingCode = FindingCode {
    code: "GPU401",
    title: "the GPU's maximum PCIe generation is below the profile's",
    explanation: "The slot or platform caps the link (a Gen4 slot for a Gen5 GPU, or the BIOS PCIe speed setting): use the right slot or fix the BIOS setting and reboot.",
    step: Some(Remedy::Reboot),
};
const WIDTH_BELOW_PROFILE: FindingCode = FindingCode {
    code: "GPU402",
    title: "the GPU's maximum PCIe width is below the profile's",
    explanation: "The slot is narrower than the GPU: move it to a x16 slot.",
    step: Some(Remedy::ServiceRma),
};
const DEGRADED_UNDER_LOAD: FindingCode = FindingCode {
    code: "GPU403",
    title: "the GPU's PCIe link stays below its maximum under load",
    explanation: "Under load (GPUs downshift only at rest) the link still runs below the generation or width both ends support: reseat the GPU or its riser; service it if it persists.",
    step: Some(Remedy::ServiceRma),
};
const IDLE_BELOW_UNCHECKED: FindingCode = FindingCode {
    code: "GPU404",
    title: "the GPU's PCIe link is below its maximum at rest and could not be re-checked under load",
    explanation: "GPUs downshift when idle, so only a reading under load tells; none could be taken (no CUDA driver, or the GPU was not sampled). Re-run where libcuda is available.",
    step: None,
};
const REPLAYS: FindingCode = FindingCode {
    code: "GPU405",
    title: "PCIe replays since the driver loaded above the limit",
    explanation: "Replays are link-level retransmissions: a marginal link. Check dmesg for AER corrected errors and reseat the GPU; persistent replays need the riser or board replaced.",
    step: Some(Remedy::ServiceRma),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "GPU PCIe link generation and width under load vs maximum (NVML and sysfs), replay counter",
    needs: &[Need::Gpu],
    kind: Kind::Active,
    libraries: &[Library::Nvml, Library::Cuda],
    facts: &[&NVML],
    timeout: Duration::from_secs(30),
    explain: Explain {
        reads: "NVML per GPU: current/max PCIe generation and width, link speed, replay counter; \
                /sys/bus/pci/devices/<gpu>/{current,max}_link_{speed,width}; then the same NVML and sysfs \
                readings again while a cuMemcpyHtoDAsync loop runs on every GPU",
        why: "A GPU that trained at a lower generation or fewer lanes (bad seating, riser, BIOS setting, signal \
              integrity) moves host data at half the rate or worse. GPUs also downshift when idle, so an idle \
              reading alone would cry wolf: only a link still below its maximum while copying is a fault. \
              A rising replay counter means the link retransmits: errors that precede a link failure.",
        fixes: &[
            ("link below maximum under load", FIX_DEGRADED),
            ("maximum below expect.gpu_pcie_gen / gpu_pcie_width", "the slot or the platform caps the link: move the GPU to a full Gen5 x16 slot or fix the BIOS setting"),
            ("replay counter above thresholds.pcie_replay_count", "check `dmesg` for AER corrected errors, reseat the GPU; persistent replays need the riser/board replaced"),
        ],
    },
    findings: &[
        &GEN_BELOW_PROFILE,
        &WIDTH_BELOW_PROFILE,
        &DEGRADED_UNDER_LOAD,
        &IDLE_BELOW_UNCHECKED,
        &REPLAYS,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for GpuPcie {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        judge_nvml(cx, ID, |facts, replayed| judge_all(cx, facts, replayed))
    }
}

/// Every GPU's link: sysfs read idle, NVML and sysfs sampled under a copy load, then each judged.
fn judge_all(cx: &Context<'_>, facts: &NvmlFacts, replayed: bool) -> Vec<CheckResult> {
    let idle_sysfs: Vec<(String, LinkAttrs)> = facts
        .gpus
        .iter()
        .filter_map(|g| g.pci_bus_id.clone().ok())
        .map(|bdf| {
            let attrs = LinkAttrs::read(cx.host, &bdf);
            (bdf, attrs)
        })
        .collect();
    let bdfs: Vec<String> = idle_sysfs.iter().map(|(b, _)| b.clone()).collect();
    let under_load = match cx
        .answers
        .obtain(nvml::UNDER_LOAD_KEY, || sample_under_load(cx.host, &bdfs))
    {
        Ok(o) => o.value,
        Err(e) => return vec![CheckResult::error(ID, e).code(&common::LIBRARY_UNANSWERED)],
    };
    facts
        .gpus
        .iter()
        .map(|g| {
            let sysfs = idle_sysfs
                .iter()
                .find(|(b, _)| Ok(b) == g.pci_bus_id.as_ref())
                .map(|(_, a)| a);
            judge(g, sysfs, &under_load, cx.profile, replayed)
        })
        .collect()
}

/// Runs a copy loop on every GPU the CUDA driver lists and reads NVML and sysfs meanwhile.
fn sample_under_load(host: &Host, bdfs: &[String]) -> UnderLoad {
    let ordinals = match cuda::load().and_then(|()| cuda::device_count()) {
        Ok(n) => (0..n).collect::<Vec<_>>(),
        Err(e) => {
            return UnderLoad {
                load_error: Some(e.to_string()),
                loop_failures: vec![],
                nvml: Err("not sampled: no load".into()),
                sysfs: vec![],
            }
        }
    };
    let ((nvml, sysfs), loop_failures) = while_busy(&ordinals, SETTLE, || {
        let nvml = nvml::sample_links();
        let sysfs = bdfs
            .iter()
            .map(|bdf| {
                let a = LinkAttrs::read(host, bdf);
                let text = |r: &crate::host::ReadResult<String>| match r {
                    Ok(v) => v.clone(),
                    Err(e) => e.reason(),
                };
                (bdf.clone(), text(&a.current_speed), text(&a.current_width))
            })
            .collect();
        (nvml, sysfs)
    });
    UnderLoad {
        load_error: None,
        loop_failures,
        nvml,
        sysfs,
    }
}

fn gen_width(gen: &Answer<u32>, width: &Answer<u32>) -> String {
    let g = gen.as_ref().map_or("?".to_string(), |g| g.to_string());
    let w = width.as_ref().map_or("?".to_string(), |w| w.to_string());
    format!("Gen{g} x{w}")
}

pub fn judge(
    g: &GpuFacts,
    sysfs: Option<&LinkAttrs>,
    load: &UnderLoad,
    profile: &Profile,
    replayed: bool,
) -> CheckResult {
    let mut f = Findings::default();
    let (max_gen, max_width) = (&g.pcie_gen_max, &g.pcie_width_max);
    let expect = &profile.expect;
    if let (Some(want), Ok(max)) = (expect.gpu_pcie_gen, max_gen) {
        if *max < u32::from(want) {
            f.coded(&GEN_BELOW_PROFILE).fail(
                format!("maximum link generation Gen{max}, profile expects Gen{want}"),
                "the slot or platform caps the link: use a Gen5 slot or fix the BIOS PCIe speed setting",
            );
        }
    }
    if let (Some(want), Ok(max)) = (expect.gpu_pcie_width, max_width) {
        if *max < u32::from(want) {
            f.coded(&WIDTH_BELOW_PROFILE).fail(
                format!("maximum link width x{max}, profile expects x{want}"),
                "the slot is narrower than the GPU: move it to a x16 slot",
            );
        }
    }
    for (what, answer) in [
        ("maximum link generation", max_gen),
        ("maximum link width", max_width),
        ("idle link generation", &g.pcie_gen_current),
        ("idle link width", &g.pcie_width_current),
    ] {
        if let Err(e) = answer {
            f.unread(what, e);
        }
    }
    let idle_below = below(&g.pcie_gen_current, max_gen) || below(&g.pcie_width_current, max_width);
    let sample = load
        .nvml
        .as_ref()
        .ok()
        .and_then(|s| s.iter().find(|s| s.pci_bus_id == g.pci_bus_id));
    let loaded = sample.map(|s| gen_width(&s.gen, &s.width));
    match (sample, &load.load_error) {
        (Some(s), _) if below(&s.gen, max_gen) || below(&s.width, max_width) => f.coded(&DEGRADED_UNDER_LOAD).fail(
            format!(
                "link {} under load, below its maximum {}",
                gen_width(&s.gen, &s.width),
                gen_width(max_gen, max_width)
            ),
            FIX_DEGRADED,
        ),
        (Some(s), _) => {
            for (what, answer) in [("link generation under load", &s.gen), ("link width under load", &s.width)] {
                if let Err(e) = answer {
                    f.unread(what, e);
                }
            }
        }
        (None, Some(e)) if idle_below => f.coded(&IDLE_BELOW_UNCHECKED).warn(
            format!(
                "link {} idle, below its maximum {}, and no load could be generated to re-check it ({e})",
                gen_width(&g.pcie_gen_current, &g.pcie_width_current),
                gen_width(max_gen, max_width)
            ),
            "re-run where the CUDA driver (libcuda.so.1) is available",
        ),
        (None, _) if idle_below => f.coded(&IDLE_BELOW_UNCHECKED).warn(
            format!(
                "link {} idle, below its maximum {}; no reading under load ({})",
                gen_width(&g.pcie_gen_current, &g.pcie_width_current),
                gen_width(max_gen, max_width),
                load.nvml.as_ref().err().map_or("GPU not sampled", String::as_str)
            ),
            "",
        ),
        _ => {}
    }
    let replay_limit = profile.thresholds.pcie_replay_count.unwrap_or_default();
    let mut measurements = Vec::new();
    if let (Err(e), true) = (&g.pcie_replay_counter, !replay_limit.is_empty()) {
        f.unread("PCIe replay counter", e);
    }
    if let Ok(replays) = g.pcie_replay_counter {
        f.coded(&REPLAYS).add(
            replay_limit.judge_max(f64::from(replays)),
            format!("{replays} PCIe replays since the driver loaded"),
            "check `dmesg` for AER corrected errors and reseat the GPU; persistent replays need the riser/board replaced",
        );
        measurements.push(
            Measurement::new("pcie_replay_count", f64::from(replays), "count")
                .judged_by(&replay_limit)
                .replayed(replayed),
        );
    }
    if let (Ok(gen), Ok(width)) = (
        sample.map_or(&g.pcie_gen_current, |s| &s.gen),
        sample.map_or(&g.pcie_width_current, |s| &s.width),
    ) {
        measurements.push(Measurement::new("pcie_gen", f64::from(*gen), "gen").replayed(replayed));
        measurements
            .push(Measurement::new("pcie_width", f64::from(*width), "lanes").replayed(replayed));
    }
    let idle = gen_width(&g.pcie_gen_current, &g.pcie_width_current);
    let summary = match &loaded {
        Some(l) => format!(
            "{l} under load (max {}, idle {idle}), {} replays",
            gen_width(max_gen, max_width),
            shown(&g.pcie_replay_counter)
        ),
        None => format!(
            "{idle} idle, not re-read under load (max {}), {} replays",
            gen_width(max_gen, max_width),
            shown(&g.pcie_replay_counter)
        ),
    };
    if let Some(attrs) = sysfs {
        for e in attrs.read_errors() {
            f.unread(&e.path, e.reason());
        }
    }
    let mut r = f
        .result(ID, summary)
        .subject(subject(g))
        .evidence(
            "nvmlDeviceGetCurrPcieLinkGeneration (idle)",
            shown(&g.pcie_gen_current),
        )
        .evidence(
            "nvmlDeviceGetCurrPcieLinkWidth (idle)",
            shown(&g.pcie_width_current),
        )
        .evidence("nvmlDeviceGetMaxPcieLinkGeneration", shown(max_gen))
        .evidence(
            "nvmlDeviceGetGpuMaxPcieLinkGeneration",
            shown(&g.pcie_gen_gpu_max),
        )
        .evidence("nvmlDeviceGetMaxPcieLinkWidth", shown(max_width))
        .evidence(
            "nvmlDeviceGetPcieLinkSpeed (idle, MT/s)",
            shown(&g.pcie_speed_current_mts),
        )
        .evidence(
            "nvmlDeviceGetPcieLinkMaxSpeed (MT/s)",
            shown(&g.pcie_speed_max_mts),
        )
        .evidence(
            "nvmlDeviceGetPcieReplayCounter",
            shown(&g.pcie_replay_counter),
        );
    if let Some(s) = sample {
        r = r
            .evidence(
                "nvmlDeviceGetCurrPcieLinkGeneration (under load)",
                shown(&s.gen),
            )
            .evidence(
                "nvmlDeviceGetCurrPcieLinkWidth (under load)",
                shown(&s.width),
            )
            .evidence(
                "nvmlDeviceGetPcieLinkSpeed (under load, MT/s)",
                shown(&s.speed_mts),
            );
    }
    if let Some(e) = &load.load_error {
        r = r.evidence("copy loop", format!("<not started: {e}>"));
    }
    for (ordinal, e) in &load.loop_failures {
        r = r.evidence(
            &format!("copy loop on CUDA device {ordinal}"),
            format!("<{e}>"),
        );
    }
    if let (Some(attrs), Ok(bdf)) = (sysfs, &g.pci_bus_id) {
        r.evidence.extend(
            attrs
                .evidence(bdf)
                .into_iter()
                .map(|l| format!("{l} (idle)")),
        );
        if let Some((_, speed, width)) = load.sysfs.iter().find(|(b, _, _)| b == bdf) {
            r = r
                .evidence(
                    &format!(
                        "{} (under load)",
                        crate::sysfs::pci_device::attr_path(bdf, "current_link_speed")
                    ),
                    speed,
                )
                .evidence(
                    &format!(
                        "{} (under load)",
                        crate::sysfs::pci_device::attr_path(bdf, "current_link_width")
                    ),
                    width,
                );
        }
        if let (Some(sys_gen), Ok(nvml_gen)) = (attrs.max_gen(), max_gen) {
            if sys_gen != *nvml_gen {
                r = r.note(format!(
                    "sysfs max_link_speed is Gen{sys_gen} (the GPU's own capability), NVML's maximum Gen{nvml_gen} \
                     (GPU and slot together): the slot limits the link"
                ));
            }
        }
    }
    r.measurements = measurements;
    r
}

/// `current < max`, when both were read.
fn below(current: &Answer<u32>, max: &Answer<u32>) -> bool {
    matches!((current, max), (Ok(c), Ok(m)) if c < m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;

    fn gpu(idle_gen: u32, idle_width: u32) -> GpuFacts {
        GpuFacts {
            index: 0,
            pci_bus_id: Ok("0000:00:06.0".into()),
            pcie_gen_current: Ok(idle_gen),
            pcie_gen_max: Ok(5),
            pcie_width_current: Ok(idle_width),
            pcie_width_max: Ok(16),
            pcie_replay_counter: Ok(0),
            ..GpuFacts::default()
        }
    }

    fn loaded(gen: u32, width: u32) -> UnderLoad {
        UnderLoad {
            load_error: None,
            loop_failures: vec![],
            nvml: Ok(vec![LinkSample {
                index: 0,
                pci_bus_id: Ok("0000:00:06.0".into()),
                gen: Ok(gen),
                width: Ok(width),
                speed_mts: Ok(32000),
            }]),
            sysfs: vec![("0000:00:06.0".into(), "32.0 GT/s PCIe".into(), "16".into())],
        }
    }

    fn profile() -> Profile {
        crate::profile::load("hgx-h100-ib", &crate::probes::ids()).unwrap()
    }

    #[test]
    fn idle_downshift_recovering_under_load_passes() {
        let r = judge(&gpu(1, 16), None, &loaded(5, 16), &profile(), false);
        assert_eq!(r.status, Status::Pass, "{}", r.summary);
        assert!(r
            .summary
            .starts_with("Gen5 x16 under load (max Gen5 x16, idle Gen1 x16)"));
    }

    /// Reproduced: NVML answered no generation or width ("Gen? x?") and nothing could be compared, so it passed.
    #[test]
    fn unread_link_generation_and_width_are_an_error_not_a_pass() {
        let mut g = gpu(5, 16);
        g.pcie_gen_max = Err("NVML_ERROR_NOT_SUPPORTED".into());
        g.pcie_width_max = Err("NVML_ERROR_NOT_SUPPORTED".into());
        let mut load = loaded(5, 16);
        if let Ok(samples) = &mut load.nvml {
            samples[0].gen = Err("NVML_ERROR_UNKNOWN".into());
            samples[0].width = Err("NVML_ERROR_UNKNOWN".into());
        }
        let r = judge(&g, None, &load, &profile(), false);
        assert_eq!(r.status, Status::Error, "{}", r.summary);
        assert!(r.summary.contains("Gen? x?"), "{}", r.summary);
        assert!(
            r.summary.contains("maximum link generation not read"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn link_still_narrow_under_load_fails() {
        let r = judge(&gpu(5, 8), None, &loaded(5, 8), &profile(), false);
        assert_eq!(r.status, Status::Fail);
        assert!(r
            .summary
            .contains("link Gen5 x8 under load, below its maximum Gen5 x16"));
    }

    #[test]
    fn idle_below_max_without_cuda_warns() {
        let load = UnderLoad {
            load_error: Some("libcuda.so.1: cannot open shared object file".into()),
            loop_failures: vec![],
            nvml: Err("not sampled: no load".into()),
            sysfs: vec![],
        };
        let r = judge(&gpu(1, 16), None, &load, &profile(), false);
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        assert!(r.summary.contains("no load could be generated"));
    }

    #[test]
    fn slot_capped_at_gen4_fails_gen5_profile() {
        let mut g = gpu(4, 16);
        g.pcie_gen_max = Ok(4);
        let r = judge(&g, None, &loaded(4, 16), &profile(), false);
        assert_eq!(r.status, Status::Fail);
        assert!(r
            .summary
            .contains("maximum link generation Gen4, profile expects Gen5"));
    }

    #[test]
    fn replays_above_threshold_fail() {
        let mut p = profile();
        p.thresholds.pcie_replay_count = Some(crate::model::Limit::new(Some(0.0), Some(100.0)));
        let mut g = gpu(5, 16);
        g.pcie_replay_counter = Ok(250);
        let r = judge(&g, None, &loaded(5, 16), &p, false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("250 PCIe replays"));
    }

    /// HGX B300 with NVML's answers: the GPU's maximum is its Gen6 port's, and a GPU that stays at Gen5 under load
    /// fails though the switch's uplink above it is Gen5 by design (sysfs alone reads it as idle). Each variant
    /// fails only its own GPU.
    #[test]
    fn b300_behind_the_supernic_is_judged_against_its_gen6_port() {
        use crate::probes::testing::run_on;
        let r = run_on(&GpuPcie, "hgx-b300-cx8", "hgx-b300-ib");
        assert_eq!(r.len(), 8);
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
        assert!(
            r[0].summary
                .starts_with("Gen6 x16 under load (max Gen6 x16"),
            "{}",
            r[0].summary
        );
        for (tree, bdf, want) in [
            (
                "hgx-b300-cx8-gpu-gen5",
                "0000:ba:00.0",
                "link Gen5 x16 under load, below its maximum Gen6 x16",
            ),
            (
                "hgx-b300-cx8-gpu-x8",
                "0000:3a:00.0",
                "link Gen6 x8 under load, below its maximum Gen6 x16",
            ),
        ] {
            let r = run_on(&GpuPcie, tree, "hgx-b300-ib");
            let failed: Vec<&CheckResult> = r.iter().filter(|x| x.status == Status::Fail).collect();
            assert_eq!(failed.len(), 1, "{tree}: {r:#?}");
            assert!(
                failed[0].subject.as_deref().unwrap().contains(bdf),
                "{tree}: {:?}",
                failed[0].subject
            );
            assert!(
                failed[0].summary.contains(want),
                "{tree}: {}",
                failed[0].summary
            );
        }
    }
}
