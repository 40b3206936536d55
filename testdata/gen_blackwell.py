#!/usr/bin/env python3
"""Blackwell- and Grace-generation nodes as recorded trees (issue 31, parts 2, 3 and 7): HGX B200 with
InfiniBand rails, HGX B300 with ConnectX-8 SuperNICs (the GPU behind the SuperNIC's own PCIe switch), GB200 NVL72
compute trays in their InfiniBand and Spectrum-X RoCE forms, a GH200 server, a node no profile fits, and the
broken classes of each. BlueField-3 storage/front-end ports sit beside the rails on every bare-metal node, as
they do on the machines. Written with gen_hosts.py's helpers; nothing is copied from a capture (the shapes
studied are listed in testdata/README.md, section "blackwell-profiles").

Shapes, each with what it re-enacts:
- HGX B200: root port -> ConnectX-7 PCIe switch (15b3:1979) -> ConnectX-7 NIC (15b3:1021), and through a second
  bridge pair the B200 (10de:2901): GPU <-> rail PXB (NVIDIA/gpu-admin-tools pci/cx7.py). GPUs at Gen5 x16 on
  a Gen5 platform. Two dual-port BlueField-3 (15b3:a2dc) on CPU root ports, 400GbE each port: storage/front end (DGX B200 datasheet).
- HGX B300: the B300 (10de:3182) hangs off the ConnectX-8's integrated switch (bridges 15b3:197c): Gen5 x16
  uplink to the CPU, Gen6 x16 inside, to the GPU and to the NIC function (15b3:1023) one bridge pair further
  (GPU <-> CX-8 PXB, 8 x 800G XDR: deepseek-ai/DeepEP#590; switch speeds: blackwell-and-fleet.md section 5).
- GB200 tray: two Grace CPUs (aarch64), one PCI segment per root port; GPUs (10de:2941) at 0008/0009/0018/0019
  :01:00.0 (NVIDIA/nccl#1769), NICs on segments of their own, so every GPU <-> NIC distance crosses the Grace
  (NODE on its own Grace); rails named so that GPU 0->mlx5_0, 1->mlx5_1, 2->mlx5_3, 3->mlx5_4
  (NVIDIA/nvidia-resiliency-ext#152); one BlueField-3 per Grace, its two ports bonded (mlx5_bond_N). GPU memory
  is a NUMA node of its own on Grace (NUMA ids 2/10/18/26 of nvidia-smi topo, sgl-project/sglang#11208): the
  PCI functions' numa_node is the Grace's.
- GH200: one Grace Hopper superchip (10de:2342), one ConnectX-7 NDR port and a BlueField-3 front-end port.

Usage: python3 testdata/gen_blackwell.py [NAME...]
"""

import json
import os
import sys

import gen_hosts as g
from gen_fleet_pcie import RECORDED, remap_answers
from gen_fleet_rdma import ACTIVE, Uverbs, netdev, port, rdma_device

GEN5_X16 = (32.0, 16, 32.0, 16)
GEN6_X16 = (64.0, 16, 64.0, 16)
NDR = "400 Gb/sec (4X NDR)"
XDR = "800 Gb/sec (4X XDR)"
DOWN = {"state": "1: DOWN", "phys_state": "2: Polling"}
DRIVER = "570.133.20"
X86_CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}
GRACE_CPUS = {0: "0-71", 1: "72-143"}


def dev(bdf, vendor, device, cls, link, ptype, cpus, numa, acs=None, subsystem=(0, 0)):
    return g.Dev(bdf, vendor, device, cls, link, ptype, acs, numa=numa, cpulist=cpus[numa], subsystem=subsystem)


def bridge(bdf, vendor, device, link, ptype, cpus, numa, acs=g.ACS_OFF):
    return dev(bdf, vendor, device, 0x060400, link, ptype, cpus, numa, acs)


def ib_port(index, *, rate=NDR, down=False):
    state = DOWN if down else ACTIVE
    return port(rate="10 Gb/sec (4X SDR)" if down else rate, link_layer="InfiniBand",
                lid="0xffff" if down else "0x%x" % (0x11 + index), sm_lid="0x0" if down else "0x1",
                gids=[("fe80:0000:0000:0000:b83f:d203:00a1:%02x%02x" % (index, index), "IB/RoCE v1", None)],
                counters={"link_downed": 3} if down else "zero", **state)


def roce_port(t, fn, index, ifname, *, rate=NDR, mtu=9000):
    netdev(t, fn.path, ifname, mtu, address="b8:3f:d2:a1:%02x:%02x" % (index, index), speed=400000)
    return port(rate=rate, link_layer="Ethernet", gids=g.roce_gids(index, ifname), **ACTIVE)


def bf3_bond(t, pfs, name, uverbs, index):
    """A BlueField-3's two 200GbE PFs in a RoCE LAG: one RDMA device on PF0, its GIDs on the bond."""
    bond = "bond%d" % index
    for k, pf in enumerate(pfs):
        netdev(t, pf.path, "enP%dp%ds0f%dnp%d" % (segment_of(pf), pf.bus(), k, k), 9000,
               address="a0:88:c2:4e:%02x:%02x" % (index, k), speed=200000)
    netdev(t, "/sys/devices/virtual", bond, 9000, address="a0:88:c2:4e:%02x:00" % index, speed=400000)
    gids = [(gid, gt, bond if nd else None) for gid, gt, nd in g.roce_gids(0x60 + index, bond)]
    rdma_device(t, pfs[0].path, name, uverbs.take(), fw_ver="32.43.1014", hca_type="MT41692",
                board_id="MT_0000001093", guid="a088:c203:004e:%02x00" % index,
                ports={1: port(rate=NDR, link_layer="Ethernet", gids=gids, **ACTIVE)})


def bf3_single(t, pf, name, uverbs, index):
    """A BlueField-3 400GbE port used alone (storage/front end)."""
    ifname = "ens%df%dnp%d" % (pf.bus(), index % 2, index % 2)
    rdma_device(t, pf.path, name, uverbs.take(), fw_ver="32.43.1014", hca_type="MT41692",
                board_id="MT_0000001093", guid="a088:c203:004e:%02x00" % index,
                ports={1: roce_port(t, pf, 0x60 + index, ifname)})


def segment_of(d):
    """The PCI segment of a function (Grace trays put each root port on one of its own)."""
    return int(d.bdf.split(":")[0], 16)


CUFILE = """{
    "logging": { "dir": "/var/log/cufile", "level": "ERROR" },
    "properties": { "allow_compat_mode": false, "rdma_dev_addr_list": [] }
}
"""


def write_node(t, *, name, arch, cpu_model, cpus, gpus, gpu_name, cmdline_extra=""):
    kernel = "6.8.0-1021-nvidia-64k" if arch == "aarch64" else "6.8.0-57-generic"
    t.write("/sys/class/infiniband_verbs/abi_version", "6")
    t.write("/dev/infiniband/rdma_cm", "", newline=False)
    t.write("/proc/cmdline", "BOOT_IMAGE=/vmlinuz-%s root=UUID=9d1f5a2e-4b7c-4e8f-a1d2-3c4b5a6d7e8f ro%s quiet"
            % (kernel, cmdline_extra))
    t.write("/proc/self/mountinfo", "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw")
    t.write("/run/udev/data/b259:2", "E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4")
    t.write("/proc/sys/kernel/osrelease", kernel)
    t.write("/proc/sys/kernel/hostname", name)
    t.write("/proc/uptime", "86231.52 15521673.60")
    t.write("/etc/cufile.json", CUFILE, newline=False)
    if arch == "aarch64":
        write_grace_cpuinfo(t, cpus)
    else:
        g.write_cpuinfo(t, False, 2, cpu_model)
    modules = [("nvidia_fs", 262144, 0, "-", "OE", "2.24.2"),
               ("nvidia_peermem", 16384, 0, "-", "OE", DRIVER),
               ("nvidia_uvm", 4911104, 0, "-", "OE", None),
               ("nvidia", 54329344, 2, "nvidia_uvm,nvidia_peermem,", "OE", DRIVER),
               ("mlx5_ib", 483328, 0, "-", "OE", "25.01-0.6.0"),
               ("ib_uverbs", 196608, 2, "mlx5_ib,nvidia_peermem,", "OE", None),
               ("ib_core", 507904, 4, "ib_uverbs,mlx5_ib,nvidia_peermem,", "OE", None),
               ("mlx5_core", 2506752, 1, "mlx5_ib,", "OE", "25.01-0.6.0")]
    g.write_modules(t, modules)
    t.write("/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for %s  %s  Release Build  (dvs-builder@U22-I3-AE18-09-1)"
            "  Fri Mar 14 01:20:51 UTC 2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"
            % (arch, DRIVER), newline=False)
    for i, gpu in enumerate(gpus):
        g.write_nvidia_gpu(t, gpu.bdf, gpu_name, 180 + i, "GPU-b1a7%04x-5c2d-4e6f-8a9b-0c1d2e3f4a5b" % i,
                           "97.00.4d.00.01", i, DRIVER)
        t.symlink(gpu.path + "/driver", g.rel_link(gpu.path, "/sys/bus/pci/drivers/nvidia"))
    t.write("/proc/driver/nvidia-fs/version", "version: 2.24")
    t.write("/proc/driver/nvidia-fs/devcount", str(len(gpus)))
    t.write("/proc/driver/nvidia-fs/stats", g.NVFS_STATS, newline=False)


def write_grace_cpuinfo(t, cpus):
    """aarch64 /proc/cpuinfo of a Neoverse V2 (Grace): no `model name`, no `flags`, no hypervisor flag."""
    blocks = []
    for i in range(cpus):
        blocks.append("processor\t: %d\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
                      "atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve "
                      "asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes svepmull svebitperm "
                      "svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti\nCPU implementer\t: 0x41\n"
                      "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n" % i)
    t.write("/proc/cpuinfo", "\n".join(blocks))


def gpu_numa_nodes(t, first, per_gpu=8, gpus=4):
    """GPU memory as CPU-less NUMA nodes after the Graces' (nvidia-smi topo: GPU NUMA ID 2/10/18/26)."""
    for k in range(gpus):
        node = first + k * per_gpu
        t.write("/sys/devices/system/node/node%d/cpulist" % node, "")
    for n, cpus in GRACE_CPUS.items():
        t.write("/sys/devices/system/node/node%d/cpulist" % n, cpus)


# ---------------------------------------------------------------------------------------------------------
# x86 HGX boards


HGX_BUSES = [0x15, 0x26, 0x37, 0x48, 0x95, 0xA6, 0xB7, 0xC8]
STORAGE_BUSES = ((0x50, 0), (0xD0, 1))


def hgx(name, *, gpu, rail_down=None, gpu_link=None, storage="single"):
    """gpu: "b200" or "b300". rail_down: index of a rail whose port is down. gpu_link: (rail index, link) for a GPU
    trained below its maximum."""
    t = g.Tree(name)
    roots, gpus, nics, bf3 = [], [], [], []
    for i, bus in enumerate(HGX_BUSES):
        numa = i // 4
        rp = bridge("0000:%02x:01.0" % bus, 0x8086, 0x352A, GEN5_X16, g.ROOT_PORT, X86_CPUS, numa, g.ACS_REDIRECT)
        link = gpu_link[1] if gpu_link and gpu_link[0] == i else None
        if gpu == "b200":
            usp = rp.add(bridge("0000:%02x:00.0" % (bus + 1), 0x15B3, 0x1979, GEN5_X16, g.SWITCH_UP, X86_CPUS, numa))
            dsp_nic = usp.add(bridge("0000:%02x:00.0" % (bus + 2), 0x15B3, 0x1979, GEN5_X16, g.SWITCH_DOWN,
                                     X86_CPUS, numa))
            nic = dsp_nic.add(dev("0000:%02x:00.0" % (bus + 3), 0x15B3, 0x1021, 0x020700, GEN5_X16, g.ENDPOINT,
                                  X86_CPUS, numa, subsystem=(0x15B3, 0x0041)))
            dsp_gpu = usp.add(bridge("0000:%02x:01.0" % (bus + 2), 0x15B3, 0x1979, GEN5_X16, g.SWITCH_DOWN,
                                     X86_CPUS, numa))
            usp2 = dsp_gpu.add(bridge("0000:%02x:00.0" % (bus + 4), 0x1000, 0xC030, GEN5_X16, g.SWITCH_UP,
                                      X86_CPUS, numa))
            dsp2 = usp2.add(bridge("0000:%02x:00.0" % (bus + 5), 0x1000, 0xC030, GEN5_X16, g.SWITCH_DOWN,
                                   X86_CPUS, numa))
            gpus.append(dsp2.add(dev("0000:%02x:00.0" % (bus + 6), 0x10DE, 0x2901, 0x030200, link or GEN5_X16,
                                     g.ENDPOINT, X86_CPUS, numa, subsystem=(0x10DE, 0x1999))))
        else:
            # ConnectX-8 SuperNIC: its switch's upstream port trains Gen5 x16 to the CPU; inside, Gen6 x16
            usp = rp.add(bridge("0000:%02x:00.0" % (bus + 1), 0x15B3, 0x197C, (32.0, 16, 64.0, 16), g.SWITCH_UP,
                                X86_CPUS, numa))
            dsp_gpu = usp.add(bridge("0000:%02x:00.0" % (bus + 2), 0x15B3, 0x197C, GEN6_X16, g.SWITCH_DOWN,
                                     X86_CPUS, numa))
            gpus.append(dsp_gpu.add(dev("0000:%02x:00.0" % (bus + 3), 0x10DE, 0x3182, 0x030200, link or GEN6_X16,
                                        g.ENDPOINT, X86_CPUS, numa, subsystem=(0x10DE, 0x2101))))
            dsp_nic = usp.add(bridge("0000:%02x:01.0" % (bus + 2), 0x15B3, 0x197C, GEN6_X16, g.SWITCH_DOWN,
                                     X86_CPUS, numa))
            usp2 = dsp_nic.add(bridge("0000:%02x:00.0" % (bus + 4), 0x15B3, 0x197C, GEN6_X16, g.SWITCH_UP,
                                      X86_CPUS, numa))
            dsp2 = usp2.add(bridge("0000:%02x:00.0" % (bus + 5), 0x15B3, 0x197C, GEN6_X16, g.SWITCH_DOWN,
                                   X86_CPUS, numa))
            nic = dsp2.add(dev("0000:%02x:00.0" % (bus + 6), 0x15B3, 0x1023, 0x020700, GEN6_X16, g.ENDPOINT,
                               X86_CPUS, numa, subsystem=(0x15B3, 0x0071)))
        nics.append(nic)
        roots.append(("pci0000:%02x" % bus, rp))
    for bus, numa in STORAGE_BUSES:
        rp = bridge("0000:%02x:01.0" % bus, 0x8086, 0x352A, GEN5_X16, g.ROOT_PORT, X86_CPUS, numa, g.ACS_REDIRECT)
        # A dual-port BlueField-3: one PCI function and one RDMA device per port
        bf3 += [rp.add(dev("0000:%02x:00.%d" % (bus + 1, fn), 0x15B3, 0xA2DC, 0x020000, GEN5_X16, g.ENDPOINT,
                           X86_CPUS, numa, subsystem=(0x15B3, 0x0051))) for fn in (0, 1)]
        roots.append(("pci0000:%02x" % bus, rp))
    for hb, root in roots:
        g.place(t, hb, root)
    uverbs = Uverbs()
    rate = NDR if gpu == "b200" else XDR
    for i, nic in enumerate(nics):
        rdma_device(t, nic.path, "mlx5_%d" % i, uverbs.take(), fw_ver="28.43.2026" if gpu == "b200" else "40.44.1036",
                    hca_type="MT4129" if gpu == "b200" else "MT4131", board_id="MT_0000000838",
                    guid="b83f:d203:00a1:%02x%02x" % (i, i), ports={1: ib_port(i, rate=rate, down=rail_down == i)})
    for k, pf in enumerate(bf3):
        bf3_single(t, pf, "mlx5_%d" % (8 + k), uverbs, k)
    model = "NVIDIA B200" if gpu == "b200" else "NVIDIA B300 SXM6 AC"
    write_node(t, name=name, arch="x86_64", cpu_model="INTEL(R) XEON(R) PLATINUM 8570", cpus=2, gpus=gpus,
               gpu_name=model)
    if gpu == "b300":
        write_gen6_answers(t, gpus, model, gpu_link)
    return t


def write_gen6_answers(t, gpus, model, trained_down):
    """NVML and CUDA answers for GPUs on Gen6 x16 ports: the 8x H100 recording (gpu-8x-h100-answers) moved to these
    GPUs, with the PCIe readings NVML gives a Gen6 GPU on a Gen6 port (its maximum the port's, not the uplink's:
    nvmlDeviceGetMaxPcieLinkGeneration is the device's link with the bus it is attached to). trained_down: (GPU
    index, (gt/s, width, ...)) read so idle and under load; the others run Gen6 x16 under load."""
    with open(RECORDED, encoding="utf-8") as f:
        answers = remap_answers(json.load(f), [gpu.bdf for gpu in gpus], DRIVER)
    gen = {32.0: 5, 64.0: 6}
    links = {}
    for i, gpu in enumerate(gpus):
        link = trained_down[1] if trained_down and trained_down[0] == i else GEN6_X16
        links[gpu.bdf] = (gen[link[0]], link[1], int(link[0] * 1000))
    for gpu in answers["nvml"]["gpus"]:
        g_now, w_now, mts = links[gpu["pci_bus_id"]["Ok"]]
        gpu["name"] = {"Ok": model}
        gpu.update({"pcie_gen_current": {"Ok": g_now}, "pcie_gen_max": {"Ok": 6}, "pcie_gen_gpu_max": {"Ok": 6},
                    "pcie_width_current": {"Ok": w_now}, "pcie_width_max": {"Ok": 16},
                    "pcie_speed_current_mts": {"Ok": mts}, "pcie_speed_max_mts": {"Ok": 64000},
                    "memory_total_bytes": {"Ok": 288 * 2**30}})
    for sample in answers["nvml.pcie_under_load"]["nvml"]["Ok"]:
        g_now, w_now, mts = links[sample["pci_bus_id"]["Ok"]]
        sample.update({"gen": {"Ok": g_now}, "width": {"Ok": w_now}, "speed_mts": {"Ok": mts}})
    for sample in answers["nvml.pcie_under_load"]["sysfs"]:
        g_now, w_now, mts = links[sample[0]]
        sample[1], sample[2] = "%.1f GT/s PCIe" % (mts / 1000), str(w_now)
    for gpu in answers["cuda.copy"]["gpus"]:
        gpu["name"] = {"Ok": model}
    with open(os.path.join(t.root, "vendor-answers.json"), "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------------------------------------
# Grace trays: GB200 NVL72 compute tray, GH200 server


GRACE_RP = (0x10DE, 0x22B2)


def segment_root(domain, numa, link=GEN5_X16):
    return bridge("%04x:00:00.0" % domain, GRACE_RP[0], GRACE_RP[1], link, g.ROOT_PORT, GRACE_CPUS, numa)


def grace_bf3(rp, domain, numa):
    """A Grace tray's BlueField-3: its two 400GbE PFs on segment `domain`'s root port (front end, storage)."""
    return [rp.add(dev("%04x:01:00.%d" % (domain, fn), 0x15B3, 0xA2DC, 0x020000, GEN5_X16, g.ENDPOINT, GRACE_CPUS,
                       numa, subsystem=(0x15B3, 0x0051))) for fn in (0, 1)]


def gb200_tray(name, *, fabric="ib", rail_down=None):
    """Four GB200 GPUs, four rails (ConnectX-7 NDR InfiniBand, or Spectrum-X: the same NICs' 400GbE RoCE ports
    on segments of their own), one BlueField-3 per Grace with its ports bonded (front end, storage)."""
    t = g.Tree(name)
    roots, gpus, rails, bf3 = [], [], [], []
    # GPUs: one segment each; NVML's busId 0x801000 = 0008:01:00.0
    for k, domain in enumerate((0x0008, 0x0009, 0x0018, 0x0019)):
        numa = k // 2
        rp = segment_root(domain, numa)
        gpus.append(rp.add(dev("%04x:01:00.0" % domain, 0x10DE, 0x2941, 0x030200, GEN5_X16, g.ENDPOINT,
                               GRACE_CPUS, numa, subsystem=(0x10DE, 0x2046))))
        roots.append(("pci%04x:00" % domain, rp))
    # Rails and BlueField-3s in PCI order: rails 0,1 and BF3 0 on Grace 0, rails 2,3 and BF3 1 on Grace 1
    layout = [(0x0000, "rail"), (0x0002, "rail"), (0x0006, "bf3"), (0x0010, "rail"), (0x0012, "rail"),
              (0x0016, "bf3")]
    for domain, what in layout:
        numa = 0 if domain < 0x10 else 1
        rp = segment_root(domain, numa)
        if what == "rail":
            rails.append(rp.add(dev("%04x:01:00.0" % domain, 0x15B3, 0x1021,
                                    0x020700 if fabric == "ib" else 0x020000, GEN5_X16, g.ENDPOINT, GRACE_CPUS, numa,
                                    subsystem=(0x15B3, 0x0041))))
        else:
            bf3.append(grace_bf3(rp, domain, numa))
        roots.append(("pci%04x:00" % domain, rp))
    for hb, root in roots:
        g.place(t, hb, root)
    uverbs = Uverbs()
    # mlx5 numbers follow PCI order: mlx5_0, mlx5_1 (Grace 0 rails), mlx5_2, mlx5_3 (Grace 1 rails) here, since
    # the BlueField-3 PFs form bonds named mlx5_bond_N
    for i, nic in enumerate(rails):
        if fabric == "ib":
            p = ib_port(i, down=rail_down == i)
        else:
            p = roce_port(t, nic, i, "enP%dp1s0np0" % segment_of(nic))
        rdma_device(t, nic.path, "mlx5_%d" % i, uverbs.take(), fw_ver="28.43.2026", hca_type="MT4129",
                    board_id="MT_0000000838", guid="b83f:d203:00a1:%02x%02x" % (i, i), ports={1: p})
    for k, pfs in enumerate(bf3):
        bf3_bond(t, pfs, "mlx5_bond_%d" % k, uverbs, k)
    gpu_numa_nodes(t, 2)
    write_node(t, name=name, arch="aarch64", cpu_model=None, cpus=2, gpus=gpus, gpu_name="NVIDIA GB200",
               cmdline_extra=" init_on_alloc=0")
    return t


def gb300_tray(name, *, gpu_link=None):
    """Four GB300 GPUs, each behind a ConnectX-8 whose switch shows on two segments: the GPU's (the GPU and the
    CX-8's Data Direct DMA function `15b3:2100`, Gen6 inside, Gen5 x16 up to the Grace) and the NIC PF's (XDR IB
    rail). Grace has no PCIe ATS, so the NIC reaches GPU memory through the DMA function; mlx5's Data Direct PCI
    driver binds it and it carries no RDMA device or netdev of its own.
    gpu_link: (GPU index, link) for a GPU trained below its Gen6 x16."""
    t = g.Tree(name)
    roots, gpus, rails, bf3, dma = [], [], [], [], []
    pairs = [(0x0008, 0x0000, 0), (0x0009, 0x0002, 0), (0x0018, 0x0010, 1), (0x0019, 0x0012, 1)]
    for k, (gpu_seg, nic_seg, numa) in enumerate(pairs):
        rp = segment_root(gpu_seg, numa)
        usp = rp.add(bridge("%04x:01:00.0" % gpu_seg, 0x15B3, 0x197C, (32.0, 16, 64.0, 16), g.SWITCH_UP,
                            GRACE_CPUS, numa))
        dsp = usp.add(bridge("%04x:02:00.0" % gpu_seg, 0x15B3, 0x197C, GEN6_X16, g.SWITCH_DOWN, GRACE_CPUS, numa))
        dma.append(dsp.add(dev("%04x:03:00.0" % gpu_seg, 0x15B3, 0x2100, 0x020000, GEN6_X16, g.ENDPOINT, GRACE_CPUS,
                               numa, subsystem=(0x15B3, 0x0071))))
        dsp = usp.add(bridge("%04x:02:01.0" % gpu_seg, 0x15B3, 0x197C, GEN6_X16, g.SWITCH_DOWN, GRACE_CPUS, numa))
        usp2 = dsp.add(bridge("%04x:04:00.0" % gpu_seg, 0x15B3, 0x197C, GEN6_X16, g.SWITCH_UP, GRACE_CPUS, numa))
        dsp2 = usp2.add(bridge("%04x:05:00.0" % gpu_seg, 0x15B3, 0x197C, GEN6_X16, g.SWITCH_DOWN, GRACE_CPUS,
                               numa))
        link = gpu_link[1] if gpu_link and gpu_link[0] == k else GEN6_X16
        gpus.append(dsp2.add(dev("%04x:06:00.0" % gpu_seg, 0x10DE, 0x31C2, 0x030200, link, g.ENDPOINT,
                                 GRACE_CPUS, numa, subsystem=(0x10DE, 0x2110))))
        roots.append(("pci%04x:00" % gpu_seg, rp))
        rp = segment_root(nic_seg, numa)
        usp = rp.add(bridge("%04x:01:00.0" % nic_seg, 0x15B3, 0x197C, (32.0, 16, 64.0, 16), g.SWITCH_UP,
                            GRACE_CPUS, numa))
        dsp = usp.add(bridge("%04x:02:00.0" % nic_seg, 0x15B3, 0x197C, GEN6_X16, g.SWITCH_DOWN, GRACE_CPUS, numa))
        rails.append(dsp.add(dev("%04x:03:00.0" % nic_seg, 0x15B3, 0x1023, 0x020700, GEN6_X16, g.ENDPOINT,
                                 GRACE_CPUS, numa, subsystem=(0x15B3, 0x0071))))
        roots.append(("pci%04x:00" % nic_seg, rp))
    for domain, numa in ((0x0006, 0), (0x0016, 1)):
        rp = segment_root(domain, numa)
        bf3.append(grace_bf3(rp, domain, numa))
        roots.append(("pci%04x:00" % domain, rp))
    for hb, root in roots:
        g.place(t, hb, root)
    uverbs = Uverbs()
    for i, nic in enumerate(rails):
        rdma_device(t, nic.path, "mlx5_%d" % i, uverbs.take(), fw_ver="40.44.1036", hca_type="MT4131",
                    board_id="MT_0000001070", guid="b83f:d203:00a1:%02x%02x" % (i, i), ports={1: ib_port(i, rate=XDR)})
        t.symlink(nic.path + "/driver", g.rel_link(nic.path, "/sys/bus/pci/drivers/mlx5_core"))
    for f in dma:
        t.symlink(f.path + "/driver", g.rel_link(f.path, "/sys/bus/pci/drivers/mlx5_data_direct"))
    for k, pfs in enumerate(bf3):
        bf3_bond(t, pfs, "mlx5_bond_%d" % k, uverbs, k)
    gpu_numa_nodes(t, 2)
    write_node(t, name=name, arch="aarch64", cpu_model=None, cpus=2, gpus=gpus, gpu_name="NVIDIA GB300",
               cmdline_extra=" init_on_alloc=0")
    return t


def gh200(name):
    """One GH200 superchip: the Hopper GPU on segment 0009, a ConnectX-7 NDR port and a BlueField-3 port."""
    t = g.Tree(name)
    roots = []
    rp = segment_root(0x0009, 0)
    gpu = rp.add(dev("0009:01:00.0", 0x10DE, 0x2342, 0x030200, GEN5_X16, g.ENDPOINT, GRACE_CPUS, 0,
                     subsystem=(0x10DE, 0x16EB)))
    roots.append(("pci0009:00", rp))
    rp = segment_root(0x0000, 0)
    nic = rp.add(dev("0000:01:00.0", 0x15B3, 0x1021, 0x020700, GEN5_X16, g.ENDPOINT, GRACE_CPUS, 0,
                     subsystem=(0x15B3, 0x0041)))
    roots.append(("pci0000:00", rp))
    rp = segment_root(0x0002, 0)
    pf = rp.add(dev("0002:01:00.0", 0x15B3, 0xA2DC, 0x020000, GEN5_X16, g.ENDPOINT, GRACE_CPUS, 0,
                    subsystem=(0x15B3, 0x0051)))
    roots.append(("pci0002:00", rp))
    for hb, root in roots:
        g.place(t, hb, root)
    uverbs = Uverbs()
    rdma_device(t, nic.path, "mlx5_0", uverbs.take(), fw_ver="28.43.2026", hca_type="MT4129",
                board_id="MT_0000000838", guid="b83f:d203:00a1:0000", ports={1: ib_port(0)})
    bf3_single(t, pf, "mlx5_1", uverbs, 0)
    # GH200: 72 cores on node 0, the HBM on node 1, nodes 2-8 CPU-less (MIG memory partitions)
    t.write("/sys/devices/system/node/node0/cpulist", "0-71")
    for n in range(1, 9):
        t.write("/sys/devices/system/node/node%d/cpulist" % n, "")
    write_node(t, name=name, arch="aarch64", cpu_model=None, cpus=2, gpus=[gpu], gpu_name="NVIDIA GH200 480GB",
               cmdline_extra=" init_on_alloc=0")
    return t


def unknown_gpu(name):
    """No profile fits: eight RTX PRO 6000 Blackwell Server cards (10de:2bb5, PCIe) with ConnectX-8 SuperNICs in
    Ethernet mode. auto must not hand it a B200/B300 board's profile."""
    t = g.Tree(name)
    roots, gpus, nics = [], [], []
    for i, bus in enumerate(HGX_BUSES):
        numa = i // 4
        rp = bridge("0000:%02x:01.0" % bus, 0x8086, 0x352A, GEN5_X16, g.ROOT_PORT, X86_CPUS, numa, g.ACS_REDIRECT)
        usp = rp.add(bridge("0000:%02x:00.0" % (bus + 1), 0x15B3, 0x197C, (32.0, 16, 64.0, 16), g.SWITCH_UP,
                            X86_CPUS, numa))
        dsp = usp.add(bridge("0000:%02x:00.0" % (bus + 2), 0x15B3, 0x197C, GEN5_X16, g.SWITCH_DOWN, X86_CPUS, numa))
        gpus.append(dsp.add(dev("0000:%02x:00.0" % (bus + 3), 0x10DE, 0x2BB5, 0x030000, GEN5_X16, g.ENDPOINT,
                                X86_CPUS, numa, subsystem=(0x10DE, 0x204E))))
        dsp = usp.add(bridge("0000:%02x:01.0" % (bus + 2), 0x15B3, 0x197C, GEN5_X16, g.SWITCH_DOWN, X86_CPUS, numa))
        nics.append(dsp.add(dev("0000:%02x:00.0" % (bus + 4), 0x15B3, 0x1023, 0x020000, GEN5_X16, g.ENDPOINT,
                                X86_CPUS, numa, subsystem=(0x15B3, 0x0071))))
        roots.append(("pci0000:%02x" % bus, rp))
    for hb, root in roots:
        g.place(t, hb, root)
    uverbs = Uverbs()
    for i, nic in enumerate(nics):
        rdma_device(t, nic.path, "mlx5_%d" % i, uverbs.take(), fw_ver="40.44.1036", hca_type="MT4131",
                    board_id="MT_0000001070", guid="b83f:d203:00a1:%02x%02x" % (i, i),
                    ports={1: roce_port(t, nic, i, "ens%dnp0" % nic.bus())})
    write_node(t, name=name, arch="x86_64", cpu_model="AMD EPYC 9575F 64-Core Processor", cpus=2, gpus=gpus,
               gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    return t


SCENARIOS = {
    "hgx-b200-ib": lambda n: hgx(n, gpu="b200"),
    "hgx-b200-ib-rail-down": lambda n: hgx(n, gpu="b200", rail_down=5),
    "hgx-b300-cx8": lambda n: hgx(n, gpu="b300"),
    # GPU 2 trained at Gen6 x8 inside the SuperNIC's switch: half its host bandwidth
    "hgx-b300-cx8-gpu-x8": lambda n: hgx(n, gpu="b300", gpu_link=(2, (64.0, 8, 64.0, 16))),
    # GPU 6 trained at Gen5 below its Gen6 port: judged against the Gen6 both ends support, not the Gen5 uplink
    "hgx-b300-cx8-gpu-gen5": lambda n: hgx(n, gpu="b300", gpu_link=(6, (32.0, 16, 64.0, 16))),
    "hgx-b300-cx8-rail-down": lambda n: hgx(n, gpu="b300", rail_down=1),
    "gb200-tray-ib": lambda n: gb200_tray(n),
    "gb200-tray-ib-rail-down": lambda n: gb200_tray(n, rail_down=2),
    "gb200-tray-roce": lambda n: gb200_tray(n, fabric="roce"),
    "gb300-tray-cx8": lambda n: gb300_tray(n),
    # GPU 1 trained at Gen6 x8 on its ConnectX-8 port
    "gb300-tray-cx8-gpu-x8": lambda n: gb300_tray(n, gpu_link=(1, (64.0, 8, 64.0, 16))),
    "gh200-ib": gh200,
    "blackwell-no-profile": unknown_gpu,
}


if __name__ == "__main__":
    g.main(sys.argv[1:], SCENARIOS)
