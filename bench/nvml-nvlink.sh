#!/usr/bin/env bash
# What a real GPU's NVML and nvidia-smi say about NVLink and the NVLink fabric: the raw answers the NVLink/fabric
# judgement reads (per-link state, fabric registration state and health), beside nvidia-smi's view of the same,
# and, given a binary, what `gpu.nvlink` judges from them in the same run.
# Read-only. A benchmark/recording script for a GPU machine, not a test. Usage: bench/nvml-nvlink.sh OUTDIR [BIN]
# Writes OUTDIR/{nvidia-smi-q.txt,nvidia-smi-nvlink-*.txt,topo.txt,nvml-raw.json,summary.txt} and, with BIN,
# OUTDIR/gpu-nvlink.{json,txt} (`BIN run --only gpu.nvlink --profile auto`).
set -u
OUT=$(readlink -f "$1"); mkdir -p "$OUT"
step() { # name command...: keep its output and exit code, never stop
  local name=$1; shift
  "$@" > "$OUT/$name.txt" 2>&1; printf '%-24s exit %s\n' "$name" "$?" | tee -a "$OUT/summary.txt" >&2
}
step nvidia-smi-q nvidia-smi -q
step nvidia-smi-nvlink-status nvidia-smi nvlink --status
step nvidia-smi-nvlink-caps nvidia-smi nvlink --capabilities
step nvidia-smi-nvlink-errors nvidia-smi nvlink --errorcounters
step topo nvidia-smi topo -m
# NVML's own answers, call by call, with each return code (ctypes: no pynvml needed).
python3 - > "$OUT/nvml-raw.json" 2>>"$OUT/summary.txt" <<'PY'
import ctypes, json
nvml = ctypes.CDLL("libnvidia-ml.so.1")
nvml.nvmlErrorString.restype = ctypes.c_char_p
def err(rc): return {"rc": rc, "name": nvml.nvmlErrorString(rc).decode()}
out = {"init": err(nvml.nvmlInit_v2())}
drv = ctypes.create_string_buffer(96); nvml.nvmlSystemGetDriverVersion(drv, 96); out["driver"] = drv.value.decode()
count = ctypes.c_uint(); out["count"] = err(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))); out["gpus"] = []
class FabricV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint)]
class FabricV3(ctypes.Structure):
    _fields_ = FabricV2._fields_ + [("healthSummary", ctypes.c_ubyte)]
class FabricV1(ctypes.Structure):
    _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte)]
for i in range(count.value):
    h = ctypes.c_void_p(); nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
    name = ctypes.create_string_buffer(96); nvml.nvmlDeviceGetName(h, name, 96)
    g = {"index": i, "name": name.value.decode(), "links": []}
    for link in range(18):  # NVML_NVLINK_MAX_LINKS
        active = ctypes.c_int(-1); rc = nvml.nvmlDeviceGetNvLinkState(h, link, ctypes.byref(active))
        entry = {"link": link, "state": err(rc), "is_active": active.value}
        if rc == 0:
            counters = {}
            for c, cname in enumerate(["dl_replay", "dl_recovery", "dl_crc_flit", "dl_crc_data", "dl_ecc_data"]):
                v = ctypes.c_ulonglong(); r = nvml.nvmlDeviceGetNvLinkErrorCounter(h, link, c, ctypes.byref(v))
                counters[cname] = v.value if r == 0 else err(r)
            entry["error_counters"] = counters
        g["links"].append(entry)
    v2 = FabricV2(); v2.version = ctypes.sizeof(FabricV2) | (2 << 24)
    rc = nvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v2)) if hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV") else -1
    g["fabric_v2"] = {"call": err(rc) if rc >= 0 else "absent", "state": v2.state, "status": v2.status,
                      "clique": v2.cliqueId, "health_mask": v2.healthMask, "cluster": bytes(v2.clusterUuid).hex()}
    v3 = FabricV3(); v3.version = ctypes.sizeof(FabricV3) | (3 << 24)
    rc = nvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3)) if hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV") else -1
    g["fabric_v3"] = {"call": err(rc) if rc >= 0 else "absent", "state": v3.state, "status": v3.status,
                      "health_mask": v3.healthMask, "health_summary": v3.healthSummary}
    v1 = FabricV1(); rc = nvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(v1))
    g["fabric_v1"] = {"call": err(rc), "state": v1.state, "status": v1.status, "clique": v1.cliqueId}
    out["gpus"].append(g)
print(json.dumps(out, indent=1))
PY
echo "nvml-raw exit $?" >> "$OUT/summary.txt"
if [ -n "${2:-}" ]; then
  step gpu-nvlink "$2" run --only gpu.nvlink --profile auto --color never
  "$2" run --only gpu.nvlink --profile auto --format json > "$OUT/gpu-nvlink.json" 2>>"$OUT/summary.txt"
  echo "gpu-nvlink json exit $?" >> "$OUT/summary.txt"
fi
