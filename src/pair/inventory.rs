//! This node's side of `pair`: the ports it offers its peer and the memory each brings to the GPU leg. Whether
//! RDMA and GPUs are there at all is the shared presence rule's call; listed in a child process (`pair::child`),
//! as the survey, libibverbs' and CUDA's device lists are library calls that may hang.

use serde::{Deserialize, Serialize};

use crate::dynlib::LibError;
use crate::host::Host;
use crate::measure::memory::MemoryChoice;
use crate::measure::rc::PortTarget;
use crate::model::Library;
use crate::model::{common, CheckResult, FindingCode, Status};
use crate::pair::findings::{NO_ACTIVE_PORT_HERE, NO_PORT_HERE};
use crate::pair::judge::ID_RDMA;
use crate::pair::wire::{PortInfo, PortMemory};
use crate::recording::Answers;
use crate::rules::presence::{Stack, Survey};
use crate::rules::topology::{nearest, PciTree, PcieDistance};
use crate::rules::transfer_verdict::LinkRate;
use crate::sysfs::infiniband;

/// This node's testable ports, or why there are none.
#[derive(Debug, Serialize, Deserialize)]
pub struct Inventory {
    /// Each port announces the memory it brings to the GPU leg (`PortInfo::memory`).
    pub ports: Vec<(PortInfo, PortTarget)>,
    /// What this node brings to GPU legs, decided once (`--memory`).
    pub gpus: GpuSource,
    /// No port: why, as this node's `pair.rdma` result (an absence skips, a fault fails or errors), coded.
    pub none: Option<CheckResult>,
    /// Ports offered, but the presence survey could not read everything (the bus, the module table): a device
    /// it could not see may be the unbound one. This node's error, reported beside the measured pairs, as the
    /// probes report it (`Survey::completed`).
    pub gap: Option<CheckResult>,
}

impl Inventory {
    /// No listing at all, and why: an error with `code` (the child that lists hung, crashed or was interrupted).
    pub fn failed(why: String, code: &FindingCode) -> Inventory {
        Inventory {
            ports: Vec::new(),
            gpus: GpuSource::None(why.clone()),
            none: Some(CheckResult::error(ID_RDMA, why).code(code)),
            gap: None,
        }
    }
}

/// What this node brings to the GPU legs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum GpuSource {
    /// Host memory only, and why.
    None(String),
    /// The GPUs CUDA lists (sysfs bus ids, CUDA order) whose memory GPU legs use.
    Gpus(Vec<String>),
    /// GPU memory due but unusable: the presence rule's status and words.
    Unusable(Status, String),
}

/// This node's ports. Whether RDMA is there at all is the shared presence rule's call (`presence::Survey`), so a
/// NIC on the bus whose driver or libibverbs is missing or broken fails or errors here as in every probe; only
/// a node with no RDMA hardware skips.
pub fn inventory(host: &Host, answers: &Answers, gpus: GpuSource) -> Inventory {
    let none = |r: CheckResult| Inventory {
        ports: Vec::new(),
        gpus: gpus.clone(),
        none: Some(r),
        gap: None,
    };
    let unread = |why: String| none(CheckResult::error(ID_RDMA, why).code(&common::UNREAD));
    let tree = PciTree::read(host).ok();
    let rdma = Survey::read(host, Stack::Rdma);
    if let Some(r) = rdma.gate_if_unusable(ID_RDMA, false) {
        return none(r);
    }
    // EFA refuses RC queue pairs: a node whose RDMA devices are all EFAs has no port to test here.
    let efa = match crate::sysfs::efa::split_efa(host, &rdma.driver_devices) {
        Ok((_, efa)) => efa,
        Err(e) => return unread(e.to_string()),
    };
    if !efa.is_empty() && efa.len() == rdma.driver_devices.len() {
        return none(CheckResult::skip(ID_RDMA, crate::sysfs::efa::NO_RC).code(&NO_PORT_HERE));
    }
    let devices: Vec<String> = match rdma.verbs_devices(answers, ID_RDMA, false) {
        Ok(d) => d.into_iter().filter(|d| !efa.contains(d)).collect(),
        Err(r) => return none(*r),
    };
    let mut ports = Vec::new();
    let all_ports = match infiniband::read_all_ports(host) {
        Ok(p) => p,
        Err(e) => return unread(e.to_string()),
    };
    for (dev, attrs) in all_ports {
        if !devices.contains(&dev) {
            continue;
        }
        // A device without a PCI function (soft-RoCE, siw) reports a placeholder rate; one whose `device` link
        // cannot be resolved is not known to be software: its ports' rate is unreadable, never a placeholder.
        let nic = infiniband::device_bdf(host, &dev);
        for p in attrs {
            // The port's state and link layer decide whether and how it is offered: with any attribute unknown the
            // node's ports are unknown, as in `rdma.link`. The rate is judged on its own (`LinkRate`).
            if let Some(e) = p.unread().filter(|e| !e.path.ends_with("/rate")) {
                return unread(format!("{}: {e}", p.subject()));
            }
            if !p.is_active() {
                continue;
            }
            // A RoCE port without a RoCE v2 GID cannot be addressed; it is left out like an inactive one.
            let target = match PortTarget::of(host, &p) {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => return unread(e.to_string()),
            };
            let rate = match &nic {
                Ok(bdf) => LinkRate::of_port(&p, bdf.is_none()),
                Err(e) => LinkRate::Unreadable(format!("the device link: {e}")),
            };
            let bdf = nic.as_ref().ok().and_then(Option::as_deref);
            ports.push((
                PortInfo {
                    device: p.device.clone(),
                    port: p.port as u8,
                    link_layer: p.link_layer.clone().unwrap_or_default(),
                    rate,
                    memory: port_memory(&gpus, tree.as_ref(), bdf),
                },
                target,
            ));
        }
    }
    if ports.is_empty() {
        return none(
            CheckResult::fail(
                ID_RDMA,
                format!(
                    "RDMA devices {} present but no port is ACTIVE",
                    devices.join(" ")
                ),
            )
            .code(&NO_ACTIVE_PORT_HERE),
        );
    }
    Inventory {
        ports,
        gpus,
        none: None,
        gap: rdma.completed(ID_RDMA, Vec::new()).pop(),
    }
}

/// What this node brings to GPU legs. `auto`: GPU memory where the NVIDIA driver lists GPUs, judged by the
/// shared presence rule (GPUs on the bus without their driver, or a CUDA that cannot load or lists none, make
/// the GPU leg fail or error, never a silent host-only pass). `gpu`: the GPUs CUDA lists, required. `cuda`
/// lists the GPUs (`memory::cuda_gpus`; a parameter so tests need no GPU).
pub fn gpu_source(
    host: &Host,
    choice: MemoryChoice,
    cuda: &dyn Fn() -> Result<Vec<String>, LibError>,
) -> GpuSource {
    let unusable = |r: CheckResult| GpuSource::Unusable(r.status, r.summary);
    match choice {
        MemoryChoice::Host => GpuSource::None("host memory only (--memory host)".into()),
        MemoryChoice::Auto => {
            let survey = Survey::read(host, Stack::Gpu);
            match survey.gate_if_unusable(ID_RDMA, false) {
                Some(r) if r.status == Status::Skip => GpuSource::None(r.summary),
                Some(r) => unusable(r),
                None => match cuda() {
                    Ok(gpus) if !gpus.is_empty() => GpuSource::Gpus(gpus),
                    Ok(_) => unusable(survey.library_lists_none(
                        ID_RDMA,
                        Library::Cuda,
                        "cuDeviceGetCount",
                        false,
                    )),
                    Err(e) => unusable(survey.library_failed(ID_RDMA, &e, false)),
                },
            }
        }
        MemoryChoice::Gpu => match cuda() {
            Ok(gpus) if !gpus.is_empty() => GpuSource::Gpus(gpus),
            Ok(_) => GpuSource::Unusable(
                Status::Fail,
                "--memory gpu: CUDA lists no device (cuDeviceGetCount = 0)".into(),
            ),
            Err(e) => {
                let survey = Survey::read(host, Stack::Gpu);
                if survey.hardware_absent() {
                    GpuSource::Unusable(
                        Status::Fail,
                        format!("--memory gpu, but no GPU here: none on the PCI bus, and {e}"),
                    )
                } else {
                    let r = survey.library_failed(ID_RDMA, &e, true);
                    GpuSource::Unusable(r.status, format!("--memory gpu: {}", r.summary))
                }
            }
        },
    }
}

/// The memory a port brings to its GPU leg: the GPU nearest the port in the PCI tree where sysfs places both
/// (`topology::nearest`, as `gdr.loopback` pairs them), else CUDA's first GPU.
pub fn port_memory(gpus: &GpuSource, tree: Option<&PciTree>, nic: Option<&str>) -> PortMemory {
    let list = match gpus {
        GpuSource::None(why) => return PortMemory::Host { why: why.clone() },
        GpuSource::Unusable(status, why) => {
            return PortMemory::Unusable {
                status: *status,
                why: why.clone(),
            }
        }
        GpuSource::Gpus(list) => list,
    };
    let placed: Vec<(usize, PcieDistance)> = list
        .iter()
        .enumerate()
        .filter_map(|(i, gpu)| Some((i, tree?.distance_between(gpu, nic?)?)))
        .collect();
    let distances: Vec<PcieDistance> = placed.iter().map(|(_, d)| *d).collect();
    match nearest(&distances) {
        Some(k) => PortMemory::Gpu {
            bus_id: list[placed[k].0].clone(),
            why: format!(
                "the GPU nearest this port in the PCI tree ({:?})",
                placed[k].1
            ),
        },
        None => PortMemory::Gpu {
            bus_id: list[0].clone(),
            why: "CUDA device 0: sysfs does not place this port and a GPU in one PCI tree".into(),
        },
    }
}

/// The handshake's line on this node's GPU memory.
pub fn gpu_text(gpus: &GpuSource) -> String {
    match gpus {
        GpuSource::None(why) => format!("none: {why}"),
        GpuSource::Gpus(list) => format!("{} (CUDA order)", list.join(", ")),
        GpuSource::Unusable(status, why) => format!("unusable ({status}): {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hgx-healthy has ConnectX functions bound to mlx5 and eight mlx5 devices; `device_list` is what
    /// libibverbs answers.
    fn inventory_with(device_list: &str) -> Inventory {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts/hgx-healthy");
        inventory_at(&root, device_list)
    }

    fn inventory_at(root: &std::path::Path, device_list: &str) -> Inventory {
        let dir = tempfile::tempdir().unwrap();
        let answers = dir.path().join("vendor-answers.json");
        std::fs::write(
            &answers,
            format!(r#"{{"verbs.device_list": {device_list}}}"#),
        )
        .unwrap();
        inventory(
            &Host::at(root).unwrap(),
            &Answers::from_file(&answers).unwrap(),
            GpuSource::None("--memory host".into()),
        )
    }

    const MLX5_0: &str = r#"{"Devices": ["mlx5_0"]}"#;

    /// An EFA node has no RC port to offer: a skip saying why, before libibverbs is asked (failed before: its
    /// EFA ports were offered, and the efa driver refuses their RC queue pairs).
    #[test]
    fn an_efa_node_has_no_rc_port_to_offer() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts/aws-p5en");
        let inventory = inventory_at(&root, r#"{"Devices": ["rdmap68s0"]}"#);
        assert!(inventory.ports.is_empty());
        let (status, why) = inventory.none.map(|r| (r.status, r.summary)).unwrap();
        assert_eq!(status, Status::Skip);
        assert!(why.starts_with("EFA has no RC queue pairs"), "{why}");
    }

    /// hgx-healthy with `damage` done to mlx5_0's files (host path → the file in the copy): the rate mlx5_0/1
    /// announces, or the listing's error as unreadable.
    fn mlx5_0_rate_after(damage: impl FnOnce(&dyn Fn(&str) -> std::path::PathBuf)) -> LinkRate {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let host = Host::at(dir.path()).unwrap();
        // The directory resolved, the last component not: a link is damaged, not what it points at.
        damage(&|path| {
            let (dir, name) = path.rsplit_once('/').unwrap();
            host.resolve(dir).unwrap().join(name)
        });
        let inv = inventory_at(dir.path(), MLX5_0);
        match inv.none.map(|r| (r.status, r.summary)) {
            // The presence survey itself could not read the port: the whole listing is an error.
            Some((Status::Error, why)) => LinkRate::Unreadable(why),
            Some(other) => panic!("{other:?}"),
            None => inv.ports[0].0.rate.clone(),
        }
    }

    fn self_loop(path: &std::path::Path) {
        std::fs::remove_file(path).unwrap();
        std::os::unix::fs::symlink(path.file_name().unwrap(), path).unwrap();
    }

    /// `pair` read the `device` link and the rate leniently: a hardware port whose link could not be resolved,
    /// or whose rate did not parse, was taken for a software device, its bandwidth not judged, and the pair
    /// could pass. Each variant is announced unreadable now, apart from a software device's placeholder.
    #[test]
    fn a_hardware_port_with_an_unreadable_link_or_rate_announces_it_unreadable() {
        const DEVICE: &str = "/sys/class/infiniband/mlx5_0/device";
        const RATE: &str = "/sys/class/infiniband/mlx5_0/ports/1/rate";
        assert_eq!(mlx5_0_rate_after(|_| {}), LinkRate::Gbps(400.0));
        let unreadable = |rate: LinkRate, what: &str| match rate {
            LinkRate::Unreadable(why) => assert!(why.contains(what), "{why}"),
            other => panic!("{other:?}"),
        };
        // The device link loops (cannot be resolved): not known to be software.
        unreadable(
            mlx5_0_rate_after(|at| self_loop(&at(DEVICE))),
            "<symlink loop>",
        );
        // The rate file unreadable, garbage, or no rate at all.
        unreadable(
            mlx5_0_rate_after(|at| self_loop(&at(RATE))),
            "<symlink loop>",
        );
        for text in ["garbage?\n", "0 Gb/sec (4X NDR)\n", "\n"] {
            let rate = mlx5_0_rate_after(|at| std::fs::write(at(RATE), text).unwrap());
            assert!(
                matches!(rate, LinkRate::Unreadable(_)),
                "{text:?}: {rate:?}"
            );
        }
        // A device without a `device` link (soft-RoCE) is software: its rate is a placeholder.
        let rate = mlx5_0_rate_after(|at| std::fs::remove_file(at(DEVICE)).unwrap());
        assert!(matches!(rate, LinkRate::NotMeaningful(_)), "{rate:?}");
    }

    /// A port whose state or link layer cannot be read is not left out as if inactive: the survey errors.
    #[test]
    fn a_port_whose_state_or_link_layer_is_unreadable_is_an_error_not_an_inactive_port() {
        for file in ["state", "link_layer"] {
            for unreadable in [true, false] {
                let dir = crate::probes::testing::copy_scenario("hgx-healthy");
                let host = Host::at(dir.path()).unwrap();
                let path = host
                    .resolve(&format!("/sys/class/infiniband/mlx5_0/ports/1/{file}"))
                    .unwrap();
                if unreadable {
                    self_loop(&path);
                } else {
                    std::fs::write(&path, "garbage?\n").unwrap();
                }
                let inv = inventory_at(dir.path(), MLX5_0);
                let (status, why) = inv
                    .none
                    .map(|r| (r.status, r.summary))
                    .expect("no port offered");
                assert_eq!(status, Status::Error, "{file}: {why}");
                assert!(why.contains(file), "{file}: {why}");
            }
        }
    }

    fn scenario(name: &str) -> Host {
        Host::at(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/hosts")
                .join(name),
        )
        .unwrap()
    }

    fn not_loaded() -> Result<Vec<String>, LibError> {
        Err(LibError::not_loaded(
            Library::Cuda,
            "libcuda.so.1: cannot open shared object file: No such file or directory",
        ))
    }

    #[test]
    fn auto_uses_the_gpus_the_driver_lists_and_never_falls_back_silently() {
        let hgx = scenario("hgx-healthy");
        let two = || Ok(vec!["0000:29:00.0".to_string(), "0000:18:00.0".to_string()]);
        assert_eq!(
            gpu_source(&hgx, MemoryChoice::Auto, &two),
            GpuSource::Gpus(vec!["0000:29:00.0".into(), "0000:18:00.0".into()])
        );
        // GPUs bound to nvidia but libcuda missing: an error naming the library, not a host-only pass.
        let GpuSource::Unusable(status, why) = gpu_source(&hgx, MemoryChoice::Auto, &not_loaded)
        else {
            panic!("not unusable")
        };
        assert_eq!(status, Status::Error, "{why}");
        assert!(why.contains("libcuda.so.1"), "{why}");
        // CUDA loads and lists nothing next to the driver's eight.
        let none = || Ok(vec![]);
        assert!(matches!(
            gpu_source(&hgx, MemoryChoice::Auto, &none),
            GpuSource::Unusable(Status::Fail, _)
        ));
        // No GPU at all: host memory, saying why; CUDA is not asked.
        let GpuSource::None(why) =
            gpu_source(&scenario("rxe-vm"), MemoryChoice::Auto, &|| unreachable!())
        else {
            panic!("not host-only")
        };
        assert!(why.contains("no NVIDIA GPU"), "{why}");
        assert!(matches!(
            gpu_source(&hgx, MemoryChoice::Host, &two),
            GpuSource::None(_)
        ));
    }

    #[test]
    fn gpus_on_the_bus_without_their_driver_fail_the_gpu_leg() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let gpus = dir.path().join("proc/driver/nvidia/gpus");
        std::fs::remove_dir_all(&gpus).unwrap();
        std::fs::create_dir(&gpus).unwrap();
        let GpuSource::Unusable(status, why) = gpu_source(
            &Host::at(dir.path()).unwrap(),
            MemoryChoice::Auto,
            &|| unreachable!(),
        ) else {
            panic!("not unusable")
        };
        assert_eq!(status, Status::Fail, "{why}");
        assert!(why.contains("without"), "{why}");
    }

    #[test]
    fn gpu_mode_requires_a_cuda_device() {
        let vm = scenario("rxe-vm");
        let standin = || Ok(vec!["0000:5e:00.0".to_string()]);
        assert_eq!(
            gpu_source(&vm, MemoryChoice::Gpu, &standin),
            GpuSource::Gpus(vec!["0000:5e:00.0".into()])
        );
        for cuda in [&not_loaded as &dyn Fn() -> _, &|| Ok(vec![])] {
            let GpuSource::Unusable(status, why) = gpu_source(&vm, MemoryChoice::Gpu, cuda) else {
                panic!("not unusable")
            };
            assert_eq!(status, Status::Fail, "{why}");
            assert!(why.starts_with("--memory gpu"), "{why}");
        }
    }

    #[test]
    fn each_port_gets_the_nearest_gpu_else_cuda_device_0() {
        let hgx = scenario("hgx-healthy");
        let tree = PciTree::read(&hgx).unwrap();
        let gpus = GpuSource::Gpus(vec!["0000:ba:00.0".into(), "0000:18:00.0".into()]);
        // mlx5_0 (0000:19:00.0) shares a PCIe switch with 0000:18:00.0.
        let m = port_memory(&gpus, Some(&tree), Some("0000:19:00.0"));
        assert_eq!(m.gpu(), Some("0000:18:00.0"), "{m:?}");
        assert!(m.why().contains("nearest"), "{m:?}");
        // A port sysfs cannot place (soft-RoCE) or a stand-in GPU it does not know: CUDA's first.
        for (gpus, nic) in [
            (gpus.clone(), None),
            (
                GpuSource::Gpus(vec!["0000:5e:00.0".into()]),
                Some("0000:19:00.0"),
            ),
        ] {
            let m = port_memory(&gpus, Some(&tree), nic);
            assert!(m.why().starts_with("CUDA device 0"), "{m:?}");
        }
        let unusable = GpuSource::Unusable(Status::Error, "x".into());
        assert!(matches!(
            port_memory(&unusable, Some(&tree), None),
            PortMemory::Unusable {
                status: Status::Error,
                ..
            }
        ));
    }

    #[test]
    fn rdma_nic_on_the_bus_is_never_a_skip() {
        // libibverbs cannot be loaded while the NICs and mlx5_ib are there: an error, not "no RDMA device".
        let (status, why) = inventory_with(r#"{"Failed": {"errno": 95, "message": "not loaded"}}"#)
            .none
            .map(|r| (r.status, r.summary))
            .unwrap();
        assert_eq!(status, Status::Error, "{why}");
        // libibverbs loads but lists nothing (no provider): a failure.
        let (status, why) = inventory_with(r#"{"Devices": []}"#)
            .none
            .map(|r| (r.status, r.summary))
            .unwrap();
        assert_eq!(status, Status::Fail, "{why}");
    }
}
