//! `rdma.roce`: for Ethernet (RoCE) ports, a RoCE v2 GID on an up netdev whose MTU carries the RoCE MTU the
//! profile wants; reports the GID index NCCL should use.

use crate::host::{Host, ReadError};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Findings, Measurement, Need, Probe,
    ProbeMeta, Remedy, Status,
};
use crate::profile::Expect;
use crate::rules::nic_role::{self, Assigned, Ports, Role, Use};
use crate::rules::presence::{Stack, Survey};
use crate::rules::rdma_transport::{self, Transport};
use crate::sysfs::infiniband::{
    device_bdf, device_dir, gid_ipv4, gid_is_link_local, port_dir, read_all_ports, read_gid,
    read_gid_indices, read_gid_ndev, read_gid_type, read_node_type, PortAttrs,
};
use crate::sysfs::net::{self, CLASS_NET};

pub struct RdmaRoce;

const ID: &str = "rdma.roce";

/// Bytes of RoCE v2 headers the kernel subtracts from the netdev MTU (GRH 40 + UDP 8 + BTH 12 + XRC 4 +
/// AtomicETH 28 + ICRC 4), as in `iboe_get_mtu()`.
const ROCE_OVERHEAD: u32 = 96;
/// The MTU that gives a 4096-byte RoCE MTU with room to spare (NVIDIA's recommendation).
const RECOMMENDED_NETDEV_MTU: u32 = 4200;

/// The RoCE path MTU a netdev MTU allows: the largest IB MTU that fits.
pub fn active_roce_mtu(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(ROCE_OVERHEAD);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
        .unwrap_or(0)
}

/// One populated GID slot.
struct Gid {
    index: u32,
    gid: String,
    gid_type: Option<String>,
    ndev: Option<String>,
}

const NO_ROCE_V2_GID: FindingCode = FindingCode {
    code: "RDM201",
    title: "a RoCE port has no RoCE v2 GID",
    explanation: "No populated GID slot of type RoCE v2: NCCL over RoCE needs one (NCCL_IB_GID_INDEX). Assign an IPv4/IPv6 address to the port's netdev and make sure RoCE v2 is enabled (`cma_roce_mode -d <dev> -p 1 -m 2`). A storage port warns.",
    step: Some(Remedy::Reconfigure),
};
const NO_NETDEV: FindingCode = FindingCode {
    code: "RDM202",
    title: "no netdev behind the RoCE v2 GID",
    explanation: "The GID names no network interface, so its state and MTU cannot be judged and RDMA CM cannot resolve addresses through it.",
    step: Some(Remedy::Reconfigure),
};
const NETDEV_DOWN: FindingCode = FindingCode {
    code: "RDM203",
    title: "the netdev behind the RoCE v2 GID is down",
    explanation: "The interface carrying the GID is not up: bring it up (`ip link set <if> up`) and check the switch port and cable.",
    step: Some(Remedy::ServiceRma),
};
const MTU_BELOW_PROFILE: FindingCode = FindingCode {
    code: "RDM204",
    title: "the netdev's MTU gives a RoCE MTU below the profile's",
    explanation: "The RoCE MTU follows the netdev MTU; below what the profile wants (`expect.roce_mtu`) every message is cut smaller. Raise the netdev MTU (e.g. 9000) on the host and the switch.",
    step: Some(Remedy::Reconfigure),
};
const MTU_BELOW_4096: FindingCode = FindingCode {
    code: "RDM205",
    title: "the netdev's MTU gives a RoCE MTU below 4096",
    explanation: "A RoCE MTU of 4096 needs a netdev MTU of at least 4200; smaller MTUs cost bandwidth. Raise the netdev MTU on the host and the switch.",
    step: Some(Remedy::Reconfigure),
};
const NOT_ROCE: FindingCode = FindingCode {
    code: "RDM206",
    title: "an Ethernet-link-layer port that is not RoCE (iWARP or other)",
    explanation: "A skip: the port's transport is not RoCE, so RoCE GIDs do not apply.",
    step: None,
};
const UNKNOWN_NODE_TYPE: FindingCode = FindingCode {
    code: "RDM207",
    title: "the device's node_type is not one the kernel writes",
    explanation: "An error: the node_type file does not name a transport the kernel knows, so whether RoCE applies is unknown.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "RoCE ports: a RoCE v2 GID on an up netdev, MTU carrying a 4096-byte RoCE MTU, the GID index for NCCL",
    needs: &[Need::RdmaDevice],
    explain: Explain {
        reads: "/sys/class/infiniband/<dev>/ports/<n>/{link_layer,gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>} \
                (EINVAL on empty slots is normal), /sys/class/net/<if>/{operstate,mtu}",
        why: "RoCE v2 (routable, UDP) needs a v2 GID with an IP address; without one NCCL either picks a v1/link-local \
              GID that does not route or fails to connect. A netdev MTU of 1500 limits the RoCE MTU to 1024 \
              bytes, costing bandwidth on every message. NCCL_IB_GID_INDEX must name the v2 GID.",
        fixes: &[
            ("no RoCE v2 GID", "assign an IP address to the port's netdev (`ip addr add ... dev <if>`); check `cma_roce_mode -d <dev> -p 1 -m 2`"),
            ("netdev down", "`ip link set <if> up`; check the switch port"),
            ("netdev MTU below 4200", "`ip link set <if> mtu 9000` (and persist it in netplan/NetworkManager); the switch ports must allow jumbo frames"),
        ],
    },
    findings: &[
        &NO_ROCE_V2_GID,
        &NO_NETDEV,
        &NETDEV_DOWN,
        &MTU_BELOW_PROFILE,
        &MTU_BELOW_4096,
        &NOT_ROCE,
        &UNKNOWN_NODE_TYPE,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for RdmaRoce {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let expect = &cx.profile.expect;
        let facts = Facts::read(
            cx.host,
            cx.inputs.env("NCCL_IB_HCA"),
            expect.rdma_port_count,
        );
        CheckResult::or_read_error(
            ID,
            facts.map(|facts| {
                let results = judge(&facts, expect);
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
    /// Read only when no RDMA device is listed: whether RDMA hardware is there without its driver.
    survey: Option<Survey>,
    devices_listed: bool,
    /// The Ethernet ports carrying traffic (not disabled by design), each with its role and what was read
    /// behind it (or the read that failed).
    ports: Vec<(PortAttrs, Assigned, Result<Kind, ReadError>)>,
    /// The Ethernet ports whose role could not be decided, with what was not read.
    unplaced: Vec<(PortAttrs, Vec<String>)>,
    /// The roles, read only where an Ethernet port is there to judge (they rest on the PCI tree).
    roles: Option<Ports>,
}

/// What an Ethernet port is, by its device's transport.
enum Kind {
    Roce(PortFacts),
    /// iWARP or another transport: RoCE GIDs do not apply. The device's `node_type` as read.
    NotRoce(Transport, String),
    /// A `node_type` the kernel does not write.
    UnknownNodeType(String),
}

/// One Ethernet port's GIDs and the netdev behind the GID NCCL would use.
struct PortFacts {
    gids: Vec<Gid>,
    evidence: Vec<String>,
    /// The netdev carrying the chosen RoCE v2 GID; none when no GID is RoCE v2 or no netdev carries it.
    netdev: Option<Netdev>,
}

struct Netdev {
    name: String,
    operstate: Result<String, ReadError>,
    mtu: Result<u32, ReadError>,
}

impl Facts {
    fn read(
        host: &Host,
        nccl_ib_hca: Option<&str>,
        rails: Option<u32>,
    ) -> Result<Facts, ReadError> {
        let devices = read_all_ports(host)?;
        let survey = devices.is_empty().then(|| Survey::read(host, Stack::Rdma));
        let mut facts = Facts {
            survey,
            devices_listed: !devices.is_empty(),
            ports: Vec::new(),
            unplaced: Vec::new(),
            roles: None,
        };
        if !devices
            .iter()
            .flat_map(|(_, p)| p)
            .any(PortAttrs::is_ethernet)
        {
            return Ok(facts);
        }
        let roles = nic_role::read(host, nccl_ib_hca, rails)?;
        for (dev, ports) in &roles.devices {
            for (p, usage) in ports {
                if let Use::Unplaced(unread) = usage {
                    if p.is_ethernet() {
                        facts.unplaced.push((p.clone(), unread.clone()));
                    }
                }
            }
            // Ports disabled by design carry no traffic: rdma.link says so.
            let ethernet: Vec<(&PortAttrs, &Assigned)> = ports
                .iter()
                .filter_map(|(p, usage)| match usage {
                    Use::Role(a) if p.is_ethernet() => Some((p, a)),
                    _ => None,
                })
                .collect();
            if ethernet.is_empty() {
                continue;
            }
            // The node type decides the transport: an RNIC is iWARP whatever its link layer.
            let node_type = read_node_type(host, dev);
            for (port, assigned) in ethernet {
                let kind = match &node_type {
                    Err(e) => Err(e.clone()),
                    Ok(None) => PortFacts::read(host, port).map(Kind::Roce),
                    Ok(Some(text)) => match rdma_transport::of(text, "Ethernet") {
                        Some(Transport::Roce) => PortFacts::read(host, port).map(Kind::Roce),
                        Some(other) => Ok(Kind::NotRoce(other, text.trim().to_string())),
                        None => Ok(Kind::UnknownNodeType(text.trim().to_string())),
                    },
                };
                facts.ports.push((port.clone(), assigned.clone(), kind));
            }
        }
        facts.roles = Some(roles);
        Ok(facts)
    }
}

impl PortFacts {
    fn read(host: &Host, port: &PortAttrs) -> Result<PortFacts, ReadError> {
        let mut evidence = Vec::new();
        let gids = read_gids(host, port, &mut evidence)?;
        let ifname = match chosen_gid(&gids) {
            None => None,
            Some(Gid { ndev: Some(n), .. }) => Some(n.clone()),
            // Without a netdev in the GID's attributes, the PCI function's first netdev carries it. A `device`
            // link that cannot be resolved is the error, not a device without a PCI function.
            Some(_) => device_bdf(host, &port.device)?
                .map(|bdf| net::read_pci_netdevs(host, &bdf))
                .transpose()?
                .and_then(|n| n.into_iter().next()),
        };
        let netdev = ifname.map(|name| Netdev {
            operstate: net::read_operstate(host, &name),
            mtu: net::read_mtu(host, &name),
            name,
        });
        Ok(PortFacts {
            gids,
            evidence,
            netdev,
        })
    }
}

/// Every populated GID slot of the port; a slot, type or netdev that cannot be read is the error: it may be the
/// RoCE v2 GID NCCL would pick.
fn read_gids(
    host: &Host,
    port: &PortAttrs,
    evidence: &mut Vec<String>,
) -> Result<Vec<Gid>, ReadError> {
    let dir = port_dir(&port.device, port.port);
    let mut gids = Vec::new();
    for index in read_gid_indices(host, &port.device, port.port)? {
        let Some(gid) = read_gid(host, &port.device, port.port, index)? else {
            continue;
        };
        let gid_type = read_gid_type(host, &port.device, port.port, index)?;
        let ndev = read_gid_ndev(host, &port.device, port.port, index)?;
        evidence.push(format!(
            "{dir}/gids/{index} = {gid} ({}, {})",
            gid_type.as_deref().unwrap_or("no type"),
            ndev.as_deref().unwrap_or("no netdev")
        ));
        gids.push(Gid {
            index,
            gid,
            gid_type,
            ndev,
        });
    }
    Ok(gids)
}

/// The RoCE v2 GID NCCL would use: a routable address, IPv4-mapped first, then global IPv6; link-local only as
/// a last resort.
fn chosen_gid(gids: &[Gid]) -> Option<&Gid> {
    let v2: Vec<&Gid> = gids
        .iter()
        .filter(|g| g.gid_type.as_deref() == Some("RoCE v2"))
        .collect();
    v2.iter()
        .find(|g| gid_ipv4(&g.gid).is_some())
        .or_else(|| v2.iter().find(|g| !gid_is_link_local(&g.gid)))
        .or_else(|| v2.first())
        .copied()
}

fn judge(facts: &Facts, expect: &Expect) -> Vec<CheckResult> {
    if let Some(r) = facts.survey.as_ref().and_then(|s| s.gate(ID, false)) {
        return vec![r];
    }
    let unplaced = facts
        .unplaced
        .iter()
        .map(|(port, unread)| nic_role::unplaced(ID, port, unread));
    if facts.ports.is_empty() && !facts.unplaced.is_empty() {
        return unplaced.collect();
    }
    if facts.ports.is_empty() {
        let why = if !facts.devices_listed {
            "no RDMA device".to_string()
        } else {
            "no RDMA port with the Ethernet link layer (RoCE does not apply to InfiniBand ports)"
                .to_string()
        };
        return vec![CheckResult::skip(ID, why).code(&common::ABSENT)];
    }
    facts
        .ports
        .iter()
        .map(|(port, assigned, read)| match read {
            Ok(Kind::Roce(f)) => judge_port(port, f, expect, assigned),
            Ok(Kind::NotRoce(transport, node_type)) => CheckResult::skip(
                ID,
                format!(
                    "{} (node_type {node_type}): RoCE GIDs do not apply",
                    transport.as_str()
                ),
            )
            .subject(port.subject())
            .evidence(&format!("{}/node_type", device_dir(&port.device)), node_type).code(&NOT_ROCE),
            Ok(Kind::UnknownNodeType(text)) => {
                let path = format!("{}/node_type", device_dir(&port.device));
                CheckResult::error(
                    ID,
                    format!("{path}: not a node type the kernel writes ({text:?}): the transport is unknown"),
                )
                .subject(port.subject())
                .evidence(&path, text).code(&UNKNOWN_NODE_TYPE)
            }
            Err(e) => CheckResult::read_error(ID, e).subject(port.subject()),
        })
        .chain(unplaced)
        .collect()
}

/// A storage/frontend port's RoCE findings warn: collectives do not run over it.
fn judge_port(
    port: &PortAttrs,
    facts: &PortFacts,
    expect: &Expect,
    assigned: &Assigned,
) -> CheckResult {
    let mut r = judge_roce(port, facts, expect, assigned.role == Role::Storage)
        .role(assigned.role.as_str())
        .note(assigned.evidence());
    if assigned.role == Role::Storage && r.status == Status::Fail {
        r = r.restatus(Status::Warn);
        r.summary = format!("storage port: {}", r.summary);
    }
    r
}

/// `storage`: the port is a storage/frontend port, whose failures warn (an unread reading still errors).
fn judge_roce(port: &PortAttrs, facts: &PortFacts, expect: &Expect, storage: bool) -> CheckResult {
    let subject = port.subject();
    let mut evidence = facts.evidence.clone();
    let Some(gid) = chosen_gid(&facts.gids) else {
        let mut r = CheckResult::fail(
            ID,
            format!("no RoCE v2 GID ({} populated GID slot(s), none of type RoCE v2)", facts.gids.len()),
        )
        .subject(subject)
        .fix("assign an IPv4/IPv6 address to the port's netdev; make sure RoCE v2 is enabled (`cma_roce_mode -d <dev> -p 1 -m 2`)").code(&NO_ROCE_V2_GID);
        r.evidence = evidence;
        return r;
    };
    let address = gid_ipv4(&gid.gid).unwrap_or_else(|| gid.gid.clone());
    let mut f = Findings::default();
    let mut measurements = vec![Measurement::new("gid_index", f64::from(gid.index), "index")];

    match &facts.netdev {
        None => {
            f.coded(&NO_NETDEV)
                .fail("no netdev behind the RoCE v2 GID", "");
        }
        Some(Netdev {
            name: ifname,
            operstate,
            mtu,
        }) => {
            match operstate {
                Ok(state) => {
                    evidence.push(format!("{CLASS_NET}/{ifname}/operstate = {state}"));
                    if state != "up" {
                        f.coded(&NETDEV_DOWN).fail(
                            format!("netdev {ifname} is {state}"),
                            format!("`ip link set {ifname} up`; check the switch port"),
                        );
                    }
                }
                // Not read: the port's state is unknown, an error rather than a finding.
                Err(e) => f.unread(&format!("netdev {ifname}"), e),
            }
            match mtu {
                Ok(mtu) => {
                    let mtu = *mtu;
                    evidence.push(format!("{CLASS_NET}/{ifname}/mtu = {mtu}"));
                    let active = active_roce_mtu(mtu);
                    let mut m_mtu = Measurement::new("netdev_mtu", f64::from(mtu), "bytes");
                    let mut m_active = Measurement::new("roce_mtu", f64::from(active), "bytes");
                    let fix = if active < 4096 {
                        format!(
                            "`ip link set {ifname} mtu 9000` and persist it; allow jumbo frames on the switch ports"
                        )
                    } else {
                        String::new()
                    };
                    match expect.roce_mtu {
                        Some(want) => {
                            m_active.fail = Some(f64::from(want));
                            if active < want {
                                f.coded(&MTU_BELOW_PROFILE).fail(
                                    format!(
                                        "netdev {ifname} MTU {mtu} gives a RoCE MTU of {active}, the profile wants {want}"
                                    ),
                                    fix,
                                );
                            }
                        }
                        None => {
                            m_mtu.warn = Some(f64::from(RECOMMENDED_NETDEV_MTU));
                            if mtu < RECOMMENDED_NETDEV_MTU {
                                f.coded(&MTU_BELOW_4096).warn(
                                    format!(
                                        "netdev {ifname} MTU {mtu} gives a RoCE MTU of {active} (4096 needs >= {RECOMMENDED_NETDEV_MTU})"
                                    ),
                                    fix,
                                );
                            }
                        }
                    }
                    measurements.push(m_mtu);
                    measurements.push(m_active);
                }
                // Not read: the port's state is unknown, an error rather than a finding.
                Err(e) => f.unread(&format!("netdev {ifname}"), e),
            }
        }
    }
    let ifname = facts.netdev.as_ref().map(|n| n.name.as_str());
    let softened = storage && f.soften(Status::Fail, Status::Warn);

    let nccl = format!("NCCL_IB_GID_INDEX={}", gid.index);
    let summary = match f.status() {
        Status::Fail | Status::Error => {
            format!("{} (RoCE v2 GID {} = {address})", f.deciding(), gid.index)
        }
        Status::Pass => format!(
            "RoCE v2 GID {} = {address} on {} (up), RoCE MTU 4096; use {nccl}",
            gid.index,
            ifname.unwrap_or("?")
        ),
        _ => format!("{} ({nccl})", f.deciding()),
    };
    let summary = if softened {
        format!("storage port: {summary}")
    } else {
        summary
    };
    let mut r = f.apply(CheckResult::pass(ID, summary)).subject(subject);
    r.measurements = measurements;
    r.evidence = evidence;
    r.note(format!("GID index NCCL should use: {nccl}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Status;
    use crate::probes::testing::{run_on, verdicts};

    #[test]
    fn mtu_1500_gives_roce_mtu_1024() {
        assert_eq!(active_roce_mtu(1500), 1024);
        assert_eq!(active_roce_mtu(4200), 4096);
        assert_eq!(active_roce_mtu(9000), 4096);
        assert_eq!(active_roce_mtu(0), 0);
    }

    #[test]
    fn roce_mtu_1500_warns_generic_and_fails_roce_profile() {
        let r = run_on(&RdmaRoce, "roce-mtu-1500", "generic");
        let v = verdicts(&r);
        assert_eq!(v.len(), 8);
        assert!(v[..7].iter().all(|(_, s)| *s == Status::Warn), "{v:?}");
        assert_eq!(v[7], ("mlx5_7/1".to_string(), Status::Fail));
        assert!(
            r[0].summary.contains("NCCL_IB_GID_INDEX=3"),
            "{}",
            r[0].summary
        );
        let r = run_on(&RdmaRoce, "roce-mtu-1500", "roce-400g");
        assert!(r.iter().all(|x| x.status == Status::Fail), "{r:#?}");
    }

    /// An unreadable `gids/` was read as a port without GIDs ("no RoCE v2 GID"), an unreadable GID slot was
    /// passed over: either may hold the GID NCCL would use.
    #[test]
    fn unreadable_gids_are_an_error_not_no_gid() {
        for path in [
            "ports/1/gids",
            "ports/1/gids/0",
            "ports/1/gid_attrs/ndevs/0",
        ] {
            let dir = crate::probes::testing::copy_scenario("rxe-vm");
            let p = dir
                .path()
                .join("sys/devices/virtual/infiniband/rxe0")
                .join(path);
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
            std::os::unix::fs::symlink(p.file_name().unwrap(), &p).unwrap();
            let r = crate::probes::testing::run_on_root(&RdmaRoce, dir.path(), "generic");
            assert_eq!(r[0].status, Status::Error, "{path}: {r:#?}");
            assert!(
                r[0].summary.contains("symlink loop"),
                "{path}: {}",
                r[0].summary
            );
        }
    }

    #[test]
    fn infiniband_ports_skip() {
        let r = run_on(&RdmaRoce, "hgx-healthy", "generic");
        assert_eq!(r[0].status, Status::Skip);
    }

    #[test]
    fn unreadable_link_layer_is_an_error_not_a_skip() {
        let dir = crate::probes::testing::copy_scenario("roce-mtu-1500");
        let ports = dir.path().join("sys/class/infiniband");
        for dev in std::fs::read_dir(&ports).unwrap() {
            let layer = std::fs::canonicalize(dev.unwrap().path())
                .unwrap()
                .join("ports/1/link_layer");
            std::fs::write(layer, b"\xff\xfe").unwrap();
        }
        let r = crate::probes::testing::run_on_root(&RdmaRoce, dir.path(), "generic");
        assert!(!r.is_empty());
        for x in &r {
            assert_eq!(x.status, Status::Error, "{x:#?}");
            assert!(
                x.summary.contains("link_layer: <not UTF-8 text>"),
                "{}",
                x.summary
            );
        }
    }
}
