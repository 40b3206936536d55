#!/usr/bin/env python3
"""Minimal GB200 NVL72 compute-tray trees for the multi-node NVLink domain checks (issue 31 §4, §5, Grace rules):
gpu.nvlink's clique/cluster rule, nvlink.imex, and topo.gpu_nic across NVLink-C2C. Written like gen_hosts.py's
trees; the NVML answers are the 8-GPU HGX recording's (gen_fleet_pcie.RECORDED) cut to 4 GPUs and re-enacted
as GB200s. Shapes re-enact public captures (testdata/README.md, "nvlink-domain"):

- one PCI segment per Grace root port: GPUs 0008/0009/0018/0019:01:00.0 (NVIDIA/nccl#1769), sysfs numa_node 0
  for GPUs 0-1 and 1 for GPUs 2-3 (the Grace their PCI function hangs off), NVML's NUMA id the GPU's own memory
  node 2/10/18/26 (sgl-project/sglang#11208);
- four ConnectX-7 NDR rails, two per Grace, each on its own segment: every GPU<->NIC path crosses the CPU
  (NODE/SYS on the PCI tree; `nvidia-smi topo` prints SYS), the designed GDR path over NVLink-C2C;
- fabric v4: clique 0x7ffe (NMX-C's default partition) of type unicast/multicast pointer, cluster UUID, health
  mask 0xaa with partition assigned and GFM connected (nccl#1769, #2186);
- IMEX host service: /etc/nvidia-imex/config.cfg and a node list of the domain's trays, the daemon in /proc,
  channel0 of the major /proc/devices gives, and `nvidia-imex-ctl -N -j` recorded (NVIDIA/ai-cloud-validation).

Healthy:
- gb200-tray: the tray in its domain, IMEX up.
- gb200-standalone: a GB200 board outside any domain: fabric NOT_SUPPORTED, clique 0 (leptonai/gpud#1108), the
  IMEX package's default files with an empty node list.
Faulty (each on gb200-tray):
- gb200-tray-imex-down: nvidia-imex not running, channel0 missing, nvidia-imex-ctl unable to reach the daemon.
- gb200-tray-clique0: GPU 2 registered with clique 0 and a zero cluster UUID (Azure/azhpc-images#506).

Usage: python3 testdata/gen_nvlink_domain.py            (rewrites every scenario)
       python3 testdata/gen_nvlink_domain.py NAME...    (only those)
"""

import json
import os
import sys

import gen_fleet_pcie
import gen_hosts
import gen_nvml_nvlink
from gen_hosts import Dev, ENDPOINT, ROOT_PORT, ACS_OFF, GEN5_X16, IB_ACTIVE, place, rel_link

DRIVER = "580.95.05"
GPUS = ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"]
NICS = ["0000:03:00.0", "0002:03:00.0", "0010:03:00.0", "0012:03:00.0"]
GPU_MEMORY_NUMA = [2, 10, 18, 26]
CPULIST = {0: "0-71", 1: "72-143"}
TRAY_IP, PEER_IP = "10.114.0.11", "10.114.0.12"
CLUSTER = "3143b15bc2cd192b28cc9b5473fb5b93"
CLIQUE = 0x7FFE
# Degraded BW, route recovery, route unhealthy, access-timeout recovery all FALSE (0xaa), partition assigned TRUE
# (1 at bit 12), global fabric manager CONNECTED (1 at bit 14).
MASK = 0xAA | 1 << 12 | 1 << 14
IMEX_MAJOR = 507
IMEX_PID = 2211

FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.114.0.0/24 2 0 2
        |-- 10.114.0.0
           /24 link UNICAST
        |-- %s
           /32 host LOCAL
  +-- 127.0.0.0/8 2 0 2
     |-- 127.0.0.1
        /32 host LOCAL
Local:
  |-- %s
     /32 host LOCAL""" % (TRAY_IP, TRAY_IP)

DEVICES = """Character devices:
  1 mem
  4 tty
195 nvidia
234 nvidia-caps
%d nvidia-caps-imex-channels
511 nvidia-uvm

Block devices:
259 blkext""" % IMEX_MAJOR

IMEX_CONFIG = """# /etc/nvidia-imex/config.cfg as the nvidia-imex package installs it (keys this tool reads)
IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg
SERVER_PORT=50000
IMEX_CMD_PORT=50005
IMEX_CMD_ENABLED=1"""


def imex_status(peer_status="READY", domain="UP"):
    def node(ip, name, status):
        return {"status": status, "host": ip, "hostName": name,
                "connections": {"0": {"host": TRAY_IP, "status": "CONNECTED", "changed": False},
                                "1": {"host": PEER_IP, "status": "CONNECTED", "changed": False}}}
    return {"nodes": {"0": node(TRAY_IP, "gb200-tray-01", "READY"),
                      "1": node(PEER_IP, "gb200-tray-02", peer_status)},
            "timestamp": "12/5/2026 23:10:00.000", "status": domain}


def ctl_answer(stdout, exit_code=0, stderr=""):
    return {"argv": ["nvidia-imex-ctl", "-N", "-j"], "exit_code": exit_code, "stdout": stdout,
            "stderr": stderr, "failure": None, "truncated": False}


def fabric(i, *, state=3, clique=CLIQUE, cluster=CLUSTER, cliques=True):
    return {"Ok": {"call": "nvmlDeviceGetGpuFabricInfo_v4", "state": state, "status": "NVML_SUCCESS",
                   "clique_id": clique, "cluster_uuid": cluster, "health_mask": MASK if state else 0,
                   "health_summary": 1 if state else 0,
                   "cliques": [{"kind": 0, "id": clique}, {"kind": 1, "id": clique}] if cliques else []}}


def tray(name, *, standalone=False, imex_down=False, fabric_of=fabric):
    t = gen_hosts.Tree(name)
    gpus, nics = [], []
    for i, bdf in enumerate(GPUS):
        numa = i // 2
        seg = bdf.split(":")[0]
        rp = Dev("%s:00:00.0" % seg, 0x10DE, 0x22B2, 0x060400, GEN5_X16, ROOT_PORT, ACS_OFF, numa=numa,
                 cpulist=CPULIST[numa])
        gpus.append(rp.add(Dev(bdf, 0x10DE, 0x2941, 0x030200, GEN5_X16, ENDPOINT, numa=numa,
                               cpulist=CPULIST[numa], subsystem=(0x10DE, 0x2057))))
        place(t, "pci%s:00" % seg, rp)
    for i, bdf in enumerate(NICS):
        numa = i // 2
        seg = bdf.split(":")[0]
        rp = Dev("%s:00:00.0" % seg, 0x10DE, 0x22B2, 0x060400, GEN5_X16, ROOT_PORT, ACS_OFF, numa=numa,
                 cpulist=CPULIST[numa])
        nics.append(rp.add(Dev(bdf, 0x15B3, 0x1021, 0x020700, GEN5_X16, ENDPOINT, numa=numa,
                               cpulist=CPULIST[numa], subsystem=(0x15B3, 0x0041))))
        place(t, "pci%s:00" % seg, rp)
    for i, nic in enumerate(nics):
        gen_hosts.write_rdma_device(t, nic, i, i, link_layer="InfiniBand", port=dict(IB_ACTIVE, lid="0x%x" % (0x21 + i)),
                                    gids=[("fe80:0000:0000:0000:a088:c203:0042:%04x" % i, "IB/RoCE v1", None)])
    t.write("/sys/class/infiniband_verbs/abi_version", "6")
    t.write("/dev/infiniband/rdma_cm", "", newline=False)
    # Grace (aarch64, Neoverse V2): the tool reads no CPU model for these checks, the kernel and driver it does.
    t.write("/proc/sys/kernel/osrelease", "6.8.0-1021-nvidia-64k")
    t.write("/proc/sys/kernel/hostname", "gb200-tray-01")
    t.write("/proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.8.0-1021-nvidia-64k root=UUID=6a1e ro iommu.passthrough=0 quiet")
    gen_hosts.write_modules(t, [
        ("nvidia_peermem", 16384, 0, "-", "OE", DRIVER),
        ("nvidia_uvm", 4911104, 0, "-", "OE", None),
        ("nvidia", 54329344, 2, "nvidia_uvm,nvidia_peermem,", "OE", DRIVER),
        ("mlx5_ib", 483328, 0, "-", "OE", "24.10-1.1.4"),
        ("ib_uverbs", 196608, 2, "mlx5_ib,nvidia_peermem,", "OE", None),
        ("ib_core", 507904, 4, "ib_uverbs,mlx5_ib,nvidia_peermem,", "OE", None),
        ("mlx5_core", 2506752, 1, "mlx5_ib,", "OE", "24.10-1.1.4")])
    t.write("/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  %s  Release Build  "
            "(dvs-builder@U22-I3-AE18-23-3)  Tue Sep 23 00:00:00 UTC 2025\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n" % DRIVER, newline=False)
    for i, gpu in enumerate(gpus):
        gen_hosts.write_nvidia_gpu(t, gpu.bdf, "NVIDIA GB200", 200 + i, "GPU-9c6f%04x-53bf-49b5-a436-b66766c413c3" % i,
                                   "97.00.82.00.1D", i, DRIVER)
    t.write("/proc/devices", DEVICES)
    t.write("/proc/net/fib_trie", FIB_TRIE)

    answers = nvml_answers(t, fabric_of if not standalone else
                           (lambda i: fabric(i, state=0, clique=0, cluster="0" * 32, cliques=False)))
    t.write("/etc/nvidia-imex/config.cfg", IMEX_CONFIG)
    if standalone:
        t.write("/etc/nvidia-imex/nodes_config.cfg", "# one IP address or host name per line", newline=True)
    else:
        t.write("/etc/nvidia-imex/nodes_config.cfg", "%s\n%s" % (TRAY_IP, PEER_IP))
        t.write("/usr/bin/nvidia-imex-ctl", "", newline=False)
        if imex_down:
            answers["imex.ctl_domain_status"] = ctl_answer(
                "", exit_code=1, stderr="Connection to the IMEX daemon at 127.0.0.1:50005 failed")
        else:
            t.write("/proc/%d/comm" % IMEX_PID, "nvidia-imex")
            t.write("/dev/nvidia-caps-imex-channels/channel0", "", newline=False)
            answers["imex.ctl_domain_status"] = ctl_answer(json.dumps(imex_status(), indent=2))
    gen_nvml_nvlink.write_answers(t, answers)
    return t


def nvml_answers(t, fabric_of):
    """The HGX recording cut to this tray's 4 GPUs, named GB200, with NVML's Grace NUMA ids and fabric v4."""
    with open(gen_fleet_pcie.RECORDED, encoding="utf-8") as f:
        recorded = json.load(f)
    answers = gen_fleet_pcie.remap_answers(recorded, GPUS + ["unused:%d" % k for k in range(4)], DRIVER)
    nvml = answers["nvml"]
    nvml["gpus"] = nvml["gpus"][:4]
    nvml["device_count"] = {"Ok": 4}
    nvml["pairs"] = [p for p in nvml["pairs"] if p["b"] < 4]
    for g in nvml["gpus"]:
        i = g["index"]
        g["name"] = {"Ok": "NVIDIA GB200"}
        g["numa_node"] = {"Ok": GPU_MEMORY_NUMA[i]}
        g["memory_total_bytes"] = {"Ok": 199715979264}
        g["pcie_gen_current"], g["pcie_speed_current_mts"] = {"Ok": 5}, {"Ok": 32000}
        g.pop("nvlinks_active", None)
        g["nvlink"] = {"links": gen_nvml_nvlink.links(), "fabric": fabric_of(i)}
    load = answers["nvml.pcie_under_load"]
    load["nvml"]["Ok"] = load["nvml"]["Ok"][:4]
    load["sysfs"] = load["sysfs"][:4]
    answers.pop("cuda.copy", None)
    return answers


def clique0(i):
    return fabric(i, clique=0, cluster="0" * 32, cliques=False) if i == 2 else fabric(i)


SCENARIOS = {
    "gb200-tray": lambda n: tray(n),
    "gb200-standalone": lambda n: tray(n, standalone=True),
    "gb200-tray-imex-down": lambda n: tray(n, imex_down=True),
    "gb200-tray-clique0": lambda n: tray(n, fabric_of=clique0),
}


if __name__ == "__main__":
    gen_hosts.main(sys.argv[1:], SCENARIOS)
