//! `rdma.roce`: for Ethernet (RoCE) ports, a RoCE v2 GID on an up netdev whose MTU carries the RoCE MTU the
//! profile wants; reports the GID index NCCL should use.

use crate::host::ReadError;
use crate::nic_role::{self, Assigned, Role, Use};
use crate::presence::{Stack, Survey};
use crate::probe::{CheckResult, Context, Explain, Measurement, Need, Probe, Status};
use crate::rdma_transport::{self, Transport};
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

impl Probe for RdmaRoce {
    fn id(&self) -> &'static str {
        ID
    }
    fn title(&self) -> &'static str {
        "RoCE ports: a RoCE v2 GID on an up netdev, MTU carrying a 4096-byte RoCE MTU, the GID index for NCCL"
    }
    fn needs(&self) -> &'static [Need] {
        &[Need::RdmaDevice]
    }
    fn explain(&self) -> Explain {
        Explain {
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
        }
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let devices = match read_all_ports(cx.host) {
            Ok(d) => d,
            Err(e) => return vec![CheckResult::read_error(ID, &e)],
        };
        if devices.is_empty() {
            if let Some(r) = Survey::read(cx.host, Stack::Rdma).gate(ID, false) {
                return vec![r];
            }
        }
        let no_ethernet = || {
            let why = if devices.is_empty() {
                "no RDMA device".to_string()
            } else {
                "no RDMA port with the Ethernet link layer (RoCE does not apply to InfiniBand ports)".to_string()
            };
            vec![CheckResult::skip(ID, why)]
        };
        // Roles (the PCI tree, NCCL_IB_HCA) matter only where there is an Ethernet port to judge.
        if !devices
            .iter()
            .flat_map(|(_, p)| p)
            .any(PortAttrs::is_ethernet)
        {
            return no_ethernet();
        }
        let all = match nic_role::read(
            cx.host,
            cx.inputs.env("NCCL_IB_HCA"),
            cx.profile.expect.rdma_port_count,
        ) {
            Ok(d) => d,
            Err(e) => return vec![CheckResult::read_error(ID, &e)],
        };
        let mut results = Vec::new();
        for (dev, ports) in &all.devices {
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
            let node_type = match read_node_type(cx.host, dev) {
                Ok(t) => t,
                Err(e) => {
                    results.extend(
                        ethernet
                            .iter()
                            .map(|(p, _)| CheckResult::read_error(ID, &e).subject(p.subject())),
                    );
                    continue;
                }
            };
            for (port, assigned) in ethernet {
                results.push(match transport_of(dev, node_type.as_deref()) {
                    Ok(Transport::Roce) => judge_port(cx, port, assigned),
                    Ok(other) => CheckResult::skip(
                        ID,
                        format!(
                            "{} (node_type {}): RoCE GIDs do not apply",
                            other.as_str(),
                            node_type.as_deref().unwrap_or_default().trim()
                        ),
                    )
                    .subject(port.subject())
                    .evidence(
                        &format!("{}/node_type", device_dir(dev)),
                        node_type.as_deref().unwrap_or_default().trim(),
                    ),
                    Err(r) => (*r).subject(port.subject()),
                });
            }
        }
        if results.is_empty() {
            return all.completed(ID, no_ethernet());
        }
        all.completed(ID, results)
    }
}

/// The transport of an Ethernet port of `dev`: its `node_type` decides (an RNIC is iWARP); a device without
/// the file (no kernel omits it) is taken at its link layer. A node type the kernel does not write is an error.
fn transport_of(dev: &str, node_type: Option<&str>) -> Result<Transport, Box<CheckResult>> {
    let Some(text) = node_type else {
        return Ok(Transport::Roce);
    };
    rdma_transport::of(text, "Ethernet").ok_or_else(|| {
        let path = format!("{}/node_type", device_dir(dev));
        Box::new(
            CheckResult::error(
                ID,
                format!(
                    "{path}: not a node type the kernel writes ({:?}): the transport is unknown",
                    text.trim()
                ),
            )
            .evidence(&path, text.trim()),
        )
    })
}

/// Every populated GID slot of the port; a slot, type or netdev that cannot be read is the error: it may be the
/// RoCE v2 GID NCCL would pick.
fn read_gids(
    cx: &Context<'_>,
    port: &PortAttrs,
    evidence: &mut Vec<String>,
) -> Result<Vec<Gid>, ReadError> {
    let dir = port_dir(&port.device, port.port);
    let mut gids = Vec::new();
    for index in read_gid_indices(cx.host, &port.device, port.port)? {
        let Some(gid) = read_gid(cx.host, &port.device, port.port, index)? else {
            continue;
        };
        let gid_type = read_gid_type(cx.host, &port.device, port.port, index)?;
        let ndev = read_gid_ndev(cx.host, &port.device, port.port, index)?;
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

/// A storage/frontend port's RoCE findings warn: collectives do not run over it.
fn judge_port(cx: &Context<'_>, port: &PortAttrs, assigned: &Assigned) -> CheckResult {
    let mut r = judge_roce(cx, port)
        .role(assigned.role.as_str())
        .note(assigned.evidence());
    if assigned.role == Role::Storage && r.status == Status::Fail {
        r.status = Status::Warn;
        r.summary = format!("storage port: {}", r.summary);
    }
    r
}

fn judge_roce(cx: &Context<'_>, port: &PortAttrs) -> CheckResult {
    let subject = port.subject();
    let mut evidence = Vec::new();
    let gids = match read_gids(cx, port, &mut evidence) {
        Ok(g) => g,
        Err(e) => return CheckResult::read_error(ID, &e).subject(subject),
    };
    let v2: Vec<&Gid> = gids
        .iter()
        .filter(|g| g.gid_type.as_deref() == Some("RoCE v2"))
        .collect();
    // NCCL wants a routable address: IPv4-mapped first, then global IPv6; link-local only as a last resort.
    let chosen = v2
        .iter()
        .find(|g| gid_ipv4(&g.gid).is_some())
        .or_else(|| v2.iter().find(|g| !gid_is_link_local(&g.gid)))
        .or_else(|| v2.first())
        .copied();

    let Some(gid) = chosen else {
        let mut r = CheckResult::fail(
            ID,
            format!("no RoCE v2 GID ({} populated GID slot(s), none of type RoCE v2)", gids.len()),
        )
        .subject(subject)
        .fix("assign an IPv4/IPv6 address to the port's netdev; make sure RoCE v2 is enabled (`cma_roce_mode -d <dev> -p 1 -m 2`)");
        r.evidence = evidence;
        return r;
    };

    // Without a netdev in the GID's attributes, the PCI function's first netdev carries it.
    let ifname = match &gid.ndev {
        Some(n) => Some(n.clone()),
        // A `device` link that cannot be resolved is the error, not a device without a PCI function.
        None => match device_bdf(cx.host, &port.device).and_then(|bdf| {
            bdf.map(|bdf| net::read_pci_netdevs(cx.host, &bdf))
                .transpose()
        }) {
            Ok(netdevs) => netdevs.and_then(|n| n.into_iter().next()),
            Err(e) => return CheckResult::read_error(ID, &e).subject(subject.clone()),
        },
    };
    let address = gid_ipv4(&gid.gid).unwrap_or_else(|| gid.gid.clone());
    let mut failures: Vec<String> = Vec::new();
    // A netdev attribute that cannot be read leaves the port's state unknown: an error, not a finding.
    let mut unread: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut fixes: Vec<String> = Vec::new();
    let mut measurements = vec![Measurement::new("gid_index", f64::from(gid.index), "index")];

    match &ifname {
        None => failures.push("no netdev behind the RoCE v2 GID".into()),
        Some(ifname) => {
            match net::read_operstate(cx.host, ifname) {
                Ok(state) => {
                    evidence.push(format!("{CLASS_NET}/{ifname}/operstate = {state}"));
                    if state != "up" {
                        failures.push(format!("netdev {ifname} is {state}"));
                        fixes.push(format!("`ip link set {ifname} up`; check the switch port"));
                    }
                }
                Err(e) => unread.push(format!("netdev {ifname}: {e}")),
            }
            match net::read_mtu(cx.host, ifname) {
                Ok(mtu) => {
                    evidence.push(format!("{CLASS_NET}/{ifname}/mtu = {mtu}"));
                    let active = active_roce_mtu(mtu);
                    let mut m_mtu = Measurement::new("netdev_mtu", f64::from(mtu), "bytes");
                    let mut m_active = Measurement::new("roce_mtu", f64::from(active), "bytes");
                    match cx.profile.expect.roce_mtu {
                        Some(want) => {
                            m_active.fail = Some(f64::from(want));
                            if active < want {
                                failures.push(format!(
                                    "netdev {ifname} MTU {mtu} gives a RoCE MTU of {active}, the profile wants {want}"
                                ));
                            }
                        }
                        None => {
                            m_mtu.warn = Some(f64::from(RECOMMENDED_NETDEV_MTU));
                            if mtu < RECOMMENDED_NETDEV_MTU {
                                warnings.push(format!(
                                    "netdev {ifname} MTU {mtu} gives a RoCE MTU of {active} (4096 needs >= {RECOMMENDED_NETDEV_MTU})"
                                ));
                            }
                        }
                    }
                    if active < 4096 {
                        fixes.push(format!(
                            "`ip link set {ifname} mtu 9000` and persist it; allow jumbo frames on the switch ports"
                        ));
                    }
                    measurements.push(m_mtu);
                    measurements.push(m_active);
                }
                Err(e) => unread.push(format!("netdev {ifname}: {e}")),
            }
        }
    }

    let nccl = format!("NCCL_IB_GID_INDEX={}", gid.index);
    let mut r = if !unread.is_empty() || !failures.is_empty() {
        let status = if unread.is_empty() {
            Status::Fail
        } else {
            Status::Error
        };
        CheckResult::new(
            ID,
            status,
            format!(
                "{} (RoCE v2 GID {} = {address})",
                unread
                    .into_iter()
                    .chain(failures)
                    .collect::<Vec<_>>()
                    .join("; "),
                gid.index
            ),
        )
    } else if !warnings.is_empty() {
        CheckResult::warn(ID, format!("{} ({nccl})", warnings.join("; ")))
    } else {
        CheckResult::pass(
            ID,
            format!(
                "RoCE v2 GID {} = {address} on {} (up), RoCE MTU 4096; use {nccl}",
                gid.index,
                ifname.as_deref().unwrap_or("?")
            ),
        )
    }
    .subject(subject);
    if !fixes.is_empty() {
        r = r.fix(fixes.join("; "));
    }
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
