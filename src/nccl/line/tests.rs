use super::channel::{
    any_channel, canonical_channel, canonical_record, holds_nccl, parse_transport,
};
use super::classify::{classify, nccl_error, VIA};
use super::framing::{
    ids_from_start, parse_clean, parse_ids, parse_line, parse_line_from, parse_prefix, Level,
    Prefix, TOKEN_LEN, VIA_LEN,
};
use super::memo::{LineMemo, PathMemo, MEMO_KEY_BYTES, MEMO_SLOTS};
use super::record::{
    Channel, ChannelKind, CommStage, Direction, Endpoint, Event, NetFamily, Record, Transport,
};
use super::text::{
    digit_bits, digits_before, digits_u32, leading_number, trim, trim_end, trim_spaced,
};

/// Records of a line without ANSI codes (those borrow from the line; the line is leaked to outlive the test
/// helper).
fn records(line: &str) -> Vec<Record<'static>> {
    let line: &'static str = Box::leak(
        line.trim_end_matches(['\n', '\r'])
            .to_string()
            .into_boxed_str(),
    );
    let mut out = Vec::new();
    parse_clean(line, &mut |r| out.push(r));
    out
}

fn one(line: &str) -> Record<'static> {
    let mut r = records(line);
    assert_eq!(r.len(), 1, "{line}: {r:?}");
    r.remove(0)
}

fn channel(line: &str) -> Channel<'static> {
    match one(line).event {
        Event::Channel(c) => c,
        other => panic!("{line}: {other:?}"),
    }
}

fn net<'a>(c: &Channel<'a>) -> (&'a str, u32, Option<u32>, bool, bool) {
    match &c.transport {
        Transport::Net {
            plugin,
            dev,
            proxy,
            gdrdma,
            collnet,
            ..
        } => (plugin, *dev, *proxy, *gdrdma, *collnet),
        t => panic!("not NET: {t:?}"),
    }
}

#[test]
fn channel_v2_3_receive_only_bare_ranks_parses() {
    let c = channel("gpu-a01:1:2 [0] NCCL INFO Ring 00 : 3 -> 0 via NET/IB/0/GDRDMA");
    assert_eq!(c.kind, ChannelKind::Ring);
    assert_eq!(net(&c), ("IB", 0, None, true, false));
    assert_eq!(c.direction, None);
    assert_eq!(c.local_rank(), Some(0));
}

#[test]
fn channel_v2_4_send_bare_ranks_parses() {
    let c = channel("h:1:2 [0] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/Socket/0");
    assert_eq!(net(&c), ("Socket", 0, None, false, false));
    assert_eq!(c.direction, Some(Direction::Send));
    assert_eq!(c.local_rank(), Some(7));
}

#[test]
fn channel_v2_5_bus_id_brackets_parse() {
    let c = channel("h:1:2 [0] NCCL INFO Ring 00 : 15[41000] -> 0[1b000] [receive] via NET/IB/0");
    assert_eq!(c.from.unwrap().bracket, Some("41000"));
    assert_eq!(c.local_rank(), Some(0));
    assert!(!net(&c).3);
}

#[test]
fn channel_v2_12_pxn_proxy_is_not_the_device() {
    let c =
        channel("h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 9[1] [send] via NET/IB/1(3)/GDRDMA");
    assert_eq!(net(&c), ("IB", 1, Some(3), true, false));
}

#[test]
fn channel_v2_26_gdr_pci_and_shared_parse() {
    let c = channel(
        "h:1:2 [0] NCCL INFO Channel 02/1 : 0[0] -> 8[0] [send] via NET/IBext_v8/2/GDRDMA(PCI)/Shared",
    );
    assert_eq!(net(&c), ("IBext_v8", 2, None, true, false));
}

#[test]
fn channel_plugin_name_with_spaces_parses() {
    let c = channel(
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA",
    );
    assert_eq!(net(&c).0, "AWS Libfabric");
    for (name, family) in [
        ("AWS Libfabric", NetFamily::Ofi),
        ("Libfabric", NetFamily::Ofi),
        ("IB", NetFamily::Ib),
        ("IBext_v8", NetFamily::Ib),
        ("UCX", NetFamily::Ib),
        ("SHARP", NetFamily::Ib),
        ("Socket", NetFamily::Socket),
        ("FastSocket", NetFamily::Socket),
        ("TCP", NetFamily::Socket),
        ("GPUDirectTCPX", NetFamily::Plugin),
        ("GPUDirectTCPXO_v7", NetFamily::Plugin),
        ("FasTrak", NetFamily::Plugin),
        ("NCCL RDMA Plugin v6", NetFamily::Plugin),
        ("bnxt_re", NetFamily::Plugin),
    ] {
        assert_eq!(NetFamily::of(name), family, "{name}");
    }
}

#[test]
fn channel_collnet_forms_parse() {
    for line in [
        "h:1:2 [0] NCCL INFO Coll 00 : 0 [send] via COLLNET/SHARP/0/GDRDMA",
        "h:1:2 [0] NCCL INFO CollNet 00 : 0 [receive] via COLLNET/SHARP/0/GDRDMA",
        "h:1:2 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA(PCI)",
    ] {
        let c = channel(line);
        assert_eq!(c.kind, ChannelKind::CollNet);
        assert_eq!(net(&c), ("SHARP", 0, None, true, true));
        assert_eq!(c.local_rank(), Some(0));
    }
}

#[test]
fn channel_intra_node_transports_parse() {
    let cases = [
        ("Ring 00 : 0[0] -> 1[1] via P2P/IPC", Transport::P2p("IPC")),
        (
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            Transport::P2p("CUMEM"),
        ),
        (
            "Ring 00 : 0[0] -> 1[1] via P2P/direct pointer",
            Transport::P2p("direct pointer"),
        ),
        (
            "Channel 00 : 0[1b000] -> 1[1c000] via P2P/indirect/4[b1000]",
            Transport::P2p("indirect"),
        ),
        (
            "Channel 00 : 1[1] -> 2[2] via SHM/direct/direct",
            Transport::Shm,
        ),
        (
            "Ring 00 : 0[0] -> 1[1] via direct shared memory",
            Transport::Shm,
        ),
    ];
    for (msg, want) in cases {
        let c = channel(&format!("h:1:2 [0] NCCL INFO {msg}"));
        assert_eq!(c.transport, want, "{msg}");
        // P2P/SHM lines are printed by the sender (left).
        assert_eq!(c.local_rank(), c.from.map(|e| e.rank), "{msg}");
    }
}

#[test]
fn graph_lines_are_not_channels() {
    for msg in [
        "Ring 00 : 7 -> 0 -> 1",
        "Channel 00/64 : 0 1 2 3",
        "Tree 0 : -1 -> 0 -> 1/-1/-1",
        "Trees [0] -1/-1/-1->0->1 [1] -1/-1/-1->0->",
        " 0 : NET/0 GPU/0 GPU/1 NET/0",
        " 0 : NET/0-0 GPU/0-60 NET/0-0",
        "CollNet Channel 1 rank 0 up 2 down 3",
    ] {
        let r = one(&format!("h:1:2 [0] NCCL INFO {msg}"));
        assert_eq!(r.event, Event::Graph, "{msg}");
    }
    let r = one("h:1:2 [0] NCCL INFO NET/0-0 :GPU/0-60 (3/1.2/PHB) CPU/0-ff (2/1.2/PHB)");
    assert_eq!(r.event, Event::Other);
}

#[test]
fn prefix_host_and_pid_are_read_behind_wrappers() {
    for (line, host) in [
        (
            "[1,4]<stdout>:gpu-c12:8812:8875 [0] NCCL INFO Using network IB",
            "gpu-c12",
        ),
        ("[rank0]:gpu-a01:8812:8875 [0] NCCL INFO Using network IB", "gpu-a01"),
        (
            "(RayWorkerWrapper pid=48213, ip=10.1.2.3) gpu-a01:8812:8875 [0] NCCL INFO Using network IB",
            "gpu-a01",
        ),
        (":8812:8875 [0] NCCL INFO Using network IB", ""),
        ("> gpu-a01:8812:8875 [0] NCCL INFO Using network IB\r", "gpu-a01"),
        (
            "2026-11-29T10:15:02.123456789Z stdout F gpu-a01:8812:8875 [0] NCCL INFO Using network IB",
            "gpu-a01",
        ),
    ] {
        let r = one(line);
        assert_eq!(r.host, Some(host), "{line}");
        assert_eq!(r.pid, Some(8812), "{line}");
        assert_eq!(r.event, Event::NetSelected("IB"), "{line}");
    }
}

#[test]
fn ansi_codes_are_stripped() {
    let line = "\x1b[36m(RayWorkerWrapper pid=1, ip=10.0.0.1)\x1b[0m gpu-a01:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA";
    let mut seen = Vec::new();
    parse_line(line, |r| {
        seen.push((
            r.host.map(str::to_string),
            matches!(r.event, Event::Channel(_)),
        ))
    });
    assert_eq!(seen, vec![(Some("gpu-a01".to_string()), true)]);
}

#[test]
fn ray_repeat_suffix_gives_multiplicity() {
    let r = one("(RayWorkerWrapper pid=1, ip=10.0.0.1) h:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA [repeated 7x across cluster]");
    assert_eq!(r.repeat, 7);
    assert!(matches!(r.event, Event::Channel(_)));
}

#[test]
fn warn_keeps_location_with_spaces() {
    let r = one("gpu-a01:1:2 [3] int ofi_init(ncclDebugLogger_t):1324 NCCL WARN NET/OFI Only EFA provider is supported");
    assert_eq!(
        r.event,
        Event::Warn {
            location: Some("int ofi_init(ncclDebugLogger_t):1324"),
            message: "NET/OFI Only EFA provider is supported"
        }
    );
    let r = one("[2026-11-29 10:15:02] gpu-a01:1:2 [0] transport/net_ib.cc:1345 NCCL WARN NET/IB : Got completion from peer 10.9.0.12<51011> with status=12 opcode=0 len=0 vendor err 129 hca mlx5_0");
    assert_eq!(r.host, Some("gpu-a01"));
    match r.event {
        Event::Warn { location, .. } => assert_eq!(location, Some("transport/net_ib.cc:1345")),
        e => panic!("{e:?}"),
    }
}

#[test]
fn glued_records_split_at_each_token() {
    let r = records("h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPCh:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA");
    assert_eq!(r.len(), 2);
    assert!(matches!(&r[0].event, Event::Channel(c) if c.transport == Transport::P2p("IPC")));
    assert!(
        matches!(&r[1].event, Event::Channel(c) if matches!(c.transport, Transport::Net { gdrdma: true, .. }))
    );
    // A record after application output on the same line (a hostname glued to letters or digits cannot be
    // told apart from them; after any other character it can).
    let r = records("loss=0.31 step=200|gpu-a02:7:8 [2] NCCL INFO Using network Socket");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].host, Some("gpu-a02"));
}

#[test]
fn version_bare_and_info_forms_parse_pytorch_error_does_not() {
    assert_eq!(
        one("NCCL version 2.18.6+cuda12.2").event,
        Event::Version("2.18.6+cuda12.2")
    );
    assert_eq!(
        one("[1,0]<stdout>:NCCL version 2.4.8+cuda10.1").event,
        Event::Version("2.4.8+cuda10.1")
    );
    assert_eq!(
        one("vm:506:506 [0] NCCL INFO NCCL version 2.28.9+cuda13.0").event,
        Event::Version("2.28.9+cuda13.0")
    );
    let line = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version 2.21.5";
    assert_eq!(one(line).event, Event::NcclError(&line[14..]));
}

#[test]
fn selection_lines_parse_in_every_release_shape() {
    for (msg, want) in [
        ("Using network IB", Event::NetSelected("IB")),
        (
            "Using network AWS Libfabric",
            Event::NetSelected("AWS Libfabric"),
        ),
        (
            "Using internal Network Socket",
            Event::NetSelected("Socket"),
        ),
        (
            "Assigned NET plugin Socket to comm",
            Event::NetSelected("Socket"),
        ),
        (
            "Initialized NET plugin Socket",
            Event::NetPluginInitialized("Socket"),
        ),
        (
            "Failed to initialize NET plugin IB",
            Event::NetPluginFailed("IB"),
        ),
        (
            "NET/Plugin: Loaded net plugin AWS Libfabric (v6)",
            Event::NetPluginLoaded("AWS Libfabric"),
        ),
        ("NET/IB : No device found.", Event::NoDevice("IB")),
        (
            "NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>",
            Event::NetDevices {
                net: "IB",
                devices: "",
            },
        ),
        (
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB ib0:10.9.0.11<0>",
            Event::NetDevices {
                net: "IB",
                devices: "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE",
            },
        ),
        (
            "NET/Socket : Using [0]ib0:10.9.0.11<0>",
            Event::NetDevices {
                net: "Socket",
                devices: "[0]ib0:10.9.0.11<0>",
            },
        ),
        (
            "NET/IB: [0] mlx5_0:1/IB ",
            Event::NetDevices {
                net: "IB",
                devices: "[0] mlx5_0:1/IB",
            },
        ),
        (
            "Bootstrap : Using eth0:10.1.2.3<0>",
            Event::Bootstrap("eth0:10.1.2.3<0>"),
        ),
        (
            "Bootstrap: Using eth0:10.1.2.3<0>",
            Event::Bootstrap("eth0:10.1.2.3<0>"),
        ),
        (
            "Connected all rings, use ring PXN 0 GDR 1",
            Event::RingPxnGdr {
                pxn: false,
                gdr: true,
            },
        ),
        (
            "NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)",
            Event::OfiProvider("efa"),
        ),
        (
            "NET/OFI No eligible providers were found",
            Event::OfiRefused("No eligible providers were found"),
        ),
        (
            "NET/OFI Support for DMA-BUF registrations: true",
            Event::OfiDmabuf(true),
        ),
        (
            "NET/OFI Support for DMA-BUF registrations: false",
            Event::OfiDmabuf(false),
        ),
        (
            "NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR",
            Event::OfiGdrOff {
                reason: "Could not disable CUDA API usage for HMEM, disabling GDR",
                instance: None,
            },
        ),
        (
            "NET/OFI Running on p5en.48xlarge platform, topology file /opt/amazon/ofi-nccl/share/aws-ofi-nccl/xml/p5en.48xl-topo.xml",
            Event::OfiPlatform("p5en.48xlarge"),
        ),
        (
            "NET/OFI Running on p4d.24xlarge platform, NCCL_TOPO_FILE environment variable is already set to /etc/topo.xml",
            Event::OfiPlatform("p4d.24xlarge"),
        ),
        (
            "comm 0x55d1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
            Event::CommTopology {
                nranks: 16,
                nnodes: 2,
            },
        ),
        ("NET/Plugin: Could not find: libnccl-net.so", Event::Other),
    ] {
        assert_eq!(
            one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
            want,
            "{msg}"
        );
    }
}

#[test]
fn comm_lifecycle_lines_parse_in_every_release_shape() {
    for (msg, comm, rank, nranks, stage) in [
        (
            "comm 0x7f3a10 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE",
            "0x7f3a10",
            0,
            2,
            CommStage::InitComplete,
        ),
        (
            "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d000 - Init COMPLETE",
            "0x5501",
            3,
            16,
            CommStage::InitComplete,
        ),
        (
            "ncclCommInitRank comm 0x5501 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 3d000 commId 0xa1 - Init START",
            "0x5501",
            3,
            16,
            CommStage::InitStart,
        ),
        (
            "ncclCommSplit comm 0x5502 rank 1 nranks 8 cudaDev 1 nvmlDev 1 busId 1c000 parent 0x5501 splitCount 1 color 0 key 1- Init START",
            "0x5502",
            1,
            8,
            CommStage::InitStart,
        ),
        (
            "[Rank 3] ncclCommInitRankConfig comm 0x5503 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 3d000 commId 0xa3 - Init START",
            "0x5503",
            3,
            16,
            CommStage::InitStart,
        ),
        (
            "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d000 - Abort COMPLETE",
            "0x5501",
            3,
            16,
            CommStage::AbortComplete,
        ),
    ] {
        assert_eq!(
            one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
            Event::CommLifecycle {
                comm,
                rank,
                nranks,
                stage
            },
            "{msg}"
        );
    }
    // Destroy is a normal end; a line cut before the stage is nothing.
    for msg in [
        "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d000 - Destroy COMPLETE",
        "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d0",
    ] {
        assert_eq!(
            one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
            Event::Other,
            "{msg}"
        );
    }
}

#[test]
fn error_returns_and_completion_errors_parse_graph_lines_do_not() {
    for (msg, want) in [
        (
            "transport/net_ib.cc:911 -> 2",
            Event::ErrorReturn {
                location: "transport/net_ib.cc:911",
                code: 2,
            },
        ),
        (
            "init.cc:1312 -> 6 [Async thread]",
            Event::ErrorReturn {
                location: "init.cc:1312",
                code: 6,
            },
        ),
        (
            "NET/IB : Got completion from peer 10.9.0.12<51011> with error 12, opcode 0, len 0, vendor err 129",
            Event::CompletionError("NET/IB : Got completion from peer 10.9.0.12<51011> with error 12, opcode 0, len 0, vendor err 129"),
        ),
        ("Ring 00 : 7 -> 0 -> 1", Event::Graph),
        ("Tree 0 : -1 -> 0 -> 1/-1/-1", Event::Graph),
        ("a:b -> 2", Event::Other),
    ] {
        assert_eq!(one(&format!("h:1:2 [0] NCCL INFO {msg}")).event, want, "{msg}");
    }
    assert_eq!(
        nccl_error("[rank8]: ncclRemoteError: A call failed"),
        Some("ncclRemoteError: A call failed")
    );
    assert_eq!(nccl_error("export TORCH_NCCL_ASYNC_ERROR_HANDLING=1"), None);
}

#[test]
fn torn_net_transports_are_rejected_not_counted_without_gdrdma() {
    for path in [
        "NET/IB/0/GD",
        "NET/IB/0/GDRDMAgpu-a01:1:3",
        "NET/IB/0x",
        "NET/IB/",
        "NET/IB",
    ] {
        let c = channel(&format!(
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via {path}"
        ));
        assert_eq!(c.transport, Transport::Other(path), "{path}");
    }
}

#[test]
fn net_path_ends_at_the_first_space() {
    for (tail, plugin, gdrdma) in [
        // RCCL.
        ("NET/IB/0 comm 0x2035d540 nRanks 02", "IB", false),
        ("NET/IB/1/GDRDMA comm 0x2035d540 nRanks 16", "IB", true),
        // A terminal copy padded with spaces or a tab; a plugin name with a space is not cut.
        ("NET/IB/0/GDRDMA        ", "IB", true),
        ("NET/IB/0/GDRDMA\t x", "IB", true),
        (
            "NET/AWS Libfabric/3/GDRDMA comm 0x1 nRanks 4",
            "AWS Libfabric",
            true,
        ),
    ] {
        let c = channel(&format!(
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via {tail}"
        ));
        match c.transport {
            Transport::Net {
                plugin: p,
                gdrdma: g,
                ..
            } => assert_eq!((p, g), (plugin, gdrdma), "{tail}"),
            t => panic!("{tail}: {t:?}"),
        }
    }
    // Glued records padded by a terminal: each one whole.
    let r = records("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA     h:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/IB/1/GDRDMA   ");
    assert_eq!(r.len(), 2);
    for rec in r {
        assert!(
            matches!(
                rec.event,
                Event::Channel(Channel {
                    transport: Transport::Net { gdrdma: true, .. },
                    ..
                })
            ),
            "{rec:?}"
        );
    }
}

#[test]
fn gdr_disabled_lines_keep_the_reason() {
    for msg in [
        "NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx5_0 (no module)",
        "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
        "GPU Direct RDMA Disabled for GPU 1c000 / HCA 0 (distance 7 > 4)",
        "NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
    ] {
        assert_eq!(
            one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
            Event::GdrDisabled(msg)
        );
    }
}

#[test]
fn fast_trims_match_std() {
    for s in [
        "",
        " ",
        "\t\x0b\x0c\r\n",
        "a",
        " a b ",
        "\u{a0}x\u{a0}",
        " \u{2003} y \u{85}",
        "é ",
        " ü",
        "  two  ",
        " \u{a0}",
        "IB ",
        " Using [0]mlx5_0:1/IB ",
    ] {
        assert_eq!(trim(s), s.trim(), "{s:?}");
        assert_eq!(trim_spaced(s), s.trim(), "{s:?}");
        assert_eq!(trim_end(s), s.trim_end(), "{s:?}");
    }
}

/// The one-pass readers (`canonical_channel`, `canonical_record`, the SWAR digit counts) against the
/// general ones, on canonical lines and on mutations of them that sit at every edge of the shape: where
/// the fast reading accepts a line, it gives exactly the general reading's records.
#[test]
fn canonical_lines_read_as_the_general_reader_does() {
    const SEEDS: [&str; 8] = [
        "gpu-a013:30105:30196 [5] NCCL INFO Channel 17/0 : 105[5] -> 113[5] [send] via NET/IB/2/GDRDMA",
        "gpu-a013:30105:30195 [5] NCCL INFO Channel 07/0 : 105[5] -> 106[6] via P2P/CUMEM/read",
        "h:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/1(3)/GDRDMA(PCI)/Shared",
        "[1,4]<stdout>:node-7:8812:8875 [0] NCCL INFO Channel 01 : 4[1b000] -> 3[b2000] via SHM/direct/direct",
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0 comm 0x2035d540 nRanks 02",
        "h:1:2 [0] NCCL INFO Channel 123456789/1 : 4294967295[0] -> 12345678901[0] via NET/Socket/0",
        "x:99999999:12 [12] NCCL INFO Channel 02/1 : 7 -> 8 [send] via COLLNET/SHARP/0/GDRDMA",
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read [repeated 3x across cluster]",
    ];
    const PIECES: [&str; 16] = [
        " ",
        "  ",
        "\t",
        "\u{a0}",
        "[",
        "]",
        "/",
        ":",
        "0",
        "99999",
        "+",
        "->",
        " via ",
        "NCCL INFO ",
        "é",
        "x",
    ];
    fn general_channel(msg: &str) -> Option<Channel<'_>> {
        VIA.find(msg.as_bytes()).and_then(|v| any_channel(msg, v))
    }
    let mut mutator = Mutator(0x9E37_79B9_7F4A_7C15);
    let mut fast_lines = 0;
    for i in 0..40_000 {
        let mut line = SEEDS[i % SEEDS.len()].to_string();
        for _ in 0..(i / SEEDS.len()) % 4 {
            mutator.mutate(&mut line, &PIECES);
        }
        let Some(hit) = line.find("NCCL") else {
            continue;
        };
        // From byte 0 the one-pass reader never applies (no token there): the general reading.
        let mut general = Vec::new();
        parse_line_from(&line, 0, |r| general.push(format!("{r:?}")));
        let mut fast = Vec::new();
        parse_line_from(&line, hit, |r| fast.push(format!("{r:?}")));
        assert_eq!(fast, general, "{line:?}");
        if canonical_record(&line, hit, None).is_some() {
            fast_lines += 1;
        }
        let msg = line.get(hit + TOKEN_LEN + 1..).unwrap_or_default();
        let msg = trim(msg.split(" [repeated ").next().unwrap_or_default());
        if let Some((c, path)) = canonical_channel(msg, None) {
            assert_eq!(Some(&c), general_channel(msg).as_ref(), "{msg:?}");
            assert_eq!(VIA.find(msg.as_bytes()), Some(path - VIA_LEN), "{msg:?}");
        }
    }
    // The fast reading is not vacuous: unmutated and lightly mutated lines take it.
    assert!(fast_lines > 8_000, "{fast_lines}");
    for s in [
        "",
        "0",
        "12345678",
        "123456789",
        "1234567890",
        "4294967295",
        "4294967296",
        "0004294967295",
        "9999999999999999999",
        "18446744073709551615",
        "18446744073709551617",
        "0000000000000000000042",
        "99999999999999999999999999",
        "12ab",
        "007x",
        "x1",
    ] {
        let digits = &s[..s.bytes().take_while(u8::is_ascii_digit).count()];
        assert_eq!(
            leading_number(s.as_bytes()),
            (digits.len(), digits.parse().ok()),
            "{s}"
        );
        assert_eq!(digits_u32(digits.as_bytes()), digits.parse().ok(), "{s}");
        let back = digits_before(s.as_bytes(), s.len());
        assert_eq!(
            back,
            s.bytes().rev().take_while(u8::is_ascii_digit).count(),
            "{s}"
        );
    }
    for b in 0..=255u8 {
        let word = u64::from_le_bytes([b, b'5', 0xff, b'0', b'9', b'/', b':', 0x80]);
        let bits = digit_bits(word);
        assert_eq!(bits & 0x80 != 0, b.is_ascii_digit(), "{b:#x}");
        assert_eq!(bits >> 8, 0x0000_0080_8000_8000 >> 8, "{b:#x}");
    }
}

/// [`ids_from_start`] against the backward reader, on prefixes and mutations of them at every edge of the
/// shape (digits, separators, host bytes, overflowing pids, text around it).
#[test]
fn prefixes_read_forwards_as_backwards() {
    const SEEDS: [&str; 6] = [
        "gpu-a013:30105:30196 [5]",
        "h:1:2 [0]",
        "node_7-b:4294967295:1 [12]",
        ":1:2 [3]",
        "x:99999999999:12 [1]",
        "h:00000000000000000000007:1 [0]",
    ];
    const PIECES: [&str; 10] = [" ", "[", "]", ":", "0", "9", "-", "é", "x", "\t"];
    let mut mutator = Mutator(0x2545_F491_4F6C_DD1D);
    let mut forward = 0;
    for i in 0..20_000 {
        let mut prefix = SEEDS[i % SEEDS.len()].to_string();
        for _ in 0..(i / SEEDS.len()) % 3 {
            mutator.mutate(&mut prefix, &PIECES);
        }
        let Some((host, pid)) = ids_from_start(&prefix) else {
            continue;
        };
        forward += 1;
        let back = prefix
            .ends_with(']')
            .then(|| parse_ids(&prefix, prefix.len() - 1))
            .flatten();
        assert_eq!(back, Some((0, host, pid)), "{prefix:?}");
    }
    assert!(forward > 5_000, "{forward}");
}

/// The prefix memo gives what `parse_prefix` reads, on first sight and on every later one: mutated prefixes
/// of lengths around the key's size, the same first bytes with another prefix length, and more distinct
/// prefixes than the table has slots (each slot replaced many times over).
#[test]
fn memoized_prefixes_read_as_parse_prefix() {
    const SEEDS: [&str; 5] = [
        "gpu-a013:30105:30196 [5] ",
        "[1,4]<stdout>:gpu-c12:8812:8875 [0] ",
        "h:1:2 [0] ",
        "node-0123456789abcdef:123:456 [7] ",
        "x ",
    ];
    const PIECES: [&str; 8] = [" ", "[", "]", ":", "7", "-", "é", "NCCL INFO "];
    fn fields<'a>(p: &Prefix<'a>) -> (usize, Option<&'a str>, Option<u32>, Option<&'a str>) {
        (p.start, p.host, p.pid, p.location)
    }
    let mut memo = LineMemo::default();
    let mut mutator = Mutator(0x9E37_79B9_7F4A_7C15);
    let mut kept = 0;
    for i in 0..4 * MEMO_SLOTS {
        let mut prefix = SEEDS[i % SEEDS.len()].to_string();
        for _ in 0..(i / SEEDS.len()) % 3 {
            mutator.mutate(&mut prefix, &PIECES);
        }
        // Distinct hosts beyond the slot count, then the token and a message (the key's other bytes).
        prefix.insert_str(0, &format!("{:x}", i % (2 * MEMO_SLOTS)));
        let segment = format!("{prefix}NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC");
        for len in [prefix.len(), prefix.len().saturating_sub(1)] {
            if !segment.is_char_boundary(len) {
                continue;
            }
            let want = parse_prefix(&segment[..len], Level::Info);
            for _ in 0..2 {
                let got = memo.info_prefix(&segment, len);
                assert_eq!(fields(&got), fields(&want), "{segment:?} {len}");
            }
            kept += usize::from(len <= MEMO_KEY_BYTES);
        }
    }
    assert!(kept > MEMO_SLOTS, "{kept}");
}

/// The path memo gives what `parse_transport` reads, on first sight and later: mutated paths of every
/// length around the key's limits, more of them than the table has slots.
#[test]
fn memoized_paths_read_as_parse_transport() {
    const PATHS: [&str; 7] = [
        "NET/IB/0/GDRDMA",
        "NET/IB/12",
        "NET/Socket/1",
        "COLLNET/SHARP/0",
        "P2P/CUMEM/read",
        "P2P/IPC",
        "SHM/direct/direct",
    ];
    const PIECES: [&str; 8] = [" ", "/", "(", ")", "7", "é", "GDRDMA", "x"];
    let mut memo = PathMemo::default();
    let mut mutator = Mutator(0x2545_F491_4F6C_DD1D);
    let mut kept = 0;
    for i in 0..5_000 {
        let mut path = PATHS[i % PATHS.len()].to_string();
        for _ in 0..(i / PATHS.len()) % 3 {
            mutator.mutate(&mut path, &PIECES);
        }
        let want = parse_transport(&path);
        for _ in 0..2 {
            assert_eq!(memo.transport(&path), want, "{path:?}");
        }
        kept += usize::from((8..=16).contains(&path.len()));
    }
    assert!(kept > 1_000, "{kept}");
}

#[test]
fn holds_nccl_is_a_window_search() {
    let text = b"NET/IB/0/GDRDMA NCCL NCC N NNCCL xNCCLx";
    for start in 0..text.len() {
        for end in start..=text.len() {
            let b = &text[start..end];
            assert_eq!(holds_nccl(b), b.windows(4).any(|w| w == b"NCCL"), "{b:?}");
        }
    }
}

/// Reproducible random edits for the equivalence tests: at a random char boundary, insert one of the
/// pieces, delete one to three chars, or cut the text there.
struct Mutator(u64);

impl Mutator {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn mutate(&mut self, text: &mut String, pieces: &[&str]) {
        let mut at = self.below(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        match self.below(3) {
            0 => text.insert_str(at, pieces[self.below(pieces.len())]),
            1 => {
                let mut end = (at + 1 + self.below(3)).min(text.len());
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                text.replace_range(at..end, "");
            }
            _ => text.truncate(at),
        }
    }
}

/// The reader's shortcuts (the first `NCCL` already found, ` via ` found while looking for the next
/// token) give the same records as searching from scratch, on lines where the two could differ.
#[test]
fn shortcuts_give_the_same_records() {
    for line in [
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
        "NCCL x NCCL version 2.18.6+cuda12.2 h:1:2 [0] NCCL INFO Using network IB",
        "h:1:2 [0] NCCL INFO  via NET/IB/0 Channel 00 : 0 -> 1 via P2P/IPC",
        "h:1:2 [0] NCCL INFO Channel 00 : 0 -> 1 via ",
        "h:1:2 [0] NCCL INFO Channel 00 : 0 -> 1 via\u{a0}",
        "h:1:2 [0] NCCL INFO\u{a0} via P2P/IPC",
        "h:1:2 [0] NCCL INFOvia h:1:2 [0] NCCL WARN via x",
        "h:1:2 [0] NCCL INFO Ring 00 : 0 -> 1 via P2P/IPC [repeated 3x across cluster]",
        "x NCCL INFO",
    ] {
        let mut from_start = Vec::new();
        parse_line_from(line, 0, |r| from_start.push(format!("{r:?}")));
        let mut from_hit = Vec::new();
        parse_line_from(line, line.find("NCCL").unwrap(), |r| {
            from_hit.push(format!("{r:?}"))
        });
        assert_eq!(from_hit, from_start, "{line}");
        // A lone INFO record: classified as by a full search of its message.
        let (first, rest) = line.split_once("NCCL INFO").unwrap();
        if !first.contains("NCCL") && !rest.contains("NCCL") {
            let message = rest.split(" [repeated ").next().unwrap();
            let events: Vec<_> = records(line).into_iter().map(|r| r.event).collect();
            let want: Vec<_> = from_start.iter().map(|_| classify(trim(message))).collect();
            assert_eq!(events, want, "{line}");
        }
    }
}

#[test]
fn noise_and_garbage_give_nothing_or_other() {
    assert!(records("epoch 1 loss 0.2").is_empty());
    assert!(records("").is_empty());
    assert_eq!(one("NCCL INFO").event, Event::Other);
    assert_eq!(
        one("x NCCL WARN").event,
        Event::Warn {
            location: None,
            message: ""
        }
    );
    assert_eq!(
        one("h:1:2 [0] NCCL INFO Channel 00 : x -> y via NET/IB/0").event,
        Event::Other
    );
    assert_eq!(
        one("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/x").event,
        Event::Channel(Channel {
            kind: ChannelKind::Channel,
            index: 0,
            from: Some(Endpoint {
                rank: 0,
                bracket: Some("0")
            }),
            to: Some(Endpoint {
                rank: 1,
                bracket: Some("0")
            }),
            direction: Some(Direction::Send),
            transport: Transport::Other("NET/IB/x")
        })
    );
}
