#!/usr/bin/env python3
"""Real-fleet node shapes for PCIe, GPU and GDS (issue 19), written like gen_hosts.py's trees.

Each shape re-enacts what public captures and vendor documents show (testdata/README.md, "fleet-pcie"): the
formats and values are theirs, the files are ours.

- fleet-hgx-h100-idle-gpu-links: an HGX H100 node at rest. NVIDIA GPUs lower their PCIe link *speed* (never
  the width) to 2.5 GT/s when idle and train back to Gen5 under load (scitix/sichek#49); NVML answers the same
  (current generation 1 at rest, 5 under load). GDS through nvidia-fs, cufile.json that forbids compat mode.
- fleet-hgx-h100-p2pdma-gds: GPUDirect Storage without nvidia-fs, through PCI P2PDMA: open kernel module 570,
  a kernel built with CONFIG_PCI_P2PDMA=y, `"use_pci_p2pdma": true`, the nvme driver loaded with
  multipath=N (NVIDIA GDS NVMe P2PDMA troubleshooting guide).

Usage: python3 testdata/gen_fleet_pcie.py            (rewrites every scenario)
       python3 testdata/gen_fleet_pcie.py NAME...    (only those)
"""

import json
import os
import sys

import gen_hosts
from gen_hosts import hgx

HERE = os.path.dirname(os.path.abspath(__file__))

IDLE_GEN5_X16 = (2.5, 16, 32.0, 16)

# The NVML answers of an 8x H100 node recorded with `snapshot` (testdata/hosts/gpu-8x-h100-answers), moved to
# this tree's bus ids so the GPU checks judge the same GPUs as the sysfs checks.
RECORDED = os.path.join(HERE, "hosts", "gpu-8x-h100-answers", "vendor-answers.json")

CUFILE_NVFS = """// cufile.json as the GDS package ships it, compat mode forbidden on this node type
{
    "logging": { "dir": "/var/log/cufile", "level": "ERROR" },
    "profile": { "cufile_stats": 0 },
    "execution": { "max_io_queue_depth": 128, "max_io_threads": 4, "parallel_io": true },
    "properties": {
        "max_direct_io_size_kb": 16384,
        "max_device_cache_size_kb": 131072,
        "max_device_pinned_mem_size_kb": 33554432,
        "use_poll_mode": false,
        "poll_mode_max_size_kb": 4,
        "allow_compat_mode": false,
        "use_pci_p2pdma": %s,
        "rdma_dev_addr_list": []
    }
}
"""


def gpu_bdfs(tree_root):
    """The GPUs' bus ids in a written tree, in bus order (NVML's index order on these boards)."""
    info = os.path.join(tree_root, "proc/driver/nvidia/gpus")
    return sorted(os.listdir(info))


def remap_answers(answers, bdfs, driver_version):
    """The recorded answers with GPU i at bdfs[i] and the driver version of this tree."""
    text = json.dumps(answers)
    recorded = [g["pci_bus_id"]["Ok"] for g in answers["nvml"]["gpus"]]
    # Through placeholders: a new id may be another GPU's old one.
    for i, old in enumerate(recorded):
        text = text.replace('"%s"' % old, '"@GPU%d@"' % i)
    for i, new in enumerate(bdfs):
        text = text.replace('"@GPU%d@"' % i, '"%s"' % new)
    out = json.loads(text)
    nvml = out["nvml"]
    nvml["driver_version"] = {"Ok": driver_version}
    nvml["nvml_version"] = {"Ok": "12." + driver_version}
    for g in nvml["gpus"]:
        # A clean GPU: the recording's replays are a fault of their own (gpu.pcie warns on them).
        g["pcie_replay_counter"] = {"Ok": 0}
    for sample in out["nvml.pcie_under_load"]["nvml"]["Ok"]:
        sample["width"] = {"Ok": 16}  # the recording's GPU6 trained to x8 under load: a fault, not this shape
    for sample in out["nvml.pcie_under_load"]["sysfs"]:
        sample[2] = "16"
    return out


def write_answers(t, driver_version):
    with open(RECORDED, encoding="utf-8") as f:
        answers = json.load(f)
    answers = remap_answers(answers, gpu_bdfs(t.root), driver_version)
    with open(os.path.join(t.root, "vendor-answers.json"), "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1, sort_keys=True)
        f.write("\n")


def add_modules(t, lines):
    """Appends `/proc/modules` lines (name size refcount users taint) and their /sys/module entries."""
    path = os.path.join(t.root, "proc/modules")
    with open(path, encoding="utf-8") as f:
        text = f.read().rstrip("\n")
    for name, size, params in lines:
        text += "\n%s %d 0 - Live 0x0000000000000000" % (name, size)
        t.write("/sys/module/%s/initstate" % name, "live")
        t.write("/sys/module/%s/taint" % name, "")
        for key, value in params.items():
            t.write("/sys/module/%s/parameters/%s" % (name, key), value)
    t.write("/proc/modules", text)


def set_driver_version(t, version):
    """An open kernel module of another release than gen_hosts' default."""
    t.write("/proc/driver/nvidia/version", gen_hosts.NVRM_OPEN.replace(gen_hosts.DRIVER_VERSION, version),
            newline=False)
    for module in ("nvidia", "nvidia_peermem"):
        if os.path.exists(os.path.join(t.root, "sys/module", module, "version")):
            t.write("/sys/module/%s/version" % module, version)
    gpus = os.path.join(t.root, "proc/driver/nvidia/gpus")
    for bdf in os.listdir(gpus):
        p = os.path.join(gpus, bdf, "information")
        with open(p, encoding="utf-8") as f:
            text = f.read()
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text.replace(gen_hosts.DRIVER_VERSION, version))


def kernel_config(t, release, p2pdma):
    """The distribution kernel's /boot/config-<release>, the lines GDS cares about."""
    lines = ["# Automatically generated file; DO NOT EDIT.", "# Linux/x86 %s Kernel Configuration" % release,
             "CONFIG_PCI=y", "CONFIG_PCIEPORTBUS=y", "CONFIG_PCIEAER=y", "CONFIG_ZONE_DEVICE=y",
             "CONFIG_PCI_P2PDMA=y" if p2pdma else "# CONFIG_PCI_P2PDMA is not set",
             "CONFIG_BLK_DEV_NVME=m", "CONFIG_NVME_MULTIPATH=y"]
    t.write("/boot/config-%s" % release, "\n".join(lines))


def idle_gpu_links(name):
    t = hgx(name, gpu_link=IDLE_GEN5_X16)
    t.write("/etc/cufile.json", CUFILE_NVFS % "false")
    write_answers(t, gen_hosts.DRIVER_VERSION)
    return t


P2PDMA_DRIVER = "570.124.06"
P2PDMA_KERNEL = "6.8.0-52-generic"


def p2pdma_gds(name, *, driver=P2PDMA_DRIVER, p2pdma_kernel=True, use_p2pdma=True):
    t = hgx(name, nvidia_fs=False, kernel=P2PDMA_KERNEL, gpu_link=IDLE_GEN5_X16)
    set_driver_version(t, driver)
    add_modules(t, [("nvme", 61440, {"multipath": "N"}), ("nvme_core", 200704, {"multipath": "N"})])
    kernel_config(t, P2PDMA_KERNEL, p2pdma_kernel)
    t.write("/etc/cufile.json", CUFILE_NVFS % ("true" if use_p2pdma else "false"))
    write_answers(t, driver)
    return t


SCENARIOS = {
    "fleet-hgx-h100-idle-gpu-links": idle_gpu_links,
    "fleet-hgx-h100-p2pdma-gds": p2pdma_gds,
}


if __name__ == "__main__":
    gen_hosts.main(sys.argv[1:], SCENARIOS)
