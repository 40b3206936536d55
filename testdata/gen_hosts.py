#!/usr/bin/env python3
"""Writes the recorded host trees under testdata/hosts/<scenario>/ (Python 3 stdlib only, deterministic).

Each tree holds only the files the probes read, in the kernel's formats (see ../shared/reference/
kernel-interfaces.md): sysfs attributes with a trailing newline, relative sysfs symlinks like the kernel's
(/sys/bus/pci/devices/<bdf> -> ../../../devices/pci0000:xx/.../<bdf>, /sys/class/infiniband/mlx5_0 ->
../../devices/.../infiniband/mlx5_0), and a real binary `config` per PCI function with a valid capability chain
(PM -> MSI -> PCI Express at 0x40/0x50/0x60; AER at 0x100 and, on root and switch ports, ACS at 0x148).

Git keeps no empty directories: an empty /sys/class/infiniband or /sys/kernel/iommu_groups on the real machine
is simply absent here, and the probes treat both the same.

Usage: python3 testdata/gen_hosts.py            (rewrites every scenario)
       python3 testdata/gen_hosts.py NAME...    (only those)
"""

import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hosts")

SPEED_CODE = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

# PCIe port types (PCI Express Capabilities register bits 7:4)
ENDPOINT, ROOT_PORT, SWITCH_UP, SWITCH_DOWN = 0, 4, 5, 6
# ACS control: SrcValid | ReqRedir | CmpltRedir | UpstreamFwd, what Linux sets when an IOMMU is present
ACS_REDIRECT = 0x001D
ACS_OFF = 0x0000


class Tree:
    def __init__(self, name):
        self.root = os.path.join(OUT, name)
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        os.makedirs(self.root)

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def write(self, path, text, newline=True):
        """A sysfs/procfs text file; the kernel ends values with a newline."""
        p = self._p(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text + ("\n" if newline and not text.endswith("\n") else ""))

    def write_bytes(self, path, data):
        p = self._p(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)

    def symlink(self, path, target):
        p = self._p(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(target, p)


def rel_link(from_dir, to_path):
    """Relative target from directory `from_dir` to `to_path` (both host-absolute)."""
    return os.path.relpath(to_path, from_dir)


def speed_text(gts):
    if gts is None:
        return "Unknown"
    return "%.1f GT/s PCIe" % gts


class Dev:
    """One PCI function. `link` = (cur_gts, cur_width, max_gts, max_width) or None (no PCIe capability)."""

    def __init__(self, bdf, vendor, device, cls, link, port_type=None, acs=None, numa=0,
                 cpulist="0-55,112-167", config_len=4096, subsystem=(0, 0), vendor_caps=False):
        self.bdf, self.vendor, self.device, self.cls = bdf, vendor, device, cls
        self.link, self.port_type, self.acs = link, port_type, acs
        self.numa, self.cpulist, self.config_len = numa, cpulist, config_len
        self.subsystem, self.vendor_caps = subsystem, vendor_caps
        self.children = []
        self.path = None  # /sys/devices/...

    def add(self, child):
        self.children.append(child)
        return child

    def bus(self):
        return int(self.bdf.split(":")[1], 16)

    def subtree_buses(self):
        buses = [self.bus()]
        for c in self.children:
            buses += c.subtree_buses()
        return buses

    def is_bridge(self):
        return (self.cls >> 8) == 0x0604

    def config(self):
        b = bytearray(self.config_len)
        struct.pack_into("<HH", b, 0, self.vendor, self.device)
        struct.pack_into("<H", b, 0x04, 0x0006)  # memory space + bus master
        has_caps = self.port_type is not None or self.vendor_caps
        struct.pack_into("<H", b, 0x06, 0x0010 if has_caps else 0)
        b[0x08] = 0x01
        b[0x09], b[0x0A], b[0x0B] = self.cls & 0xFF, (self.cls >> 8) & 0xFF, self.cls >> 16
        b[0x0E] = 0x01 if self.is_bridge() else 0x00
        if self.is_bridge():
            buses = [c.bus() for c in self.children] or [0]
            b[0x18] = self.bus()
            b[0x19] = min(buses)
            b[0x1A] = max(sum((c.subtree_buses() for c in self.children), [0]))
        if self.port_type is not None:
            b[0x34] = 0x40
            b[0x40], b[0x41] = 0x01, 0x50  # power management
            b[0x50], b[0x51] = 0x05, 0x60  # MSI
            b[0x60], b[0x61] = 0x10, 0x00  # PCI Express, end of list
            struct.pack_into("<H", b, 0x62, 0x2 | (self.port_type << 4))
            cur_gts, cur_w, max_gts, max_w = self.link
            max_code = SPEED_CODE[max_gts]
            port_number = int(self.bdf.split(":")[2].split(".")[0], 16)
            struct.pack_into("<I", b, 0x6C, max_code | (max_w << 4) | (port_number << 24))
            cur_code = SPEED_CODE.get(cur_gts, 1)
            dll_active = (1 << 13) if self.port_type in (ROOT_PORT, SWITCH_DOWN) and cur_w else 0
            struct.pack_into("<H", b, 0x72, cur_code | (cur_w << 4) | dll_active)
            struct.pack_into("<I", b, 0x8C, sum(1 << k for k in range(1, max_code + 1)))
            if self.config_len == 4096:
                next_ext = 0x148 if self.acs is not None else 0
                struct.pack_into("<I", b, 0x100, 0x0001 | (2 << 16) | (next_ext << 20))  # AER
                if self.acs is not None:
                    struct.pack_into("<I", b, 0x148, 0x000D | (1 << 16))
                    struct.pack_into("<HH", b, 0x14C, 0x005F, self.acs)
        elif self.vendor_caps:
            # virtio-pci: vendor-specific capabilities (0x09) then MSI-X (0x11), no PCI Express capability
            b[0x34] = 0x40
            for off, nxt in ((0x40, 0x50), (0x50, 0x60), (0x60, 0x70)):
                b[off], b[off + 1], b[off + 2] = 0x09, nxt, 0x10
            b[0x70], b[0x71] = 0x11, 0x00
        return bytes(b)


def place(tree, host_bridge, dev, parent_path=None):
    """Writes `dev` and its subtree under /sys/devices/<host_bridge>/..."""
    base = parent_path or "/sys/devices/" + host_bridge
    dev.path = base + "/" + dev.bdf
    d = dev.path
    tree.write(d + "/class", "0x%06x" % dev.cls)
    tree.write(d + "/vendor", "0x%04x" % dev.vendor)
    tree.write(d + "/device", "0x%04x" % dev.device)
    tree.write(d + "/subsystem_vendor", "0x%04x" % dev.subsystem[0])
    tree.write(d + "/subsystem_device", "0x%04x" % dev.subsystem[1])
    tree.write(d + "/numa_node", str(dev.numa))
    tree.write(d + "/local_cpulist", dev.cpulist)
    if dev.link is not None:
        cur_gts, cur_w, max_gts, max_w = dev.link
        tree.write(d + "/current_link_speed", speed_text(cur_gts))
        tree.write(d + "/current_link_width", str(cur_w))
        tree.write(d + "/max_link_speed", speed_text(max_gts))
        tree.write(d + "/max_link_width", str(max_w))
    tree.write_bytes(d + "/config", dev.config())
    tree.symlink("/sys/bus/pci/devices/" + dev.bdf, rel_link("/sys/bus/pci/devices", d))
    for c in dev.children:
        place(tree, host_bridge, c, d)


# ---------------------------------------------------------------------------------------------------------
# Node-level files


def write_cpuinfo(tree, hypervisor, cpus, model):
    flags = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
             "sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq "
             "ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand")
    if hypervisor:
        flags += " hypervisor"
    flags += " lahf_lm abm 3dnowprefetch avx2 avx512f avx512dq"
    blocks = []
    for i in range(cpus):
        blocks.append("processor\t: %d\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                      "model name\t: %s\nflags\t\t: %s\n" % (i, model, flags))
    tree.write("/proc/cpuinfo", "\n".join(blocks))


def write_modules(tree, modules):
    """modules: list of (name, size, refcount, users, taint, version or None)."""
    lines = []
    for name, size, ref, users, taint, version in modules:
        lines.append("%s %d %s %s Live 0x0000000000000000%s" % (
            name, size, ref, users, " (%s)" % taint if taint else ""))
        d = "/sys/module/" + name
        tree.write(d + "/initstate", "live")
        tree.write(d + "/taint", taint)
        if version:
            tree.write(d + "/version", version)
    tree.write("/proc/modules", "\n".join(lines))


NVIDIA_INFORMATION = (
    "Model: \t\t %s\nIRQ:   \t\t %d\nGPU UUID: \t %s\nVideo BIOS: \t %s\nBus Type: \t PCIe\n"
    "DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\n"
    "GPU Firmware: \t %s\nGPU Excluded:\t No\n"
)


def write_nvidia_gpu(tree, bdf, model, irq, uuid, vbios, minor, firmware):
    tree.write("/proc/driver/nvidia/gpus/%s/information" % bdf,
               NVIDIA_INFORMATION % (model, irq, uuid, vbios, bdf, minor, firmware), newline=False)


NVFS_STATS = (
    "GDS Version: 1.11.1.6 \nNVFS statistics(ver: 4.0)\nNVFS Driver(version: 2.22.3)\n"
    "Mellanox PeerDirect Supported: True\nIO stats: Enabled, peer IO stats: Enabled\nLogging level: info\n\n"
    "Active Shadow-Buffer (MiB): 0\nActive Process: 0\n"
    "Reads\t\t\t\t: n=0 ok=0 err=0 readMiB=0 io_state_err=0\n"
    "Reads\t\t\t\t: Bandwidth(MiB/s)=0 Avg-Latency(usec)=0\n"
    "Writes\t\t\t\t: n=0 ok=0 err=0 writeMiB=0 io_state_err=0 pg-cache=0 pg-cache-fail=0 pg-cache-eio=0\n"
    "Writes\t\t\t\t: Bandwidth(MiB/s)=0 Avg-Latency(usec)=0\n"
    "Mmap\t\t\t\t: n=0 ok=0 err=0 munmap=0\n"
    "Bar1-map\t\t\t: n=0 ok=0 err=0 free=0 callbacks=0 active=0 delay-frees=0\n"
    "Error\t\t\t\t: cpu-gpu-pages=0 sg-ext=0 dma-map=0 dma-ref=0\n"
    "Ops\t\t\t\t: Read=0 Write=0 BatchIO=0\n"
)

# ---------------------------------------------------------------------------------------------------------
# RDMA


PMA_ZERO = ["symbol_error", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
            "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
            "port_rcv_constraint_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
            "VL15_dropped", "link_downed"]
HW_ZERO = ["out_of_buffer", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err",
           "req_cqe_error", "resp_cqe_error", "rx_icrc_encapsulated", "duplicate_request", "implied_nak_seq_err"]


def write_rdma_device(tree, nic, index, uverbs, *, link_layer, port, netdev=None, gids=None, counters=None):
    """port: dict(state, phys_state, rate, lid, sm_lid). gids: list of (gid, type or None, ndev or None)."""
    name = "mlx5_%d" % index
    d = nic.path + "/infiniband/" + name
    tree.write(d + "/node_type", "1: CA")
    tree.write(d + "/fw_ver", "28.39.1002")
    tree.write(d + "/board_id", "MT_0000000838")
    tree.write(d + "/hca_type", "MT4129")
    tree.write(d + "/node_guid", "946d:ae03:00cd:e7%02x" % index)
    tree.write(d + "/sys_image_guid", "946d:ae03:00cd:e7%02x" % index)
    tree.symlink(d + "/device", rel_link(d, nic.path))
    p = d + "/ports/1"
    tree.write(p + "/state", port["state"])
    tree.write(p + "/phys_state", port["phys_state"])
    tree.write(p + "/rate", port["rate"])
    tree.write(p + "/link_layer", link_layer)
    tree.write(p + "/lid", port["lid"])
    tree.write(p + "/sm_lid", port["sm_lid"])
    tree.write(p + "/lid_mask_count", "0")
    tree.write(p + "/sm_sl", "0")
    tree.write(p + "/cap_mask", "0xa751e848" if link_layer == "InfiniBand" else "0x04010000")
    for i, (gid, gtype, ndev) in enumerate(gids or []):
        tree.write(p + "/gids/%d" % i, gid)
        # Empty slots fail with EINVAL on a live system: a recording leaves their attribute files out.
        if gtype:
            tree.write(p + "/gid_attrs/types/%d" % i, gtype)
        if ndev:
            tree.write(p + "/gid_attrs/ndevs/%d" % i, ndev)
    values = dict((c, 0) for c in PMA_ZERO)
    values.update({"port_xmit_wait": 48211, "port_xmit_data": 9187726291, "port_rcv_data": 9187411807,
                   "port_xmit_packets": 38271622, "port_rcv_packets": 38270155})
    values.update(counters or {})
    for c, v in sorted(values.items()):
        tree.write(p + "/counters/" + c, str(v))
    for c in HW_ZERO:
        tree.write(p + "/hw_counters/" + c, "0")
    tree.write(p + "/hw_counters/lifespan", "10")
    tree.symlink("/sys/class/infiniband/" + name, rel_link("/sys/class/infiniband", d))
    v = nic.path + "/infiniband_verbs/uverbs%d" % uverbs
    tree.write(v + "/ibdev", name)
    tree.write(v + "/abi_version", "1")
    tree.symlink("/sys/class/infiniband_verbs/uverbs%d" % uverbs, rel_link("/sys/class/infiniband_verbs", v))
    tree.write("/dev/infiniband/uverbs%d" % uverbs, "", newline=False)
    tree.write("/dev/infiniband/umad%d" % uverbs, "", newline=False)
    if netdev:
        ifname, mtu = netdev
        n = nic.path + "/net/" + ifname
        tree.write(n + "/operstate", "up")
        tree.write(n + "/mtu", str(mtu))
        tree.write(n + "/type", "1")
        tree.write(n + "/speed", "400000")
        tree.write(n + "/address", "94:6d:ae:cd:e7:%02x" % index)
        tree.symlink("/sys/class/net/" + ifname, rel_link("/sys/class/net", n))
    return name


def roce_gids(index, ifname, with_v2=True):
    """Typical bare-metal mlx5 layout: 0 link-local v1, 1 link-local v2, 2 IPv4 v1, 3 IPv4 v2, then empty."""
    ll = "fe80:0000:0000:0000:966d:aeff:fecd:e7%02x" % index
    v4 = "0000:0000:0000:0000:0000:ffff:0a00:%02x01" % index
    empty = "0000:0000:0000:0000:0000:0000:0000:0000"
    gids = [(ll, "IB/RoCE v1", ifname), (ll, "RoCE v2", ifname), (v4, "IB/RoCE v1", ifname),
            (v4, "RoCE v2", ifname)]
    if not with_v2:
        gids = [g if g[1] != "RoCE v2" else (empty, None, None) for g in gids]
    return gids + [(empty, None, None)] * 4


# ---------------------------------------------------------------------------------------------------------
# The HGX-style node: 8 PCIe switches, each with GPU i, NIC i (mlx5_i) and on even i an NVMe drive


SWITCH_BUSES = [0x15, 0x26, 0x37, 0x48, 0x95, 0xA6, 0xB7, 0xC8]
NIC_ALONE_BUSES = [0xD0, 0xD4, 0xD8, 0xDC, 0xE0, 0xE4, 0xE8, 0xEC]
CPULIST = {0: "0-55,112-167", 1: "56-111,168-223"}
GEN5_X16 = (32.0, 16, 32.0, 16)
IB_ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "sm_lid": "0x1"}

DRIVER_VERSION = "550.127.05"
NVRM_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  "
             "(dvs-builder@U16-I3-B03-4-3)  Tue Oct  8 00:40:35 UTC 2024\n"
             "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n" % DRIVER_VERSION)
NVRM_PROPRIETARY = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Oct  8 00:18:26 UTC 2024\n"
                    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n" % DRIVER_VERSION)


def hgx(name, *, driver="open", peermem=True, nvidia_fs=True, kernel="5.15.0-122-generic",
        degraded=(), acs_redirect=(), nic_cross_socket=False, iommu=None, roce=None, port_down=None,
        gpu_link=GEN5_X16, nic_device=0x1021, extra=(), rdma=None):
    """degraded: labels trained to x8 ("GPU3", "NIC5"). gpu_link: what every GPU's link runs at (an idle GPU
    lowers its speed, e.g. (2.5, 16, 32.0, 16)). acs_redirect: DSP bdfs with ReqRedir/CmpltRedir on.
    roce: None for InfiniBand, else dict(mtu=..., no_v2=[nic index]). port_down: NIC index whose port is down.
    iommu: None (no IOMMU: no groups), "identity" (iommu=pt) or "translated" (DMA / DMA-FQ domains).
    nic_device: the rail NICs' PCI device id. extra: more (host bridge, root Dev) subtrees placed with the rest.
    rdma: None for the RDMA devices above, else rdma(tree, rail NICs) writes them instead."""
    t = Tree(name)
    devices = []  # (host_bridge, root dev)
    gpus, nics, nvmes, dsps = [], [], [], []

    def link_for(label, base=GEN5_X16):
        if label in degraded:
            return (base[0], 8, base[2], base[3])
        return base

    # Platform host bridge and the NVSwitch management path (Switchtec ports with ACS on: normal there)
    devices.append(("pci0000:00", Dev("0000:00:00.0", 0x8086, 0x09A2, 0x060000, None, numa=0,
                                      cpulist=CPULIST[0], config_len=256)))
    rp = Dev("0000:05:01.0", 0x8086, 0x352A, 0x060400, (16.0, 4, 16.0, 4), ROOT_PORT, ACS_REDIRECT)
    usp = rp.add(Dev("0000:06:00.0", 0x11F8, 0x4052, 0x060400, (16.0, 4, 16.0, 4), SWITCH_UP))
    for k in range(4):
        dsp = usp.add(Dev("0000:07:%02x.0" % k, 0x11F8, 0x4052, 0x060400, (16.0, 2, 16.0, 2), SWITCH_DOWN,
                          ACS_REDIRECT))
        dsp.add(Dev("0000:%02x:00.0" % (8 + k), 0x10DE, 0x22A3, 0x068000, (16.0, 2, 16.0, 2), ENDPOINT,
                    subsystem=(0x10DE, 0x1796)))
    devices.append(("pci0000:05", rp))

    gpu_numa = (lambda i: 0) if nic_cross_socket else (lambda i: i // 4)
    for i, bus in enumerate(SWITCH_BUSES):
        numa = gpu_numa(i)
        cpus = CPULIST[numa]

        def dev(bdf, vendor, device, cls, link, ptype, acs=None, subsystem=(0, 0)):
            return Dev(bdf, vendor, device, cls, link, ptype, acs, numa=numa, cpulist=cpus, subsystem=subsystem)

        rp = dev("0000:%02x:01.0" % bus, 0x8086, 0x352A, 0x060400, GEN5_X16, ROOT_PORT, ACS_REDIRECT)
        usp = rp.add(dev("0000:%02x:00.0" % (bus + 1), 0x1000, 0xC030, 0x060400, GEN5_X16, SWITCH_UP))

        def dsp(slot, link):
            bdf = "0000:%02x:%02x.0" % (bus + 2, slot)
            d = usp.add(dev(bdf, 0x1000, 0xC030, 0x060400, link, SWITCH_DOWN,
                            ACS_REDIRECT if bdf in acs_redirect else ACS_OFF))
            dsps.append(d)
            return d

        g_link = link_for("GPU%d" % i, gpu_link)
        gpu = dsp(0, (g_link[0], g_link[1], 32.0, 16)).add(
            dev("0000:%02x:00.0" % (bus + 3), 0x10DE, 0x2330, 0x030200, g_link, ENDPOINT,
                subsystem=(0x10DE, 0x16C1)))
        gpus.append(gpu)
        if not nic_cross_socket:
            n_link = link_for("NIC%d" % i)
            nic = dsp(1, (n_link[0], n_link[1], 32.0, 16)).add(
                dev("0000:%02x:00.0" % (bus + 4), 0x15B3, nic_device, 0x020000 if roce else 0x020700, n_link,
                    ENDPOINT, subsystem=(0x15B3, 0x0041)))
            nics.append(nic)
        if i % 2 == 0:
            # A Gen4 drive in a Gen5 x4 slot: runs at 16 GT/s, which is what both ends support
            nvme = dsp(2, (16.0, 4, 32.0, 4)).add(
                dev("0000:%02x:00.0" % (bus + 5), 0x144D, 0xA80A, 0x010802, (16.0, 4, 16.0, 4), ENDPOINT,
                    subsystem=(0x144D, 0xA812)))
            nvmes.append(nvme)
        if i == 0:
            dsp(3, (None, 0, 32.0, 16))  # empty slot: link down, no device
        devices.append(("pci0000:%02x" % bus, rp))

    if nic_cross_socket:
        # Every NIC on its own root port of a host bridge on the other socket
        for i, bus in enumerate(NIC_ALONE_BUSES):
            rp = Dev("0000:%02x:01.0" % bus, 0x8086, 0x352A, 0x060400, GEN5_X16, ROOT_PORT, ACS_REDIRECT,
                     numa=1, cpulist=CPULIST[1])
            nic = rp.add(Dev("0000:%02x:00.0" % (bus + 1), 0x15B3, 0x1021, 0x020000 if roce else 0x020700,
                             GEN5_X16, ENDPOINT, numa=1, cpulist=CPULIST[1], subsystem=(0x15B3, 0x0041)))
            nics.append(nic)
            devices.append(("pci0000:%02x" % bus, rp))

    devices += list(extra)
    for host_bridge, root in devices:
        place(t, host_bridge, root)

    # RDMA devices
    for i, nic in enumerate(nics if rdma is None else ()):
        if roce is None:
            port = dict(IB_ACTIVE, lid="0x%x" % (0x11 + i))
            counters = None
            if port_down == i:
                port = {"state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)",
                        "lid": "0xffff", "sm_lid": "0x0"}
                counters = {"link_downed": 255, "symbol_error": 12}
            write_rdma_device(t, nic, i, i, link_layer="InfiniBand", port=port, counters=counters,
                              gids=[("fe80:0000:0000:0000:946d:ae03:00cd:e7%02x" % i, "IB/RoCE v1", None)])
        else:
            bus = int(nic.bdf.split(":")[1], 16)
            ifname = "enp%ds0np0" % bus
            port = dict(IB_ACTIVE, lid="0x0", sm_lid="0x0")
            write_rdma_device(t, nic, i, i, link_layer="Ethernet", port=port, netdev=(ifname, roce["mtu"]),
                              gids=roce_gids(i, ifname, with_v2=i not in roce.get("no_v2", ())))
    if rdma is not None:
        rdma(t, nics)
    t.write("/sys/class/infiniband_verbs/abi_version", "6")
    t.write("/dev/infiniband/rdma_cm", "", newline=False)

    # IOMMU: one group per endpoint of interest
    cmdline = "BOOT_IMAGE=/vmlinuz-%s root=UUID=4f2b8a4e-63f0-4a39-9d1e-1c9a1f1b7c52 ro" % kernel
    if iommu == "identity":
        cmdline += " intel_iommu=on iommu=pt"
    elif iommu == "translated":
        cmdline += " intel_iommu=on"
    if iommu:
        for n, d in enumerate(gpus + nics + nvmes):
            g = "/sys/kernel/iommu_groups/%d" % (n + 20)
            kind = iommu_type(iommu, d)
            t.write(g + "/type", kind)
            t.symlink(g + "/devices/" + d.bdf, rel_link(g + "/devices", d.path))
    t.write("/proc/cmdline", cmdline + " quiet")
    # Root filesystem on the first NVMe drive, as gds.config and gds.read see it (mount table of the probing
    # process, and the udev record cuFile looks up for the block device).
    t.write("/proc/self/mountinfo",
            "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro")
    t.write("/run/udev/data/b259:2", "E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4")

    # Kernel, CPU, driver
    t.write("/proc/sys/kernel/osrelease", kernel)
    t.write("/proc/sys/kernel/hostname", name)
    write_cpuinfo(t, False, 2, "Intel(R) Xeon(R) Platinum 8480+")
    nvidia_taint = "POE" if driver == "proprietary" else "OE"
    modules = []
    if nvidia_fs:
        modules.append(("nvidia_fs", 262144, 0, "-", "OE", "2.22.3"))
    if peermem:
        modules.append(("nvidia_peermem", 16384, 0, "-", "OE", DRIVER_VERSION))
    users = "nvidia_uvm," + ("nvidia_peermem," if peermem else "")
    modules += [("nvidia_uvm", 4911104, 0, "-", nvidia_taint, None),
                ("nvidia", 54329344, 2 if peermem else 1, users, nvidia_taint, DRIVER_VERSION),
                ("mlx5_ib", 483328, 0, "-", "OE", "24.07-0.6.1"),
                ("ib_uverbs", 196608, 2, "mlx5_ib," + ("nvidia_peermem," if peermem else ""), "OE", None),
                ("ib_core", 507904, 4, "ib_uverbs,mlx5_ib," + ("nvidia_peermem," if peermem else ""), "OE", None),
                ("mlx5_core", 2506752, 1, "mlx5_ib,", "OE", "24.07-0.6.1")]
    write_modules(t, modules)
    t.write("/proc/driver/nvidia/version", NVRM_OPEN if driver == "open" else NVRM_PROPRIETARY, newline=False)
    for i, gpu in enumerate(gpus):
        write_nvidia_gpu(t, gpu.bdf, "NVIDIA H100 80GB HBM3", 180 + i,
                         "GPU-3f1c%04x-9a2b-4c8d-8e7f-0a1b2c3d4e5f" % i, "96.00.99.00.01", i, DRIVER_VERSION)
    if nvidia_fs:
        t.write("/proc/driver/nvidia-fs/version", "version: 2.22")
        t.write("/proc/driver/nvidia-fs/devcount", str(len(gpus)))
        t.write("/proc/driver/nvidia-fs/stats", NVFS_STATS, newline=False)
    return t


def iommu_type(iommu, dev):
    if iommu == "identity":
        return "identity"
    # Translated: the default domain is lazy (DMA-FQ) for most devices; strict DMA on the NVMe drives
    return "DMA" if dev.cls == 0x010802 else "DMA-FQ"


# ---------------------------------------------------------------------------------------------------------
# The H200 VM (../shared/testdata/h200-capture.txt): values as captured. Not captured and reasoned instead:
# config-space contents (virtio functions: 256 bytes of vendor capabilities; the GPU: a PCI Express endpoint),
# /proc/cpuinfo (the hypervisor flag follows from Firecracker / nvidia-smi "Pass-Through"), the hostname.


def h200_vm(name):
    t = Tree(name)
    numa, cpus = -1, "0-15"
    hb = "pci0000:00"
    funcs = [
        Dev("0000:00:00.0", 0x8086, 0x0D57, 0x060000, None, numa=numa, cpulist=cpus, config_len=256),
        Dev("0000:00:01.0", 0x1AF4, 0x1042, 0x018000, None, numa=numa, cpulist=cpus, config_len=256,
            subsystem=(0x1AF4, 0x0002), vendor_caps=True),
        Dev("0000:00:02.0", 0x1AF4, 0x1042, 0x018000, None, numa=numa, cpulist=cpus, config_len=256,
            subsystem=(0x1AF4, 0x0002), vendor_caps=True),
        Dev("0000:00:03.0", 0x1AF4, 0x1041, 0x020000, None, numa=numa, cpulist=cpus, config_len=256,
            subsystem=(0x1AF4, 0x0001), vendor_caps=True),
        Dev("0000:00:04.0", 0x1AF4, 0x1053, 0xFFFF00, None, numa=numa, cpulist=cpus, config_len=256,
            subsystem=(0x1AF4, 0x0013), vendor_caps=True),
        Dev("0000:00:05.0", 0x1AF4, 0x1044, 0xFFFF00, None, numa=numa, cpulist=cpus, config_len=256,
            subsystem=(0x1AF4, 0x0004), vendor_caps=True),
        Dev("0000:00:06.0", 0x10DE, 0x2335, 0x030200, (32.0, 16, 32.0, 16), ENDPOINT, numa=numa, cpulist=cpus,
            subsystem=(0x10DE, 0x18BF)),
    ]
    for f in funcs:
        place(t, hb, f)
    t.write("/proc/modules", "nvidia_uvm 1830912 - - Live 0xffffffffc080c000 (O)\n"
                             "nvidia 14299136 - - Live 0xffffffffc0400000 (O)\n", newline=False)
    t.write("/sys/module/nvidia/version", "580.159.04")
    t.write("/sys/module/nvidia/taint", "O")
    t.write("/sys/module/nvidia_uvm/taint", "O")
    for p in ("netns_mode", "recv_queue_size", "send_queue_size"):
        t.write("/sys/module/ib_core/parameters/" + p, {"netns_mode": "Y"}.get(p, "256"))
    t.write("/sys/module/ib_core/uevent", "", newline=False)
    for p in ("debug_mask", "prof_sel"):
        t.write("/sys/module/mlx5_core/parameters/" + p, {"prof_sel": "2"}.get(p, "0"))
    t.write("/sys/module/mlx5_core/uevent", "", newline=False)
    t.symlink("/sys/module/mlx5_core/drivers/pci:mlx5_core", "../../../bus/pci/drivers/mlx5_core")
    t.write("/sys/module/mlx5_ib/uevent", "", newline=False)
    t.symlink("/sys/module/mlx5_ib/drivers/auxiliary:mlx5_ib.rdma", "../../../bus/auxiliary/drivers/mlx5_ib.rdma")
    t.write("/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n"
            "GCC version:  gcc version 15.3.0 (GCC) \n", newline=False)
    write_nvidia_gpu(t, "0000:00:06.0", "NVIDIA H200", 41, "GPU-0cb02a0f-76da-8f49-2381-04795573d342",
                     "96.00.a5.00.1a", 0, "580.159.04")
    t.write("/sys/class/infiniband_verbs/abi_version", "6")
    t.write("/dev/infiniband/rdma_cm", "", newline=False)
    t.write("/proc/cmdline", "swiotlb=noforce pci=realloc=off")
    t.write("/proc/sys/kernel/osrelease", "6.18.44-fc-v657-gpu")
    t.write("/proc/sys/kernel/hostname", name)
    write_cpuinfo(t, True, 16, "Intel(R) Xeon(R) Platinum 8480+")
    return t


SCENARIOS = {
    "hgx-healthy": lambda n: hgx(n),
    "ib-port-down": lambda n: hgx(n, port_down=3),
    "link-degraded-x8": lambda n: hgx(n, degraded=("GPU3", "NIC5")),
    "acs-redirect": lambda n: hgx(n, acs_redirect=("0000:17:00.0", "0000:39:01.0")),
    "roce-mtu-1500": lambda n: hgx(n, roce={"mtu": 1500, "no_v2": (7,)}),
    "nic-cross-socket": lambda n: hgx(n, nic_cross_socket=True),
    "iommu-translated": lambda n: hgx(n, iommu="translated"),
    "peermem-missing-proprietary": lambda n: hgx(n, driver="proprietary", peermem=False),
    "dmabuf-only": lambda n: hgx(n, driver="open", peermem=False, kernel="6.8.0-45-generic"),
    # Also the passthrough IOMMU case (iommu=pt, identity domains), which must not change any verdict
    "nvidia-fs-missing": lambda n: hgx(n, nvidia_fs=False, iommu="identity"),
    "h200-vm-no-rdma": h200_vm,
}


def main(argv, scenarios=None):
    """Writes the named scenarios (all of them without names) of `scenarios`: this file's, or a generator's that
    imports it."""
    scenarios = SCENARIOS if scenarios is None else scenarios
    names = argv or sorted(scenarios)
    for n in names:
        if n not in scenarios:
            sys.exit("unknown scenario %s (known: %s)" % (n, ", ".join(sorted(scenarios))))
        scenarios[n](n)
        print("wrote", os.path.relpath(os.path.join(OUT, n)))


if __name__ == "__main__":
    main(sys.argv[1:])
