//! PCI ids that say more than a class code: RDMA NICs whose class is not "network" (Omni-Path HFIs, ConnectX
//! in flash-recovery mode).

use crate::sysfs::pci::VENDOR_MELLANOX;

pub const VENDOR_INTEL: u16 = 0x8086;

/// Intel Omni-Path HFI 100 Series (discrete and integrated), driven by hfi1 (Linux `drivers/infiniband/hw/hfi1`,
/// `PCI_DEVICE_ID_INTEL0` / `PCI_DEVICE_ID_INTEL1`).
const OMNIPATH_HFI: &[u16] = &[0x24f0, 0x24f1];

/// Mellanox/NVIDIA adapters in flash-recovery ("livefish") mode: the firmware did not boot, so the function
/// comes up with a dedicated device id, often as a memory controller, and no driver takes it. From mstflint's
/// `kernel/nnt_device_list.h` (`livefish_pci_devices`) and the `mst` script's `live_fish_id_database`.
const FLASH_RECOVERY: &[(u16, &str)] = &[
    (0x01f6, "ConnectX-3"),
    (0x01f8, "ConnectX-3 Pro"),
    (0x01ff, "Connect-IB"),
    (0x0209, "ConnectX-4"),
    (0x020b, "ConnectX-4 Lx"),
    (0x020d, "ConnectX-5"),
    (0x020f, "ConnectX-6"),
    (0x0210, "ConnectX-6 (secure)"),
    (0x0211, "BlueField"),
    (0x0212, "ConnectX-6 Dx"),
    (0x0213, "ConnectX-6 Dx (secure)"),
    (0x0214, "BlueField-2"),
    (0x0215, "BlueField-2 (secure)"),
    (0x0216, "ConnectX-6 Lx"),
    (0x0217, "ConnectX-6 Lx (secure)"),
    (0x0218, "ConnectX-7"),
    (0x0219, "ConnectX-7 (secure)"),
    (0x021a, "BlueField-3 Lx"),
    (0x021b, "BlueField-3 Lx (secure)"),
    (0x021c, "BlueField-3"),
    (0x021d, "BlueField-3 (secure)"),
    (0x021e, "ConnectX-8"),
    (0x0220, "BlueField-4"),
];

/// The adapter a Mellanox function in flash-recovery mode is, by its device id.
pub fn flash_recovery(vendor: u16, device: u16) -> Option<&'static str> {
    (vendor == VENDOR_MELLANOX)
        .then(|| FLASH_RECOVERY.iter().find(|(id, _)| *id == device))
        .flatten()
        .map(|(_, name)| *name)
}

/// An Intel Omni-Path host fabric interface.
pub fn is_omnipath_hfi(vendor: u16, device: u16) -> bool {
    vendor == VENDOR_INTEL && OMNIPATH_HFI.contains(&device)
}

/// The fix for a function in flash-recovery mode.
pub const FLASH_RECOVERY_FIX: &str = "the adapter's firmware did not boot (flash-recovery mode): burn its firmware with \
`mstflint -d <bdf> -i <fw-image.bin> burn` (or `flint`, from MFT), matching the board's PSID (`mstflint -d <bdf> query`), \
then reboot or `mstfwreset`; an adapter that falls back to recovery again needs RMA";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_ids_are_mellanox_only() {
        assert_eq!(flash_recovery(0x15b3, 0x0218), Some("ConnectX-7"));
        assert_eq!(flash_recovery(0x15b3, 0x1021), None);
        assert_eq!(flash_recovery(0x8086, 0x0218), None);
        assert!(is_omnipath_hfi(0x8086, 0x24f0));
        assert!(!is_omnipath_hfi(0x15b3, 0x24f0));
    }
}
