//! `nvlink.link_quality`: NVLink5 link quality per GPU: each active link's speed against the profile
//! (`expect.nvlink_link_gbps`, 53.125 GB/s on Blackwell) or the GPU's fastest link, and NVML's link-recovery and
//! effective-error counters judged as a rate between two reads within the run. A link whose recovery count climbs
//! is named: 505 recoveries on one link preceded an Xid 149 by five days (marin-community/marin#9086).
//! FEC-corrected symbols are normal on NVLink5 and are not read.

use crate::dynlib::nvml::{Answer, GpuFacts, LinkCounters, LinkQuality};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Findings, Kind, Library, Need, Probe,
    ProbeMeta, Remedy,
};
use crate::probes::shared::facts::NVML;
use crate::probes::shared::gpu::{judge_nvml, subject};

pub struct NvlinkLinkQuality;

const ID: &str = "nvlink.link_quality";

const FIX_SPEED: &str =
    "`nvidia-smi nvlink -s -i <gpu>` shows each link's speed; check the NVLink bandwidth \
mode (`nvidia-smi nvlink -gBwMode`), then reset the GPU or have the tray's NVLink cabling serviced";
const FIX_RECOVERY: &str =
    "`nvidia-smi nvlink -e -i <gpu>` and `dmesg | grep -i xid` (Xid 144-150): drain the \
node and have the named link's cable/cartridge or switch port serviced before it fails (Xid 149)";

const SLOW_LINK: FindingCode = FindingCode {
    code: "NVL101",
    title: "NVLink links run below the expected speed",
    explanation: "Links run slower than the profile's `nvlink_link_gbps` (a failure) or than the GPU's fastest link (a warning): reset the GPU; links that stay slow need service.",
    step: Some(Remedy::ResetGpu),
};
const RECOVERY_FAILING: FindingCode = FindingCode {
    code: "NVL102",
    title: "NVLink failed-recovery counts climb",
    explanation: "Link recoveries fail while the check watches: the link is failing. Drain the node; the baseboard or NVSwitch tray needs service.",
    step: Some(Remedy::ServiceRma),
};
const RECOVERIES: FindingCode = FindingCode {
    code: "NVL103",
    title: "NVLink recovery or effective-error counts climb",
    explanation: "Links recover or count effective errors while the check watches: a marginal link. Reset the GPU and watch; service it if they keep climbing.",
    step: Some(Remedy::ResetGpu),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "NVLink5 links: speed as the profile expects, no recovery or effective-error count climbing",
    needs: &[Need::Gpu],
    kind: Kind::Library,
    libraries: &[Library::Nvml],
    facts: &[&NVML],
    explain: Explain {
        reads: "NVML per active link (nvmlDeviceGetFieldValues, scope = link): NVLINK_GET_SPEED, \
                NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS / _FAILED_EVENTS, NVLINK_COUNT_EFFECTIVE_ERRORS, \
                read twice 1 s apart where the GPU reports them (NVLink5, R570+)",
        why: "A link retraining again and again, or one trained below its speed, still counts as Active: NCCL \
              keeps using it, collectives slow down or stall, and the link ends in a fatal Xid days later.",
        fixes: &[
            ("a link slower than the profile or the GPU's other links", FIX_SPEED),
            ("a link's recovery or effective-error count climbing during the run", FIX_RECOVERY),
        ],
    },
    findings: &[
        &SLOW_LINK,
        &RECOVERY_FAILING,
        &RECOVERIES,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for NvlinkLinkQuality {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        judge_nvml(cx, ID, |facts, _| {
            let want = cx.profile.expect.nvlink_link_gbps;
            let results: Vec<CheckResult> = facts
                .gpus
                .iter()
                .filter_map(|g| judge_gpu(g, want))
                .collect();
            if results.is_empty() {
                return vec![CheckResult::skip(
                    ID,
                    "no active NVLink with quality answers (no NVLink, or a recording made before they were asked)",
                ).code(&common::ABSENT)];
            }
            results
        })
    }
}

/// `None` for a GPU with no active link read.
fn judge_gpu(g: &GpuFacts, want_gbps: Option<f64>) -> Option<CheckResult> {
    let q = g.nvlink.as_ref()?.quality.as_ref()?;
    if q.first.is_empty() {
        return None;
    }
    let mut f = Findings::default();
    judge_speed(q, want_gbps, &mut f);
    let judged_counters = judge_rates(q, &mut f);
    let summary = format!(
        "GPU {}, {} active link(s){}",
        g.index,
        q.first.len(),
        if judged_counters {
            format!(", counters read twice {} ms apart", q.interval_ms)
        } else {
            ", recovery and error counters not reported (NVLink4 or older, or an older driver)"
                .into()
        }
    );
    let mut r = f.result(ID, summary).subject(subject(g));
    for c in q.second.as_ref().unwrap_or(&q.first) {
        r = r.evidence(
            &format!("link {}", c.link),
            format!(
                "speed {} MB/s, recoveries {}, failed {}, effective errors {}",
                shown(&c.speed_mbps),
                shown(&c.recoveries),
                shown(&c.recoveries_failed),
                shown(&c.effective_errors)
            ),
        );
    }
    Some(r)
}

fn shown(a: &Answer<u64>) -> String {
    a.as_ref().map_or("n/a".into(), u64::to_string)
}

/// Below the profile's speed fails; without a profile, below the GPU's fastest link warns (a bandwidth mode may
/// be configured on purpose).
fn judge_speed(q: &LinkQuality, want_gbps: Option<f64>, f: &mut Findings) {
    let speeds: Vec<(u32, f64)> = q
        .first
        .iter()
        .filter_map(|c| Some((c.link, *c.speed_mbps.as_ref().ok()? as f64 / 1000.0)))
        .collect();
    let fastest = speeds.iter().map(|s| s.1).fold(0.0, f64::max);
    let (floor, words, fail) = match want_gbps {
        // 0.1 % for the profile's rounding (53.125 vs 53125 MB/s).
        Some(w) => (w * 0.999, format!("the profile expects {w} GB/s"), true),
        None => (
            fastest * 0.999,
            format!("its fastest link runs {fastest} GB/s"),
            false,
        ),
    };
    let slow: Vec<String> = speeds
        .iter()
        .filter(|(_, s)| *s < floor)
        .map(|(l, s)| format!("link {l} at {s} GB/s"))
        .collect();
    if !slow.is_empty() {
        let problem = format!("{}: {words}", slow.join(", "));
        if fail {
            f.coded(&SLOW_LINK).fail(problem, FIX_SPEED)
        } else {
            f.coded(&SLOW_LINK).warn(problem, FIX_SPEED)
        }
    }
}

/// Counts that climbed between the two reads, per link. Returns whether any counter was read twice.
fn judge_rates(q: &LinkQuality, f: &mut Findings) -> bool {
    let Some(second) = &q.second else {
        return false;
    };
    let secs = q.interval_ms as f64 / 1000.0;
    let mut judged = false;
    type Reading = fn(&LinkCounters) -> &Answer<u64>;
    let counters: [(&str, Reading, bool); 3] = [
        ("failed recovery count", |c| &c.recoveries_failed, true),
        ("recovery count", |c| &c.recoveries, false),
        ("effective-error count", |c| &c.effective_errors, false),
    ];
    for (what, get, fails) in counters {
        let mut climbed = Vec::new();
        for (a, b) in q.first.iter().zip(second) {
            if let (Ok(x), Ok(y)) = (get(a), get(b)) {
                judged = true;
                if y > x {
                    climbed.push(format!("link {} {x} → {y}", a.link));
                }
            }
        }
        if !climbed.is_empty() {
            let problem = format!("NVLink {what} climbing in {secs} s: {}", climbed.join(", "));
            if fails {
                f.coded(&RECOVERY_FAILING).fail(problem, FIX_RECOVERY)
            } else {
                f.coded(&RECOVERIES).warn(problem, FIX_RECOVERY)
            }
        }
    }
    judged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynlib::nvml::NvLinkFacts;
    use crate::probe::Status;

    const UNSUPPORTED: &str = "nvmlDeviceGetFieldValues(NVLINK_COUNT_EFFECTIVE_ERRORS, link 0): NVML_ERROR_NOT_SUPPORTED (the requested operation is not available on the target device)";

    fn counters(link: u32, speed: u64, rec: u64, failed: u64, eff: u64) -> LinkCounters {
        LinkCounters {
            link,
            speed_mbps: Ok(speed),
            recoveries: Ok(rec),
            recoveries_failed: Ok(failed),
            effective_errors: Ok(eff),
        }
    }

    /// 18 NVLink5 links at 53125 MB/s; link 14 at 505 lifetime recoveries (marin#9086) and steady.
    fn blackwell(edit: impl Fn(u32, &mut LinkCounters)) -> GpuFacts {
        let first: Vec<LinkCounters> = (0..18)
            .map(|l| counters(l, 53125, if l == 14 { 505 } else { 0 }, 0, 0))
            .collect();
        let mut second = first.clone();
        for c in &mut second {
            edit(c.link, c);
        }
        GpuFacts {
            index: 0,
            pci_bus_id: Ok("0008:01:00.0".into()),
            nvlink: Some(NvLinkFacts {
                links: vec![Ok(true); 18],
                fabric: Err("not read".into()),
                quality: Some(LinkQuality {
                    first,
                    second: Some(second),
                    interval_ms: 1000,
                }),
            }),
            ..GpuFacts::default()
        }
    }

    #[test]
    fn steady_links_at_speed_pass_and_lifetime_counts_are_not_judged() {
        for want in [None, Some(53.125)] {
            let r = judge_gpu(&blackwell(|_, _| {}), want).unwrap();
            assert_eq!(r.status, Status::Pass, "{}", r.summary);
            assert!(
                r.evidence.iter().any(|e| e.contains("recoveries 505")),
                "{:?}",
                r.evidence
            );
        }
    }

    /// The class "a link degrading while Active": each counter that climbs is named with its link.
    #[test]
    fn climbing_counts_are_named_by_link() {
        for (edit, want, words) in [
            (
                Box::new(|l: u32, c: &mut LinkCounters| {
                    if l == 14 {
                        c.recoveries = Ok(508)
                    }
                }) as Box<dyn Fn(u32, &mut LinkCounters)>,
                Status::Warn,
                "recovery count climbing in 1 s: link 14 505 → 508",
            ),
            (
                Box::new(|l, c| {
                    if l == 3 {
                        c.recoveries_failed = Ok(1)
                    }
                }),
                Status::Fail,
                "failed recovery count climbing in 1 s: link 3 0 → 1",
            ),
            (
                Box::new(|l, c| {
                    if l == 9 {
                        c.effective_errors = Ok(12)
                    }
                }),
                Status::Warn,
                "effective-error count climbing in 1 s: link 9 0 → 12",
            ),
        ] {
            let r = judge_gpu(&blackwell(edit), None).unwrap();
            assert_eq!(r.status, want, "{}", r.summary);
            assert!(r.summary.contains(words), "{}", r.summary);
        }
    }

    #[test]
    fn slow_links_fail_the_profile_and_warn_beside_faster_peers() {
        let mut g = blackwell(|_, _| {});
        let q = g.nvlink.as_mut().unwrap().quality.as_mut().unwrap();
        q.first[5].speed_mbps = Ok(26562);
        let r = judge_gpu(&g, Some(53.125)).unwrap();
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
        assert!(
            r.summary
                .contains("link 5 at 26.562 GB/s: the profile expects 53.125 GB/s"),
            "{}",
            r.summary
        );
        assert_eq!(judge_gpu(&g, None).unwrap().status, Status::Warn);
        // Every link of an H100 at 26.562 under a Blackwell profile.
        let mut h100 = blackwell(|_, _| {});
        for c in &mut h100
            .nvlink
            .as_mut()
            .unwrap()
            .quality
            .as_mut()
            .unwrap()
            .first
        {
            c.speed_mbps = Ok(26562);
        }
        assert_eq!(judge_gpu(&h100, Some(53.125)).unwrap().status, Status::Fail);
        assert_eq!(judge_gpu(&h100, None).unwrap().status, Status::Pass);
    }

    /// NVLink4 answers NOT_SUPPORTED for the NVLink5 counters: no second read, nothing judged but the speed,
    /// and the summary says so; a recording without these answers judges nothing.
    #[test]
    fn unreported_counters_are_said_not_judged() {
        let mut g = blackwell(|_, _| {});
        let q = g.nvlink.as_mut().unwrap().quality.as_mut().unwrap();
        q.second = None;
        for c in &mut q.first {
            c.recoveries = Err(UNSUPPORTED.into());
            c.recoveries_failed = Err(UNSUPPORTED.into());
            c.effective_errors = Err(UNSUPPORTED.into());
        }
        let r = judge_gpu(&g, None).unwrap();
        assert_eq!(r.status, Status::Pass);
        assert!(r.summary.contains("not reported"), "{}", r.summary);
        g.nvlink.as_mut().unwrap().quality = None;
        assert!(judge_gpu(&g, None).is_none());
    }
}
