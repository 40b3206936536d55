#!/usr/bin/env python3
"""NVLink and NVLink-fabric answers (issue 19 §2: "the NVLink/fabric state where NVML reports it"), written like
gen_hosts.py's trees, with the NVML answers `gpu.nvlink` judges in vendor-answers.json.

Each GPU's answers are what nvmlDeviceGetNvLinkState gives for links 0..17 (active, inactive, or an error:
NOT_SUPPORTED where the GPU has no such link) and what nvmlDeviceGetGpuFabricInfoV / nvmlDeviceGetGpuFabricInfo
give (state 0 not supported, 1 not started, 2 in progress, 3 completed; the registration status; the health mask
of nvml.h's NVML_GPU_FABRIC_HEALTH_MASK_* fields and the v3 health summary). Values re-enact what public captures
show (testdata/README.md, "nvml-nvlink"); the H200 one is our own capture (testdata/device/h200/
session-2026-12-02-s5/nvlink/nvml-raw.json).

Healthy:
- nvlink-hgx-h100: HGX H100 at rest, 18 links active on every GPU, fabric completed, health full.
- nvlink-hgx-h100-r535-fabric-v1: the same board on a driver whose NVML has only the v1 fabric call (no
  nvmlDeviceGetGpuFabricInfoV, so no health mask).
- nvlink-h200-vm-no-nvlink: one H200 in a VM: every link NOT_SUPPORTED, fabric info SUCCESS with state 0.
Faulty (each on the healthy HGX H100 tree):
- nvlink-hgx-h100-link-down: GPU 3 with links 5 and 11 inactive; GPU 6 reports link 17 NOT_SUPPORTED (one fewer
  link than its peers).
- nvlink-hgx-h100-fm-not-started: the fabric manager not running: every GPU's fabric state 1.
- nvlink-hgx-h100-fabric-in-progress: registration still running: state 2.
- nvlink-hgx-h100-fabric-degraded: GPU 2 completed with NVML_ERROR_INSUFFICIENT_RESOURCES (Azure/azhpc-images#506),
  GPU 6 with bandwidth degraded and a limited-capacity summary.
- nvlink-hgx-h100-nvml-error: GPU 4 answers NVML_ERROR_UNKNOWN for link 7, GPU 1 for the fabric call.

Usage: python3 testdata/gen_nvml_nvlink.py            (rewrites every scenario)
       python3 testdata/gen_nvml_nvlink.py NAME...    (only those)
"""

import json
import os
import sys

import gen_fleet_pcie
import gen_hosts
from gen_hosts import hgx

HERE = os.path.dirname(os.path.abspath(__file__))
# The H200 VM's NVML answers as `snapshot` recorded them (testdata/hosts/h200-vm-snapshot): the same machine as the
# session-5 capture, so its identity, memory and PCIe answers go with the NVLink ones.
H200_RECORDED = os.path.join(HERE, "hosts", "h200-vm-snapshot", "vendor-answers.json")

MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


def not_supported(call):
    return {"Err": "%s: NVML_ERROR_NOT_SUPPORTED (the requested operation is not available on the target device)"
                   % call}


def error(call, code, words):
    return {"Err": "%s: %s (%s)" % (call, code, words)}


def link_call(link):
    return "nvmlDeviceGetNvLinkState(link %d)" % link


# Health mask fields (nvml.h): bandwidth full (2 at bit 0), no route recovery (2 at bit 2), route healthy (2 at
# bit 4), no access-timeout recovery (2 at bit 6), configuration correct (1 at bit 8).
HEALTH_FULL = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
DEGRADED_BW = (HEALTH_FULL & ~3) | 1
SUMMARY_HEALTHY, SUMMARY_LIMITED = 1, 3


def fabric(state=3, status="NVML_SUCCESS", mask=HEALTH_FULL, summary=SUMMARY_HEALTHY, version=3):
    """The fabric answer of one GPU on an HGX board (one NVSwitch domain: clique 0, zero cluster UUID)."""
    info = {"call": "nvmlDeviceGetGpuFabricInfoV(v%d)" % version if version > 1 else "nvmlDeviceGetGpuFabricInfo",
            "state": state, "status": status, "clique_id": 0, "cluster_uuid": "0" * 32,
            "health_mask": mask if version > 1 else None, "health_summary": summary if version > 2 else None}
    return {"Ok": info}


def links(active=MAX_LINKS, inactive=(), absent_from=None):
    """Links 0..active-1 active (those in `inactive` not), the rest NOT_SUPPORTED."""
    end = MAX_LINKS if absent_from is None else absent_from
    out = []
    for link in range(MAX_LINKS):
        if link < min(active, end):
            out.append({"Ok": link not in inactive})
        else:
            out.append(not_supported(link_call(link)))
    return out


def set_nvlink(answers, per_gpu):
    """per_gpu(index) -> (links, fabric) for each GPU of the recording; the old `nvlinks_active` count goes."""
    for g in answers["nvml"]["gpus"]:
        g.pop("nvlinks_active", None)
        link_answers, fabric_answer = per_gpu(g["index"])
        g["nvlink"] = {"links": link_answers, "fabric": fabric_answer}


def write_answers(t, answers):
    with open(os.path.join(t.root, "vendor-answers.json"), "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1, sort_keys=True)
        f.write("\n")


def hgx_nvlink(name, per_gpu, *, driver=gen_hosts.DRIVER_VERSION):
    """The HGX H100 shape of gen_fleet_pcie (GPU links idle at 2.5 GT/s, as NVML answers) with NVLink answers."""
    t = hgx(name, gpu_link=gen_fleet_pcie.IDLE_GEN5_X16)
    t.write("/etc/cufile.json", gen_fleet_pcie.CUFILE_NVFS % "false")
    if driver != gen_hosts.DRIVER_VERSION:
        gen_fleet_pcie.set_driver_version(t, driver)
    with open(gen_fleet_pcie.RECORDED, encoding="utf-8") as f:
        answers = gen_fleet_pcie.remap_answers(json.load(f), gen_fleet_pcie.gpu_bdfs(t.root), driver)
    set_nvlink(answers, per_gpu)
    write_answers(t, answers)
    return t


def healthy(_index):
    return links(), fabric()


def link_down(index):
    if index == 3:
        return links(inactive=(5, 11)), fabric()
    if index == 6:
        return links(absent_from=17), fabric()
    return healthy(index)


def fabric_degraded(index):
    if index == 2:
        return links(), fabric(status="NVML_ERROR_INSUFFICIENT_RESOURCES", mask=0, summary=0)
    if index == 6:
        return links(), fabric(mask=DEGRADED_BW, summary=SUMMARY_LIMITED)
    return healthy(index)


def nvml_error(index):
    if index == 4:
        answers = links()
        answers[7] = error(link_call(7), "NVML_ERROR_UNKNOWN", "an internal driver error occurred")
        return answers, fabric()
    if index == 1:
        return links(), error("nvmlDeviceGetGpuFabricInfoV", "NVML_ERROR_UNKNOWN",
                              "an internal driver error occurred")
    return healthy(index)


R535 = "535.104.05"


def h200_vm_no_nvlink(name):
    """gen_hosts' H200 VM with the machine's recorded NVML answers and the session-5 NVLink/fabric answers."""
    t = gen_hosts.h200_vm(name)
    with open(H200_RECORDED, encoding="utf-8") as f:
        recorded = json.load(f)
    answers = {"nvml": recorded["nvml"]}
    # nvml-raw.json: rc 3 (Not Supported) on links 0..17; fabric v2 rc 0 with state 0, status 0, clique 0.
    set_nvlink(answers, lambda _i: (links(active=0),
                                    fabric(state=0, mask=0, version=2)))
    write_answers(t, answers)
    return t


SCENARIOS = {
    "nvlink-hgx-h100": lambda n: hgx_nvlink(n, healthy),
    "nvlink-hgx-h100-r535-fabric-v1": lambda n: hgx_nvlink(n, lambda _i: (links(), fabric(version=1)),
                                                           driver=R535),
    "nvlink-h200-vm-no-nvlink": h200_vm_no_nvlink,
    "nvlink-hgx-h100-link-down": lambda n: hgx_nvlink(n, link_down),
    "nvlink-hgx-h100-fm-not-started": lambda n: hgx_nvlink(n, lambda _i: (links(), fabric(state=1, mask=0,
                                                                                           summary=0))),
    "nvlink-hgx-h100-fabric-in-progress": lambda n: hgx_nvlink(n, lambda _i: (links(), fabric(state=2, mask=0,
                                                                                               summary=0))),
    "nvlink-hgx-h100-fabric-degraded": lambda n: hgx_nvlink(n, fabric_degraded),
    "nvlink-hgx-h100-nvml-error": lambda n: hgx_nvlink(n, nvml_error),
}


if __name__ == "__main__":
    gen_hosts.main(sys.argv[1:], SCENARIOS)
