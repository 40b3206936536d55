//! The verdicts particular to `--mode nic-loopback` and `--mode per-rail`: the loopback's transport (an RDMA
//! NET path with GPUDirect RDMA through every rail NIC NCCL listed, or plainly no NIC to loop through), the
//! NVLink-only run's (P2P channels only), and each rail's busbw. The data path is still the shared NCCL
//! analysis' (`crate::nccl`); these add what a one-node or one-rail run must also show.

use std::collections::{BTreeMap, BTreeSet};

use super::judge::{
    floor, judged_busbw, judged_transport, measured, row_busbw, size_text, with_transport_evidence,
    Facts, ID_BUSBW, ID_TRANSPORT,
};
use super::nccl_tests::{RankLine, Row};
use super::ranks::short_host;
use crate::model::{CheckResult, FindingCode, Remedy, Status};
use crate::nccl::line::NetFamily;
use crate::nccl::{self, Verdict};
use crate::rules::topology::{PciTree, Role};

const LOOPBACK_ACROSS_NODES: FindingCode = FindingCode {
    code: "COL701",
    title: "the NIC loopback ran on several hosts: its floor is per node",
    explanation: "The NIC loopback judges one node's NICs; a job across nodes is judged by --mode job or per-rail. Launch it on one node (`srun -N1`, `mpirun --host NODE:8`).",
    step: Some(Remedy::Reconfigure),
};
const LOOPBACK_SOCKET_ONLY: FindingCode = FindingCode {
    code: "COL702",
    title: "the NIC loopback found no NIC to loop through: Socket only",
    explanation: "NCCL found no RDMA device (`NET/IB : No device found`), selected Socket, or carried channels over NET/Socket: no RDMA NIC carried a byte. Load the RDMA stack (the HCA's driver, ib_uverbs) and see `fabric-preflight run` (rdma.devices, rdma.link).",
    step: Some(Remedy::LoadModule),
};
const LOOPBACK_SETTINGS_LOST: FindingCode = FindingCode {
    code: "COL703",
    title: "the NIC loopback's settings did not reach the ranks: every channel is P2P/SHM",
    explanation: "The loopback turns SHM, P2P and NVLS off so that every channel goes through a NIC; channels over P2P/SHM mean the launcher did not pass the environment. With mpirun pass it with `-x` (srun and torchrun pass it).",
    step: Some(Remedy::Reconfigure),
};
const LOOPBACK_UNPROVEN: FindingCode = FindingCode {
    code: "COL704",
    title: "the NIC loopback cannot be proven: no channel line",
    explanation: "A single rank connects to nothing: run one rank per GPU, at least two, with NCCL_DEBUG=INFO.",
    step: Some(Remedy::Reconfigure),
};
const RAIL_NIC_IDLE: FindingCode = FindingCode {
    code: "COL705",
    title: "a rail NIC carried no channel: NCCL routed around it",
    explanation: "A GPU's nearest NIC, or one NCCL listed, carried no channel, so the node runs below its bandwidth. Name every rail in NCCL_IB_HCA, then see the NIC's rdma.link and rdma.counters (a port down, errors).",
    step: Some(Remedy::Reconfigure),
};
const RAIL_NIC_WITHOUT_GDR: FindingCode = FindingCode {
    code: "COL706",
    title: "a rail NIC carried channels without GPUDirect RDMA where it is expected",
    explanation: "Channels through the NIC staged through host memory: nvidia_peermem not loaded or DMA-BUF unavailable, or the GPU and NIC too far apart for NCCL_NET_GDR_LEVEL. See gdr.kernel_path and topo.gpu_nic.",
    step: Some(Remedy::LoadModule),
};
const NICS_UNNAMED: FindingCode = FindingCode {
    code: "COL707",
    title: "NCCL's log names no NIC, so a NIC routed around cannot be seen",
    explanation: "A warning: aws-ofi-nccl prints no NIC list, so the loopback's transport is met but not proven on every NIC.",
    step: None,
};
const OFF_NVLINK: FindingCode = FindingCode {
    code: "COL711",
    title: "GPU pairs without NVLink in the NVLink-only run",
    explanation: "With P2P allowed only over NVLink (NCCL_P2P_LEVEL=NVL) and SHM and the NICs off, a channel over NET or SHM names a GPU pair NVLink does not join: a link down or an NVSwitch fault. See gpu.nvlink and `nvidia-smi nvlink --status`.",
    step: Some(Remedy::ResetGpu),
};
const ONE_GPU: FindingCode = FindingCode {
    code: "COL712",
    title: "one GPU: no GPU pair to connect over NVLink",
    explanation: "A skip: the NVLink-only run needs two GPUs or more.",
    step: None,
};
const NVLINK_UNPROVEN: FindingCode = FindingCode {
    code: "COL713",
    title: "the NVLink path cannot be proven: no channel line",
    explanation: "Run one rank per GPU with NCCL_DEBUG=INFO so that NCCL prints its channels.",
    step: Some(Remedy::Reconfigure),
};
const NOT_RAILS: FindingCode = FindingCode {
    code: "COL721",
    title: "the per-rail communicators are not rails, so no rail was judged",
    explanation: "A communicator holds several ranks of one host: ranks are not placed node by node, or --rails is not the GPUs per node. Place ranks block-wise (`srun --distribution=block`, `mpirun --map-by ppr:8:node`).",
    step: Some(Remedy::Reconfigure),
};
const RAIL_NO_TABLE: FindingCode = FindingCode {
    code: "COL722",
    title: "a rail printed no result table: not judged",
    explanation: "The rail's communicator printed no nccl-tests table: it failed or hung (see collective.command and the rank's last NCCL line).",
    step: None,
};
const RAILS_COMBINED: FindingCode = FindingCode {
    code: "COL723",
    title: "one table stands for every rail: a slow rail may hide in it",
    explanation: "nccl-tests prints one table for a split run: unless it is the slowest rail's (`-a 3`), a rail below the floor hides in it. Add `-a 3`, or use `--workload torch`, which prints each rail's table.",
    step: Some(Remedy::Reconfigure),
};

/// Every finding this file's results can carry, by check id (gathered by `commands::findings`).
pub const FINDINGS: &[(&str, &[&FindingCode])] = &[
    (
        ID_TRANSPORT,
        &[
            &LOOPBACK_ACROSS_NODES,
            &LOOPBACK_SOCKET_ONLY,
            &LOOPBACK_SETTINGS_LOST,
            &LOOPBACK_UNPROVEN,
            &RAIL_NIC_IDLE,
            &RAIL_NIC_WITHOUT_GDR,
            &NICS_UNNAMED,
            &OFF_NVLINK,
            &ONE_GPU,
            &NVLINK_UNPROVEN,
        ],
    ),
    (ID_BUSBW, &[&NOT_RAILS, &RAIL_NO_TABLE, &RAILS_COMBINED]),
];

/// The NIC loopback's data path: proven RDMA (GPUDirect RDMA where expected) on every rail NIC NCCL listed.
/// Socket is a failure that says the node has no NIC to loop through; P2P/SHM channels mean the loopback's
/// settings never reached the ranks.
pub fn loopback_transport(f: &Facts<'_>) -> CheckResult {
    let s = f.summary;
    let rdma_channels = s.net_channels.ib + s.net_channels.ofi + s.net_channels.plugin;
    let socket_selected = s
        .network_selected
        .iter()
        .any(|n| NetFamily::of(n) == NetFamily::Socket);
    let ib_missing = s.no_device.iter().any(|n| n == "IB");
    let hosts = f.tests.hosts();
    let r = if hosts.len() > 1 {
        CheckResult::error(
            ID_TRANSPORT,
            format!(
                "the NIC loopback is a one-node test, but the job ran on {} hosts ({}): its floor is per node",
                hosts.len(),
                hosts.join(", ")
            ),
        )
        .fix("launch it on one node (`srun -N1 …`, `mpirun -np 8 --host NODE:8 …`); across nodes use --mode job or per-rail")
        .code(&LOOPBACK_ACROSS_NODES)
    } else if rdma_channels == 0 && (socket_selected || ib_missing || s.net_channels.socket > 0) {
        let mut why = Vec::new();
        if ib_missing {
            why.push("`NET/IB : No device found`".to_string());
        }
        if socket_selected {
            why.push("NCCL selected Socket".to_string());
        }
        if s.net_channels.socket > 0 {
            why.push(format!(
                "{} channel(s) over NET/Socket",
                s.net_channels.socket
            ));
        }
        CheckResult::fail(
            ID_TRANSPORT,
            format!(
                "no NIC to loop through: {} (Socket only: TCP through the kernel, no RDMA NIC carried a byte){}",
                why.join(", "),
                measured(f)
            ),
        )
        .fix(nccl::advice(Verdict::Socket).unwrap_or_default())
        .code(&LOOPBACK_SOCKET_ONLY)
    } else if s.verdict == Verdict::IntraNodeOnly {
        CheckResult::fail(
            ID_TRANSPORT,
            format!(
                "no channel went through a NIC: every channel is P2P/SHM although the loopback turns them off, so \
                 its settings did not reach the ranks{}",
                measured(f)
            ),
        )
        .fix("pass the environment to every rank: `mpirun -x NCCL_SHM_DISABLE -x NCCL_P2P_DISABLE -x NCCL_NVLS_ENABLE -x NCCL_NET_GDR_LEVEL` (srun and torchrun pass it)")
        .code(&LOOPBACK_SETTINGS_LOST)
    } else if s.verdict == Verdict::Undetermined {
        CheckResult::error(
            ID_TRANSPORT,
            "cannot prove the loopback: no channel line (a single rank connects to nothing: run one rank per GPU, \
             at least two)",
        )
        .code(&LOOPBACK_UNPROVEN)
    } else {
        every_nic(f, judged_transport(f))
    };
    with_transport_evidence(f, r)
}

/// A transport met on some NICs is not met on the node: each rail NIC must carry channels, with GPUDirect RDMA
/// where it is expected. The rails are the NICs NCCL listed and, where the ranks ran on this host, each GPU's
/// nearest NIC on its PCI tree (a NIC whose port is down is not in NCCL's list at all); listed NICs that are no
/// GPU's nearest (storage, frontend) are not expected to carry any. Without a list (aws-ofi-nccl prints none)
/// a met transport is a warning: a NIC routed around cannot be seen.
fn every_nic(f: &Facts<'_>, judged: CheckResult) -> CheckResult {
    let s = f.summary;
    // (plugin, device index) → whether every channel through it had GPUDirect RDMA.
    let mut used: BTreeMap<(String, u32), bool> = BTreeMap::new();
    for t in s.transports.iter().filter(|t| t.net) {
        let Some(plugin) = t.transport.strip_prefix("NET/") else {
            continue;
        };
        let plugin = plugin.strip_suffix("/GDRDMA").unwrap_or(plugin);
        if NetFamily::of(plugin) == NetFamily::Socket {
            continue;
        }
        for dev in &t.devices {
            let gdr = used.entry((plugin.to_string(), *dev)).or_insert(true);
            *gdr &= t.gdrdma;
        }
    }
    // NIC name → (its NET path, whether its channels all had GPUDirect RDMA; None: it carried none).
    let mut names: BTreeMap<(String, u32), String> = BTreeMap::new();
    for p in f.ranks.processes() {
        for (plugin, devices) in &p.net_devices {
            if NetFamily::of(plugin) != NetFamily::Socket {
                for (index, name) in devices {
                    names.insert((plugin.clone(), *index), name.clone());
                }
            }
        }
    }
    let listed = !names.is_empty();
    let mut nics: BTreeMap<String, (String, Option<bool>)> = BTreeMap::new();
    for ((plugin, index), name) in &names {
        let gdr = used.get(&(plugin.clone(), *index)).copied();
        nics.insert(name.clone(), (format!("NET/{plugin}/{index}"), gdr));
    }
    for ((plugin, index), gdr) in used {
        if !names.contains_key(&(plugin.clone(), index)) {
            let path = format!("NET/{plugin}/{index}");
            nics.insert(path.clone(), (path, Some(gdr)));
        }
    }
    let me = short_host(f.hostname);
    let here = f.ranks.processes().any(|p| p.host == me);
    // The tree names rails only where NCCL names its devices (aws-ofi-nccl lists none: EFA devices are not
    // told apart by name, and counting them would fail a healthy node).
    let (rails, others) = match f.tree {
        Some(tree) if here && listed => rails_of(tree),
        _ => Default::default(),
    };
    for rail in &rails {
        nics.entry(rail.clone())
            .or_insert_with(|| ("not in NCCL's list of NICs".into(), None));
    }
    let mut missing = Vec::new();
    let mut without_gdr = Vec::new();
    let mut carrying = 0;
    let mut evidence = Vec::new();
    for (name, (path, gdr)) in &nics {
        let state = match gdr {
            Some(true) => "carried channels with GPUDirect RDMA",
            Some(false) => {
                without_gdr.push(format!("{name} ({path})"));
                "carried channels without GPUDirect RDMA"
            }
            None if others.contains(name) => {
                "carried no channel; no GPU's nearest NIC (storage or frontend), not expected to"
            }
            None => {
                missing.push(format!("{name} ({path})"));
                "carried no channel"
            }
        };
        if gdr.is_some() {
            carrying += 1;
        }
        evidence.push((format!("nic {name} ({path})"), state));
    }
    let mut r = if judged.status != Status::Pass {
        judged
    } else if !missing.is_empty() {
        CheckResult::fail(
            ID_TRANSPORT,
            format!(
                "{}, but not through every NIC: {} carried no channel, so NCCL routed around it and the node runs \
                 below its bandwidth",
                judged.summary,
                missing.join(", ")
            ),
        )
        .fix(
            "`fabric-preflight run --only rdma.link,rdma.counters` for the named NIC (port state, errors), \
             NCCL_IB_HCA naming every rail; then rerun the loopback",
        )
        .code(&RAIL_NIC_IDLE)
    } else if nccl::judge::wants_gdr(f.expect) && !without_gdr.is_empty() {
        CheckResult::fail(
            ID_TRANSPORT,
            format!(
                "{}, but {} carried channels without GPUDirect RDMA",
                judged.summary,
                without_gdr.join(", ")
            ),
        )
        .fix(nccl::advice(Verdict::PartialGdrdma).unwrap_or_default())
        .code(&RAIL_NIC_WITHOUT_GDR)
    } else if !listed {
        CheckResult::warn(
            ID_TRANSPORT,
            format!(
                "{}, but NCCL's log lists no NICs by name (aws-ofi-nccl prints none), so a NIC it routed around \
                 cannot be seen",
                judged.summary
            ),
        )
        .code(&NICS_UNNAMED)
    } else {
        CheckResult::pass(
            ID_TRANSPORT,
            format!(
                "{}, through each of the {carrying} rail NIC(s)",
                judged.summary
            ),
        )
    };
    for (k, v) in evidence {
        r = r.evidence(&k, v);
    }
    r
}

/// This host's rail NICs (each GPU's nearest RDMA device, ties included) and its other RDMA devices; both empty
/// without GPUs on the tree.
fn rails_of(tree: &PciTree) -> (BTreeSet<String>, BTreeSet<String>) {
    let nics = tree.rdma_nics();
    let mut nearest = BTreeSet::new();
    for gpu in tree.with_role(Role::Gpu) {
        let distances: Vec<_> = nics.iter().map(|&n| tree.distance(gpu, n)).collect();
        let Some(best) = distances.iter().min() else {
            continue;
        };
        for (k, d) in distances.iter().enumerate() {
            if d == best {
                nearest.insert(nics[k]);
            }
        }
    }
    if nearest.is_empty() {
        return Default::default();
    }
    let names = |want: bool| -> BTreeSet<String> {
        nics.iter()
            .filter(|n| nearest.contains(n) == want)
            .flat_map(|&n| tree.nodes[n].rdma_devices.iter().cloned())
            .collect()
    };
    (names(true), names(false))
}

/// The NVLink-only run's data path: every channel P2P, allowed only over NVLink (`NCCL_P2P_LEVEL=NVL`) with SHM
/// and the NICs off, so a GPU pair without NVLink shows as a NET or SHM channel, named by its ranks.
pub fn nvlink_transport(f: &Facts<'_>) -> CheckResult {
    let s = f.summary;
    let off_nvlink: Vec<String> = s
        .transports
        .iter()
        .filter(|t| t.net || !t.transport.starts_with("P2P/"))
        .map(|t| {
            format!(
                "ranks {} over {} x{}",
                nccl::ranges(&t.ranks.iter().copied().collect::<Vec<_>>()),
                t.transport,
                t.channels
            )
        })
        .collect();
    let gpus = f.ranks.nranks.unwrap_or(0).max(f.tests.ranks.len() as u32);
    let r = if !off_nvlink.is_empty() {
        CheckResult::fail(
            ID_TRANSPORT,
            format!(
                "GPU pairs without NVLink: {} with P2P allowed only over NVLink (NCCL_P2P_LEVEL=NVL, SHM and the \
                 NICs off){}",
                off_nvlink.join("; "),
                measured(f)
            ),
        )
        .fix("`fabric-preflight run --only gpu.nvlink` and `nvidia-smi nvlink --status` / `nvidia-smi topo -m` for the named ranks' GPUs")
        .code(&OFF_NVLINK)
    } else if s.verdict == Verdict::IntraNodeOnly {
        CheckResult::pass(
            ID_TRANSPORT,
            format!(
                "every channel P2P with P2P allowed only over NVLink (NCCL_P2P_LEVEL=NVL){}",
                measured(f)
            ),
        )
    } else if gpus <= 1 {
        CheckResult::skip(ID_TRANSPORT, "one GPU: no GPU pair to connect over NVLink")
            .code(&ONE_GPU)
    } else {
        CheckResult::error(
            ID_TRANSPORT,
            "cannot prove the NVLink path: no channel line",
        )
        .code(&NVLINK_UNPROVEN)
    };
    with_transport_evidence(f, r)
}

/// Each rail's busbw against the per_rail floor, the rail named when below it. The built-in workload prints a
/// table per rail; nccl-tests prints one for all (see [`super::nccl_tests`]), judged for what its `-a` makes of
/// the rails' times: only the slowest (`-a 3`) speaks for every rail.
pub fn rail_busbw(f: &Facts<'_>, rails: u32) -> Vec<CheckResult> {
    let Some(collective) = f.tests.collective.as_deref() else {
        return super::judge::busbw(f);
    };
    let Some(largest) = f.tests.largest() else {
        return super::judge::busbw(f);
    };
    if let Some(why) = not_rails(f, rails) {
        return vec![CheckResult::error(
            ID_BUSBW,
            format!("the communicators are not rails, so no rail was judged: {why}"),
        )
        .subject("rails")
        .fix(
            "place the ranks node by node (rank = node x GPUs per node + local index: `srun --distribution=block`, \
             `mpirun --map-by ppr:8:node`) and give --rails the GPUs per node",
        )
        .code(&NOT_RAILS)];
    }
    let limit = floor(f, collective, "per_rail");
    let groups = f.tests.groups();
    if groups.is_empty() {
        return vec![combined_rails(f, collective, largest, limit, rails)];
    }
    let mut results = Vec::new();
    for g in 0..rails {
        let subject = format!("rail {g}");
        let members = rail_members(f, g, rails);
        let Some(row) = groups
            .get(&g)
            .and_then(|rows| rows.iter().rev().max_by_key(|r| r.bytes))
        else {
            results.push(
                CheckResult::error(
                    ID_BUSBW,
                    format!("rail {g} ({members}) printed no result table: not judged"),
                )
                .code(&RAIL_NO_TABLE)
                .subject(subject),
            );
            continue;
        };
        let mut r = judged_busbw(f, collective, &subject, row, limit, "per_rail");
        r.summary = format!("rail {g} ({members}): {}", r.summary);
        results.push(r.evidence("rail", members));
    }
    results
}

/// Why rank mod `rails` does not give one rank per host in each communicator (ranks placed otherwise than node
/// by node, or `--rails` not the GPUs per node), from the header's hosts; None when every group is a rail.
fn not_rails(f: &Facts<'_>, rails: u32) -> Option<String> {
    let mut seen: BTreeMap<(u32, &str), Vec<u32>> = BTreeMap::new();
    for r in &f.tests.ranks {
        let group = r.group.unwrap_or(r.rank % rails);
        seen.entry((group, short_host(&r.host)))
            .or_default()
            .push(r.rank);
    }
    seen.into_iter()
        .find(|(_, ranks)| ranks.len() > 1)
        .map(|((group, host), ranks)| {
            format!(
                "communicator {group} holds {} ranks on {host} (ranks {})",
                ranks.len(),
                nccl::ranges(&ranks)
            )
        })
}

/// nccl-tests' one table of a split run: a number for all rails, what it stands for said, the rails listed.
fn combined_rails(
    f: &Facts<'_>,
    collective: &str,
    row: &Row,
    limit: crate::model::Limit,
    rails: u32,
) -> CheckResult {
    let (stands_for, below) = match f.average {
        0 => ("rank 0's rail (nccl-tests -a 0)", "rail 0 is below"),
        2 => ("the fastest rail (nccl-tests -a 2)", "every rail is below"),
        3 => (
            "the slowest rail (nccl-tests -a 3)",
            "at least one rail is below",
        ),
        _ => (
            "the mean of the rails' times (nccl-tests -a 1, its default)",
            "at least one rail is below",
        ),
    };
    let mut r = judged_busbw(f, collective, "all rails", row, limit, "per_rail");
    let busbw = row_busbw(row);
    r.summary = match r.status {
        Status::Pass if f.average != 3 => {
            r.status = Status::Warn;
            format!(
                "busbw {busbw:.2} GB/s at {} is {stands_for}: it meets the floor, but one slow rail hides in it, so \
                 not every rail was judged",
                size_text(row.bytes)
            )
        }
        Status::Fail | Status::Warn if !limit.is_empty() => format!(
            "{stands_for}: {}; {below}, and nccl-tests' one table does not say which",
            r.summary
        ),
        _ => format!("{stands_for}: {}", r.summary),
    };
    if r.status == Status::Warn && r.findings.is_empty() {
        r = r.code(&RAILS_COMBINED);
    }
    if r.status != Status::Pass {
        r = r.fix(
            "add `-a 3` so that the table is the slowest rail's; `--workload torch` prints each rail's own table \
             and names the one below its floor",
        );
    }
    for g in 0..rails {
        r = r.evidence(&format!("rail {g}"), rail_members(f, g, rails));
    }
    r
}

/// `ranks 3,11 on gpu-a01,gpu-a02 through mlx5_3`: a rail's ranks (nccl-tests' Group, else rank mod rails),
/// their hosts and the NICs their channels used. Processes are matched by the header's host and pid: NCCL's own
/// lines give the rank in the rail's communicator, not in the job.
fn rail_members(f: &Facts<'_>, rail: u32, rails: u32) -> String {
    let members: Vec<&RankLine> = f
        .tests
        .ranks
        .iter()
        .filter(|r| r.group.unwrap_or(r.rank % rails) == rail)
        .collect();
    let ranks: Vec<u32> = members.iter().map(|r| r.rank).collect();
    let mut hosts = BTreeSet::new();
    let mut nics = BTreeSet::new();
    for p in f.ranks.processes() {
        if members
            .iter()
            .any(|r| r.pid == p.pid && short_host(&r.host) == p.host)
        {
            hosts.insert(p.host.clone());
            nics.extend(p.used_nics());
        }
    }
    let mut text = format!("ranks {}", nccl::ranges(&ranks));
    if !hosts.is_empty() {
        text.push_str(&format!(
            " on {}",
            hosts.into_iter().collect::<Vec<_>>().join(",")
        ));
    }
    if !nics.is_empty() {
        text.push_str(&format!(
            " through {}",
            nics.into_iter().collect::<Vec<_>>().join(",")
        ));
    }
    text
}
