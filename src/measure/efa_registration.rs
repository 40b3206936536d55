//! GPUDirect RDMA on EFA without a transfer: GPU memory registered on an EFA protection domain, the same
//! registration step `gdr.loopback` does (DMA-BUF, else `ibv_reg_mr` on the device pointer = the peer path).
//! EFA has no RC queue pairs, so the loopback itself cannot run there; a registration the device accepts is what
//! proves the GPU memory path. Recorded as a vendor answer; no verdicts here.

use serde::{Deserialize, Serialize};

use crate::measure::memory::TestMemory;
use crate::measure::rc::{self, Failure, PortTarget};

/// One 2 MiB GPU page: enough for the NIC to pin and map, small enough for any BAR1.
const REGION_BYTES: usize = 2 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRegistration {
    pub gpu: String,
    pub device: String,
    /// The call that registered it (`ibv_reg_dmabuf_mr`, `ibv_reg_mr`) with the attempts refused before it, or
    /// where it stopped.
    pub outcome: Result<rc::Registration, Failure>,
}

/// Each `(GPU bus id, EFA device)` in turn.
pub fn register_each(jobs: &[(String, String)]) -> Vec<GpuRegistration> {
    jobs.iter()
        .map(|(gpu, device)| GpuRegistration {
            gpu: gpu.clone(),
            device: device.clone(),
            outcome: register(gpu, device),
        })
        .collect()
}

fn register(gpu: &str, device: &str) -> Result<rc::Registration, Failure> {
    let mut memory = TestMemory::gpu(gpu, REGION_BYTES)?;
    let target = PortTarget {
        device: device.to_string(),
        port: 1,
        roce_gid: None,
    };
    let port = rc::open_port(&target, 1)?;
    let (_mr, mut registration) = port.register(memory.region())?;
    registration.refused.splice(0..0, memory.refused());
    Ok(registration)
}
