#!/usr/bin/env python3
"""Cloud GPU nodes as recorded trees: AWS P5en / P5 (EFA), Azure ND H100 v5 (InfiniBand), GCP A3 Ultra (RoCE)
and A3 Mega (no verbs NIC), plus the broken EFA variants. Same CLI as gen_hosts.py; imports its helpers.

Formats (see testdata/README.md, section "EFA and cloud trees", for the sources studied):
- EFA PCI function: vendor 0x1d0f, device 0xefa1 (P4d) / 0xefa2 (P5) / 0xefa3 (P5en) [reasoned: the ids are
  rdma-core's `efa_table`, which generation ships which id is not published], class 0x020000, bound to `efa`.
- EFA RDMA device `rdmap<bus>s<slot>` (udev predictable naming); port 1: `4: ACTIVE` / `5: LinkUp` always,
  link_layer `Unknown`, rate from the device's link speed (kernel efa_link_gbps_to_speed_and_width: 100 ->
  `100 Gb/sec (4X EDR)`, 200 -> `200 Gb/sec (4X HDR)`), one GID: the interface's IPv6 link-local EUI-64 address.
- Port `hw_counters/`: the kernel's EFA_DEFINE_PORT_STATS names; device `hw_counters/`: EFA_DEFINE_DEVICE_STATS.
- ENA: a separate PCI function (1d0f:ec20) bound to `ena` whose netdev carries the interface's MAC (the MAC the
  EFA's GID is derived from). EFA-only interfaces have no ENA function.
- amzn-drivers' efa exposes the peer path as `p2p` on the PCI function (`NVIDIA peermem`, `NVIDIA`, or empty);
  its module has a `version` (the in-tree driver has none).

Usage: python3 testdata/gen_efa.py [NAME...]
"""

import json
import os
import sys

import gen_fleet_rdma as fr
import gen_hosts as g

EFA_PORT_COUNTERS = ["tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs",
                     "recv_bytes", "recv_wrs", "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err",
                     "rdma_read_resp_bytes", "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err",
                     "rdma_write_recv_bytes", "retrans_bytes", "retrans_pkts", "retrans_timeout_events",
                     "unresponsive_remote_events", "impaired_remote_conn_events"]
EFA_DEVICE_COUNTERS = ["submitted_cmds", "completed_cmds", "cmds_err", "no_completion_cmds", "keep_alive_rcvd",
                       "alloc_pd_err", "create_qp_err", "create_cq_err", "reg_mr_err", "alloc_ucontext_err",
                       "create_ah_err", "mmap_err"]
EFA_RATE = {100: "100 Gb/sec (4X EDR)", 200: "200 Gb/sec (4X HDR)", 400: "400 Gb/sec (8X HDR)"}
DRIVER_VERSION = "560.35.03"


def driver_link(t, dev, driver):
    t.symlink(dev.path + "/driver", g.rel_link(dev.path, "/sys/bus/pci/drivers/" + driver))


def write_dmi(t, sys_vendor, product_name, board_vendor):
    for f, v in (("sys_vendor", sys_vendor), ("product_name", product_name), ("board_vendor", board_vendor)):
        t.write("/sys/class/dmi/id/" + f, v)


def mac_of(n):
    """AWS ENI MACs are locally administered unicast addresses."""
    return "0a:%02x:%02x:%02x:%02x:%02x" % (0x1e, 0x5b, (n >> 8) & 0xFF, n & 0xFF, 0x3c)


def eui64_gid(mac):
    """IPv6 link-local EUI-64 of a MAC, written as sysfs writes GIDs (8 groups of 4 hex digits)."""
    b = [int(x, 16) for x in mac.split(":")]
    e = [b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
    return "fe80:0000:0000:0000:" + ":".join("%02x%02x" % (e[i], e[i + 1]) for i in range(0, 8, 2))


def write_efa(t, efa, uverbs, *, gbps, counters=None, device_counters=None):
    name = "rdmap%ds%d" % (efa.bus(), int(efa.bdf.split(":")[2].split(".")[0], 16))
    d = efa.path + "/infiniband/" + name
    t.write(d + "/node_type", "1: CA")
    t.write(d + "/node_guid", "0000:0000:0000:0000")
    t.write(d + "/sys_image_guid", "0000:0000:0000:0000")
    t.write(d + "/fw_ver", "0.0.0.0")
    t.symlink(d + "/device", g.rel_link(d, efa.path))
    p = d + "/ports/1"
    t.write(p + "/state", "4: ACTIVE")
    t.write(p + "/phys_state", "5: LinkUp")
    t.write(p + "/rate", EFA_RATE[gbps])
    t.write(p + "/link_layer", "Unknown")
    t.write(p + "/lid", "0x0")
    t.write(p + "/sm_lid", "0x0")
    t.write(p + "/gids/0", eui64_gid(efa.mac))
    t.write(p + "/gid_attrs/types/0", "IB/RoCE v1")
    values = dict((c, 0) for c in EFA_PORT_COUNTERS)
    values.update({"tx_bytes": 918272611, "tx_pkts": 921771, "rx_bytes": 918201733, "rx_pkts": 921702,
                   "send_wrs": 10412, "recv_wrs": 10409})
    values.update(counters or {})
    for c, v in values.items():
        t.write(p + "/hw_counters/" + c, str(v))
    t.write(p + "/hw_counters/lifespan", "10")
    values = dict((c, 0) for c in EFA_DEVICE_COUNTERS)
    values.update({"submitted_cmds": 412, "completed_cmds": 412, "keep_alive_rcvd": 9211})
    values.update(device_counters or {})
    for c, v in values.items():
        t.write(d + "/hw_counters/" + c, str(v))
    t.write(d + "/hw_counters/lifespan", "10")
    t.symlink("/sys/class/infiniband/" + name, g.rel_link("/sys/class/infiniband", d))
    v = efa.path + "/infiniband_verbs/uverbs%d" % uverbs
    t.write(v + "/ibdev", name)
    t.write(v + "/abi_version", "1")
    t.symlink("/sys/class/infiniband_verbs/uverbs%d" % uverbs, g.rel_link("/sys/class/infiniband_verbs", v))
    t.write("/dev/infiniband/uverbs%d" % uverbs, "", newline=False)
    return name


def write_ena_netdev(t, ena, ifname, up=True):
    n = ena.path + "/net/" + ifname
    t.write(n + "/address", ena.mac)
    t.write(n + "/operstate", "up" if up else "down")
    t.write(n + "/carrier", "1" if up else "0")
    t.write(n + "/mtu", "9001")
    t.write(n + "/type", "1")
    t.symlink("/sys/class/net/" + ifname, g.rel_link("/sys/class/net", n))


def write_answers(t, domains, registrations, provider=True, hmem=True, call="ibv_reg_dmabuf_mr"):
    """The library answers the EFA checks record: libfabric's fi_getinfo for provider efa, FI_EP_RDM
    (dynlib::fabric::Query), libefa's dlopen, and GPU memory registered on each GPU's nearest EFA
    (measure::efa_registration). Reasoned from the APIs, not captured: no EFA machine was at hand."""
    answers = {"efa.libefa": {"Ok": "libefa.so.1"},
               "verbs.efa_gdr_registration": [
                   {"gpu": gpu, "device": dev, "outcome": {"Ok": {"call": call, "refused": []}}}
                   for gpu, dev in registrations],
               "libfabric.efa": {
        "library": {"Ok": "1.22.0"},
        "hmem_requested": hmem,
        "providers": [] if not provider else
        [{"fabric": "efa-direct", "domain": d + "-rdm", "provider": "efa"} for d in domains],
        "error": None if provider else {"code": -61, "text": "No data available"},
    }}
    path = os.path.join(t.root, "vendor-answers.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1, sort_keys=True)
        f.write("\n")


def nvlink_management_vpd():
    """PCI VPD of an HGX Blackwell baseboard's NVLink switch management ConnectX-7, in the PCI VPD format
    (identifier string 0x82, VPD-R 0x90 with keywords, end 0x78). Fabric Manager's start script finds the device
    by the `SMDL=SW_MNG` it carries; the other values are ours."""
    ident = b"NVIDIA ConnectX-7 NVLink switch management"
    fields = b"".join(k + bytes([len(v)]) + v for k, v in ((b"PN", b"MCX750500B-0D00"), (b"SN", b"MT2419X00042"),
                                                          (b"V2", b"SMDL=SW_MNG"), (b"RV", b"\x00")))
    return (b"\x82" + len(ident).to_bytes(2, "little") + ident + b"\x90" + len(fields).to_bytes(2, "little")
            + fields + b"\x78")


def aws(name, *, product, gpu_device, gpu_model, efa_device, efa_per_gpu, gbps, with_ena, driver="open",
        efa_driver="amzn", p2p="NVIDIA peermem", nv_peermem=True, unbound=(), ena_down=(), efa_counters=None,
        libfabric=True, efa_missing=0, uptime=86231.52, nvlink_management=(), management_vpd=True,
        driver_version=DRIVER_VERSION):
    """with_ena: EFA indices whose interface also carries an ENA function (the rest are EFA-only).
    efa_driver: "amzn" (out-of-tree, has a module version and the `p2p` attribute) or "intree".
    unbound: EFA indices whose function has no driver (and so no RDMA device). efa_missing: EFAs not yet there
    (late initialisation). nvlink_management: GPU indices under whose switch an NVLink switch management
    ConnectX-7 sits (p6-b200: two, InfiniBand, `ibp<bus>s0f0`); management_vpd: its VPD readable (root).
    driver_version: the NVIDIA driver (Blackwell needs R570 or later)."""
    t = g.Tree(name)
    write_dmi(t, "Amazon EC2", product, "Amazon EC2")
    gpus, efas, enas, managers = [], [], [], []
    roots = []
    base = 0x40
    n_efa = 0
    for i in range(8):
        numa = i // 4
        cpus = g.CPULIST[numa]
        bus = base + i * 0x10

        def dev(bdf, vendor, device, cls, link, ptype, acs=None, subsystem=(0, 0)):
            return g.Dev(bdf, vendor, device, cls, link, ptype, acs, numa=numa, cpulist=cpus, subsystem=subsystem)

        rp = dev("0000:%02x:01.0" % bus, 0x8086, 0x352A, 0x060400, g.GEN5_X16, g.ROOT_PORT, g.ACS_OFF)
        usp = rp.add(dev("0000:%02x:00.0" % (bus + 1), 0x1000, 0xC030, 0x060400, g.GEN5_X16, g.SWITCH_UP))
        slot = [0]

        def dsp(link):
            d = usp.add(dev("0000:%02x:%02x.0" % (bus + 2, slot[0]), 0x1000, 0xC030, 0x060400, link,
                            g.SWITCH_DOWN, g.ACS_OFF))
            slot[0] += 1
            return d

        gpus.append(dsp(g.GEN5_X16).add(dev("0000:%02x:00.0" % (bus + 3), 0x10DE, gpu_device, 0x030200, g.GEN5_X16,
                                           g.ENDPOINT, subsystem=(0x10DE, 0x16C1))))
        for k in range(efa_per_gpu):
            efa_bus = bus + 4 + k
            efa = dsp((16.0, 16, 16.0, 16)).add(dev("0000:%02x:00.0" % efa_bus, 0x1D0F, efa_device, 0x020000,
                                                    (16.0, 16, 16.0, 16), g.ENDPOINT, subsystem=(0x1D0F, 0x0000)))
            efa.mac = mac_of(n_efa)
            efa.index = n_efa
            if n_efa in with_ena:
                ena = dsp((16.0, 8, 16.0, 8)).add(dev("0000:%02x:00.0" % (efa_bus + 8), 0x1D0F, 0xEC20, 0x020000,
                                                      (16.0, 8, 16.0, 8), g.ENDPOINT, subsystem=(0x1D0F, 0x0000)))
                ena.mac = efa.mac
                enas.append(ena)
            efas.append(efa)
            n_efa += 1
        if i in nvlink_management:
            managers.append(dsp(g.GEN5_X16).add(fr.mlx_function("0000:%02x:00.0" % (bus + 0xC), 0x1021, 0x020700,
                                                                 g.GEN5_X16, numa)))
        roots.append(("pci0000:%02x" % bus, rp))
    for hb, root in roots:
        g.place(t, hb, root)

    present = efas[:len(efas) - efa_missing] if efa_missing else efas
    domains = []
    nearest = {}  # GPU index -> its first EFA's RDMA device
    uverbs = 0
    for efa in present:
        if efa.index in unbound:
            continue
        driver_link(t, efa, "efa")
        if efa_driver == "amzn" and p2p is not None:
            t.write(efa.path + "/p2p", p2p)
        domains.append(write_efa(t, efa, uverbs, gbps=gbps, counters=(efa_counters or {}).get(efa.index)))
        nearest.setdefault(efa.index // efa_per_gpu, domains[-1])
        uverbs += 1
    for k, m in enumerate(managers):
        driver_link(t, m, "mlx5_core")
        if management_vpd:
            t.write_bytes(m.path + "/vpd", nvlink_management_vpd())
        fr.rdma_device(t, m.path, "ibp%ds0f0" % m.bus(), uverbs, fw_ver="28.43.1014", hca_type="MT4129",
                       board_id="MT_0000001093", guid="5c25:7303:00a1:%04x" % k,
                       ports={1: fr.ib_rail(k)})
        uverbs += 1
    if efa_missing:
        # Not yet probed: the functions are not on the bus either (the device appears when it is ready).
        for efa in efas[len(efas) - efa_missing:]:
            for f in os.listdir(t._p(efa.path)):
                os.remove(os.path.join(t._p(efa.path), f))
            os.rmdir(t._p(efa.path))
            os.remove(t._p("/sys/bus/pci/devices/" + efa.bdf))
    for n, ena in enumerate(enas):
        driver_link(t, ena, "ena")
        write_ena_netdev(t, ena, "ens%d" % (32 + n), up=n not in ena_down)
    for gpu in gpus:
        driver_link(t, gpu, "nvidia")
    t.write("/sys/class/infiniband_verbs/abi_version", "6")

    t.write("/proc/uptime", "%.2f %.2f" % (uptime, uptime * 180))
    kernel = "6.8.0-1021-aws"
    t.write("/proc/sys/kernel/osrelease", kernel)
    t.write("/proc/sys/kernel/hostname", name)
    t.write("/proc/cmdline", "BOOT_IMAGE=/vmlinuz-%s root=PARTUUID=0b9f5b4c-01 ro console=ttyS0 nvme_core.io_timeout=4294967295"
            % kernel)
    t.write("/proc/self/mountinfo", "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw,discard")
    t.write("/run/udev/data/b259:1", "E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4")
    g.write_cpuinfo(t, True, 2, "AMD EPYC 7R13 Processor" if "p5." in product else "Intel(R) Xeon(R) Platinum 8488C")
    taint = "POE" if driver == "proprietary" else "OE"
    modules = []
    if nv_peermem:
        modules.append(("efa_nv_peermem", 16384, 0, "-", "OE", "1.2.3"))
    modules += [("nvidia_uvm", 4911104, 0, "-", taint, None),
                ("nvidia", 54329344, 2 if nv_peermem else 1, "nvidia_uvm," + ("efa_nv_peermem," if nv_peermem else ""),
                 taint, driver_version),
                ("efa", 167936, 0, "-", "OE" if efa_driver == "amzn" else "",
                 "2.13.0g" if efa_driver == "amzn" else None),
                ("ib_uverbs", 196608, 1, "efa,", "", None),
                ("ib_core", 507904, 2, "ib_uverbs,efa,", "", None),
                ("ena", 196608, 0, "-", "", "2.13.0g")]
    if managers:
        modules += [("mlx5_ib", 483328, 0, "-", "", None), ("mlx5_core", 2506752, 1, "mlx5_ib,", "", None)]
    g.write_modules(t, modules)
    t.write("/proc/driver/nvidia/version", g.NVRM_OPEN.replace(g.DRIVER_VERSION, driver_version) if driver == "open"
            else g.NVRM_PROPRIETARY.replace(g.DRIVER_VERSION, driver_version), newline=False)
    for i, gpu in enumerate(gpus):
        g.write_nvidia_gpu(t, gpu.bdf, gpu_model, 180 + i, "GPU-7e2a%04x-1b2c-4d3e-8f40-5a6b7c8d9e0f" % i,
                           "96.00.99.00.01", i, driver_version)
    # Without the open module there is no DMA-BUF: GPU memory is registered through the peer path (ibv_reg_mr).
    write_answers(t, domains, [(gpus[i].bdf, d) for i, d in sorted(nearest.items())], provider=libfabric,
                  call="ibv_reg_dmabuf_mr" if driver == "open" else "ibv_reg_mr")
    return t


P5EN = dict(product="p5en.48xlarge", gpu_device=0x2335, gpu_model="NVIDIA H200", efa_device=0xEFA3, efa_per_gpu=2,
            gbps=200, with_ena=range(16))
# P5: the first network card carries EFA + ENA, the other 31 interfaces are EFA-only (AWS's recommended launch
# for P5 since efa-only interfaces exist); the in-tree efa driver, DMA-BUF registration through the open module.
P5 = dict(product="p5.48xlarge", gpu_device=0x2330, gpu_model="NVIDIA H100 80GB HBM3", efa_device=0xEFA2,
          efa_per_gpu=4, gbps=100, with_ena=(0,), efa_driver="intree", p2p=None, nv_peermem=False)

P6_B200 = dict(product="p6-b200.48xlarge", gpu_device=0x2901, gpu_model="NVIDIA B200", efa_device=0xEFA3,
               efa_per_gpu=1, gbps=400, with_ena=(0,), nvlink_management=(3, 4), driver_version="570.133.20")


def vm_node(name, *, dmi, gpu_device, gpu_model, nics, roce=False, extra_nics=0, an_vf=None):
    """Azure/GCP guests: every passthrough device on a PCI domain of its own (Hyper-V vPCI / a flat guest bus),
    no switch ports visible. nics: ConnectX-7 VFs with an RDMA device (InfiniBand, or RoCE with GIDs on a netdev).
    an_vf: Azure's accelerated-networking VF `mlx5_an0` ("netvsc": its netdev enslaved to Hyper-V's eth0 as the
    guest shows it; "alone": no master link, as a container's sysfs may show it)."""
    t = g.Tree(name)
    write_dmi(t, *dmi)
    gpus, rdma = [], []
    for i in range(8):
        numa = i // 4
        gpu = g.Dev("%04x:00:00.0" % (0x0001 + i), 0x10DE, gpu_device, 0x030200, g.GEN5_X16, g.ENDPOINT, numa=numa,
                    cpulist=g.CPULIST[numa], subsystem=(0x10DE, 0x16C1))
        g.place(t, "pci%04x:00" % (0x0001 + i), gpu)
        driver_link(t, gpu, "nvidia")
        gpus.append(gpu)
    for i in range(nics):
        numa = i // 4
        nic = g.Dev("%04x:00:00.0" % (0x0101 + i), 0x15B3, 0x101E, 0x020000 if roce else 0x020700, g.GEN5_X16,
                    g.ENDPOINT, numa=numa, cpulist=g.CPULIST[numa], subsystem=(0x15B3, 0x0041))
        g.place(t, "pci%04x:00" % (0x0101 + i), nic)
        driver_link(t, nic, "mlx5_core")
        rdma.append(nic)
    for i in range(extra_nics):
        # gVNIC (Google Virtual NIC): no RDMA device; A3 Mega's GPUDirect-TCPXO NICs
        nic = g.Dev("0000:%02x:00.0" % (0x80 + i), 0x1AE0, 0x0042, 0x020000, None, numa=i * 2 // extra_nics,
                    cpulist=g.CPULIST[i * 2 // extra_nics], config_len=256)
        g.place(t, "pci0000:%02x" % (0x80 + i), nic)
        driver_link(t, nic, "gve")
    for i, nic in enumerate(rdma):
        if roce:
            ifname = "gpu%drdma0" % i
            g.write_rdma_device(t, nic, i, i, link_layer="Ethernet", port=dict(g.IB_ACTIVE, lid="0x0", sm_lid="0x0"),
                                netdev=(ifname, 8896), gids=g.roce_gids(i, ifname))
        else:
            g.write_rdma_device(t, nic, i, i, link_layer="InfiniBand", port=dict(g.IB_ACTIVE, lid="0x%x" % (0x21 + i)),
                                gids=[("fe80:0000:0000:0000:0015:5dff:fd33:ff%02x" % i, "IB/RoCE v1", None)])
    if an_vf:
        write_an_vf(t, len(rdma), an_vf == "netvsc")
    if rdma:
        t.write("/sys/class/infiniband_verbs/abi_version", "6")
        t.write("/dev/infiniband/rdma_cm", "", newline=False)
    kernel = "6.8.0-1017-azure" if dmi[0].startswith("Microsoft") else "6.8.0-1015-gcp"
    t.write("/proc/sys/kernel/osrelease", kernel)
    t.write("/proc/sys/kernel/hostname", name)
    t.write("/proc/uptime", "86231.52 15521673.60")
    t.write("/proc/cmdline", "BOOT_IMAGE=/vmlinuz-%s root=PARTUUID=4e7a3c1b-01 ro console=ttyS0" % kernel)
    t.write("/proc/self/mountinfo", "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw")
    t.write("/run/udev/data/b259:1", "E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4")
    g.write_cpuinfo(t, True, 2, "Intel(R) Xeon(R) Platinum 8480C")
    modules = [("nvidia_peermem", 16384, 0, "-", "OE", DRIVER_VERSION),
               ("nvidia_uvm", 4911104, 0, "-", "OE", None),
               ("nvidia", 54329344, 2, "nvidia_uvm,nvidia_peermem,", "OE", DRIVER_VERSION)]
    if rdma:
        modules += [("mlx5_ib", 483328, 0, "-", "", None),
                    ("ib_uverbs", 196608, 2, "mlx5_ib,nvidia_peermem,", "", None),
                    ("ib_core", 507904, 3, "ib_uverbs,mlx5_ib,nvidia_peermem,", "", None),
                    ("mlx5_core", 2506752, 1, "mlx5_ib,", "", None)]
    g.write_modules(t, modules)
    t.write("/proc/driver/nvidia/version", g.NVRM_OPEN.replace(g.DRIVER_VERSION, DRIVER_VERSION), newline=False)
    for i, gpu in enumerate(gpus):
        g.write_nvidia_gpu(t, gpu.bdf, gpu_model, 180 + i, "GPU-2c4e%04x-3a5b-4c6d-9e7f-8a9b0c1d2e3f" % i,
                           "96.00.99.00.01", i, DRIVER_VERSION)
    return t


# Hyper-V's synthetic NIC on VMBus (the guest's eth0) and the accelerated-networking VF on vPCI domain 0x7870
VMBUS_NIC = "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/000d3a6e-f1d2-4c6b-9a3e-2b1c0d9e8f70"


def write_an_vf(t, uverbs, netvsc):
    """mlx5_an0: a ConnectX-4 Lx VF (15b3:1016), Ethernet at MTU 1500, its netdev enP30832s1 the VF half of
    eth0 (hv_netvsc) [reasoned from the Azure accelerated-networking docs: the VF is enslaved to the synthetic
    interface and carries its traffic]. No NCCL traffic runs over it: the rails are the 8 InfiniBand VFs."""
    vf = g.Dev("7870:00:02.0", 0x15B3, 0x1016, 0x020000, (8.0, 8, 8.0, 8), g.ENDPOINT, numa=0, cpulist=g.CPULIST[0],
               subsystem=(0x15B3, 0x0190))
    g.place(t, "pci7870:00", vf)
    driver_link(t, vf, "mlx5_core")
    vf_net = fr.netdev(t, vf.path, "enP30832s1", 1500, address="00:0d:3a:6e:f1:d2", speed=40000)
    eth0 = fr.netdev(t, VMBUS_NIC, "eth0", 1500, address="00:0d:3a:6e:f1:d2", speed=40000)
    t.symlink(eth0 + "/device", g.rel_link(eth0, VMBUS_NIC))
    t.symlink(VMBUS_NIC + "/driver", g.rel_link(VMBUS_NIC, "/sys/bus/vmbus/drivers/hv_netvsc"))
    if netvsc:
        t.symlink(vf_net + "/master", g.rel_link(vf_net, eth0))
        t.symlink(eth0 + "/lower_enP30832s1", g.rel_link(eth0, vf_net))
    fr.rdma_device(t, vf.path, "mlx5_an0", uverbs, fw_ver="14.32.1010", hca_type="MT4118", board_id="MSF0010110035",
                   guid="000d:3aff:fe6e:f1d2",
                   ports={1: fr.port(state="4: ACTIVE", phys_state="5: LinkUp", rate="40 Gb/sec (4X QDR)",
                                     link_layer="Ethernet", gids=g.roce_gids(0x70, "enP30832s1"))})


AZURE_DMI = ("Microsoft Corporation", "Virtual Machine", "Microsoft Corporation")
GCP_DMI = ("Google", "Google Compute Engine", "Google")

SCENARIOS = {
    "aws-p5en": lambda n: aws(n, **P5EN),
    "aws-p5": lambda n: aws(n, **P5),
    "aws-p5en-efa-unbound": lambda n: aws(n, **P5EN, unbound=(5,)),
    "aws-p5en-no-libfabric-provider": lambda n: aws(n, **P5EN, libfabric=False),
    "aws-p5en-ena-down": lambda n: aws(n, **P5EN, ena_down=(3,)),
    "aws-p5en-read-errors": lambda n: aws(n, **P5EN, efa_counters={7: {"rdma_read_wr_err": 14}}),
    # amzn driver with the proprietary NVIDIA module (no DMA-BUF), no peer provider and no efa_nv_peermem
    "aws-p5en-no-gdr": lambda n: aws(n, **dict(P5EN, driver="proprietary", p2p="", nv_peermem=False)),
    # P5 on the amzn driver with the proprietary NVIDIA module (no DMA-BUF): GPU memory reaches the EFA through
    # the driver's own peer path, via efa_nv_peermem or calling nvidia_p2p_* directly (amzn-drivers efa_nvmem.c)
    # p6-b200: 8 B200, 8 EFA v3 at 400 Gb/s, and two InfiniBand NVLink switch management ConnectX-7 functions
    # (ibp*) beside them, here under GPU 3's and GPU 4's switches (aws/sagemaker-hyperpod-cli#282)
    "aws-p6-b200": lambda n: aws(n, **P6_B200),
    # the same where the VPD cannot be read (not root): the InfiniBand ports beside EFA rails still tell them
    "aws-p6-b200-vpd-unread": lambda n: aws(n, **dict(P6_B200, management_vpd=False)),
    "aws-p5-amzn-peermem": lambda n: aws(n, **dict(P5, efa_driver="amzn", driver="proprietary", p2p="NVIDIA peermem",
                                                   nv_peermem=True)),
    "aws-p5-amzn-nvidia-direct": lambda n: aws(n, **dict(P5, efa_driver="amzn", driver="proprietary", p2p="NVIDIA",
                                                         nv_peermem=False)),
    # 3 minutes after boot, 4 EFAs not yet initialised
    "aws-p5en-late-efa": lambda n: aws(n, **P5EN, efa_missing=4, uptime=187.06),
    "azure-nd-h100-v5": lambda n: vm_node(n, dmi=AZURE_DMI, gpu_device=0x2330, gpu_model="NVIDIA H100 80GB HBM3",
                                          nics=8, an_vf="netvsc"),
    # the same as a container's sysfs may show it: the VF's netdev without its master link
    "azure-nd-h100-v5-an-alone": lambda n: vm_node(n, dmi=AZURE_DMI, gpu_device=0x2330,
                                                   gpu_model="NVIDIA H100 80GB HBM3", nics=8, an_vf="alone"),
    "gcp-a3-ultra": lambda n: vm_node(n, dmi=GCP_DMI, gpu_device=0x2335, gpu_model="NVIDIA H200", nics=8, roce=True,
                                      extra_nics=2),
    "gcp-a3-mega": lambda n: vm_node(n, dmi=GCP_DMI, gpu_device=0x2330, gpu_model="NVIDIA H100 80GB HBM3", nics=0,
                                     extra_nics=9),
}


if __name__ == "__main__":
    g.main(sys.argv[1:], SCENARIOS)
