//! `rdma.devices`: RDMA devices under /sys/class/infiniband, what they are, and whether this process can open
//! them (the uverbs character device exists under /dev/infiniband).

use crate::host::{Host, ReadError};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Need, Probe, ProbeMeta, Remedy,
};
use crate::profile::Expect;
use crate::rules::nic_role::{self, Ports, Role, Use};
use crate::rules::presence::{Stack, Survey};
use crate::sysfs::infiniband::{
    self, read_device, read_device_names, read_uverbs_map, RdmaDevice, UverbsMap, CLASS_INFINIBAND,
    DEV_INFINIBAND,
};

pub struct RdmaDevices;

const ID: &str = "rdma.devices";

const FIX_UVERBS: &str = "expose the verbs devices to the container: Kubernetes RDMA device plugin \
(rdma/hca resource) or `--device /dev/infiniband/uverbsN` (Docker); on the host: `modprobe ib_uverbs`";

const EXPECTED_NONE: FindingCode = FindingCode {
    code: "RDM001",
    title: "no RDMA device while the profile expects some",
    explanation: "/sys/class/infiniband is empty or absent but the profile expects RDMA devices (`expect.rdma_device_count`): check that the HCAs are seated and their driver loaded (`dmesg | grep -i mlx5`, `lspci -d 15b3:`).",
    step: Some(Remedy::ServiceRma),
};
const NO_ACCESS: FindingCode = FindingCode {
    code: "RDM002",
    title: "this process may not open the device's uverbs node",
    explanation: "/dev/infiniband/uverbsN exists but is not readable and writable by this user: verbs cannot open the device. rdma-core's udev rules make the nodes 0666; or add the user to their group, or run as root.",
    step: Some(Remedy::Reconfigure),
};
const NODE_MISSING: FindingCode = FindingCode {
    code: "RDM003",
    title: "the device's uverbs node is missing from /dev/infiniband",
    explanation: "The device is in sysfs but its /dev/infiniband/uverbsN node is missing (a container without the device mounted, or udev not run): verbs cannot open it.",
    step: Some(Remedy::LoadModule),
};
const NO_UVERBS: FindingCode = FindingCode {
    code: "RDM004",
    title: "no uverbs device maps to the RDMA device",
    explanation: "No /sys/class/infiniband_verbs entry names the device: ib_uverbs is not loaded, so verbs cannot open it. `modprobe ib_uverbs`.",
    step: Some(Remedy::LoadModule),
};
const TOO_FEW: FindingCode = FindingCode {
    code: "RDM005",
    title: "fewer RDMA devices than the profile expects",
    explanation: "Fewer devices are listed than `expect.rdma_device_count`: an HCA missing from the bus or without its driver. Find it (`dmesg | grep -i mlx5`, `lspci -d 15b3:`); reseat or replace it.",
    step: Some(Remedy::ServiceRma),
};
const TOO_MANY: FindingCode = FindingCode {
    code: "RDM006",
    title: "more RDMA devices than the profile expects",
    explanation: "More devices than `expect.rdma_device_count` and storage/frontend devices do not explain the surplus: a bond, VFs, or a profile written for another node shape.",
    step: Some(Remedy::Reconfigure),
};
const UVERBS_UNREADABLE: FindingCode = FindingCode {
    code: "RDM007",
    title: "which uverbs device opens the RDMA device cannot be told",
    explanation: "An error: ibdev files under /sys/class/infiniband_verbs could not be read; one of them may be this device's.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "RDMA devices present, their PCI function and firmware, and openable through /dev/infiniband/uverbsN",
    needs: &[Need::RdmaDevice],
    explain: Explain {
        reads: "/sys/class/infiniband/<dev>/{node_type,fw_ver,board_id,hca_type,device,ports/}, the PCI bus \
                (Mellanox functions with a flash-recovery device id), \
                /sys/class/infiniband_verbs/uverbsN/ibdev, /dev/infiniband/uverbsN (present; live: read-write access for this user)",
        why: "NCCL, UCX and perftest open RDMA devices through /dev/infiniband/uverbsN. A container that sees the \
              devices in sysfs but lacks the character devices cannot use them, and NCCL silently falls back \
              to TCP sockets. A missing HCA (fewer devices than the node type has) halves a rail.",
        fixes: &[
            ("fewer RDMA devices than the profile expects", "check `dmesg | grep mlx5`, reseat or replace the HCA, verify the port is in the expected link type (`mlxconfig -d <dev> q LINK_TYPE_P1`)"),
            ("uverbs character device missing", FIX_UVERBS),
            ("a ConnectX/BlueField in flash-recovery mode (a Mellanox function with a recovery device id)", crate::sysfs::pci_ids::FLASH_RECOVERY_FIX),
        ],
    },
    findings: &[
        &EXPECTED_NONE,
        &NO_ACCESS,
        &NODE_MISSING,
        &NO_UVERBS,
        &TOO_FEW,
        &TOO_MANY,
        &UVERBS_UNREADABLE,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for RdmaDevices {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let expect = &cx.profile.expect;
        let facts = Facts::read(cx.host, cx.inputs.env("NCCL_IB_HCA"), expect);
        CheckResult::or_read_error(
            ID,
            facts.map(|facts| {
                let results = judge(&facts, expect.rdma_device_count);
                match &facts.roles {
                    Some(roles) => roles.completed(ID, results),
                    None => results,
                }
            }),
        )
    }
}

/// What the check reads, before it judges.
struct Facts {
    names: Vec<String>,
    /// The PCI bus's RDMA NICs: hardware without its driver when no RDMA device is listed, and in any case
    /// the functions in flash-recovery mode.
    survey: Survey,
    uverbs: UverbsMap,
    devices: Vec<DeviceFacts>,
    /// The ports' roles, read only when there are more devices than the profile expects: devices whose every
    /// port is a storage/frontend port (a bond, a storage NIC) are not the extra rails the count warns about.
    roles: Option<Ports>,
}

/// One RDMA device and the uverbs node verbs open it through.
struct DeviceFacts {
    dev: RdmaDevice,
    /// `uverbsN`, when one maps to the device.
    char_dev: Option<String>,
    /// Live only: whether this process may open the node read-write.
    access: Option<Result<(), ReadError>>,
    node_present: bool,
}

impl Facts {
    fn read(host: &Host, nccl_ib_hca: Option<&str>, expect: &Expect) -> Result<Facts, ReadError> {
        let names = read_device_names(host)?;
        if names.is_empty() {
            return Ok(Facts {
                names,
                survey: Survey::read(host, Stack::Rdma),
                uverbs: UverbsMap::default(),
                devices: Vec::new(),
                roles: None,
            });
        }
        let roles = match expect.rdma_device_count {
            Some(n) if names.len() > n as usize => {
                Some(nic_role::read(host, nccl_ib_hca, expect.rdma_port_count)?)
            }
            _ => None,
        };
        let uverbs = read_uverbs_map(host);
        let devices = names
            .iter()
            .map(|name| {
                let char_dev = uverbs
                    .map
                    .iter()
                    .find(|(_, ib)| ib == name)
                    .map(|(u, _)| u.clone());
                let node = char_dev.as_ref().map(|u| format!("{DEV_INFINIBAND}/{u}"));
                DeviceFacts {
                    dev: read_device(host, name),
                    access: node.as_deref().and_then(|n| host.access_rw(n)),
                    node_present: node.as_deref().is_some_and(|n| host.exists(n)),
                    char_dev,
                }
            })
            .collect();
        Ok(Facts {
            names,
            survey: Survey::read(host, Stack::Rdma),
            uverbs,
            devices,
            roles,
        })
    }
}

fn judge(facts: &Facts, expected: Option<u32>) -> Vec<CheckResult> {
    let names = &facts.names;
    let uverbs = &facts.uverbs;
    if names.is_empty() {
        let survey = &facts.survey;
        let required = expected.is_some_and(|n| n > 0);
        if let Some(r) = survey.gate(ID, required) {
            return vec![r];
        }
        let r = match expected {
                Some(n) if n > 0 => CheckResult::fail(
                    ID,
                    format!("no RDMA device, the profile expects {n}"),
                )
                .fix("check that the HCAs are seated and their driver is loaded: `dmesg | grep -i mlx5`, `lspci -d 15b3:`").code(&EXPECTED_NONE),
                _ => CheckResult::skip(ID, format!("no RDMA device ({CLASS_INFINIBAND} is empty or absent)")).code(&common::ABSENT),
            };
        return vec![r.evidence(CLASS_INFINIBAND, "<no devices>")];
    }

    let mut results = Vec::new();
    for (name, facts) in names.iter().zip(&facts.devices) {
        let DeviceFacts {
            dev,
            char_dev,
            access,
            node_present,
        } = facts;
        let dir = infiniband::device_dir(name);
        // An attribute or `ports/` that could not be read: the device is not known to be sound.
        let unread = dev.unread.clone().or_else(|| dev.ports.clone().err());
        let mut r = match (&unread, &char_dev) {
            (Some(e), _) => CheckResult::read_error(ID, e),
            // Live only: the node is there but this user may not open it (no rdma udev rules, or a
            // container user outside the device's group).
            (None, Some(u)) if matches!(access, Some(Err(e)) if e.kind == crate::host::ReadErrorKind::PermissionDenied) =>
            {
                CheckResult::fail(
                        ID,
                        format!(
                            "{DEV_INFINIBAND}/{u} is there but this process (uid {}) may not open it read-write: verbs cannot open the device",
                            // SAFETY: getuid has no preconditions.
                            unsafe { libc::getuid() }
                        ),
                    )
                    .fix("run as root, or give the user read-write access to /dev/infiniband/uverbs* (rdma-core's udev rules make them 0666; else add the user to the nodes' group)").code(&NO_ACCESS)
            }
            (None, Some(u)) if *node_present => CheckResult::pass(
                ID,
                format!(
                    "{} on {}, {}, {} port(s), opened through {DEV_INFINIBAND}/{u}",
                    dev.node_type.as_deref().unwrap_or("unknown node type"),
                    dev.pci_bdf.as_deref().unwrap_or("no PCI function"),
                    match dev.fw_ver.as_deref() {
                        Some("") =>
                            "no firmware version (empty fw_ver, as software devices report)"
                                .to_string(),
                        Some(v) => format!("firmware {v}"),
                        None => "firmware unknown".to_string(),
                    },
                    dev.ports.as_ref().map_or(0, Vec::len)
                ),
            ),
            (None, Some(u)) => CheckResult::fail(
                ID,
                format!(
                    "visible in sysfs but {DEV_INFINIBAND}/{u} is missing: verbs cannot open it"
                ),
            )
            .fix(FIX_UVERBS)
            .code(&NODE_MISSING),
            // Unreadable `ibdev` files: one of them may be this device's.
            (None, None) if !uverbs.unreadable.is_empty() => {
                let mut r = CheckResult::error(
                    ID,
                    format!(
                        "cannot tell which uverbs device opens it: {} ibdev file(s) unreadable",
                        uverbs.unreadable.len()
                    ),
                )
                .code(&UVERBS_UNREADABLE);
                for (path, why) in &uverbs.unreadable {
                    r = r.evidence(path, why);
                }
                r
            }
            (None, None) => CheckResult::fail(
                ID,
                "no uverbs device maps to it (ib_uverbs not loaded?): verbs cannot open it",
            )
            .fix(FIX_UVERBS)
            .code(&NO_UVERBS),
        };
        r = r.subject(name.clone());
        for (file, value) in [
            ("node_type", &dev.node_type),
            ("fw_ver", &dev.fw_ver),
            ("board_id", &dev.board_id),
            ("hca_type", &dev.hca_type),
            ("device", &dev.pci_bdf),
        ] {
            let unreadable = unread
                .as_ref()
                .filter(|e| e.path.ends_with(&format!("/{file}")))
                .map(|e| e.reason());
            r = r.evidence(
                &format!("{dir}/{file}"),
                match value.as_deref() {
                    Some("") => "<empty>",
                    Some(v) => v,
                    None => unreadable.as_deref().unwrap_or("<missing>"),
                },
            );
        }
        if let Some(u) = &char_dev {
            r = r.evidence(
                &format!("{}/{u}/ibdev", infiniband::CLASS_INFINIBAND_VERBS),
                name,
            );
            r = r.evidence(
                &format!("{DEV_INFINIBAND}/{u}"),
                if *node_present {
                    "present"
                } else {
                    "<missing>"
                },
            );
        }
        results.push(r);
    }

    let count = names.len() as u32;
    let count_result = match expected {
        Some(n) if count < n => CheckResult::fail(
            ID,
            format!("{count} RDMA device(s), the profile expects {n}"),
        )
        .fix("find the missing HCA: `dmesg | grep -i mlx5`, `lspci -d 15b3:`; reseat or replace it")
        .code(&TOO_FEW),
        Some(n) if count > n => {
            // Storage devices explain the surplus only where every function that places a port was read.
            let storage = facts
                .roles
                .as_ref()
                .filter(|roles| roles.fully_placed())
                .map(storage_devices)
                .unwrap_or_default();
            if count - storage.len() as u32 == n {
                CheckResult::pass(
                    ID,
                    format!(
                        "{count} RDMA device(s): {n} with compute ports, as the profile expects, and {} \
                         storage/frontend ({})",
                        storage.len(),
                        storage.join(", ")
                    ),
                )
            } else {
                CheckResult::warn(
                    ID,
                    format!(
                        "{count} RDMA device(s), more than the {n} the profile expects (a bond or VFs?)"
                    ),
                ).code(&TOO_MANY)
            }
        }
        Some(n) => CheckResult::pass(
            ID,
            format!("{count} RDMA device(s), as the profile expects ({n})"),
        ),
        None => CheckResult::pass(ID, format!("{count} RDMA device(s)")),
    };
    let mut count_result = count_result
        .measure(crate::probe::Measurement::new(
            "rdma_devices",
            f64::from(count),
            "count",
        ))
        .evidence(CLASS_INFINIBAND, names.join(" "));
    if let Some(n) = expected {
        count_result.measurements[0].fail = Some(f64::from(n));
    }
    results.insert(0, count_result);
    // A ConnectX in flash-recovery mode has no RDMA device: only the bus shows it.
    results.extend(facts.survey.recovery_results(ID));
    facts.survey.completed(ID, results)
}

/// Devices whose every port in use is a storage/frontend port (a port of unknown role is not).
fn storage_devices(roles: &Ports) -> Vec<String> {
    roles
        .devices
        .iter()
        .filter(|(_, ports)| {
            let roles: Vec<Option<Role>> = ports
                .iter()
                .filter_map(|(_, usage)| match usage {
                    Use::Role(a) => Some(Some(a.role)),
                    Use::Unplaced(_) => Some(None),
                    Use::DisabledByDesign => None,
                })
                .collect();
            !roles.is_empty() && roles.iter().all(|r| *r == Some(Role::Storage))
        })
        .map(|(dev, _)| dev.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;
    use crate::probes::testing::run_on;

    /// An attribute file that is there but unreadable was read as absent ("firmware unknown", PASS).
    #[test]
    fn unreadable_attribute_is_an_error_not_unknown() {
        let dir = crate::probes::testing::copy_scenario("rxe-vm");
        let fw = dir
            .path()
            .join("sys/devices/virtual/infiniband/rxe0/fw_ver");
        std::fs::remove_file(&fw).unwrap();
        std::os::unix::fs::symlink("fw_ver", &fw).unwrap();
        let r = crate::probes::testing::run_on_root(&RdmaDevices, dir.path(), "generic");
        let dev = r
            .iter()
            .find(|x| x.subject.as_deref() == Some("rxe0"))
            .unwrap();
        assert_eq!(dev.status, Status::Error, "{dev:#?}");
        assert!(
            dev.evidence
                .iter()
                .any(|e| e.ends_with("fw_ver = <symlink loop>")),
            "{dev:#?}"
        );
    }

    #[test]
    fn hgx_eight_devices_all_openable_pass() {
        let r = run_on(&RdmaDevices, "hgx-healthy", "hgx-h100-ib");
        assert_eq!(r.len(), 9);
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
        assert_eq!(r[1].subject.as_deref(), Some("mlx5_0"));
        assert!(r[1].summary.contains("0000:19:00.0"), "{}", r[1].summary);
    }

    #[test]
    fn missing_uverbs_node_fails_that_device() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        std::fs::remove_file(dir.path().join("dev/infiniband/uverbs1")).unwrap();
        let r = crate::probes::testing::run_on_root(&RdmaDevices, dir.path(), "generic");
        let bad: Vec<_> = crate::probes::testing::verdicts(&r)
            .into_iter()
            .filter(|(_, s)| *s != Status::Pass)
            .collect();
        assert_eq!(bad, [("mlx5_1".to_string(), Status::Fail)]);
        assert!(
            r[2].summary.contains("/dev/infiniband/uverbs1 is missing"),
            "{}",
            r[2].summary
        );
    }

    #[test]
    fn h200_no_device_skips() {
        let r = run_on(&RdmaDevices, "h200-vm-no-rdma", "generic");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, Status::Skip);
    }

    #[test]
    fn h200_no_device_fails_when_profile_expects_eight() {
        let r = run_on(&RdmaDevices, "h200-vm-no-rdma", "hgx-h200-ib");
        assert_eq!(r[0].status, Status::Fail);
    }

    #[test]
    fn unreadable_ibdev_is_an_error_naming_the_file() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let verbs = dir.path().join("sys/class/infiniband_verbs");
        for u in std::fs::read_dir(&verbs).unwrap() {
            let u = u.unwrap();
            if !u.file_name().to_string_lossy().starts_with("uverbs") {
                continue;
            }
            let ibdev = std::fs::canonicalize(u.path()).unwrap().join("ibdev");
            std::fs::write(ibdev, "").unwrap();
        }
        let r = crate::probes::testing::run_on_root(&RdmaDevices, dir.path(), "generic");
        let per_device: Vec<_> = r.iter().filter(|x| x.subject.is_some()).collect();
        assert_eq!(per_device.len(), 8);
        for x in per_device {
            assert_eq!(x.status, Status::Error, "{x:#?}");
            assert!(
                x.evidence.iter().any(|e| e.ends_with("/ibdev = <empty>")),
                "{:?}",
                x.evidence
            );
        }
    }

    #[test]
    fn empty_firmware_of_a_software_device_is_not_missing() {
        let r = run_on(&RdmaDevices, "rxe-vm", "generic");
        assert_eq!(r[1].subject.as_deref(), Some("rxe0"));
        assert_eq!(r[1].status, Status::Pass, "{:#?}", r[1]);
        assert!(r[1].summary.contains("empty fw_ver"), "{}", r[1].summary);
        assert!(
            r[1].evidence
                .iter()
                .any(|e| e.ends_with("rxe0/fw_ver = <empty>")),
            "{:?}",
            r[1].evidence
        );
    }
}
