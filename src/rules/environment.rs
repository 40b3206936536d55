//! Where this node runs, as far as a check's meaning goes (`Environment`): on bare metal or in a virtual
//! machine, and whether inside a container. Read through the host root, so a recorded tree tells its own; the
//! report records it with the evidence, and each check declares where it is meaningful (`ProbeMeta::meaningful`).
//! Verdicts do not rest on it: a probe that behaves differently in a VM (`pcie.acs`) reads its own signals.

use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::model::Environment;
use crate::sysfs::hypervisor::{self, PROC_CPUINFO};

/// Files a container runtime leaves at the root of the container: Docker's, and podman's and CRI-O's.
const CONTAINER_MARKERS: &[&str] = &["/.dockerenv", "/run/.containerenv"];
/// The control groups of the first process: a runtime's or Kubernetes' names where the cgroup namespace is the
/// host's (cgroup v1, or v2 without a private namespace).
const PROC_1_CGROUP: &str = "/proc/1/cgroup";
const CGROUP_MARKERS: &[&str] = &["kubepods", "docker", "containerd", "libpod", "crio", "lxc"];

/// The environment as the report records it, in the words checks declare theirs with, and the files that
/// decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detected {
    /// The machine under the container, if any: `BareMetal`, or `CloudVm` for any virtual machine (a cloud
    /// provider's or another hypervisor's: the PCIe ports are virtual either way); None where the signals could
    /// not be read (a recorded tree without `/proc/cpuinfo`, an unreadable file).
    pub machine: Option<Environment>,
    pub container: bool,
    /// `path = what it showed`, one line per signal read (and per one that could not be read).
    pub evidence: Vec<String>,
}

impl Detected {
    /// The environments a check must be meaningful in to apply here (none while the machine is unknown).
    pub fn environments(&self) -> Vec<Environment> {
        self.machine
            .into_iter()
            .chain(self.container.then_some(Environment::Container))
            .collect()
    }

    /// `bare metal`, `VM, in a container`, `unknown machine`: for the table's header.
    pub fn describe(&self) -> String {
        let machine = match self.machine {
            Some(Environment::BareMetal) => "bare metal",
            Some(_) => "virtual machine",
            None => "unknown machine",
        };
        if self.container {
            format!("{machine}, in a container")
        } else {
            machine.to_string()
        }
    }
}

/// Reads the signals under the host root. Never fails: what could not be read makes the machine unknown and is
/// named in the evidence.
pub fn detect(host: &Host) -> Detected {
    let mut evidence = Vec::new();
    let machine = match hypervisor::detect(host) {
        Ok(h) if h.is_vm() => {
            evidence.extend(h.signals);
            Some(Environment::CloudVm)
        }
        // No signal is bare metal only where the CPU's own flags were there to show one.
        Ok(h) if h.cpuinfo_read => {
            evidence.push(format!(
                "{PROC_CPUINFO} = no `hypervisor` flag, no virtual platform in DMI"
            ));
            Some(Environment::BareMetal)
        }
        Ok(_) => {
            evidence.push(format!("{PROC_CPUINFO} = absent"));
            None
        }
        Err(e) => {
            evidence.push(format!("{} = unreadable: {}", e.path, e.reason()));
            None
        }
    };
    let mut container = false;
    for marker in CONTAINER_MARKERS {
        if host.exists(marker) {
            evidence.push(format!("{marker} = present"));
            container = true;
        }
    }
    match host.read(PROC_1_CGROUP) {
        Ok(text) => {
            let named: Vec<&str> = CGROUP_MARKERS
                .iter()
                .copied()
                .filter(|m| text.contains(m))
                .collect();
            if !named.is_empty() {
                evidence.push(format!("{PROC_1_CGROUP} = names {}", named.join(", ")));
                container = true;
            }
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => evidence.push(format!("{PROC_1_CGROUP} = unreadable: {}", e.reason())),
    }
    Detected {
        machine,
        container,
        evidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detected(files: &[(&str, &str)]) -> Detected {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let at = dir.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        }
        detect(&Host::at(dir.path()).unwrap())
    }

    const METAL: &str = "processor : 0\nflags : fpu vme sse2\n";
    const GUEST: &str = "processor : 0\nflags : fpu vme sse2 hypervisor\n";
    const ARM: &str = "processor : 0\nFeatures : fp asimd\n";

    #[test]
    fn bare_metal_vm_and_unknown_machines() {
        let metal = detected(&[("/proc/cpuinfo", METAL)]);
        assert_eq!(
            (metal.machine, metal.container),
            (Some(Environment::BareMetal), false)
        );
        assert_eq!(metal.environments(), [Environment::BareMetal]);
        assert_eq!(
            detected(&[("/proc/cpuinfo", GUEST)]).machine,
            Some(Environment::CloudVm)
        );
        // Arm guests show no CPU flag: DMI names the hypervisor.
        let arm_guest = detected(&[
            ("/proc/cpuinfo", ARM),
            ("/sys/class/dmi/id/sys_vendor", "QEMU\n"),
        ]);
        assert_eq!(
            arm_guest.machine,
            Some(Environment::CloudVm),
            "{arm_guest:?}"
        );
        // An EC2 metal instance names the cloud in DMI but is bare metal.
        let ec2_metal = detected(&[
            ("/proc/cpuinfo", METAL),
            ("/sys/class/dmi/id/sys_vendor", "Amazon EC2\n"),
        ]);
        assert_eq!(ec2_metal.machine, Some(Environment::BareMetal));
        // Nothing to read is not bare metal.
        let unknown = detected(&[]);
        assert_eq!(unknown.machine, None);
        assert!(unknown.environments().is_empty());
        assert_eq!(detected(&[("/proc/cpuinfo", "garbage")]).machine, None);
    }

    #[test]
    fn containers_by_marker_file_or_cgroup() {
        for (path, text) in [
            ("/.dockerenv", ""),
            ("/run/.containerenv", "engine=\"podman-5\"\n"),
            (
                "/proc/1/cgroup",
                "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope\n",
            ),
            ("/proc/1/cgroup", "12:devices:/docker/0123abcd\n"),
        ] {
            let d = detected(&[("/proc/cpuinfo", GUEST), (path, text)]);
            assert!(d.container, "{path}: {d:?}");
            assert_eq!(
                d.environments(),
                [Environment::CloudVm, Environment::Container]
            );
            assert_eq!(d.describe(), "virtual machine, in a container");
        }
        // A host's own cgroup (systemd's init.scope) is no container.
        let host = detected(&[
            ("/proc/cpuinfo", METAL),
            ("/proc/1/cgroup", "0::/init.scope\n"),
        ]);
        assert!(!host.container, "{host:?}");
        assert_eq!(host.describe(), "bare metal");
    }
}
