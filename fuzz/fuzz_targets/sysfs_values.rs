//! The pure parsers of kernel and driver files (/proc/modules, the NVIDIA version and per-GPU information
//! files, RDMA rates, numbered states, GIDs, PCI link speeds, addresses, kernel release, the command line,
//! cufile.json, mountinfo, udev records, nvidia-fs stats, local addresses, CPU lists):
//! arbitrary text in, a value or `None` out, never a panic.
#![no_main]

use fabric_preflight::sysfs::{
    cufile_json, hypervisor, infiniband, iommu, kernel, modules, mountinfo, netaddr, nvfs, nvidia, pci,
    pci_device, udev,
};
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

    // GDS inputs: cufile.json (comments and trailing commas blanked before serde_json), the mount table, udev
    // records, nvidia-fs stats; addresses; CPU lists.
    if let Ok(config) = cufile_json::parse(text) {
        let _ = config.get("properties.allow_compat_mode");
    }
    let mounts = mountinfo::parse_mountinfo(text);
    let _ = mountinfo::mount_for(&mounts, "/tmp/x");
    let record = udev::parse_record(text);
    let _ = record.property("ID_FS_TYPE");
    let _ = nvfs::parse_reads_n(text);
    let _ = netaddr::parse_fib_trie_local(text);
    let _ = netaddr::parse_if_inet6(text);
    let _ = pci_device::parse_cpulist(text);
});
