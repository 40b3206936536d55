//! `rdma.link`: every RDMA port ACTIVE/LinkUp, at the expected rate and link layer, with a valid LID and SM LID
//! on InfiniBand; compute rails and storage/frontend ports each by their own expectations (`nic_role`).

use crate::host::{Host, ReadError};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Findings, Measurement, Need, Probe,
    ProbeMeta, Remedy, Status,
};
use crate::profile::{Expect, LinkLayer};
use crate::rules::nic_role::{self, Assigned, Ports, Role, Use};
use crate::rules::presence::{Stack, Survey};
use crate::sysfs::infiniband::{device_dir, parse_lid, read_hca_type, PortAttrs, CLASS_INFINIBAND};

pub struct RdmaLink;

const ID: &str = "rdma.link";

/// HCA models that run at HDR or faster; an SDR rate on them means the kernel does not know the speed.
const FAST_HCAS: &[&str] = &["MT4123", "MT4125", "MT4129", "MT41692"];

const PORT_DOWN: FindingCode = FindingCode {
    code: "RDM101",
    title: "an RDMA port is not ACTIVE / LinkUp",
    explanation: "The port's state or physical state is not ACTIVE / LinkUp: a cable, transceiver or switch port problem (an INIT port waits for a subnet manager). A compute port fails, a storage port warns. Check `ibstat`, `mlxlink -d <dev> -m`.",
    step: Some(Remedy::ServiceRma),
};
const WRONG_LINK_LAYER: FindingCode = FindingCode {
    code: "RDM102",
    title: "an RDMA port's link layer is not the one the profile expects",
    explanation: "InfiniBand where the profile expects Ethernet (RoCE) or the reverse: set the port type with `mlxconfig -d <dev> set LINK_TYPE_P1=1|2` and reboot.",
    step: Some(Remedy::Reboot),
};
const RATE_UNKNOWN: FindingCode = FindingCode {
    code: "RDM103",
    title: "an RDMA port's rate is not recognised",
    explanation: "The rate file's text is not one this check parses, so the rate is not judged.",
    step: None,
};
const RATE_BELOW_MIN: FindingCode = FindingCode {
    code: "RDM104",
    title: "an RDMA port's rate is below the profile minimum",
    explanation: "The port trained below `expect.rdma_min_rate_gbps` (or the storage minimum): lanes down or a slower cable or transceiver. Reseat or replace it; `mlxlink -d <dev> -m` shows the lanes.",
    step: Some(Remedy::ServiceRma),
};
const RATE_BELOW_SIBLINGS: FindingCode = FindingCode {
    code: "RDM105",
    title: "an RDMA port's rate is below its siblings of the same HCA model",
    explanation: "Without a profile minimum, a port slower than the fastest port of the same HCA model and role warns: compare cables and switch ports with the faster siblings.",
    step: Some(Remedy::ServiceRma),
};
const NO_SUBNET_MANAGER: FindingCode = FindingCode {
    code: "RDM106",
    title: "an InfiniBand port has no valid LID or SM LID",
    explanation: "A LID or SM LID of 0 or 0xffff: no subnet manager is reachable, so the port cannot carry traffic. Check opensm/UFM and the switch port.",
    step: Some(Remedy::RestartService),
};
const EXPECTED_NONE: FindingCode = FindingCode {
    code: "RDM107",
    title: "no RDMA port while the profile expects some",
    explanation: "No RDMA port at all, but the profile expects `expect.rdma_port_count` ports: the HCAs are missing or their driver is not loaded.",
    step: Some(Remedy::ServiceRma),
};
const TOO_FEW_ACTIVE: FindingCode = FindingCode {
    code: "RDM108",
    title: "fewer ACTIVE ports of a role than the profile expects",
    explanation: "Fewer compute (or storage) ports are ACTIVE than `expect.rdma_port_count`: ports are down or missing. The per-port results name them.",
    step: Some(Remedy::ServiceRma),
};
const EFA_ELSEWHERE: FindingCode = FindingCode {
    code: "RDM109",
    title: "EFA devices are judged by efa.link",
    explanation: "A skip: the efa driver hard-codes its ports to ACTIVE/LinkUp, so their state says nothing; efa.link judges them.",
    step: None,
};
const DISABLED_BY_DESIGN: FindingCode = FindingCode {
    code: "RDM110",
    title: "ports Disabled beside ACTIVE ports of the same device: off by design",
    explanation: "A skip: multi-plane or unused ports of a multi-port device, disabled while their siblings are ACTIVE, are not judged.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "RDMA ports ACTIVE and LinkUp, rate and link layer as expected, valid LID/SM LID on InfiniBand",
    needs: &[Need::RdmaDevice],
    explain: Explain {
        reads: "/sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer,lid,sm_lid}, \
                /sys/class/infiniband/<dev>/hca_type",
        why: "A port that is down, polling, or trained to a lower width or speed takes its rail out of NCCL's \
              rings or slows every collective to the slowest rail. An InfiniBand port without a LID or SM LID \
              has no subnet manager and cannot carry traffic even when the cable is fine.",
        fixes: &[
            ("port not ACTIVE / phys_state not LinkUp", "check the cable and the switch port (`ibstat`, `mlxlink -d <dev> -m`); Polling = no peer, Disabled = port disabled on the switch or by `ibportstate`"),
            ("INIT / no LID / SM LID 0", "start or reach a subnet manager (`systemctl status opensm` or the UFM/switch SM); check the partition key"),
            ("rate below the profile or its siblings", "reseat or replace the cable/transceiver; check `mlxlink -d <dev> -m` for lane errors; compare firmware with `mlxfwmanager`"),
            ("link layer differs from the profile", "set the port type: `mlxconfig -d <dev> set LINK_TYPE_P1=1` (IB) or `=2` (Ethernet), then reboot"),
        ],
    },
    findings: &[
        &PORT_DOWN,
        &WRONG_LINK_LAYER,
        &RATE_UNKNOWN,
        &RATE_BELOW_MIN,
        &RATE_BELOW_SIBLINGS,
        &NO_SUBNET_MANAGER,
        &EXPECTED_NONE,
        &TOO_FEW_ACTIVE,
        &EFA_ELSEWHERE,
        &DISABLED_BY_DESIGN,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for RdmaLink {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let expect = &cx.profile.expect;
        CheckResult::or_read_error(
            ID,
            Facts::read(
                cx.host,
                cx.inputs.env("NCCL_IB_HCA"),
                expect.rdma_port_count,
            )
            .map(|facts| facts.ports.completed(ID, judge(&facts, expect))),
        )
    }
}

/// What the check reads, before it judges.
struct Facts {
    /// Every port with its use (role, or disabled by design) and the PCI tree the roles rest on.
    ports: Ports,
    /// Each device's HCA model (the model groups siblings), by device name.
    models: Vec<(String, Option<String>)>,
    /// Read only when no RDMA device is listed: whether RDMA hardware is there without its driver.
    survey: Option<Survey>,
    /// EFA devices, left to efa.link: the efa driver hard-codes their ports to ACTIVE/LinkUp.
    efa: Vec<String>,
}

impl Facts {
    fn read(
        host: &Host,
        nccl_ib_hca: Option<&str>,
        rails: Option<u32>,
    ) -> Result<Facts, ReadError> {
        let mut ports = nic_role::read(host, nccl_ib_hca, rails)?;
        let survey = ports
            .devices
            .is_empty()
            .then(|| Survey::read(host, Stack::Rdma));
        let names: Vec<String> = ports.devices.iter().map(|(d, _)| d.clone()).collect();
        let (_, efa) = crate::sysfs::efa::split_efa(host, &names)?;
        ports.devices.retain(|(d, _)| !efa.contains(d));
        let mut models = Vec::new();
        for (dev, dev_ports) in &ports.devices {
            if dev_ports.is_empty() {
                continue;
            }
            // One model that cannot be read leaves the sibling comparison unknown.
            models.push((dev.clone(), read_hca_type(host, dev)?));
        }
        Ok(Facts {
            ports,
            models,
            survey,
            efa,
        })
    }
}

fn judge(facts: &Facts, expect: &Expect) -> Vec<CheckResult> {
    let mut results = judge_ports(facts, expect);
    if !facts.efa.is_empty() {
        let efa_only = facts.ports.devices.is_empty();
        let r = CheckResult::skip(
            ID,
            format!(
                "{} EFA device(s) judged by efa.link: the efa driver hard-codes their ports to ACTIVE/LinkUp",
                facts.efa.len()
            ),
        )
        .evidence("EFA devices", facts.efa.join(", ")).code(&EFA_ELSEWHERE);
        if efa_only && expect.rdma_port_count.is_none_or(|n| n == 0) {
            return vec![r];
        }
        results.push(r);
    }
    results
}

fn judge_ports(facts: &Facts, expect: &Expect) -> Vec<CheckResult> {
    if let Some(survey) = &facts.survey {
        let expected = expect.rdma_port_count.is_some_and(|n| n > 0);
        if let Some(r) = survey.gate(ID, expected) {
            return vec![r];
        }
    }
    let model_of = |dev: &str| {
        facts
            .models
            .iter()
            .find(|(d, _)| d == dev)
            .and_then(|(_, m)| m.clone())
    };
    let mut ports: Vec<(Option<String>, &PortAttrs, &Assigned)> = Vec::new();
    let mut off_by_design = Vec::new();
    // Ports whose role could not be decided: an error each, counted in neither role.
    let mut unplaced = Vec::new();
    for (dev, dev_ports) in &facts.ports.devices {
        let disabled: Vec<&PortAttrs> = dev_ports
            .iter()
            .filter(|(_, usage)| *usage == Use::DisabledByDesign)
            .map(|(p, _)| p)
            .collect();
        if !disabled.is_empty() {
            off_by_design.push(disabled_ports(dev, dev_ports, &disabled));
        }
        for (p, usage) in dev_ports {
            match usage {
                Use::Role(role) => ports.push((model_of(dev), p, role)),
                Use::Unplaced(unread) => unplaced.push(nic_role::unplaced(ID, p, unread)),
                Use::DisabledByDesign => {}
            }
        }
    }
    if ports.is_empty() && !unplaced.is_empty() {
        unplaced.extend(off_by_design);
        return unplaced;
    }
    if ports.is_empty() {
        let r = match expect.rdma_port_count {
            Some(n) if n > 0 => {
                CheckResult::fail(ID, format!("no RDMA port, the profile expects {n}"))
                    .code(&EXPECTED_NONE)
            }
            _ => CheckResult::skip(
                ID,
                format!("no RDMA port ({CLASS_INFINIBAND} is empty or absent)"),
            )
            .code(&common::ABSENT),
        };
        return vec![r];
    }

    // Sibling rule: the fastest active rate per HCA model and role.
    let fastest = |model: &Option<String>, role: Role| {
        ports
            .iter()
            .filter(|(m, p, a)| m == model && a.role == role && p.is_active())
            .filter_map(|(_, p, _)| p.parsed_rate().map(|r| r.gbps))
            .fold(0.0_f64, f64::max)
    };

    let mut results = Vec::new();
    for (model, port, assigned) in &ports {
        let wants = Wants::of(expect, assigned.role);
        results.push(judge_port(
            &wants,
            port,
            model,
            fastest(model, assigned.role),
            assigned,
        ));
    }
    let unknown = unplaced.len();
    results.extend(unplaced);
    results.extend(off_by_design);

    for (role, want) in [
        (Role::Storage, expect.storage_port_count),
        (Role::Compute, expect.rdma_port_count),
    ] {
        let Some(n) = want else { continue };
        let of_role: Vec<&PortAttrs> = ports
            .iter()
            .filter(|(_, _, a)| a.role == role)
            .map(|(_, p, _)| *p)
            .collect();
        let active = of_role.iter().filter(|p| p.is_active()).count() as u32;
        // Too few, but a port of unknown role may be one of them: the count is not known.
        let status = match active < n {
            true if unknown > 0 => Status::Error,
            true => Status::Fail,
            false => Status::Pass,
        };
        let mut m = Measurement::new(
            &format!("active_{}_ports", role.as_str()),
            f64::from(active),
            "count",
        );
        m.fail = Some(f64::from(n));
        results.insert(
            0,
            CheckResult::new(
                ID,
                status,
                format!(
                    "{active} of {} {} port(s) ACTIVE, the profile expects {n}{}",
                    of_role.len(),
                    role.as_str(),
                    if status == Status::Error {
                        format!("; {unknown} port(s) of unknown role not counted")
                    } else {
                        String::new()
                    }
                ),
            )
            .measure(m)
            .code(if status == Status::Error {
                &common::UNREAD
            } else {
                &TOO_FEW_ACTIVE
            }),
        );
    }
    results
}

/// What a port of one role must show: compute rails the profile's `rdma_*` keys, storage ports its
/// `storage_*` keys (by default only ACTIVE, and a storage port down warns: collectives do not run over it).
struct Wants {
    link_layer: Option<LinkLayer>,
    min_rate_gbps: Option<f64>,
    down: Status,
    /// `storage ` before "port is …", empty for rails.
    label: &'static str,
}

impl Wants {
    fn of(expect: &Expect, role: Role) -> Wants {
        match role {
            Role::Compute => Wants {
                link_layer: expect.rdma_link_layer,
                min_rate_gbps: expect.rdma_min_rate_gbps,
                down: Status::Fail,
                label: "",
            },
            Role::Storage => Wants {
                link_layer: expect.storage_link_layer,
                min_rate_gbps: expect.storage_min_rate_gbps,
                down: Status::Warn,
                label: "storage ",
            },
        }
    }
}

/// One result for the ports of `dev` that are disabled by design: not judged, and said so.
fn disabled_ports(dev: &str, all: &[(PortAttrs, Use)], disabled: &[&PortAttrs]) -> CheckResult {
    let active: Vec<String> = all
        .iter()
        .filter(|(p, _)| p.is_active() && p.is_link_up())
        .map(|(p, _)| p.port.to_string())
        .collect();
    let mut r = CheckResult::skip(
        ID,
        format!(
            "{} port(s) Disabled beside ACTIVE ports {}: off by design (multi-plane or unused ports of a \
             multi-port device), not judged",
            disabled.len(),
            active.join(", ")
        ),
    )
    .subject(dev).code(&DISABLED_BY_DESIGN);
    for p in disabled {
        for (k, v) in p.evidence().into_iter().take(2) {
            r = r.evidence(&k, v);
        }
    }
    r
}

fn judge_port(
    wants: &Wants,
    port: &PortAttrs,
    model: &Option<String>,
    siblings_fastest: f64,
    assigned: &Assigned,
) -> CheckResult {
    let mut f = Findings::default();
    let text = |r: &Result<String, ReadError>| match r {
        Ok(s) => s.clone(),
        Err(e) => e.reason(),
    };

    let up = port.is_active() && port.is_link_up();
    if !up {
        f.coded(&PORT_DOWN).add(
            wants.down,
            format!(
                "{}port is {} / {}",
                wants.label,
                text(&port.state),
                text(&port.phys_state)
            ),
            "check the cable and the switch port (`ibstat`, `mlxlink -d <dev> -m`); an INIT port needs a subnet manager",
        );
    }

    let layer = port.link_layer.as_deref().unwrap_or("<unreadable>");
    if let Some(want) = wants.link_layer {
        let ok = match want {
            LinkLayer::Infiniband => port.is_infiniband(),
            LinkLayer::Ethernet => port.is_ethernet(),
        };
        if !ok {
            let want = match want {
                LinkLayer::Infiniband => "InfiniBand",
                LinkLayer::Ethernet => "Ethernet",
            };
            f.coded(&WRONG_LINK_LAYER).fail(
                format!("link layer {layer}, the profile expects {want}"),
                "set the port type with `mlxconfig -d <dev> set LINK_TYPE_P1=1|2` and reboot",
            );
        }
    }

    let rate = port.parsed_rate();
    let mut measurement = None;
    match &rate {
        None => {
            f.coded(&RATE_UNKNOWN)
                .warn(format!("rate not recognised: {}", text(&port.rate)), "");
        }
        Some(r) if up => {
            let mut m = Measurement::new("rate", r.gbps, "Gb/s");
            if let Some(min) = wants.min_rate_gbps {
                m.fail = Some(min);
                if r.gbps < min {
                    f.coded(&RATE_BELOW_MIN).fail(
                        format!("rate {} Gb/s below the profile minimum {min} Gb/s", r.gbps),
                        "reseat or replace the cable/transceiver; check `mlxlink -d <dev> -m` for lanes down",
                    );
                }
            } else if r.gbps < siblings_fastest {
                m.warn = Some(siblings_fastest);
                f.coded(&RATE_BELOW_SIBLINGS).warn(
                    format!(
                        "rate {} Gb/s below its siblings of the same HCA model ({siblings_fastest} Gb/s)",
                        r.gbps
                    ),
                    "compare cables and switch ports with the faster siblings (`mlxlink -d <dev> -m`)",
                );
            }
            measurement = Some(m);
        }
        Some(_) => {}
    }

    if up && port.is_infiniband() {
        for (name, value) in [("LID", &port.lid), ("SM LID", &port.sm_lid)] {
            match value.as_deref().ok().and_then(parse_lid) {
                Some(l) if l != 0 && l != 0xffff => {}
                _ => {
                    f.coded(&NO_SUBNET_MANAGER).fail(
                        format!("invalid {name} {}", text(value)),
                        "no subnet manager reachable: check opensm/UFM and the switch port",
                    );
                }
            }
        }
    }

    let rate_text = text(&port.rate);
    let subject = port.subject();
    let summary = match f.status() {
        Status::Pass => format!("ACTIVE, LinkUp, {rate_text}, {layer}"),
        _ => f.deciding(),
    };
    let mut r = f
        .apply(CheckResult::pass(ID, summary))
        .subject(subject)
        .role(assigned.role.as_str())
        .note(assigned.evidence());
    if let Some(m) = measurement {
        r = r.measure(m);
    }
    for (k, v) in port.evidence() {
        r = r.evidence(&k, v);
    }
    if let Some(m) = model {
        r = r.evidence(&format!("{}/hca_type", device_dir(&port.device)), m);
    }
    let speed_unnamed = rate
        .as_ref()
        .is_some_and(|r| r.speed.as_deref().is_none_or(|s| s == "SDR"));
    if up && speed_unnamed && model.as_deref().is_some_and(|m| FAST_HCAS.contains(&m)) {
        r = r.note(format!(
            "rate names SDR on a {} HCA: the kernel may be too old to name the speed (not necessarily a degraded link)",
            model.as_deref().unwrap_or("")
        ));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::testing::{run_on, verdicts};

    /// Reproduced: a front-end port judged as a rail failed healthy nodes: Azure's `mlx5_an0` ("link layer
    /// Ethernet, the profile expects InfiniBand"), the BlueField-3 bond of a /sys/class/infiniband capture.
    /// Each is now a storage/front-end port; the rails alone count toward the profile's 8.
    #[test]
    fn front_end_ports_do_not_fail_as_rails() {
        for (scenario, profile, front) in [
            ("azure-nd-h100-v5", "Standard_ND96isr_H100_v5", "mlx5_an0/1"),
            (
                "azure-nd-h100-v5-an-alone",
                "Standard_ND96isr_H100_v5",
                "mlx5_an0/1",
            ),
            ("ib-class-only-bond", "hgx-h100-ib", "mlx5_bond_0/1"),
        ] {
            let r = run_on(&RdmaLink, scenario, profile);
            assert!(
                r.iter().all(|x| x.status <= Status::Warn),
                "{scenario}: {r:#?}"
            );
            assert!(
                r[0].summary.starts_with("8 of 8 compute port(s) ACTIVE"),
                "{scenario}: {}",
                r[0].summary
            );
            let port = r
                .iter()
                .find(|x| x.subject.as_deref() == Some(front))
                .unwrap();
            assert!(
                port.evidence
                    .iter()
                    .any(|e| e.starts_with("role = storage")),
                "{scenario}: {:#?}",
                port.evidence
            );
        }
    }

    #[test]
    fn hgx_all_ports_active_ndr_pass() {
        let r = run_on(&RdmaLink, "hgx-healthy", "hgx-h100-ib");
        assert_eq!(r.len(), 9, "{r:#?}");
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
        assert_eq!(r[1].subject.as_deref(), Some("mlx5_0/1"));
    }

    #[test]
    fn port_down_fails_naming_the_port() {
        let r = run_on(&RdmaLink, "ib-port-down", "generic");
        let failed: Vec<_> = verdicts(&r)
            .into_iter()
            .filter(|(_, s)| *s != Status::Pass)
            .collect();
        assert_eq!(failed, [("mlx5_3/1".to_string(), Status::Fail)]);
        let r = run_on(&RdmaLink, "ib-port-down", "hgx-h100-ib");
        assert_eq!(r[0].status, Status::Fail, "7 of 8 active: {}", r[0].summary);
    }

    #[test]
    fn roce_ports_fail_an_infiniband_profile() {
        let r = run_on(&RdmaLink, "roce-mtu-1500", "hgx-h100-ib");
        assert!(r
            .iter()
            .skip(1)
            .all(|x| x.status == Status::Fail && x.summary.contains("link layer")));
        let r = run_on(&RdmaLink, "roce-mtu-1500", "roce-400g");
        assert!(r.iter().all(|x| x.status == Status::Pass), "{r:#?}");
    }

    #[test]
    fn port_slower_than_siblings_warns_generic_fails_profile_minimum() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let rate = dir.path().join("sys/class/infiniband/mlx5_2/ports/1/rate");
        std::fs::write(&rate, "200 Gb/sec (2X NDR)\n").unwrap();
        let r = crate::probes::testing::run_on_root(&RdmaLink, dir.path(), "generic");
        let bad: Vec<_> = verdicts(&r)
            .into_iter()
            .filter(|(_, s)| *s != Status::Pass)
            .collect();
        assert_eq!(bad, [("mlx5_2/1".to_string(), Status::Warn)]);
        let r = crate::probes::testing::run_on_root(&RdmaLink, dir.path(), "hgx-h100-ib");
        let bad: Vec<_> = verdicts(&r)
            .into_iter()
            .filter(|(_, s)| *s != Status::Pass)
            .collect();
        assert_eq!(bad, [("mlx5_2/1".to_string(), Status::Fail)]);
    }

    #[test]
    fn h200_without_rdma_skips() {
        let r = run_on(&RdmaLink, "h200-vm-no-rdma", "generic");
        assert_eq!(r[0].status, Status::Skip);
    }

    /// Reproduced (issue 31's Blackwell trees, the damage sweep): GPU7's `class` or `numa_node` unread, its
    /// down rail `mlx5_5` was "no GPU's nearest port", a storage port, and passed under `hgx-h100-ib`. Its role
    /// is now unknown: an error naming the file, and the count of compute ports unknown with it.
    #[test]
    fn a_rail_whose_gpu_was_not_read_is_an_error_not_a_storage_port() {
        let clean = run_on(&RdmaLink, "hgx-b200-ib-rail-down", "hgx-h100-ib");
        let down = |r: &[CheckResult]| {
            r.iter()
                .find(|x| x.subject.as_deref() == Some("mlx5_5/1"))
                .cloned()
                .expect("mlx5_5/1")
        };
        assert_eq!(down(&clean).status, Status::Fail, "{clean:#?}");
        for (file, text) in [
            ("class", None),
            ("class", Some("garbage?\n")),
            ("numa_node", None),
            ("numa_node", Some("7x\n")),
        ] {
            let dir = crate::probes::testing::damaged_copy(
                "hgx-b200-ib-rail-down",
                &format!("/sys/bus/pci/devices/0000:ac:00.0/{file}"),
                text,
            );
            let r = crate::probes::testing::run_on_root(&RdmaLink, dir.path(), "hgx-h100-ib");
            let port = down(&r);
            assert_eq!(port.status, Status::Error, "{file} {text:?}: {port:#?}");
            assert!(
                port.evidence
                    .iter()
                    .any(|e| e.contains(&format!("0000:ac:00.0/{file}"))),
                "{port:#?}"
            );
        }
    }
}
