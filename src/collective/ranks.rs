//! Who printed what: every NCCL line of a run attributed to its process (`host:pid` of NCCL's prefix), and each
//! process to its rank(s), from NCCL's own lines (`comm 0x… rank 5 nRanks 16 …`, `… rank 5 nranks 16 cudaDev 5
//! … busId 9a000 … - Init COMPLETE`) and from nccl-tests' header (`Rank 5 Group 0 Pid 4711 on gpu-a01 …`).
//! What it keeps per process is what a hang report and the rail map need: the last NCCL line, whether init
//! completed, the GPU's bus id, the NET devices NCCL listed and the ones its channels used.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::nccl_tests::RankLine;
use crate::nccl::line::{self, Event, NetFamily, Transport};

/// Longest last line kept for the report.
const MAX_LAST_LINE_CHARS: usize = 200;
/// Processes tracked; a log with more (damaged input) keeps the first ones.
const MAX_PROCESSES: usize = 1 << 16;

/// Where a line was read: the log's name and its line number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sighting {
    pub text: String,
    pub source: String,
    pub line: u64,
}

/// One process of the job, as its NCCL lines and the nccl-tests header show it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Process {
    pub host: String,
    pub pid: u32,
    pub ranks: BTreeSet<u32>,
    pub nranks: Option<u32>,
    /// The GPU's PCI address: NCCL's bus id (`9a000`, from `Init COMPLETE`/`Init START`), else nccl-tests'
    /// `[0x9a]` (the bus alone).
    pub gpu: Option<GpuAddr>,
    pub init_complete: bool,
    pub nccl_lines: u64,
    pub last_line: Option<Sighting>,
    /// `NET/IB : Using [0]mlx5_0:1/IB …`: index → device name, per NET plugin.
    #[serde(skip)]
    pub net_devices: BTreeMap<String, BTreeMap<u32, String>>,
    /// RDMA NET channels this process's ranks drove through their own NIC: (plugin, device index). PXN
    /// channels (sent through another rank's NIC by design) and sockets (no rail) are left out.
    #[serde(skip)]
    pub net_used: BTreeSet<(String, u32)>,
}

impl Process {
    /// `rank 5`, `ranks 0,8`, or `pid 4711` when no line named its rank.
    pub fn who(&self) -> String {
        match self.ranks.len() {
            0 => format!("pid {}", self.pid),
            1 => format!("rank {}", self.ranks.iter().next().unwrap_or(&0)),
            _ => {
                let ranks: Vec<u32> = self.ranks.iter().copied().collect();
                format!("ranks {}", crate::nccl::ranges(&ranks))
            }
        }
    }

    /// The device names of the NET devices this process's channels used (`mlx5_3`), or `IB/3` where NCCL's
    /// device list was not in the log.
    pub fn used_nics(&self) -> Vec<String> {
        self.net_used
            .iter()
            .map(|(plugin, dev)| {
                self.net_devices
                    .get(plugin)
                    .and_then(|m| m.get(dev))
                    .cloned()
                    .unwrap_or_else(|| format!("{plugin}/{dev}"))
            })
            .collect()
    }
}

/// Where a rank's GPU sits on the PCI bus (domain 0, as both NCCL's and nccl-tests' forms assume).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuAddr {
    pub bus: u8,
    /// Device and function, where NCCL gave them.
    pub slot: Option<(u8, u8)>,
}

impl GpuAddr {
    /// Whether `bdf` is this address.
    pub fn matches(&self, bdf: &crate::sysfs::pci::Bdf) -> bool {
        bdf.domain == 0
            && bdf.bus == self.bus
            && self
                .slot
                .is_none_or(|(d, f)| bdf.device == d && bdf.function == f)
    }
}

/// Every process of a job.
#[derive(Debug, Default)]
pub struct RankMap {
    processes: BTreeMap<(String, u32), Process>,
    /// Largest `nranks` any line gave.
    pub nranks: Option<u32>,
}

impl RankMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads one whole log named `source` (the tests' shorthand for feeding it line by line).
    #[cfg(test)]
    pub fn read(&mut self, source: &str, text: &str) {
        for (i, raw) in text.lines().enumerate() {
            self.read_line(source, i as u64 + 1, raw);
        }
    }

    /// Takes in one line of the log named `source` (numbered from 1).
    pub fn read_line(&mut self, source: &str, line_no: u64, raw: &str) {
        if !raw.contains("NCCL ") {
            return;
        }
        let mut records: Vec<Seen> = Vec::new();
        line::parse_line(raw, |r| {
            let (Some(host), Some(pid)) = (r.host, r.pid) else {
                return;
            };
            let channel = match &r.event {
                Event::Channel(c) => match (&c.transport, c.local_rank()) {
                    (
                        Transport::Net {
                            collnet: false,
                            plugin,
                            dev,
                            proxy: None,
                            ..
                        },
                        Some(rank),
                    ) => Some((rank, plugin.to_string(), *dev)),
                    _ => None,
                },
                _ => None,
            };
            let devices = match &r.event {
                Event::NetDevices { net, devices } => Some((net.to_string(), devices.to_string())),
                _ => None,
            };
            records.push(Seen {
                host: host.to_string(),
                pid,
                channel,
                devices,
            });
        });
        let message = message_of(raw);
        for Seen {
            host,
            pid,
            channel,
            devices,
        } in records
        {
            let Some(p) = self.process(&host, pid) else {
                return;
            };
            p.nccl_lines += 1;
            p.last_line = Some(Sighting {
                text: cut(message.unwrap_or(raw.trim())),
                source: source.to_string(),
                line: line_no,
            });
            if let Some((rank, plugin, dev)) = channel {
                p.ranks.insert(rank);
                if NetFamily::of(&plugin) != NetFamily::Socket {
                    p.net_used.insert((plugin, dev));
                }
            }
            if let Some((net, list)) = devices {
                p.net_devices.insert(net, device_list(&list));
            }
            if let Some(msg) = message {
                let facts = comm_facts(msg);
                if let Some(rank) = facts.rank {
                    p.ranks.insert(rank);
                }
                if facts.nranks.is_some() {
                    p.nranks = facts.nranks;
                    self.nranks = self.nranks.max(facts.nranks);
                }
                let p = self.process(&host, pid).expect("created above");
                if let Some(gpu) = facts.gpu {
                    p.gpu = Some(gpu);
                }
                p.init_complete |= facts.init_complete;
            }
        }
    }

    fn process(&mut self, host: &str, pid: u32) -> Option<&mut Process> {
        let key = (host.to_string(), pid);
        if !self.processes.contains_key(&key) && self.processes.len() >= MAX_PROCESSES {
            return None;
        }
        Some(self.processes.entry(key).or_insert_with(|| Process {
            host: host.to_string(),
            pid,
            ..Default::default()
        }))
    }

    /// Adds what nccl-tests' header says: each rank's host, pid and GPU, a process for a rank that never
    /// printed an NCCL line among them.
    pub fn add_header(&mut self, ranks: &[RankLine]) {
        for r in ranks {
            let host = short_host(&r.host).to_string();
            let Some(p) = self.process(&host, r.pid) else {
                return;
            };
            p.ranks.insert(r.rank);
            if p.gpu.is_none() {
                p.gpu = parse_hex_bus(&r.bus).map(|bus| GpuAddr { bus, slot: None });
            }
        }
        let n = ranks.len() as u32;
        if n > 0 && self.nranks.is_none_or(|have| have < n) {
            self.nranks = Some(n);
        }
    }

    pub fn processes(&self) -> impl Iterator<Item = &Process> {
        self.processes.values()
    }

    /// Ranks below `nranks` that no process claims: they printed nothing that names them.
    pub fn unseen_ranks(&self) -> Vec<u32> {
        let claimed: BTreeSet<u32> = self
            .processes
            .values()
            .flat_map(|p| p.ranks.iter().copied())
            .collect();
        (0..self.nranks.unwrap_or(0).min(1 << 20))
            .filter(|r| !claimed.contains(r))
            .collect()
    }

    /// Processes ordered by rank (those without a known rank last).
    pub fn by_rank(&self) -> Vec<&Process> {
        let mut list: Vec<&Process> = self.processes.values().collect();
        list.sort_by_key(|p| {
            (
                p.ranks.iter().next().copied().unwrap_or(u32::MAX),
                p.host.clone(),
                p.pid,
            )
        });
        list
    }
}

/// What one record of a line says about its process.
struct Seen {
    host: String,
    pid: u32,
    /// A NET channel through its own NIC (not PXN): (local rank, plugin, device index).
    channel: Option<(u32, String, u32)>,
    /// `NET/<plugin> : Using …`: (plugin, device list).
    devices: Option<(String, String)>,
}

/// `gpu-a01` for `gpu-a01.example.net` (NCCL cuts its host names the same way).
pub fn short_host(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// The text after `NCCL INFO ` / `NCCL WARN ` on a line.
fn message_of(raw: &str) -> Option<&str> {
    ["NCCL INFO ", "NCCL WARN "]
        .iter()
        .filter_map(|t| raw.find(t).map(|at| raw[at + t.len()..].trim()))
        .next()
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_LAST_LINE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// `[0]mlx5_0:1/IB [1]mlx5_3:1/RoCE` → {0: mlx5_0, 1: mlx5_3}.
fn device_list(list: &str) -> BTreeMap<u32, String> {
    list.split_whitespace()
        .filter_map(|item| {
            let rest = item.strip_prefix('[')?;
            let (index, name) = rest.split_once(']')?;
            let name = name.split(':').next().unwrap_or(name);
            Some((index.parse().ok()?, name.to_string()))
        })
        .filter(|(_, name)| !name.is_empty())
        .collect()
}

#[derive(Debug, Default, PartialEq)]
struct CommFacts {
    rank: Option<u32>,
    nranks: Option<u32>,
    gpu: Option<GpuAddr>,
    init_complete: bool,
}

/// What a communicator line says about its process: `comm 0x… rank 5 nRanks 16 nNodes 2 …`,
/// `comm 0x… rank 5 nranks 16 cudaDev 5 nvmlDev 5 busId 9a000 commId 0x… - Init COMPLETE`.
fn comm_facts(msg: &str) -> CommFacts {
    if !msg.contains("comm 0x") {
        return CommFacts::default();
    }
    let words: Vec<&str> = msg.split_whitespace().collect();
    let after = |key: &str| {
        let at = words.iter().position(|w| w.eq_ignore_ascii_case(key))?;
        words.get(at + 1).copied()
    };
    CommFacts {
        rank: after("rank").and_then(|v| v.parse().ok()),
        nranks: after("nranks").and_then(|v| v.parse().ok()),
        gpu: after("busId").and_then(nccl_bus_id),
        init_complete: msg.ends_with("Init COMPLETE"),
    }
}

/// NCCL prints a bus id as the hex of its digits without punctuation: `9a000` = `0000:9a:00.0`.
fn nccl_bus_id(text: &str) -> Option<GpuAddr> {
    let value = u64::from_str_radix(text, 16).ok()?;
    if value >> 20 != 0 {
        return None; // another PCI domain: not matched against this host's tree
    }
    Some(GpuAddr {
        bus: ((value >> 12) & 0xff) as u8,
        slot: Some((((value >> 4) & 0xff) as u8, (value & 0xf) as u8)),
    })
}

/// nccl-tests' `[0x9a]`.
fn parse_hex_bus(text: &str) -> Option<u8> {
    u8::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANK5: &str = "\
gpu-a01:4711:4711 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB eth0:10.1.2.3<0>
gpu-a01:4711:4711 [5] NCCL INFO comm 0x55d1 rank 5 nRanks 16 nNodes 2 localRanks 8 localRank 5 MNNVL 0
gpu-a01:4711:4790 [5] NCCL INFO Channel 00/0 : 5[5] -> 13[5] [send] via NET/IB/1/GDRDMA
gpu-a01:4711:4790 [5] NCCL INFO Channel 01/0 : 5[5] -> 13[5] [send] via NET/IB/0(4)/GDRDMA
gpu-a01:4711:4790 [5] NCCL INFO Channel 02/0 : 5[5] -> 13[5] [send] via NET/Socket/0
gpu-a01:4711:4711 [5] NCCL INFO comm 0x55d1 rank 5 nranks 16 cudaDev 5 nvmlDev 5 busId 9a000 commId 0x1 - Init COMPLETE
";

    #[test]
    fn a_process_gets_its_rank_gpu_devices_and_last_line() {
        let mut map = RankMap::new();
        map.read("nccl.gpu-a01.4711.log", RANK5);
        let p = map.processes().next().unwrap();
        assert_eq!(p.who(), "rank 5");
        assert_eq!(p.gpu.unwrap().bus, 0x9a);
        assert!(p.init_complete);
        // The PXN channel (through rank 4's NIC) is not this rank's own rail, nor is a socket.
        assert_eq!(p.used_nics(), ["mlx5_3"]);
        assert_eq!(p.last_line.as_ref().unwrap().line, 6);
        assert_eq!(map.nranks, Some(16));
        assert_eq!(map.unseen_ranks().len(), 15);
    }

    #[test]
    fn the_header_adds_ranks_that_never_printed() {
        let mut map = RankMap::new();
        map.read("out.log", RANK5);
        map.add_header(&[RankLine {
            rank: 6,
            pid: 4712,
            host: "gpu-a01.example.net".into(),
            device: 6,
            bus: "0xab".into(),
            model: String::new(),
            group: Some(0),
        }]);
        let silent = map.by_rank().into_iter().find(|p| p.pid == 4712).unwrap();
        assert_eq!(silent.nccl_lines, 0);
        assert_eq!(silent.gpu.unwrap().bus, 0xab);
        assert_eq!(silent.host, "gpu-a01");
    }

    #[test]
    fn bus_ids_decode_both_ways() {
        let at = |bus, d, f| {
            Some(GpuAddr {
                bus,
                slot: Some((d, f)),
            })
        };
        assert_eq!(nccl_bus_id("9a000"), at(0x9a, 0, 0));
        assert_eq!(nccl_bus_id("60"), at(0, 6, 0));
        assert_eq!(nccl_bus_id("1b001"), at(0x1b, 0, 1));
        assert_eq!(parse_hex_bus("0x06"), Some(6));
        assert_eq!(parse_hex_bus("zz"), None);
    }
}
