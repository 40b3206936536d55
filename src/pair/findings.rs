//! The finding codes of `pair`'s results (the `PAR` family), in one place because several files raise them:
//! the handshake and port pairing (`link`), a port pair's verdict (`judge`), this node's ports (`inventory`) and
//! the ring (`judge::ring_summary`). An unreadable input, a measuring child that hung or crashed, a run
//! interrupted and a thread that panicked carry the common `RUN` codes instead.

use crate::model::{FindingCode, Remedy};
use crate::pair::judge::{ID_HANDSHAKE, ID_RDMA, ID_RING};

pub const HANDSHAKE_FAILED: FindingCode = FindingCode {
    code: "PAR001",
    title: "the handshake with the other end did not complete",
    explanation: "The other end did not answer, refused the token, or spoke another protocol version before the \
        deadline. Start both ends with the same --token and the same fabric-preflight version, within the \
        deadline, and open the TCP port between the nodes.",
    step: Some(Remedy::Reconfigure),
};
pub const NO_PORT_HERE: FindingCode = FindingCode {
    code: "PAR101",
    title: "this node has no RDMA port pair can test",
    explanation: "No RDMA hardware is on this node's PCI bus, or its only RDMA devices are EFAs (which refuse \
        the RC queue pairs pair uses): nothing to test, and nothing passed.",
    step: None,
};
pub const NO_ACTIVE_PORT_HERE: FindingCode = FindingCode {
    code: "PAR102",
    title: "this node's RDMA devices are present but no port is ACTIVE (or addressable)",
    explanation: "Every port is down, or every RoCE port lacks a RoCE v2 GID. Bring a port up: the cable, the \
        switch port, a subnet manager for InfiniBand, an IP address on a RoCE port's netdev (see rdma.link and \
        rdma.roce on this node).",
    step: Some(Remedy::ServiceRma),
};
pub const PEER_HAS_NO_PORT: FindingCode = FindingCode {
    code: "PAR103",
    title: "the peer has no RDMA hardware: the link is untested",
    explanation: "The other end announced no RDMA hardware, so no port pair could be measured. Pair nodes that \
        both have RDMA ports.",
    step: None,
};
pub const PEER_CANNOT_TEST: FindingCode = FindingCode {
    code: "PAR104",
    title: "the peer's RDMA hardware is there but unusable: the link is untested",
    explanation:
        "The other end has RDMA hardware it cannot use (no driver, no active port, an unreadable \
        tree). Its own report names the fault; until it is fixed this link is unproven.",
    step: None,
};
pub const NO_COUNTERPART: FindingCode = FindingCode {
    code: "PAR105",
    title: "a port has no counterpart on the other end",
    explanation:
        "The two ends have different numbers of usable ports, so a port was left unpaired: a port \
        down at the end with fewer, or nodes of different shapes. Compare rdma.link on both nodes.",
    step: Some(Remedy::ServiceRma),
};
pub const LINK_LAYERS_DIFFER: FindingCode = FindingCode {
    code: "PAR106",
    title: "the paired ports are of different fabrics (InfiniBand and RoCE)",
    explanation:
        "A port pair joins an InfiniBand port with an Ethernet (RoCE) one, which cannot talk. Pair \
        ports of the same fabric (order the ports, or pair other nodes).",
    step: Some(Remedy::Reconfigure),
};
pub const GPU_MEMORY_UNUSABLE: FindingCode = FindingCode {
    code: "PAR111",
    title: "GPU memory was due at this end but is unusable",
    explanation: "GPUs are on this node's bus but their driver is not loaded, or CUDA lists none, so the GPU \
        leg could not run (`--memory gpu` asks for it; `auto` asks wherever GPUs are on the bus). See \
        gpu.inventory and driver.nvidia on this node.",
    step: Some(Remedy::LoadModule),
};
pub const GPU_PATH_SHORT: FindingCode = FindingCode {
    code: "PAR121",
    title: "GPU memory moves slowly or fails between the nodes while host memory is fast: the GPUDirect path",
    explanation: "The same port pair moves host memory at speed but GPU memory slower, or not at all: the \
        GPUDirect RDMA path at the end with GPU memory is at fault (nvidia_peermem or DMA-BUF, the PCIe \
        placement of GPU and NIC, ACS or the IOMMU). See gdr.kernel_path, topo.gpu_nic, pcie.acs there.",
    step: Some(Remedy::LoadModule),
};
pub const LINK_SHORT: FindingCode = FindingCode {
    code: "PAR122",
    title: "GPU and host memory both fall short between the nodes: the ports or the link",
    explanation: "Host memory is slow or broken too, so the path between the ports is at fault, not the GPUs: \
        compare rdma.link and rdma.counters at both ends, then the cable and the switch ports.",
    step: Some(Remedy::ServiceRma),
};
pub const HOST_LEG_FAILED: FindingCode = FindingCode {
    code: "PAR123",
    title: "the host-memory control failed too: nothing to compare the GPU leg with",
    explanation:
        "The control transfer through host memory failed as well: check the ports, rdma-core and \
        memlock (rdma.memlock) at both ends.",
    step: Some(Remedy::Reconfigure),
};
pub const SHORT: FindingCode = FindingCode {
    code: "PAR124",
    title: "the transfer between the ports fell short of its limits or broke",
    explanation: "Bandwidth below the share of the lower link rate, latency above the limit, data that did \
        not arrive intact, or a transfer the path broke (the summary says which). Compare rdma.link at both \
        ends (rate, MTU), then the cable and switch port; `ib_write_bw` between the same ports confirms.",
    step: Some(Remedy::ServiceRma),
};
pub const NOT_MEASURED: FindingCode = FindingCode {
    code: "PAR125",
    title: "a port pair was not measured: the peer went away or the control channel was lost",
    explanation: "The peer's process ended mid-transfer, or an earlier pair's measurement stopped mid-protocol \
        so the control channel could not be trusted. The peer's own report or log says why it stopped.",
    step: None,
};
pub const COMMON_NODE: FindingCode = FindingCode {
    code: "PAR201",
    title: "one node is common to every failing ring link",
    explanation:
        "Every failing pair includes this node: suspect its port, cable or switch port before its \
        neighbours. Drain it and run `fabric-preflight run` on it.",
    step: Some(Remedy::ServiceRma),
};
pub const LINKS_FAIL: FindingCode = FindingCode {
    code: "PAR202",
    title: "ring links fail without a single common node",
    explanation: "The failing links share no node: each link itself (cable, switch port) or one of its ends; \
        the neighbours' reports decide which.",
    step: Some(Remedy::ServiceRma),
};
pub const LINKS_WARN: FindingCode = FindingCode {
    code: "PAR203",
    title: "no ring link fails, but some warn",
    explanation:
        "Their pair.rdma results say why (a deadline that cut a phase short, a latency above the \
        warning mark).",
    step: None,
};
pub const LINKS_UNMEASURED: FindingCode = FindingCode {
    code: "PAR204",
    title: "ring links moved no data",
    explanation:
        "A link whose ends lack RDMA hardware proves nothing, so it never counts as a pass; with \
        every link unmeasured the ring is a skip. Their pair.rdma results say why.",
    step: None,
};

/// Every finding pair's results can carry, by check id (gathered by `commands::findings`).
pub const FINDINGS: &[(&str, &[&FindingCode])] = &[
    (ID_HANDSHAKE, &[&HANDSHAKE_FAILED]),
    (
        ID_RDMA,
        &[
            &NO_PORT_HERE,
            &NO_ACTIVE_PORT_HERE,
            &PEER_HAS_NO_PORT,
            &PEER_CANNOT_TEST,
            &NO_COUNTERPART,
            &LINK_LAYERS_DIFFER,
            &GPU_MEMORY_UNUSABLE,
            &GPU_PATH_SHORT,
            &LINK_SHORT,
            &HOST_LEG_FAILED,
            &SHORT,
            &NOT_MEASURED,
        ],
    ),
    (
        ID_RING,
        &[&COMMON_NODE, &LINKS_FAIL, &LINKS_WARN, &LINKS_UNMEASURED],
    ),
];
