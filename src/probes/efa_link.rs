//! `efa.link`: the link of each EFA, from what is real. The efa driver hard-codes its port to ACTIVE/LinkUp and
//! registers no netdev, so the port state proves nothing. Where the interface also carries an ENA device (a
//! separate PCI function with the same MAC, the MAC the EFA's GID is derived from), that netdev's `operstate`
//! and `carrier` are the link; an EFA-only interface has no link signal beyond its counters and traffic, and
//! this says so. The rate is judged only where the driver reports the device's own link speed.

use crate::host::ReadError;
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Probe, ProbeMeta, Remedy, Status,
};
use crate::sysfs::efa::{self, mac_text, EfaPort};

pub struct EfaLink;

const ID: &str = "efa.link";
/// Kernels before the efa driver mapped the device's link speed printed this for every EFA.
const PLACEHOLDER_RATE: &str = "100 Gb/sec (4X EDR)";

const FIX_DOWN: &str = "the interface's ENA netdev is down: `ip link set <if> up`; check `dmesg | grep -i ena` and the \
instance's network card in the EC2 console (detach/attach the ENI, or stop/start the instance)";
const NO_SIGNAL: &str = "no link signal: EFA-only interface (no netdev shares its MAC) and the port's ACTIVE state is \
hard-coded by the efa driver; efa.counters and traffic (`collective`, the NCCL OFI log) are what prove it";

const NETDEV_DOWN: FindingCode = FindingCode {
    code: "EFA101",
    title: "the ENA netdev of an EFA interface is down or has no carrier",
    explanation: "The EFA's traffic rides its interface's ENA netdev: down or without carrier, it has no link. Bring it up (`ip link set <if> up`); on EC2 a detached or failed interface is replaced by stopping and starting the instance.",
    step: Some(Remedy::RestartService),
};
const RATE_BELOW: FindingCode = FindingCode {
    code: "EFA102",
    title: "an EFA's rate is below this instance type's",
    explanation: "The EFA reports a rate below the `expect.efa_link_gbps` of the instance type: a degraded or misattached interface. Stop and start the instance to move to other hardware.",
    step: Some(Remedy::ServiceRma),
};
const RATE_UNREADABLE: FindingCode = FindingCode {
    code: "EFA103",
    title: "an EFA's rate is unreadable or not a rate",
    explanation: "An error: the port's rate file could not be read or parsed while the profile expects a rate.",
    step: None,
};
const NETDEV_UNKNOWN: FindingCode = FindingCode {
    code: "EFA104",
    title: "which netdev is an EFA's interface cannot be told",
    explanation: "An error: the netdevs' MAC addresses could not be read, so the EFA's ENA netdev is unknown.",
    step: None,
};
const EFA_ONLY: FindingCode = FindingCode {
    code: "EFA105",
    title: "EFA-only interfaces: no netdev carries a link signal",
    explanation: "A skip: EFA-only interfaces have no ENA netdev, and the efa driver hard-codes its ports ACTIVE, so there is no link signal to judge.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "AWS EFA link: the paired ENA netdev up with carrier; EFA-only interfaces said to have no link signal; rate where real",
    explain: Explain {
        reads: "/sys/class/infiniband/<efa>/ports/1/{gids/0,rate}, /sys/class/net/*/address and the matching \
                netdev's operstate and carrier",
        why: "An EFA port reads ACTIVE/LinkUp whatever the network does (the driver sets them), so rdma.link \
              proves nothing on EFA. The ENA netdev of the same elastic network interface shares its MAC; the \
              EFA's GID is the IPv6 link-local EUI-64 address of that MAC, which pairs the two.",
        fixes: &[("ENA netdev down or without carrier", FIX_DOWN)],
    },
    findings: &[
        &NETDEV_DOWN,
        &RATE_BELOW,
        &RATE_UNREADABLE,
        &NETDEV_UNKNOWN,
        &EFA_ONLY,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for EfaLink {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let devices = efa::read_rdma_devices(cx.host)?;
    if devices.is_empty() {
        return Ok(vec![CheckResult::skip(
            ID,
            "no EFA RDMA device on this host",
        )
        .code(&common::ABSENT)]);
    }
    let netdevs = efa::read_netdev_macs(cx.host)?;
    let ports: Vec<EfaPort> = devices
        .iter()
        .map(|d| efa::read_port(cx.host, d, &netdevs.macs))
        .collect();
    Ok(judge(
        &ports,
        &netdevs.unreadable,
        cx.profile.expect.efa_link_gbps,
    ))
}

/// The code of a rate verdict: below the instance type's, or not read.
fn rate_code(status: Status) -> &'static FindingCode {
    if status == Status::Fail {
        &RATE_BELOW
    } else {
        &RATE_UNREADABLE
    }
}

/// One result per paired EFA, one for the EFA-only ones together. An EFA whose pair cannot be told (its GID
/// unreadable or not a MAC's EUI-64 address, or some netdev's address unreadable) is an error, never EFA-only.
pub fn judge(
    ports: &[EfaPort],
    unreadable_netdevs: &[String],
    expected_gbps: Option<f64>,
) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let mut unpaired = Vec::new();
    for p in ports {
        let rate = rate_verdict(p, expected_gbps);
        let unknown_pair = match (&p.gid, p.mac) {
            (Err(e), _) => Some(format!("its GID cannot be read ({e})")),
            (Ok(g), None) => Some(format!(
                "its GID {g} is not the EUI-64 address of a MAC, as EFA's are"
            )),
            (Ok(_), Some(_)) if p.netdev.is_none() && !unreadable_netdevs.is_empty() => {
                Some(format!(
                    "{} netdev address(es) could not be read, first {}",
                    unreadable_netdevs.len(),
                    unreadable_netdevs[0]
                ))
            }
            _ => None,
        };
        let mut r = match (&p.netdev, unknown_pair) {
            (None, Some(why)) => CheckResult::error(
                ID,
                format!("cannot tell which netdev is this EFA's interface: {why}"),
            )
            .code(&NETDEV_UNKNOWN),
            (None, None) => {
                unpaired.push(p);
                if rate.0 == Status::Pass {
                    continue;
                }
                CheckResult::new(ID, rate.0, rate.1.clone()).code(rate_code(rate.0))
            }
            (Some(n), _) => {
                let up = n.operstate.as_deref() == Ok("up");
                let carrier = n.carrier.as_deref() == Ok("1");
                let show = |r: &Result<String, String>| r.clone().unwrap_or_else(|e| e);
                let link = if up && carrier {
                    CheckResult::pass(
                        ID,
                        format!("ENA netdev {} up with carrier; {}", n.ifname, rate.1),
                    )
                } else {
                    CheckResult::fail(
                        ID,
                        format!(
                            "ENA netdev {} of this interface is {} (carrier {}): the EFA's traffic has no link",
                            n.ifname,
                            show(&n.operstate),
                            show(&n.carrier)
                        ),
                    )
                    .fix(FIX_DOWN).code(&NETDEV_DOWN)
                };
                if rate.0 > link.status {
                    CheckResult::new(ID, rate.0, format!("{}; {}", link.summary, rate.1))
                        .code(rate_code(rate.0))
                } else {
                    link
                }
            }
        };
        r = r.subject(p.device.clone());
        r.evidence = evidence(p);
        out.push(r);
    }
    if !unpaired.is_empty() {
        let names: Vec<&str> = unpaired.iter().map(|p| p.device.as_str()).collect();
        let mut r = CheckResult::skip(ID, format!("{} EFA(s): {NO_SIGNAL}", unpaired.len()))
            .evidence("EFA-only", names.join(", "))
            .code(&EFA_ONLY);
        for p in &unpaired {
            r.evidence.extend(evidence(p));
        }
        out.push(r);
    }
    out
}

/// The rate's verdict and words. Not judged where it may be the old kernels' placeholder or nothing is expected.
fn rate_verdict(p: &EfaPort, expected: Option<f64>) -> (Status, String) {
    let rate = match &p.rate {
        Ok(Some(r)) => r,
        Ok(None) if expected.is_none() => {
            return (
                Status::Pass,
                format!("rate {:?} not parsed: not judged", p.rate_text.trim()),
            )
        }
        Ok(None) => {
            return (
                Status::Error,
                format!("rate {:?} is not a rate", p.rate_text.trim()),
            )
        }
        Err(e) => return (Status::Error, format!("rate unreadable ({e})")),
    };
    match expected {
        Some(want) if rate.gbps < want && p.rate_text.trim() == PLACEHOLDER_RATE => (
            Status::Pass,
            format!(
                "rate {} not judged: kernels before the efa link-speed mapping print it for every EFA (expected {want} Gb/s)",
                p.rate_text.trim()
            ),
        ),
        Some(want) if rate.gbps < want => (
            Status::Fail,
            format!(
                "rate {} below the {want} Gb/s of this instance type's EFAs",
                p.rate_text.trim()
            ),
        ),
        _ => (Status::Pass, format!("rate {}", p.rate_text.trim())),
    }
}

fn evidence(p: &EfaPort) -> Vec<String> {
    let port = crate::sysfs::infiniband::port_dir(&p.device, 1);
    let mut ev = vec![
        format!("{port}/rate = {}", p.rate_text.trim()),
        format!("{port}/gids/0 = {}", p.gid.clone().unwrap_or_else(|e| e)),
        format!(
            "{} MAC = {}",
            p.device,
            p.mac
                .map_or("<GID is not an EUI-64 address>".into(), mac_text)
        ),
    ];
    if let Some(n) = &p.netdev {
        let show = |r: &Result<String, String>| r.clone().unwrap_or_else(|e| e);
        ev.push(format!(
            "/sys/class/net/{}/operstate = {}",
            n.ifname,
            show(&n.operstate)
        ));
        ev.push(format!(
            "/sys/class/net/{}/carrier = {}",
            n.ifname,
            show(&n.carrier)
        ));
    }
    ev
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::efa::PairedNetdev;
    use crate::sysfs::infiniband::parse_rate;

    fn port(rate: &str, netdev: Option<(&str, &str)>) -> EfaPort {
        EfaPort {
            device: "rdmap68s0".into(),
            rate: Ok(parse_rate(rate)),
            rate_text: rate.into(),
            gid: Ok("fe80:0000:0000:0000:081e:5bff:fe00:003c".into()),
            mac: Some([0x0a, 0x1e, 0x5b, 0, 0, 0x3c]),
            netdev: netdev.map(|(state, carrier)| PairedNetdev {
                ifname: "ens32".into(),
                operstate: Ok(state.into()),
                carrier: Ok(carrier.into()),
            }),
        }
    }

    fn judge_(ports: &[EfaPort], expected: Option<f64>) -> Vec<CheckResult> {
        judge(ports, &[], expected)
    }

    #[test]
    fn the_paired_netdev_decides_and_efa_only_says_so() {
        let r = judge_(
            &[port("200 Gb/sec (4X HDR)", Some(("up", "1")))],
            Some(200.0),
        );
        assert_eq!(r[0].status, Status::Pass, "{r:#?}");
        for (state, carrier) in [("down", "0"), ("up", "0"), ("lowerlayerdown", "0")] {
            let r = judge_(&[port("200 Gb/sec (4X HDR)", Some((state, carrier)))], None);
            assert_eq!(r[0].status, Status::Fail, "{state}/{carrier}");
            assert!(r[0].summary.contains("ens32"), "{}", r[0].summary);
        }
        let r = judge_(&[port("100 Gb/sec (4X EDR)", None)], Some(100.0));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, Status::Skip);
        assert!(r[0].summary.contains("no link signal"), "{}", r[0].summary);
    }

    /// `100 Gb/sec (4X EDR)` may be the pre-mapping placeholder: not judged. Another rate below the expected one
    /// came from the device: judged.
    #[test]
    fn the_rate_is_judged_only_where_real() {
        let r = judge_(
            &[port("100 Gb/sec (4X EDR)", Some(("up", "1")))],
            Some(200.0),
        );
        assert_eq!(r[0].status, Status::Pass, "{r:#?}");
        assert!(r[0].summary.contains("not judged"), "{}", r[0].summary);
        let r = judge_(
            &[port("200 Gb/sec (4X HDR)", Some(("up", "1")))],
            Some(400.0),
        );
        assert_eq!(r[0].status, Status::Fail, "{r:#?}");
        let r = judge_(&[port("200 Gb/sec (4X HDR)", None)], Some(400.0));
        assert_eq!(
            r[0].status,
            Status::Fail,
            "an EFA-only port's real rate is judged too"
        );
    }

    /// EFA-only is a conclusion: where the pair cannot be looked for, it is an error, never "no link signal".
    #[test]
    fn an_unknown_pair_is_an_error() {
        let mut unread_gid = port("200 Gb/sec (4X HDR)", None);
        unread_gid.gid = Err("<permission denied>".into());
        unread_gid.mac = None;
        let mut other_gid = port("200 Gb/sec (4X HDR)", None);
        other_gid.mac = None;
        for p in [unread_gid, other_gid] {
            let r = judge(&[p], &[], None);
            assert_eq!(r[0].status, Status::Error, "{r:#?}");
        }
        let r = judge(
            &[port("200 Gb/sec (4X HDR)", None)],
            &["/sys/class/net/ens40/address = <permission denied>".into()],
            None,
        );
        assert_eq!(r[0].status, Status::Error, "{r:#?}");
        assert!(r[0].summary.contains("ens40"), "{}", r[0].summary);
        let mut unread_rate = port("200 Gb/sec (4X HDR)", Some(("up", "1")));
        unread_rate.rate = Err("<permission denied>".into());
        assert_eq!(judge(&[unread_rate], &[], None)[0].status, Status::Error);
    }
}
