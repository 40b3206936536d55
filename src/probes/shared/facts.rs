//! Every library fact gathered once per run: each is asked in one child process (`__facts`) for all the
//! probes that name it in their `facts`, and recorded under its key in `vendor-answers.json`.

use crate::dynlib::{efa, fabric, nvml, verbs};
use crate::probe::{FactSource, Library};

use super::efa::could_hold_an_efa;

/// NVML's inventory (every GPU's identity, memory, BAR1, PCIe link, NVLinks and peer status), judged by every
/// GPU probe.
pub const NVML: FactSource = FactSource {
    key: nvml::ANSWERS_KEY,
    library: Library::Nvml,
    collect: || serde_json::to_value(nvml::collect()).unwrap_or_default(),
    // Asked on every host: a GPU the PCI tree does not show must still be found by NVML.
    only_if: None,
};

/// The devices libibverbs lists.
pub const VERBS_DEVICES: FactSource = FactSource {
    key: verbs::DEVICE_LIST_KEY,
    library: Library::Verbs,
    collect: || serde_json::to_value(verbs::discover()).unwrap_or_default(),
    // Asked on every host: soft-RoCE and other software devices sit on no PCI function.
    only_if: None,
};

/// Whether libefa loads (a hung dlopen is killed in the child, naming it).
pub const LIBEFA_LOADED: FactSource = FactSource {
    key: efa::LIBEFA_KEY,
    library: Library::Efa,
    collect: || serde_json::to_value(efa::load_libefa()).unwrap_or_default(),
    only_if: Some(could_hold_an_efa),
};

/// libfabric's efa offers: with FI_HMEM, and without it where that found nothing, so the answer serves nodes
/// with and without GPUs (the child knows no PCI tree).
pub const EFA_OFFERS: FactSource = FactSource {
    key: fabric::EFA_QUERY_KEY,
    library: Library::Fabric,
    collect: || serde_json::to_value(fabric::query_efa(true)).unwrap_or_default(),
    only_if: Some(could_hold_an_efa),
};
