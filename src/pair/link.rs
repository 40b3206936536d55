//! One link of `pair`: the handshake with one peer, then every port pair, each measured in a child process
//! (`pair::child`) and judged here from the legs it measured (`pair::judge`).

use std::net::SocketAddr;

use crate::child::ChildFailure;
use crate::interrupt;
use crate::measure::rdma_pair::{PairPlan, Role};
use crate::model::Limit;
use crate::model::{common, CheckResult, FindingCode, Status};
use crate::pair::child::{measure_in_child, MeasuredLegs};
use crate::pair::findings;
use crate::pair::inventory::{gpu_text, GpuSource, Inventory};
use crate::pair::judge::{self, PairLegs, ID_HANDSHAKE, ID_RDMA};
use crate::pair::session::{self, Local, Peer};
use crate::pair::supervise::Tally;
use crate::pair::wire::{NoPorts, PortInfo, VERSION};
use crate::rules::transfer_verdict::LinkRate;

/// Which end of the link this node is.
pub enum Side {
    Listen(SocketAddr),
    Connect(String),
}

/// How every port pair is measured and judged.
#[derive(Debug, Clone)]
pub struct Settings {
    pub plan: PairPlan,
    pub pct: Limit,
    pub lat: Limit,
}

/// One peer: handshake, then every port pair, each measured in a child process.
/// `expected` names the peer for the report when no handshake happened (the ring knows its neighbours).
pub fn link(
    side: &Side,
    me: &str,
    expected: Option<&str>,
    token: &str,
    inv: &Inventory,
    settings: &Settings,
    tally: &Tally,
) {
    let local = Local {
        node: me.to_string(),
        ports: inv.ports.iter().map(|(p, _)| p.clone()).collect(),
        no_ports: inv.none.as_ref().map(|r| NoPorts {
            status: r.status,
            why: r.summary.clone(),
        }),
        accept_only: match side {
            Side::Listen(_) => expected.map(str::to_string),
            Side::Connect(_) => None,
        },
    };
    let deadline = settings.plan.deadline;
    let (role, what) = match side {
        Side::Listen(addr) => (Role::Responder, format!("listening on {addr}")),
        Side::Connect(target) => (Role::Initiator, format!("connecting to {target}")),
    };
    let unnamed = format!("{me} <-> {}", expected.unwrap_or("?"));
    tally.begin(
        CheckResult::error(ID_HANDSHAKE, format!("{what}: the handshake")).subject(unnamed.clone()),
    );
    let peer = match side {
        Side::Listen(addr) => session::listen(*addr, token, &local, deadline, &mut |line| {
            eprintln!("fabric-preflight pair: refused {line}")
        }),
        Side::Connect(target) => session::connect(target, token, &local, deadline),
    };
    let mut peer = match peer {
        Ok(p) => p,
        Err(e) => {
            return tally.record(CheckResult::error(ID_HANDSHAKE, format!("{what}: {e}"))
                .subject(unnamed)
                .fix("start the other end with the same --token within the deadline; check that the TCP port is open between the nodes")
                .code(&findings::HANDSHAKE_FAILED))
        }
    };
    let peer_node = peer.node.clone();
    let subject = |l: &str, r: &str| format!("{me}:{l} <-> {peer_node}:{r}");
    tally.record(
        CheckResult::pass(
            ID_HANDSHAKE,
            format!("{what}: handshake with {} done", peer.name()),
        )
        .subject(format!("{me} <-> {}", peer.node))
        .evidence("protocol version", VERSION)
        .evidence("GPU memory here", gpu_text(&inv.gpus))
        .evidence("peer address", peer.addr)
        .evidence(
            "peer ports",
            if peer.ports.is_empty() {
                peer.no_ports
                    .as_ref()
                    .map(|n| format!("none: {} ({})", n.why, n.status))
                    .unwrap_or_else(|| "none".into())
            } else {
                peer.ports
                    .iter()
                    .map(PortInfo::name)
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        ),
    );
    if let Some(gap) = &inv.gap {
        // This node's survey could not read everything: its error, beside the pairs still measured.
        tally.record(gap.clone().subject(me.to_string()));
    }
    if let Some(none) = &inv.none {
        // No port pair to move GPU memory through; a GPU leg that was due and unusable still counts.
        let why = &none.summary;
        let (status, summary) = match &inv.gpus {
            GpuSource::Unusable(s, gpu_why) => (
                none.status.max(*s),
                format!("this node: {why}; GPU memory unusable: {gpu_why}"),
            ),
            GpuSource::Gpus(list) => (
                none.status,
                format!(
                    "this node: {why}; GPU memory ({}) not tested: no port to move it through",
                    list.join(", ")
                ),
            ),
            GpuSource::None(_) => (none.status, format!("this node: {why}")),
        };
        let mut r = CheckResult::new(ID_RDMA, status, summary);
        r.findings = none.findings.clone();
        if let GpuSource::Unusable(s, gpu_why) = &inv.gpus {
            r = r.finding(judge::gpu_unusable_code(*s), *s, gpu_why.clone());
        }
        r.findings.sort_by_key(|f| std::cmp::Reverse(f.status));
        return tally.record(
            r.subject(format!("{me} <-> {peer_node}"))
                .evidence("GPU memory here", gpu_text(&inv.gpus)),
        );
    }
    if peer.ports.is_empty() {
        // The peer's own report judges its node; here the pair is untested. Only a peer without RDMA hardware
        // makes that a skip: hardware there but unusable leaves this link unproven, an error.
        let none = peer.no_ports.clone().unwrap_or(NoPorts {
            status: Status::Error,
            why: "announced no port and no reason".into(),
        });
        let result = if none.status == Status::Skip {
            CheckResult::skip(ID_RDMA, format!("peer {}: {}", peer.node, none.why))
                .code(&findings::PEER_HAS_NO_PORT)
        } else {
            CheckResult::error(
                ID_RDMA,
                format!(
                    "not tested: peer {} cannot test its side ({}: {})",
                    peer.node, none.status, none.why
                ),
            )
            .fix(format!(
                "see fabric-preflight's report on {}: its RDMA hardware is there but unusable",
                peer.node
            ))
            .code(&findings::PEER_CANNOT_TEST)
        };
        return tally.record(result.subject(format!("{me} <-> {peer_node}")));
    }
    let pairs = inv.ports.len().max(peer.ports.len());
    let pair_subject = |i: usize| {
        let name = |p: Option<&PortInfo>| p.map(PortInfo::name).unwrap_or_else(|| "-".into());
        subject(
            &name(inv.ports.get(i).map(|(p, _)| p)),
            &name(peer.ports.get(i)),
        )
    };
    for i in 0..pairs {
        if let Some(signal) = interrupt::requested() {
            return not_run(
                tally,
                i..pairs,
                &pair_subject,
                &format!("interrupted by {signal}"),
                &common::INTERRUPTED,
            );
        }
        peer.port_pair = i as u32;
        let result = match (inv.ports.get(i), peer.ports.get(i).cloned()) {
            (Some((mine, target)), Some(theirs)) => {
                if mine.link_layer != theirs.link_layer {
                    // Both ends see the same two announcements, so both skip the transfer without a word.
                    CheckResult::fail(
                        ID_RDMA,
                        format!(
                            "link layers differ: {} here, {} on {}",
                            mine.link_layer, theirs.link_layer, peer.node
                        ),
                    )
                    .fix("pair ports of the same fabric (InfiniBand with InfiniBand, RoCE with RoCE)")
                    .code(&findings::LINK_LAYERS_DIFFER)
                    .subject(pair_subject(i))
                } else {
                    tally.begin(
                        CheckResult::error(ID_RDMA, format!("measurement with {}", peer.name()))
                            .subject(pair_subject(i)),
                    );
                    match measure_in_child(&peer, role, mine, target, &theirs, &settings.plan) {
                        Ok(legs) => judge_pair(&peer, mine, &theirs, legs, settings)
                            .subject(pair_subject(i)),
                        Err(failure) => {
                            // The control channel may be mid-frame: nothing more can be said with this peer.
                            tally.record(stopped(&peer, failure).subject(pair_subject(i)));
                            let why = format!(
                            "the measurement of port pair {i} stopped mid-protocol, so the control channel with {} cannot be trusted",
                            peer.name()
                        );
                            return not_run(
                                tally,
                                i + 1..pairs,
                                &pair_subject,
                                &why,
                                &findings::NOT_MEASURED,
                            );
                        }
                    }
                }
            }
            (Some(_), None) => CheckResult::warn(
                ID_RDMA,
                format!(
                    "no counterpart: {} has {} active port(s)",
                    peer.node,
                    peer.ports.len()
                ),
            )
            .code(&findings::NO_COUNTERPART)
            .subject(pair_subject(i)),
            (None, Some(_)) => CheckResult::warn(
                ID_RDMA,
                format!(
                    "no counterpart: this node has {} active port(s)",
                    inv.ports.len()
                ),
            )
            .code(&findings::NO_COUNTERPART)
            .subject(pair_subject(i)),
            (None, None) => unreachable!(),
        };
        tally.record(result);
    }
}

/// The port pairs `range` were not measured, and why (coded `code`).
fn not_run(
    tally: &Tally,
    range: std::ops::Range<usize>,
    subject: &dyn Fn(usize) -> String,
    why: &str,
    code: &FindingCode,
) {
    for i in range {
        tally.record(
            CheckResult::error(ID_RDMA, format!("not run: {why}"))
                .code(code)
                .subject(subject(i)),
        );
    }
}

/// The error for a port pair whose measuring child was killed or crashed, naming the call and the peer.
fn stopped(peer: &Peer, f: ChildFailure) -> CheckResult {
    let mut r = CheckResult::error(
        ID_RDMA,
        format!("measurement with {}: {}", peer.name(), f.summary),
    );
    r = r.code(f.code());
    r.evidence.extend(f.evidence);
    if f.interrupted {
        return r;
    }
    r.fix(if f.timed_out {
        "a verbs call that does not return is a wedged driver, firmware or device: look at this node's kernel log (dmesg) for the HCA, then reset it or drain the node"
    } else {
        "the verbs library or its provider failed inside the call: check that rdma-core and its provider match the kernel driver, and this node's kernel log"
    })
}

/// A port pair's verdict from the legs its child measured, against the rate both ends can carry.
fn judge_pair(
    peer: &Peer,
    mine: &PortInfo,
    theirs: &PortInfo,
    measured: MeasuredLegs,
    settings: &Settings,
) -> CheckResult {
    let legs = PairLegs {
        peer_name: peer.name(),
        peer_node: peer.node.clone(),
        mine: mine.memory.clone(),
        theirs: theirs.memory.clone(),
        host: measured.host,
        gpu: measured.gpu,
    };
    let mut r = judge::judge(
        &legs,
        LinkRate::common(&mine.rate, &theirs.rate, &peer.node),
        &settings.pct,
        &settings.lat,
    );
    r.evidence.insert(0, port_line(mine));
    r.evidence
        .insert(1, format!("{}:{}", peer.node, port_line(theirs)));
    r
}

/// `mlx5_0/1: link layer InfiniBand, rate 400 Gb/s, host memory (why)`: a port of the pair, for the evidence.
fn port_line(p: &PortInfo) -> String {
    format!(
        "{}: link layer {}, rate {}, {} ({})",
        p.name(),
        p.link_layer,
        p.rate.describe(),
        p.memory.describe(),
        p.memory.why()
    )
}
