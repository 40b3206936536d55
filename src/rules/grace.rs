//! Grace platforms (GH200, GB200/GB300 compute trays): the GPU reaches its CPU over NVLink-C2C, not PCIe, so the
//! NICs on the CPU's root ports are the designed GPUDirect RDMA path ("across the CPU" on the PCI tree:
//! `nvidia-smi topo` prints SYS, the tree NODE), and NCCL takes it by default (`NCCL_NET_GDR_C2C=1`, NCCL
//! `src/graph/paths.cc`; NVIDIA/nccl#1579). GPU memory is a NUMA node of its own there (NVML's
//! `nvmlDeviceGetNumaNodeId` answers it), so only sysfs's PCI `numa_node` places GPUs beside NICs.

use crate::sysfs::pci::{PciAttrs, VENDOR_NVIDIA};

/// PCI device ids of GPUs attached to a Grace CPU over NVLink-C2C (NVIDIA/open-gpu-kernel-modules README):
/// GH200 `2342`, GB200 `2941`, GB300 `31c2`/`31c3`.
const C2C_GPU_DEVICE_IDS: [u16; 4] = [0x2342, 0x2941, 0x31c2, 0x31c3];

/// This GPU function is a Grace-attached GPU (its CPU path is NVLink-C2C).
pub fn c2c_attached(gpu: &PciAttrs) -> bool {
    gpu.vendor == VENDOR_NVIDIA && C2C_GPU_DEVICE_IDS.contains(&gpu.device)
}
