//! Are we a virtual machine? `/proc/cpuinfo` `hypervisor` flag, `/sys/hypervisor/type`, DMI vendor strings.

use crate::host::{Host, ReadError};
use crate::sysfs::dmi::{DMI_PRODUCT_NAME, DMI_SYS_VENDOR};

pub const PROC_CPUINFO: &str = "/proc/cpuinfo";
pub const SYS_HYPERVISOR_TYPE: &str = "/sys/hypervisor/type";

/// DMI strings of virtual platforms. Bare-metal cloud hosts also report the cloud vendor, so DMI alone is a
/// weak signal; it is reported with the others, not on its own.
const VIRTUAL_DMI: &[&str] = &[
    "QEMU",
    "KVM",
    "VMware",
    "VirtualBox",
    "Virtual Machine",
    "Xen",
    "Bochs",
    "Firecracker",
];

/// The signals that fired, as `path = value` evidence. Empty = no sign of a hypervisor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hypervisor {
    pub signals: Vec<String>,
    /// `/proc/cpuinfo` was there to read: only then does no signal mean bare metal.
    pub cpuinfo_read: bool,
}

impl Hypervisor {
    pub fn is_vm(&self) -> bool {
        !self.signals.is_empty()
    }
}

/// `flags : ... hypervisor ...` on any processor line (x86: CPUID.1:ECX bit 31).
pub fn cpuinfo_has_hypervisor_flag(cpuinfo: &str) -> bool {
    cpuinfo.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim() == "flags" && v.split_whitespace().any(|f| f == "hypervisor")
        })
    })
}

/// The signals found. An unreadable `/proc/cpuinfo` (the one signal every x86 guest gives) is an error: a VM
/// would pass for bare metal.
fn cpuinfo_lists_features(cpuinfo: &str) -> bool {
    cpuinfo.lines().any(|l| {
        l.split_once(':')
            .is_some_and(|(k, _)| matches!(k.trim(), "flags" | "Features"))
    })
}

pub fn detect(host: &Host) -> Result<Hypervisor, ReadError> {
    let mut signals = Vec::new();
    let cpuinfo = host.read(PROC_CPUINFO);
    let cpuinfo_read = cpuinfo.is_ok();
    match cpuinfo {
        // The CPU's own flag settles it on x86; the weaker signals are read only where it is absent (Arm, or a
        // hypervisor that hides it).
        Ok(c) if cpuinfo_has_hypervisor_flag(&c) => {
            signals.push(format!("{PROC_CPUINFO} = flags contain `hypervisor`"));
            return Ok(Hypervisor {
                signals,
                cpuinfo_read: true,
            });
        }
        // Every CPU line block lists its feature flags (`flags` on x86, `Features` on Arm).
        Ok(c) if !cpuinfo_lists_features(&c) => {
            return Err(ReadError {
                path: PROC_CPUINFO.into(),
                kind: crate::host::ReadErrorKind::Other("no `flags` or `Features` line".into()),
            })
        }
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    if let Ok(t) = host.read(SYS_HYPERVISOR_TYPE) {
        if !t.is_empty() {
            signals.push(format!("{SYS_HYPERVISOR_TYPE} = {t}"));
        }
    }
    for path in [DMI_SYS_VENDOR, DMI_PRODUCT_NAME] {
        if let Ok(v) = host.read(path) {
            if VIRTUAL_DMI.iter().any(|m| v.contains(m)) {
                signals.push(format!("{path} = {v}"));
            }
        }
    }
    Ok(Hypervisor {
        signals,
        cpuinfo_read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypervisor_flag_is_found_only_in_flags() {
        assert!(cpuinfo_has_hypervisor_flag(
            "processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor lahf_lm\n"
        ));
        assert!(!cpuinfo_has_hypervisor_flag(
            "processor\t: 0\nmodel name\t: hypervisor\nflags\t\t: fpu vme\n"
        ));
    }
}
