//! IOMMU state: `/sys/kernel/iommu_groups/<N>/{type,devices/}` and the IOMMU parameters of `/proc/cmdline`.

use crate::host::{Host, ReadError};

pub const IOMMU_GROUPS: &str = "/sys/kernel/iommu_groups";
pub const PROC_CMDLINE: &str = "/proc/cmdline";

/// One IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuGroup {
    pub id: String,
    /// `identity`, `DMA`, `DMA-FQ`, `blocked`, `unmanaged`; None when the file is missing (old kernels).
    pub domain_type: Option<String>,
    /// The type file exists but could not be read: `(path, reason)`. The group may be translated or not.
    pub type_unreadable: Option<(String, String)>,
    /// Member BDFs.
    pub devices: Vec<String>,
}

impl IommuGroup {
    /// DMA goes through IOMMU page tables (`DMA`, `DMA-FQ`).
    pub fn is_translated(&self) -> bool {
        matches!(self.domain_type.as_deref(), Some("DMA" | "DMA-FQ"))
    }
}

/// Every group, in numeric order. No directory, or an empty one, means no IOMMU.
pub fn read_groups(host: &Host) -> Result<Vec<IommuGroup>, ReadError> {
    let mut ids = match host.read_dir(IOMMU_GROUPS) {
        Ok(ids) => ids,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    ids.sort_by_key(|id| id.parse::<u64>().unwrap_or(u64::MAX));
    ids.into_iter()
        .map(|id| {
            let dir = format!("{IOMMU_GROUPS}/{id}");
            let type_path = format!("{dir}/type");
            let (domain_type, type_unreadable) = match host.read_value(&type_path) {
                Ok(t) if DOMAIN_TYPES.contains(&t.as_str()) => (Some(t), None),
                Ok(t) => (None, Some((type_path, format!("<unrecognised: {t:?}>")))),
                Err(e) if e.is_not_found() => (None, None),
                Err(e) => (None, Some((e.path.clone(), e.reason()))),
            };
            Ok(IommuGroup {
                domain_type,
                type_unreadable,
                // The members decide which devices the group's type applies to: unreadable is an error.
                devices: host.read_dir(&format!("{dir}/devices"))?,
                id,
            })
        })
        .collect()
}

/// What the kernel writes to a group's `type` (`iommu_group_show_type`); `unknown` and anything else leave
/// passthrough and translation undecided.
const DOMAIN_TYPES: &[&str] = &["identity", "DMA", "DMA-FQ", "blocked", "unmanaged"];

/// The IOMMU and ACS parameters of a kernel command line, in order (`intel_iommu=on`, `iommu=pt`, …).
pub fn iommu_parameters(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .filter(|p| {
            let key = p.split('=').next().unwrap_or(p);
            matches!(key, "iommu" | "intel_iommu" | "amd_iommu")
                || key.starts_with("iommu.")
                || p.starts_with("pci=disable_acs_redir")
                || p.starts_with("pci=config_acs")
        })
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_iommu_parameters_are_picked() {
        let p = iommu_parameters(
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt iommu.strict=0 quiet pci=realloc=off",
        );
        assert_eq!(p, ["intel_iommu=on", "iommu=pt", "iommu.strict=0"]);
        assert!(iommu_parameters("swiotlb=noforce pci=realloc=off").is_empty());
    }

    #[test]
    fn translated_types() {
        let g = |t: &str| IommuGroup {
            id: "0".into(),
            domain_type: Some(t.into()),
            type_unreadable: None,
            devices: vec![],
        };
        assert!(g("DMA").is_translated());
        assert!(g("DMA-FQ").is_translated());
        assert!(!g("identity").is_translated());
    }
}
