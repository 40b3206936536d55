//! What every GPU probe does first: obtain NVML's facts (live or replayed) and turn "no NVML" into the right
//! result. Shared helpers only; no probe lives here.

use std::fmt::Display;

use crate::dynlib::nvml::{self, Answer, GpuFacts, NvmlFacts};
use crate::probe::Library;
use crate::recording::Obtained;

use crate::probe::{common, CheckResult, Context};
use crate::rules::presence::{Stack, Survey};

/// Note added to results built from recorded answers.
pub const REPLAYED_NOTE: &str =
    "vendor answers replayed from recording (vendor-answers.json), not measured on this host";

/// NVML's facts, or the one result the probe returns when there are none: NVML failed or lists no GPU →
/// the presence rule (`presence.rs`); a recording without NVML answers → error.
pub fn obtain_nvml(cx: &Context<'_>, id: &str) -> Result<Obtained<NvmlFacts>, Box<CheckResult>> {
    let obtained = cx
        .answers
        .obtain(nvml::ANSWERS_KEY, nvml::collect)
        .map_err(|e| Box::new(CheckResult::error(id, e).code(&common::LIBRARY_UNANSWERED)))?;
    let facts = &obtained.value;
    let verdict = match &facts.nvml_error {
        Some(err) => gpu_survey(cx).library_failed(id, err, expects_gpus(cx)),
        None if facts.gpus.is_empty() => gpu_survey(cx).library_lists_none(
            id,
            Library::Nvml,
            "nvmlDeviceGetCount_v2",
            expects_gpus(cx),
        ),
        None => return Ok(obtained),
    };
    Err(Box::new(mark_replayed(verdict, obtained.replayed)))
}

/// What most GPU probes do with NVML: judge its facts (told whether they were replayed), or return the one
/// result [`obtain_nvml`] gives when there are none; every result carries the replay note when replayed.
pub fn judge_nvml(
    cx: &Context<'_>,
    id: &str,
    judge: impl FnOnce(&NvmlFacts, bool) -> Vec<CheckResult>,
) -> Vec<CheckResult> {
    match obtain_nvml(cx, id) {
        Ok(o) => judge(&o.value, o.replayed)
            .into_iter()
            .map(|r| mark_replayed(r, o.replayed))
            .collect(),
        Err(r) => vec![*r],
    }
}

/// The GPUs, their driver and what it lists (`presence.rs`).
pub fn gpu_survey(cx: &Context<'_>) -> Survey {
    Survey::read(cx.host, Stack::Gpu)
}

/// The profile counts on GPUs being there.
pub fn expects_gpus(cx: &Context<'_>) -> bool {
    cx.profile.expect.gpu_count.is_some_and(|n| n > 0)
}

/// Adds the replay note when the answers came from a recording.
pub fn mark_replayed(r: CheckResult, replayed: bool) -> CheckResult {
    if replayed {
        r.note(REPLAYED_NOTE)
    } else {
        r
    }
}

/// The subject of a per-GPU result: its PCI bus id, else `GPU <index>`.
pub fn subject(g: &GpuFacts) -> String {
    match &g.pci_bus_id {
        Ok(id) => id.clone(),
        Err(_) => format!("GPU {}", g.index),
    }
}

/// What a GPU that fell off the bus, or answers NVML with an error, needs.
pub fn lost_fix(index: u32) -> String {
    format!("see `dmesg | grep -i xid` (Xid 79: fallen off the bus); reset the GPU (`nvidia-smi -r -i {index}`) or reboot the node; RMA it if the error recurs")
}

/// An answer as evidence text: the value, or `<error text>`.
pub fn shown<T: Display>(a: &Answer<T>) -> String {
    match a {
        Ok(v) => v.to_string(),
        Err(e) => format!("<{e}>"),
    }
}

/// Bytes → MiB for display and limits.
pub fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}
