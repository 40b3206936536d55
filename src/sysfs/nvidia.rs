//! NVIDIA driver procfs: `/proc/driver/nvidia/version` and `/proc/driver/nvidia/gpus/<bdf>/information`.

use std::sync::OnceLock;

use regex::Regex;

use crate::host::{Host, ReadError, ReadErrorKind};

pub const NVIDIA_VERSION: &str = "/proc/driver/nvidia/version";
pub const NVIDIA_GPUS: &str = "/proc/driver/nvidia/gpus";

/// Kernel-module flavour: DMA-BUF GDR and P2PDMA GDS need the open one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleFlavour {
    Open,
    Proprietary,
}

impl ModuleFlavour {
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleFlavour::Open => "open",
            ModuleFlavour::Proprietary => "proprietary",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverVersion {
    pub version: String,
    pub flavour: ModuleFlavour,
    /// The `NVRM version:` line as read, trimmed.
    pub nvrm_line: String,
}

/// Parses the first line of `/proc/driver/nvidia/version`. Fields are separated by runs of spaces whose width
/// varies between builds, so a regex finds the version rather than a field index.
pub fn parse_version(text: &str) -> Option<DriverVersion> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"Module(?: for \S+)?\s+(\d+(?:\.\d+)+)(?:\s|$)").expect("static regex")
    });
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let version = re.captures(line)?.get(1)?.as_str().to_string();
    let flavour = if line.contains("Open Kernel Module") {
        ModuleFlavour::Open
    } else {
        ModuleFlavour::Proprietary
    };
    Some(DriverVersion {
        version,
        flavour,
        nvrm_line: line.trim().to_string(),
    })
}

/// One GPU as the driver lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverGpu {
    /// Directory name: lower-case BDF with a 4-digit domain.
    pub bdf: String,
    pub model: Option<String>,
    pub uuid: Option<String>,
    /// `GPU Excluded: Yes` (older drivers: `Blacklisted: Yes`).
    pub excluded: bool,
}

/// `Key: <spaces/TABs> value` lines; split on the first colon.
pub fn parse_information(bdf: &str, text: &str) -> DriverGpu {
    let mut gpu = DriverGpu {
        bdf: bdf.to_string(),
        model: None,
        uuid: None,
        excluded: false,
    };
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "Model" => gpu.model = Some(value.to_string()),
            "GPU UUID" => gpu.uuid = Some(value.to_string()),
            "GPU Excluded" | "Blacklisted" => gpu.excluded = value.eq_ignore_ascii_case("yes"),
            _ => {}
        }
    }
    gpu
}

/// The first line of a file, for an error that shows what was found instead.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// The GPUs under `/proc/driver/nvidia/gpus/`. ENOENT (driver not loaded) is an empty list. Read once per host
/// and shared: the presence rule and several checks of one run ask for it.
pub fn read_driver_gpus(host: &Host) -> Result<Vec<DriverGpu>, ReadError> {
    host.shared(|host| DriverGpus(read_driver_gpus_uncached(host)))
        .0
        .clone()
}

/// The shared model's own type ([`Host::shared`] keys models by type).
struct DriverGpus(Result<Vec<DriverGpu>, ReadError>);

fn read_driver_gpus_uncached(host: &Host) -> Result<Vec<DriverGpu>, ReadError> {
    let names = match host.read_dir(NVIDIA_GPUS) {
        Ok(n) => n,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    names
        .into_iter()
        .map(|bdf| {
            let path = format!("{NVIDIA_GPUS}/{bdf}/information");
            let text = host.read(&path)?;
            let gpu = parse_information(&bdf, &text);
            // The driver always writes the model and UUID: without them this is not its file.
            if gpu.model.is_none() && gpu.uuid.is_none() {
                return Err(ReadError {
                    path,
                    kind: ReadErrorKind::Other(format!("unrecognised: {:?}", first_line(&text))),
                });
            }
            Ok(gpu)
        })
        .collect()
}

/// The driver flavour and kernel release that DMA-BUF GPUDirect RDMA and P2PDMA GDS depend on, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverAndKernel {
    pub driver: Option<DriverVersion>,
    /// `/proc/sys/kernel/osrelease`.
    pub release: Option<String>,
}

impl DriverAndKernel {
    /// A missing file is "not known" (driver not loaded); one that exists but cannot be read or parsed is an
    /// error: both decide whether DMA-BUF is possible.
    pub fn read(host: &Host) -> Result<Self, ReadError> {
        let driver = match super::stable::read(host, NVIDIA_VERSION) {
            Ok(t) => Some(parse_version(&t).ok_or_else(|| ReadError {
                path: NVIDIA_VERSION.into(),
                kind: ReadErrorKind::Other(format!("unrecognised: {:?}", first_line(&t))),
            })?),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let release = match crate::sysfs::kernel::read_release(host) {
            Ok(r) if crate::sysfs::kernel::parse_release(&r).is_some() => Some(r),
            Ok(r) => {
                return Err(ReadError {
                    path: crate::sysfs::kernel::OSRELEASE.into(),
                    kind: ReadErrorKind::Other(format!("unrecognised: {r:?}")),
                })
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        Ok(DriverAndKernel { driver, release })
    }

    pub fn open_module(&self) -> bool {
        self.driver
            .as_ref()
            .is_some_and(|d| d.flavour == ModuleFlavour::Open)
    }

    /// The kernel release is at least `(major, minor)`; unknown counts as no.
    pub fn kernel_at_least(&self, min: (u32, u32)) -> bool {
        self.release
            .as_deref()
            .and_then(crate::sysfs::kernel::parse_release)
            .is_some_and(|r| r >= min)
    }

    /// `path = value` lines for both.
    pub fn evidence(&self) -> [String; 2] {
        let driver = self
            .driver
            .as_ref()
            .map(|d| format!("{} ({} module)", d.version, d.flavour.as_str()))
            .unwrap_or("<missing or unrecognised>".into());
        [
            format!("{NVIDIA_VERSION} = {driver}"),
            format!(
                "{} = {}",
                crate::sysfs::kernel::OSRELEASE,
                self.release.as_deref().unwrap_or("<missing>")
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The presence rule and the checks of one run ask for the list in turn: the driver's files are read once.
    #[test]
    fn driver_gpu_list_is_read_once_per_host() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let host = Host::at(dir.path()).unwrap();
        let first = read_driver_gpus(&host).unwrap();
        assert_eq!(first.len(), 8);
        std::fs::remove_dir_all(dir.path().join("proc/driver/nvidia/gpus")).unwrap();
        assert_eq!(read_driver_gpus(&host.clone()).unwrap(), first);
        assert!(read_driver_gpus(&Host::at(dir.path()).unwrap())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn version_open_module_h200_double_spaces() {
        let v = parse_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n",
        )
        .unwrap();
        assert_eq!(v.version, "580.159.04");
        assert_eq!(v.flavour, ModuleFlavour::Open);
    }

    #[test]
    fn version_proprietary_module() {
        let v = parse_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n").unwrap();
        assert_eq!(v.version, "535.104.05");
        assert_eq!(v.flavour, ModuleFlavour::Proprietary);
    }

    #[test]
    fn version_garbage_is_none() {
        assert_eq!(parse_version("hello\n"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn information_tabs_and_excluded() {
        let g = parse_information(
            "0000:00:06.0",
            "Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-0cb02a0f-76da-8f49-2381-04795573d342\nGPU Excluded:\t No\n",
        );
        assert_eq!(g.model.as_deref(), Some("NVIDIA H200"));
        assert!(!g.excluded);
        assert!(parse_information("x", "Blacklisted: \t Yes\n").excluded);
    }
}
