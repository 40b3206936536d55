//! One rule for "is the thing this check needs there?", used by every probe: what the PCI bus shows × what the
//! kernel driver has taken × what the user-space library says → a verdict. No probe writes its own.
//!
//! | hardware on the bus | kernel driver          | user-space library              | verdict                          |
//! |---------------------|------------------------|---------------------------------|----------------------------------|
//! | none                | –                      | –                               | SKIP (FAIL if the profile expects it) |
//! | unreadable (bus or driver list) | –           | –                               | ERROR naming what was not read   |
//! | present             | not loaded / not bound | –                               | FAIL, naming the devices         |
//! | present             | bound                  | cannot be loaded                | ERROR: what to mount or install  |
//! | present             | bound                  | loads but fails or lists nothing| FAIL, the library's words + fix  |
//! | present             | bound, none in this container | works, lists none        | ERROR: no GPU exposed            |
//! | present             | bound                  | hangs                           | ERROR naming the call (runner)   |
//! | present             | bound                  | works                           | the probe judges                 |
//!
//! A hang is the runner's to report (`runner.rs`): the library is then marked hung for the rest of the run.

use crate::dynlib::{verbs, ErrorKind, LibError};
use crate::host::{optional, Host, ReadResult};
use crate::model::finding::common;
use crate::model::{CheckResult, Library, Status};
use crate::recording::Answers;
use crate::rules::topology::{PciTree, Role, GPUS, NICS};
use crate::sysfs::infiniband;
use crate::sysfs::modules::Modules;
use crate::sysfs::nvidia::{self, NVIDIA_GPUS, NVIDIA_VERSION};
use crate::sysfs::pci_ids;

/// Which hardware and driver a check stands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    /// NVIDIA GPUs and the `nvidia` kernel module.
    Gpu,
    /// RDMA-capable NICs (ConnectX and other network functions with an RDMA device) and their RDMA driver
    /// (`mlx5_ib` and kin), which registers devices under `/sys/class/infiniband`.
    Rdma,
}

impl Stack {
    fn hardware(self) -> &'static str {
        match self {
            Stack::Gpu => "NVIDIA GPU",
            Stack::Rdma => "RDMA-capable NIC",
        }
    }

    fn driver(self) -> &'static str {
        match self {
            Stack::Gpu => "the NVIDIA kernel driver (nvidia)",
            Stack::Rdma => "an RDMA driver (mlx5_ib for ConnectX)",
        }
    }

    fn driver_fix(self) -> &'static str {
        match self {
            Stack::Gpu => "install the NVIDIA driver and load it: `modprobe nvidia nvidia_uvm`; see `dmesg | grep -i nvrm` for why it did not bind",
            Stack::Rdma => "load the RDMA driver: `modprobe mlx5_ib ib_uverbs` (rdma-core's `rdma` service does it at boot); see `dmesg | grep -i mlx5`",
        }
    }
}

/// Adds an unreadable input to the survey's gap: the first one makes the error, later ones are named with it.
fn add_gap(gap: &mut Option<CheckResult>, e: &crate::host::ReadError) {
    match gap {
        Some(r) => r.evidence.push(format!("{} = {}", e.path, e.reason())),
        None => *gap = Some(CheckResult::read_error("", e)),
    }
}

/// Makes the driver's own unreadable list the gap's headline (it is what decides presence), keeping what was
/// there as evidence.
fn add_gap_first(gap: &mut Option<CheckResult>, e: &crate::host::ReadError) {
    let mut r = CheckResult::read_error("", e);
    if let Some(old) = gap.take() {
        r.evidence.push(old.summary);
        r.evidence.extend(old.evidence);
    }
    *gap = Some(r);
}

/// What the host shows for one stack, read once per check.
#[derive(Debug, Clone)]
pub struct Survey {
    pub stack: Stack,
    /// `GPU0 0000:18:00.0` per function of this kind on the PCI bus.
    pub on_bus: Vec<String>,
    /// Of those, the ones the kernel driver has not taken, with the driver they are bound to where sysfs says.
    pub unbound: Vec<String>,
    /// Devices the driver lists (GPU bus ids under /proc/driver/nvidia/gpus; RDMA device names).
    pub driver_devices: Vec<String>,
    pub evidence: Vec<String>,
    /// RDMA NICs in flash-recovery mode (`NIC3 0000:4c:00.0 (ConnectX-7 …)`): on the bus, invisible to every
    /// RDMA driver and library until their firmware is burnt again.
    pub recovery: Vec<String>,
    /// The bus, the module table or the driver's own list could not be read in full: neither absence nor
    /// "all bound" can be concluded (the error result to return then).
    gap: Option<CheckResult>,
}

impl Survey {
    pub fn read(host: &Host, stack: Stack) -> Survey {
        let tree = PciTree::read(host);
        let role = match stack {
            Stack::Gpu => Role::Gpu,
            Stack::Rdma => Role::Nic,
        };
        let looks_for = match stack {
            Stack::Gpu => GPUS,
            Stack::Rdma => NICS,
        };
        let recovery: Vec<String> = match (&tree, stack) {
            (Ok(t), Stack::Rdma) => t
                .with_role(role)
                .into_iter()
                .filter_map(|i| {
                    let n = &t.nodes[i];
                    n.flash_recovery.map(|adapter| {
                        format!(
                            "{} ({adapter} in flash-recovery mode, {:04x}:{:04x}: no driver, no RDMA device)",
                            t.subject(i),
                            n.attrs.vendor,
                            n.attrs.device
                        )
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        let (nodes, mut tree_gap) = match &tree {
            Ok(t) => (
                t.with_role(role)
                    .into_iter()
                    .map(|i| {
                        (
                            t.subject(i),
                            t.nodes[i].bdf.to_string(),
                            t.nodes[i].rdma_devices.clone(),
                        )
                    })
                    .collect::<Vec<_>>(),
                (!t.unread_of(looks_for).is_empty())
                    .then(|| t.nothing_found("", looks_for, CheckResult::skip("", ""))),
            ),
            Err(e) => (vec![], Some(CheckResult::read_error("", e))),
        };
        let mut evidence = vec![format!(
            "PCI bus {} = {}",
            stack.hardware(),
            if nodes.is_empty() {
                "<none>".to_string()
            } else {
                nodes
                    .iter()
                    .map(|(s, _, _)| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )];
        if let Ok(t) = &tree {
            evidence.extend(t.not_judged(looks_for));
        }
        let (driver_devices, unbound) = match stack {
            Stack::Gpu => {
                let module = match Modules::read(host).and_then(|m| m.state(host, "nvidia")) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        add_gap(&mut tree_gap, &e);
                        None
                    }
                };
                let loaded =
                    module.as_ref().is_some_and(|m| m.is_loaded()) || host.exists(NVIDIA_VERSION);
                if let Some(m) = &module {
                    evidence.extend(m.evidence());
                }
                let listed: Result<Vec<String>, _> = nvidia::read_driver_gpus(host)
                    .map(|g| g.into_iter().map(|g| g.bdf.to_ascii_lowercase()).collect());
                if let Err(e) = &listed {
                    add_gap_first(&mut tree_gap, e);
                }
                evidence.push(match &listed {
                    Ok(l) => format!("{NVIDIA_GPUS} = [{}]", l.join(", ")),
                    Err(e) => format!("{} = {}", e.path, e.reason()),
                });
                // The function's own `driver` link decides where sysfs has it: a container shows every GPU on
                // the bus but lists only its own under /proc/driver/nvidia/gpus. Recorded trees lack the link:
                // the driver's list decides there, and an unreadable list proves nothing unbound.
                // An unreadable link is no answer: the driver's list or an unloaded module still decides, and
                // where neither does, it is a gap.
                let is_listed = |bdf: &String| listed.as_ref().is_ok_and(|l| l.contains(bdf));
                let unbound = nodes
                    .iter()
                    .filter_map(|(subject, bdf, _)| match pci_driver(host, bdf) {
                        Ok(Some(d)) if d == "nvidia" => None,
                        Ok(Some(d)) => Some(format!("{subject} (bound to {d})")),
                        Ok(None) if !loaded || !is_listed(bdf) => Some(subject.clone()),
                        Ok(None) => None,
                        Err(e) if !loaded || is_listed(bdf) => {
                            evidence.push(format!("{} = {}", e.path, e.reason()));
                            (!loaded).then(|| subject.clone())
                        }
                        Err(e) => {
                            add_gap(&mut tree_gap, &e);
                            None
                        }
                    })
                    .collect();
                (listed, unbound)
            }
            Stack::Rdma => {
                // Shown, not judged (mlx5_ib is one RDMA driver of many), but read: unreadable is a gap.
                match Modules::read(host).and_then(|m| m.state(host, "mlx5_ib")) {
                    Ok(m) => evidence.extend(m.evidence()),
                    Err(e) => add_gap(&mut tree_gap, &e),
                }
                let names = infiniband::read_device_names(host);
                if let Err(e) = &names {
                    add_gap_first(&mut tree_gap, e);
                }
                evidence.push(match &names {
                    Ok(n) => format!("{} = [{}]", infiniband::CLASS_INFINIBAND, n.join(", ")),
                    Err(e) => format!("{} = {}", e.path, e.reason()),
                });
                // Only when no RDMA device is registered at all: a container in an exclusive RDMA network
                // namespace sees every NIC on the bus but only its own devices, and the PCI driver (mlx5_core)
                // says nothing about the RDMA one (mlx5_ib). An unreadable class directory proves nothing.
                let unbound = match &names {
                    Ok(n) if n.is_empty() => nodes
                        .iter()
                        .map(|(subject, bdf, _)| match pci_driver(host, bdf) {
                            Ok(Some(d)) => format!("{subject} (PCI driver {d})"),
                            Ok(None) => subject.clone(),
                            Err(e) => {
                                evidence.push(format!("{} = {}", e.path, e.reason()));
                                format!("{subject} (PCI driver link unreadable)")
                            }
                        })
                        .collect(),
                    _ => vec![],
                };
                (names, unbound)
            }
        };
        // An unreadable list is already in the gap.
        let driver_devices = driver_devices.unwrap_or_default();
        Survey {
            stack,
            on_bus: nodes.into_iter().map(|(s, _, _)| s).collect(),
            unbound,
            driver_devices,
            evidence,
            recovery,
            gap: tree_gap,
        }
    }

    /// One failure per RDMA NIC in flash-recovery mode, naming it and the firmware burn that brings it back:
    /// the check that lists RDMA devices reports them beside the devices it sees.
    pub fn recovery_results(&self, id: &str) -> Vec<CheckResult> {
        self.recovery
            .iter()
            .map(|f| {
                let subject = f.split(" (").next().unwrap_or(f).to_string();
                CheckResult::fail(id, format!("{f}: its firmware did not boot"))
                    .subject(subject)
                    .fix(pci_ids::FLASH_RECOVERY_FIX)
                    .code(&common::FLASH_RECOVERY)
            })
            .collect()
    }

    /// `results` of a check that went on past the gate, the survey's readings added to the first one's evidence
    /// (what the gate saw is on record), with the error added when the survey could not read everything and no
    /// node-wide error says so yet: a device it could not see may be the unbound one.
    pub fn completed(&self, id: &str, mut results: Vec<CheckResult>) -> Vec<CheckResult> {
        if let Some(first) = results.first_mut() {
            for line in &self.evidence {
                if !first.evidence.contains(line) {
                    first.evidence.push(line.clone());
                }
            }
        }
        let node_error = results
            .iter()
            .any(|r| r.subject.is_none() && r.status == Status::Error);
        if let (Some(gap), false) = (&self.gap, node_error) {
            let mut r = gap.clone();
            r.id = id.to_string();
            results.push(r);
        }
        results
    }

    /// No function of this kind on the bus and none listed by a driver.
    pub fn hardware_absent(&self) -> bool {
        self.on_bus.is_empty() && self.driver_devices.is_empty()
    }

    /// The verdict when the hardware or its driver is missing; None when both are there and the check goes on.
    /// `expected`: the profile expects this hardware (absence is then a failure).
    pub fn gate(&self, id: &str, expected: bool) -> Option<CheckResult> {
        let r = if self.hardware_absent() {
            if let Some(gap) = &self.gap {
                let mut r = gap.clone();
                r.id = id.to_string();
                return Some(r);
            }
            let what = self.stack.hardware();
            if expected {
                CheckResult::fail(id, format!("no {what} on the PCI bus, but the profile expects one"))
                    .fix("check that the devices are seated and powered (`lspci`), and the BIOS enables their slots")
                    .code(&common::EXPECTED_ABSENT)
            } else {
                CheckResult::skip(id, format!("no {what} on this host (none on the PCI bus)"))
                    .code(&common::ABSENT)
            }
        } else if !self.unbound.is_empty() {
            // The summary names a few (a table row stays readable); the evidence names every one.
            const NAMED: usize = 3;
            let more = self.unbound.len().saturating_sub(NAMED);
            CheckResult::fail(
                id,
                format!(
                    "{} {}(s) on the PCI bus without {}: {}{}",
                    self.unbound.len(),
                    self.stack.hardware(),
                    self.stack.driver(),
                    self.unbound[..self.unbound.len().min(NAMED)].join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ),
            )
            .evidence("without a driver", self.unbound.join(", "))
            .fix(if self.recovery.is_empty() {
                self.stack.driver_fix().to_string()
            } else {
                format!(
                    "{}: {}; for the others, {}",
                    self.recovery.join(", "),
                    pci_ids::FLASH_RECOVERY_FIX,
                    self.stack.driver_fix()
                )
            })
            .code(&common::UNBOUND)
        } else if let Some(gap) = &self.gap {
            // Present and bound as far as could be read; what could not be read may hide an unbound device.
            let mut r = gap.clone();
            r.id = id.to_string();
            r
        } else {
            return None;
        };
        Some(self.with_evidence(r))
    }

    /// [`Survey::gate`] only when nothing of this kind is usable: a check that measures what the driver did
    /// take goes on when some devices lack it (the check that lists devices names those).
    pub fn gate_if_unusable(&self, id: &str, expected: bool) -> Option<CheckResult> {
        if self.driver_devices.is_empty() {
            self.gate(id, expected)
        } else {
            None
        }
    }

    /// The verdict for a library that failed before the check could read anything.
    pub fn library_failed(&self, id: &str, err: &LibError, expected: bool) -> CheckResult {
        if let Some(r) = self.gate(id, expected) {
            return r.note(format!("{} = {err}", err.call));
        }
        let r = match err.kind {
            ErrorKind::NotLoaded => CheckResult::error(
                id,
                format!(
                    "the kernel driver is there but {} cannot be loaded: {err}",
                    err.library.soname()
                ),
            )
            .fix(install_fix(err.library))
            .code(&common::LIBRARY_MISSING),
            ErrorKind::MissingSymbol | ErrorKind::Failed => {
                CheckResult::fail(id, format!("{} failed: {err}", err.library.soname()))
                    .fix(broken_fix(err))
                    .code(&common::LIBRARY_BROKEN)
            }
        };
        self.with_evidence(r.evidence(&err.call, &err.text))
    }

    /// The devices a library lists, or the verdict when it failed (with the call's own answer as a note) or
    /// listed none.
    fn library_devices(
        &self,
        id: &str,
        library: Library,
        call: &str,
        listed: Result<Vec<String>, (LibError, String)>,
        expected: bool,
    ) -> Result<Vec<String>, Box<CheckResult>> {
        match listed {
            Err((err, answer)) => Err(Box::new(
                self.library_failed(id, &err, expected).note(answer),
            )),
            Ok(devices) if devices.is_empty() => Err(Box::new(
                self.library_lists_none(id, library, call, expected),
            )),
            Ok(devices) => Ok(devices),
        }
    }

    /// The devices libibverbs lists (recorded or live), or the verdict when it cannot be asked, fails or lists
    /// none.
    pub fn verbs_devices(
        &self,
        answers: &Answers,
        id: &str,
        expected: bool,
    ) -> Result<Vec<String>, Box<CheckResult>> {
        let discovery = answers
            .obtain(verbs::DEVICE_LIST_KEY, verbs::discover)
            .map_err(|e| Box::new(CheckResult::error(id, e).code(&common::LIBRARY_UNANSWERED)))?
            .value;
        self.library_devices(
            id,
            Library::Verbs,
            "ibv_get_device_list",
            discovery.into_result(),
            expected,
        )
    }

    /// The verdict for a library that works but lists none of the devices the bus and the driver show.
    pub fn library_lists_none(
        &self,
        id: &str,
        library: Library,
        call: &str,
        expected: bool,
    ) -> CheckResult {
        if let Some(r) = self.gate(id, expected) {
            return r.note(format!("{call} = 0 devices"));
        }
        if self.stack == Stack::Gpu && self.driver_devices.is_empty() {
            // Bound on the host (their sysfs links say so) but none listed here: a container given no GPU.
            let r = CheckResult::error(
                id,
                format!(
                    "no GPU is exposed to this container: {} lists none and /proc/driver/nvidia/gpus is empty, while {} GPU(s) bound to nvidia are on the PCI bus",
                    library.soname(),
                    self.on_bus.len()
                ),
            )
            .fix("request GPUs for the pod (`nvidia.com/gpu` resources) or run with `--gpus all` / NVIDIA_VISIBLE_DEVICES; a pod that needs no GPU should skip the GPU checks (`--skip gpu.inventory,...` or a profile without them)")
            .code(&common::NOT_EXPOSED);
            return self.with_evidence(r.evidence(call, 0));
        }
        let r = CheckResult::fail(
            id,
            format!(
                "{} lists no device while {} {}(s) are on the PCI bus and {} lists [{}]",
                library.soname(),
                self.on_bus.len(),
                self.stack.hardware(),
                self.stack.driver(),
                self.driver_devices.join(", ")
            ),
        )
        .fix(match library {
            Library::Verbs | Library::Efa | Library::Fabric => "libibverbs has no provider for these devices: install the provider library (`ibverbs-providers`, which ships libmlx5) matching the kernel driver; in a container, mount /etc/libibverbs.d and the provider too",
            Library::Nvml | Library::Cuda | Library::Cufile => "in a container, expose the GPUs (`--gpus all`, NVIDIA_VISIBLE_DEVICES, the device plugin); on the host see `nvidia-smi` and `dmesg` for Xid errors",
        })
        .code(&common::LIBRARY_LISTS_NONE);
        self.with_evidence(r.evidence(call, 0))
    }

    fn with_evidence(&self, mut r: CheckResult) -> CheckResult {
        r.evidence.splice(0..0, self.evidence.iter().cloned());
        r
    }
}

/// The driver bound to a PCI function, from its `driver` link; None where there is no link (nothing bound
/// live; not recorded in a tree). A link that exists but cannot be read is the error, not "no driver".
fn pci_driver(host: &Host, bdf: &str) -> ReadResult<Option<String>> {
    let target = optional(host.read_link(&format!("/sys/bus/pci/devices/{bdf}/driver")))?;
    Ok(target.and_then(|t| t.rsplit('/').next().map(str::to_string)))
}

/// What to mount or install when the kernel side is there and the library is not.
fn install_fix(library: Library) -> &'static str {
    match library {
        Library::Nvml | Library::Cuda => "in a container, run with the NVIDIA container toolkit (`--gpus all`, or the runtime class the GPU operator installs) so libnvidia-ml.so.1 and libcuda.so.1 are mounted; on the host, install the driver's user-space libraries matching the loaded module (`libnvidia-compute-<branch>`)",
        Library::Cufile => "install libcufile (the CUDA toolkit's `libcufile` or `nvidia-gds` package) or mount it into the container and add its directory to the loader path",
        Library::Verbs => "install rdma-core (`apt install rdma-core ibverbs-providers` / `dnf install rdma-core libibverbs`), or mount libibverbs.so.1 and its providers into the container",
        Library::Efa | Library::Fabric => "install AWS's EFA software (aws-efa-installer: libefa, and libfabric with the efa provider in /opt/amazon/efa), or mount them into the container",
    }
}

/// The fix for a library that loaded and then failed, by its own code.
fn broken_fix(err: &LibError) -> &'static str {
    const MISMATCH: &str = "the kernel module and the user-space library come from different driver versions (a driver upgraded without a reboot, or a container image carrying its own driver libraries): reboot, or unload and reload the nvidia modules; in a container, let the NVIDIA toolkit mount the host's libraries instead of shipping them";
    match (err.kind, err.library, err.code) {
        (ErrorKind::MissingSymbol, Library::Nvml | Library::Cuda, _) => "the driver's user-space library is older than this tool supports (R535 / CUDA 12.2 or later) or not NVIDIA's: upgrade the driver, or mount the host's libraries",
        (ErrorKind::MissingSymbol, _, _) => "the library is older than this tool supports or not the real one: upgrade it",
        // NVML_ERROR_LIB_RM_VERSION_MISMATCH; CUDA_ERROR_SYSTEM_DRIVER_MISMATCH.
        (_, Library::Nvml, Some(18)) | (_, Library::Cuda, Some(803)) => MISMATCH,
        // NVML_ERROR_DRIVER_NOT_LOADED; CUDA_ERROR_NO_DEVICE.
        (_, Library::Nvml, Some(9)) | (_, Library::Cuda, Some(100)) => "the library reaches no GPU: load the driver (`modprobe nvidia nvidia_uvm`); in a container, expose the GPUs (`--gpus all`, NVIDIA_VISIBLE_DEVICES)",
        // NVML_ERROR_NO_PERMISSION; CUDA_ERROR_NOT_PERMITTED (/dev/nvidia* not accessible).
        (_, Library::Nvml, Some(4)) | (_, Library::Cuda, Some(800)) => "this user cannot open /dev/nvidia*: run as root or fix the device nodes' permissions (NVreg_DeviceFileMode)",
        (_, Library::Verbs, _) => "see the errno above: EACCES = the container lacks /dev/infiniband (RDMA device plugin or `--device`); ENOSYS = ib_uverbs not loaded",
        _ => "see `dmesg` for Xid or driver errors; check that nvidia_uvm is loaded and the GPU is healthy (`nvidia-smi -q`)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Status;

    fn survey(on_bus: &[&str], unbound: &[&str], driver: &[&str]) -> Survey {
        Survey {
            stack: Stack::Gpu,
            on_bus: on_bus.iter().map(|s| s.to_string()).collect(),
            unbound: unbound.iter().map(|s| s.to_string()).collect(),
            driver_devices: driver.iter().map(|s| s.to_string()).collect(),
            evidence: vec![],
            recovery: vec![],
            gap: None,
        }
    }

    /// An RDMA class directory that cannot be listed on a host with no NIC on the bus proves no absence: an
    /// error naming it, not "no RDMA-capable NIC on this host" (it was a SKIP).
    #[test]
    fn an_unreadable_driver_list_is_no_proof_of_absence() {
        let dir = crate::probes::testing::copy_scenario("h200-vm-snapshot");
        std::os::unix::fs::symlink("infiniband", dir.path().join("sys/class/infiniband")).unwrap();
        let host = Host::at(dir.path()).unwrap();
        let r = Survey::read(&host, Stack::Rdma).gate("x", false).unwrap();
        assert_eq!(r.status, Status::Error, "{}", r.summary);
        assert!(
            r.summary.contains(infiniband::CLASS_INFINIBAND),
            "{}",
            r.summary
        );
    }

    /// A copy of `hgx-healthy` whose first GPU has a `driver` entry that is no link (reading it fails with
    /// EINVAL), optionally dropped from the driver's list; the host and the GPU's address.
    fn gpu_with_unreadable_driver_link(listed: bool) -> (tempfile::TempDir, Host, String) {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let host = Host::at(dir.path()).unwrap();
        let bdf = nvidia::read_driver_gpus(&host).unwrap()[0]
            .bdf
            .to_ascii_lowercase();
        let device = host
            .resolve(&format!("/sys/bus/pci/devices/{bdf}"))
            .unwrap();
        std::fs::write(device.join("driver"), "").unwrap();
        if !listed {
            std::fs::remove_dir_all(dir.path().join(format!("proc/driver/nvidia/gpus/{bdf}")))
                .unwrap();
        }
        let host = Host::at(dir.path()).unwrap();
        (dir, host, bdf)
    }

    /// Reproduced: an unreadable `driver` link read as "no link", so a GPU the driver does not list was called
    /// unbound (FAIL) where nothing says which driver has it; now an error naming the link.
    #[test]
    fn an_unreadable_driver_link_is_an_error_where_it_decides() {
        let (_dir, host, bdf) = gpu_with_unreadable_driver_link(false);
        let r = Survey::read(&host, Stack::Gpu).gate("x", false).unwrap();
        assert_eq!(r.status, Status::Error, "{r:#?}");
        let link = format!("/sys/bus/pci/devices/{bdf}/driver");
        assert!(r.summary.contains(&link), "{}", r.summary);
    }

    /// Where the driver's list decides, the verdict stands and the evidence shows the failed read, not nothing.
    #[test]
    fn an_unreadable_driver_link_is_shown_where_the_list_decides() {
        let (_dir, host, bdf) = gpu_with_unreadable_driver_link(true);
        let survey = Survey::read(&host, Stack::Gpu);
        assert!(survey.gate("x", false).is_none());
        let line = format!("/sys/bus/pci/devices/{bdf}/driver = <EINVAL>");
        assert!(survey.evidence.contains(&line), "{:#?}", survey.evidence);
    }

    #[test]
    fn the_table() {
        let absent = LibError::not_loaded(
            Library::Nvml,
            "libnvidia-ml.so.1: cannot open shared object file",
        );
        let mismatch = LibError::failed(
            Library::Nvml,
            "nvmlInit_v2",
            Some(18),
            "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        );
        let none = survey(&[], &[], &[]);
        assert_eq!(
            none.library_failed("x", &absent, false).status,
            Status::Skip
        );
        assert_eq!(none.library_failed("x", &absent, true).status, Status::Fail);
        assert_eq!(
            none.library_failed("x", &mismatch, false).status,
            Status::Skip
        );
        let no_driver = survey(&["GPU0 0000:18:00.0"], &["GPU0 0000:18:00.0"], &[]);
        let r = no_driver.library_failed("x", &absent, false);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("GPU0 0000:18:00.0"), "{}", r.summary);
        let healthy = survey(&["GPU0 0000:18:00.0"], &[], &["0000:18:00.0"]);
        assert!(healthy.gate("x", false).is_none());
        assert_eq!(
            healthy.library_failed("x", &absent, false).status,
            Status::Error
        );
        let r = healthy.library_failed("x", &mismatch, false);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary.contains("NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
            "{}",
            r.summary
        );
        assert!(r.remediation.unwrap().contains("reboot"));
        assert_eq!(
            healthy
                .library_lists_none("x", Library::Nvml, "nvmlDeviceGetCount_v2", false)
                .status,
            Status::Fail
        );
    }
}
