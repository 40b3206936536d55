//! The GPUDirect RDMA loopback per GPU and port: the loopback of [`rdma_loopback`] (WRITE, READ, SEND/RECV)
//! once through GPU memory (DMA-BUF registration, else `ibv_reg_mr` on the device pointer = peermem) and once
//! through host memory, so a judge can tell a bad GDR path from a bad link. Recorded as a vendor answer; no
//! verdicts here.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::measure::memory::TestMemory;
use crate::measure::rdma_loopback::{self, guarded, Leg, Plan, PortTarget};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairRun {
    pub gpu: String,
    pub gpu_memory: Leg,
    pub host_memory: Leg,
}

/// Each `(GPU bus id, port)` job in turn; each leg gets half of an equal share of the time left before
/// `deadline`.
pub fn run_pairs(jobs: &[(String, PortTarget)], plan: Plan, deadline: Instant) -> Vec<PairRun> {
    let share = |i: usize| {
        let left = deadline.saturating_duration_since(Instant::now());
        Instant::now() + left / (jobs.len() - i).max(1) as u32 / 2
    };
    jobs.iter()
        .enumerate()
        .map(|(i, (gpu, target))| {
            let host_memory = guarded(|| rdma_loopback::host_memory(target, plan, share(i)));
            let gpu_memory = guarded(|| gpu_memory(gpu, target, plan, share(i)));
            PairRun {
                gpu: gpu.clone(),
                gpu_memory,
                host_memory,
            }
        })
        .collect()
}

/// The loopback through memory of the GPU at `bdf`. The CPU cannot stamp GPU memory, so the check is the
/// comparison of every destination slot with its source slot after each phase (through the staging copy).
pub fn gpu_memory(bdf: &str, target: &PortTarget, plan: Plan, deadline: Instant) -> Leg {
    match TestMemory::gpu(bdf, plan.region_bytes()) {
        Ok(memory) => rdma_loopback::leg(target, memory, plan, deadline),
        Err(f) => f.into(),
    }
}
