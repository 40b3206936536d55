//! The pure parsers of kernel and driver files (/proc/modules, the NVIDIA version and per-GPU information
//! files, RDMA rates, numbered states, GIDs, PCI link speeds, addresses, kernel release, the command line):
//! arbitrary text in, a value or `None` out, never a panic.
#![no_main]

use fabric_preflight::sysfs::{hypervisor, infiniband, iommu, kernel, modules, nvidia, pci};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();

    let (lines, bad) = modules::parse_proc_modules(text);
    for line in &lines {
        let _ = line.is_live();
    }
    let _ = bad.len();

    let _ = nvidia::parse_version(text);
    let _ = nvidia::parse_information("0000:17:00.0", text);

    if let Some(rate) = infiniband::parse_rate(text) {
        let _ = format!("{rate:?}");
    }
    let _ = infiniband::parse_numbered(text);
    let _ = infiniband::parse_lid(text);
    if let Some(gid) = infiniband::parse_gid(text) {
        let _ = infiniband::gid_ipv4(gid);
        let _ = infiniband::gid_is_link_local(gid);
    }
    let _ = infiniband::gid_ipv4(text);
    let _ = infiniband::gid_is_link_local(text);
    let _ = infiniband::counter_width(text);
    // Two names compared the way device lists are sorted (split at the first newline).
    let (a, b) = text.split_once('\n').unwrap_or((text, ""));
    let _ = infiniband::natural_cmp(a, b);
    let _ = infiniband::natural_cmp(b, a);

    if let Some(speed) = pci::parse_link_speed(text) {
        let _ = (speed.generation(), speed.gts(), speed.to_string());
    }
    if let Some(bdf) = pci::Bdf::parse(text) {
        let _ = bdf.to_string();
    }
    let _ = pci::parse_hex(text);
    let _ = pci::parse_numa_node(text);

    let _ = kernel::parse_release(text);
    let _ = iommu::iommu_parameters(text);
    let _ = hypervisor::cpuinfo_has_hypervisor_flag(text);
});
