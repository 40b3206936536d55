//! GPUDirect Storage without nvidia-fs: cuFile's PCI P2PDMA path. One reading for `gds.config` and
//! `gds.kernel_path`, so the two checks agree on whether the host has a direct path.
//!
//! The path needs (NVIDIA GDS "NVMe P2PDMA" troubleshooting guide): `"use_pci_p2pdma": true` in cufile.json,
//! the open NVIDIA kernel module of release 565 or later, a kernel built with `CONFIG_PCI_P2PDMA=y`, and the
//! NVMe driver. nvidia-fs is then not needed.

use crate::host::{optional, Host, ReadError};
use crate::sysfs::cufile_json::CufileConfig;
use crate::sysfs::modules::Modules;
use crate::sysfs::nvidia::{DriverAndKernel, ModuleFlavour};
use crate::version::compare_versions;

/// The first driver release whose open module serves cuFile through PCI P2PDMA.
pub const MIN_DRIVER: &str = "565";

pub const KEY: &str = "properties.use_pci_p2pdma";

pub const FIX: &str = "use the open NVIDIA kernel module 565 or later, a kernel with CONFIG_PCI_P2PDMA=y and the NVMe \
driver (nvme_core multipath=N); else set `\"use_pci_p2pdma\": false` and load nvidia-fs";

/// What the host offers for the P2PDMA path.
#[derive(Debug, Clone)]
pub struct P2pdma {
    /// cufile.json asks for it.
    pub requested: bool,
    /// The prerequisites the host lacks, as phrases ("a kernel with CONFIG_PCI_P2PDMA=y").
    pub missing: Vec<String>,
    /// What was read, as `path = value`.
    pub evidence: Vec<String>,
}

impl P2pdma {
    /// Requested and every prerequisite there: cuFile reads NVMe straight into GPU memory without nvidia-fs.
    pub fn ready(&self) -> bool {
        self.requested && self.missing.is_empty()
    }

    /// Reads the prerequisites; `config` is the parsed cufile.json where there is one.
    pub fn read(host: &Host, config: Option<&CufileConfig>) -> Result<P2pdma, ReadError> {
        let requested = config.and_then(|c| c.bool(KEY)).unwrap_or(false);
        let platform = DriverAndKernel::read(host)?;
        let kconfig_path = platform
            .release
            .as_ref()
            .map(|r| format!("/boot/config-{r}"));
        let kconfig = match &kconfig_path {
            Some(p) => optional(host.read(p))?,
            None => None,
        };
        let nvme = Modules::read(host)?.state(host, "nvme")?.is_loaded();
        let mut missing = Vec::new();
        match &platform.driver {
            Some(d) if d.flavour != ModuleFlavour::Open => missing.push(format!(
                "the open NVIDIA kernel module (this is the {} one)",
                d.flavour.as_str()
            )),
            Some(d) if compare_versions(&d.version, MIN_DRIVER).is_lt() => missing.push(format!(
                "an NVIDIA driver {MIN_DRIVER} or later (this is {})",
                d.version
            )),
            Some(_) => {}
            None => missing.push("the NVIDIA kernel module (not loaded)".into()),
        }
        match (&kconfig_path, &kconfig) {
            (_, Some(text)) if text.lines().any(|l| l.trim() == "CONFIG_PCI_P2PDMA=y") => {}
            (Some(p), Some(_)) => {
                missing.push(format!("a kernel with CONFIG_PCI_P2PDMA=y ({p} lacks it)"))
            }
            (Some(p), None) => missing.push(format!(
                "a kernel config showing CONFIG_PCI_P2PDMA=y ({p} missing)"
            )),
            (None, _) => missing.push(
                "a kernel config showing CONFIG_PCI_P2PDMA=y (kernel release unknown)".into(),
            ),
        }
        if !nvme {
            missing.push("the NVMe driver (nvme not loaded)".into());
        }
        let mut evidence: Vec<String> = platform.evidence().into();
        if let Some(p) = &kconfig_path {
            let line = kconfig.as_deref().map_or("<missing>".to_string(), |t| {
                t.lines()
                    .find(|l| l.contains("CONFIG_PCI_P2PDMA"))
                    .unwrap_or("<no CONFIG_PCI_P2PDMA line>")
                    .trim()
                    .to_string()
            });
            evidence.push(format!("{p} [CONFIG_PCI_P2PDMA] = {line}"));
        }
        evidence.push(format!("cufile.json [{KEY}] = {requested}"));
        Ok(P2pdma {
            requested,
            missing,
            evidence,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(scenario: &str) -> P2pdma {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/hosts")
            .join(scenario);
        let host = Host::at(&root).unwrap();
        let config = crate::sysfs::cufile_json::read_config(&host, "/etc/cufile.json").ok();
        P2pdma::read(&host, config.as_ref()).unwrap()
    }

    #[test]
    fn the_p2pdma_tree_is_ready() {
        let p = read("fleet-hgx-h100-p2pdma-gds");
        assert!(p.ready(), "{p:?}");
    }

    #[test]
    fn the_nvidia_fs_tree_neither_asks_nor_has_it() {
        let p = read("fleet-hgx-h100-idle-gpu-links");
        assert!(!p.requested);
        assert!(!p.ready());
        // 550 < 565, no kernel config, no nvme driver.
        assert_eq!(p.missing.len(), 3, "{:?}", p.missing);
    }
}
