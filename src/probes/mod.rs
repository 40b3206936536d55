//! The registry: one line per probe. Adding a probe = one file in this directory plus one line in `ALL`.

use crate::probe::{FactSource, Probe};

#[cfg(test)]
mod damage_sweep;
mod driver_nvidia;
mod efa_counters;
mod efa_devices;
mod efa_gdr;
mod efa_libfabric;
mod efa_link;
mod gdr_kernel_path;
mod gdr_loopback;
mod gds_config;
mod gds_kernel_path;
mod gds_read;
mod gpu_bar1;
mod gpu_copy_bandwidth;
mod gpu_inventory;
mod gpu_nvlink;
mod gpu_p2p;
mod gpu_pcie;
mod nccl_env;
mod nccl_transport;
mod nvlink_imex;
mod nvlink_link_quality;
mod pcie_acs;
mod pcie_aer;
mod pcie_iommu;
mod pcie_link;
mod rdma_counters;
mod rdma_devices;
mod rdma_link;
mod rdma_loopback;
mod rdma_memlock;
mod rdma_roce;
mod shared;
#[cfg(test)]
pub(crate) mod testing;
mod topo_gpu_nic;

static ALL: &[&dyn Probe] = &[
    &driver_nvidia::DriverNvidia,
    &gpu_inventory::GpuInventory,
    &gpu_bar1::GpuBar1,
    &gpu_p2p::GpuP2p,
    &gpu_nvlink::GpuNvlink,
    &nvlink_imex::NvlinkImex,
    &nvlink_link_quality::NvlinkLinkQuality,
    &gdr_kernel_path::GdrKernelPath,
    &gds_kernel_path::GdsKernelPath,
    &gds_config::GdsConfig,
    &rdma_memlock::RdmaMemlock,
    &rdma_devices::RdmaDevices,
    &rdma_link::RdmaLink,
    &rdma_roce::RdmaRoce,
    &rdma_counters::RdmaCounters,
    &efa_devices::EfaDevices,
    &efa_link::EfaLink,
    &efa_counters::EfaCounters,
    &efa_libfabric::EfaLibfabric,
    &pcie_link::PcieLink,
    &pcie_acs::PcieAcs,
    &pcie_aer::PcieAer,
    &pcie_iommu::PcieIommu,
    &topo_gpu_nic::TopoGpuNic,
    &nccl_transport::NcclTransport,
    &nccl_env::NcclEnv,
    // Active probes last: they run one at a time after the others.
    &gpu_pcie::GpuPcie,
    &gpu_copy_bandwidth::GpuCopyBandwidth,
    &gds_read::GdsRead,
    &rdma_loopback::RdmaLoopback,
    &gdr_loopback::GdrLoopback,
    &efa_gdr::EfaGdr,
];

/// Every probe, in report order.
pub fn all() -> &'static [&'static dyn Probe] {
    ALL
}

pub fn find(id: &str) -> Option<&'static dyn Probe> {
    ALL.iter().copied().find(|p| p.id() == id)
}

/// The library facts a probe names, by key (for the child process that gathers them).
pub fn fact_source(key: &str) -> Option<&'static FactSource> {
    ALL.iter()
        .flat_map(|p| p.meta().facts)
        .copied()
        .find(|s| s.key == key)
}

pub fn ids() -> Vec<&'static str> {
    ALL.iter().map(|p| p.id()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_dotted_lowercase_and_explained() {
        let mut seen = std::collections::HashSet::new();
        for p in all() {
            let id = p.id();
            assert!(seen.insert(id), "duplicate id {id}");
            let (area, thing) = id
                .split_once('.')
                .unwrap_or_else(|| panic!("{id} is not dotted"));
            for part in [area, thing] {
                assert!(
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
                    "{id}"
                );
            }
            let e = p.explain();
            assert!(
                !e.reads.is_empty() && !e.why.is_empty() && !e.fixes.is_empty(),
                "{id} lacks explain text"
            );
            assert!(!p.title().is_empty());
        }
    }

    /// A library probe runs in this process on the facts the runner gathered in a child: it may call no library
    /// those facts do not come from.
    #[test]
    fn library_probes_judge_gathered_facts_only() {
        use crate::probe::Kind;
        for p in all().iter().filter(|p| p.kind() == Kind::Library) {
            let from_facts: Vec<_> = p.meta().facts.iter().map(|s| s.library).collect();
            assert!(!from_facts.is_empty(), "{} names no facts", p.id());
            assert!(
                p.libraries().iter().all(|l| from_facts.contains(l)),
                "{} calls a library it has no facts of",
                p.id()
            );
        }
        for key in ["nvml", "verbs.device_list"] {
            assert_eq!(fact_source(key).map(|s| s.key), Some(key));
        }
    }

    #[test]
    fn each_probe_file_is_named_after_its_id() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/probes");
        for p in all() {
            let file = dir.join(format!("{}.rs", p.id().replace('.', "_")));
            assert!(
                file.exists(),
                "{} should live in {}",
                p.id(),
                file.display()
            );
        }
    }
}
