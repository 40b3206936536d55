//! The GPUDirect RDMA loopback per GPU and port: the loopback of [`rdma_loopback`] (WRITE, READ, SEND/RECV)
//! once through GPU memory (DMA-BUF registration, else `ibv_reg_mr` on the device pointer = peermem) and once
//! through host memory, so a judge can tell a bad GDR path from a bad link. Recorded as a vendor answer; no
//! verdicts here.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::dynlib::cuda::{self, DeviceBuffer, DeviceContext, PinnedHostBuffer};
use crate::dynlib::cuda_dmabuf;
use crate::measure::rdma_loopback::{
    self, guarded, leg_failed, pattern_from, Leg, Plan, PortTarget, Region,
};

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
/// comparison of every destination slot with its source slot afterwards (written by the WRITEs, fetched again
/// by the READs).
pub fn gpu_memory(bdf: &str, target: &PortTarget, plan: Plan, deadline: Instant) -> Leg {
    let len = plan.region_bytes();
    let sources = plan.depth as usize * plan.message_bytes;
    let ordinal = match gpu_ordinal(bdf) {
        Ok(o) => o,
        Err(e) => return leg_failed("CUDA", e),
    };
    let ctx = match DeviceContext::new(ordinal) {
        Ok(c) => c,
        Err(e) => return leg_failed("CUDA", e.to_string()),
    };
    let (dev, mut staging) = match (DeviceBuffer::alloc(len), PinnedHostBuffer::alloc(len)) {
        (Ok(d), Ok(h)) => (d, h),
        (Err(e), _) | (_, Err(e)) => return leg_failed("CUDA", e.to_string()),
    };
    let host = staging.as_mut_slice();
    host.fill(0);
    for (slot, chunk) in host[..sources].chunks_mut(plan.message_bytes).enumerate() {
        chunk.copy_from_slice(&pattern_from(slot, plan.message_bytes));
    }
    if let Err(e) = cuda::copy_htod(&dev, &staging) {
        return leg_failed("CUDA", e.to_string());
    }
    let dmabuf = cuda_dmabuf::export(&dev);
    let mut refused_export = Vec::new();
    if let Err(e) = &dmabuf {
        refused_export.push(format!("DMA-BUF export = {e}"));
    }
    let region = Region {
        addr: dev.ptr(),
        len: dev.len(),
        dmabuf_fd: dmabuf.as_ref().ok().map(|fd| fd.raw()),
        host_visible: false,
    };
    let leg = match rdma_loopback::loopback(target, region, plan, deadline) {
        Ok(mut outcome) => {
            outcome.registration.refused.splice(0..0, refused_export);
            let verified = outcome.checks_pass()
                && cuda::copy_dtoh(&mut staging, &dev).is_ok()
                && staging.as_slice()[..sources] == staging.as_slice()[sources..2 * sources];
            Leg::Done { outcome, verified }
        }
        Err(f) => {
            let mut refused = refused_export;
            refused.extend(f.refused_registrations);
            Leg::Failed {
                stage: f.stage,
                message: f.message,
                refused,
            }
        }
    };
    drop(dmabuf);
    drop(dev);
    drop(ctx);
    leg
}

/// The CUDA ordinal of the GPU at `bdf` (CUDA numbers GPUs its own way).
fn gpu_ordinal(bdf: &str) -> Result<usize, String> {
    cuda::load()?;
    for i in 0..cuda::device_count()? {
        let bus = cuda::Device::get(i)?.pci_bus_id()?;
        // CUDA prints an 8-digit domain on some drivers (`00000000:17:00.0`): compare bus:device.function.
        let tail = |s: &str| {
            s.to_ascii_lowercase()
                .rsplit_once(':')
                .map(|(a, b)| format!("{}:{b}", a.rsplit(':').next().unwrap_or("")))
        };
        if bus.eq_ignore_ascii_case(bdf) || (tail(&bus).is_some() && tail(&bus) == tail(bdf)) {
            return Ok(i);
        }
    }
    Err(format!("no CUDA device has PCI bus id {bdf}"))
}
