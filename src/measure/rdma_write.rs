//! An RDMA WRITE loopback through one port: one device, one protection domain, one memory region holding a
//! source half and a destination half, two RC queue pairs on the same port connected to each other (IB: by
//! LID; RoCE: by the RoCE v2 GID). Queue pair A RDMA-WRITEs the source half into the destination half through
//! the port. The caller owns the memory (host or GPU) and says what the data should be; no verdicts here.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sideway::ibverbs::queue_pair::QueuePair;

use crate::isolate::breadcrumb;
use crate::measure::rc::{self, fail, Op, Remote};
pub use crate::measure::rc::{Failure, PortTarget, Region, Registration};

#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Bandwidth message size (perftest practice: 8 MiB for GDR checks).
    pub message_bytes: usize,
    pub bw_messages: u32,
    /// Writes in flight during the bandwidth phase.
    pub queue_depth: u32,
    pub lat_iterations: u32,
    pub deadline: Instant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub registration: Registration,
    pub bandwidth_gbps: f64,
    pub bytes_written: u64,
    /// Mean time from posting one 8-byte signalled RDMA WRITE to its completion (one write in flight).
    pub latency_us: f64,
    pub lat_samples: u32,
    /// The deadline ended a phase early.
    pub cut_short: bool,
}

const LAT_BYTES: u32 = 8;
const PSN_A: u32 = 0x1000;
const PSN_B: u32 = 0x2000;

/// Runs the loopback on `target` over `region`. The caller fills the source half before and compares the
/// halves after (it knows whether the memory is host or GPU).
pub fn loopback(target: &PortTarget, region: Region, plan: Plan) -> Result<Outcome, Failure> {
    let half = region.len / 2;
    if half == 0 || plan.message_bytes > half || plan.message_bytes > u32::MAX as usize {
        return Err(fail(
            "plan",
            format!(
                "message of {} bytes does not fit half of a {}-byte region",
                plan.message_bytes, region.len
            ),
        ));
    }
    let port = rc::open_port(target)?;
    let (mr, registration) = port.register(region)?;
    let depth = plan.queue_depth.max(1);
    let cq = port.create_cq(depth * 2 + 4)?;
    let mut qp_a = port.create_qp(&cq, &cq, depth, 1)?;
    let mut qp_b = port.create_qp(&cq, &cq, depth, 1)?;
    let gid = target.roce_gid.map(|(_, raw)| raw);
    let remote = |qpn, psn| Remote {
        qpn,
        psn,
        lid: port.lid,
        gid,
    };
    let (qpn_a, qpn_b) = (qp_a.qp_number(), qp_b.qp_number());
    rc::connect(&mut qp_a, target, port.mtu, &remote(qpn_b, PSN_B), PSN_A)?;
    rc::connect(&mut qp_b, target, port.mtu, &remote(qpn_a, PSN_A), PSN_B)?;

    let src = region.addr;
    let dst = region.addr + half as u64;
    let lkey = mr.lkey();
    let write = Op::Write {
        rkey: mr.rkey(),
        dst,
    };

    // Bandwidth: keep `depth` writes of `message_bytes` in flight.
    let started = Instant::now();
    let (completed, mut cut_short) = rc::stream(
        &mut qp_a,
        &cq,
        write,
        lkey,
        src,
        plan.message_bytes as u32,
        plan.bw_messages,
        depth,
        plan.deadline,
    )?;
    let bw_elapsed = started.elapsed();
    let bytes_written = completed as u64 * plan.message_bytes as u64;
    let bandwidth_gbps = bits_per_sec_gbps(bytes_written, bw_elapsed);

    // Latency: one 8-byte write at a time.
    let mut lat_samples = 0u32;
    let mut lat_total = Duration::ZERO;
    while lat_samples < plan.lat_iterations {
        if Instant::now() >= plan.deadline {
            cut_short = true;
            break;
        }
        let t = Instant::now();
        rc::post(
            &mut qp_a,
            write,
            u64::from(lat_samples),
            lkey,
            src,
            LAT_BYTES,
        )?;
        rc::wait_completions(&cq, plan.deadline, "RDMA WRITE")?;
        lat_total += t.elapsed();
        lat_samples += 1;
    }
    let latency_us = if lat_samples == 0 {
        0.0
    } else {
        lat_total.as_secs_f64() * 1e6 / f64::from(lat_samples)
    };
    breadcrumb("ibv_dereg_mr");
    drop(mr);
    // The QPs, CQ, PD and device context go when this returns (ibv_destroy_qp … ibv_close_device).
    breadcrumb("ibv teardown (ibv_destroy_qp, ibv_destroy_cq, ibv_dealloc_pd, ibv_close_device)");
    Ok(Outcome {
        registration,
        bandwidth_gbps,
        bytes_written,
        latency_us,
        lat_samples,
        cut_short,
    })
}

/// Gb/s (10^9 bits) for `bytes` in `elapsed`.
pub fn bits_per_sec_gbps(bytes: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s <= 0.0 {
        0.0
    } else {
        bytes as f64 * 8.0 / s / 1e9
    }
}

/// One loopback through one kind of memory, with its data check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Leg {
    Done {
        outcome: Outcome,
        /// The destination half equals the source half afterwards.
        verified: bool,
    },
    Failed {
        stage: String,
        message: String,
        refused: Vec<String>,
    },
}

pub fn leg_failed(stage: &str, message: impl Into<String>) -> Leg {
    Leg::Failed {
        stage: stage.into(),
        message: message.into(),
        refused: Vec::new(),
    }
}

impl From<Failure> for Leg {
    fn from(f: Failure) -> Leg {
        Leg::Failed {
            stage: f.stage,
            message: f.message,
            refused: f.refused_registrations,
        }
    }
}

/// sideway converts some unknown enum values with a panic; a panic is one failed leg, not a lost probe.
pub fn guarded(f: impl FnOnce() -> Leg) -> Leg {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        leg_failed(
            "verbs",
            "the verbs wrapper panicked (unexpected value from the device)",
        )
    })
}

/// The source half's contents: no two neighbouring bytes equal, so a shifted or partial write shows.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(7))
        .collect()
}

/// The loopback through ordinary host memory (`ibv_reg_mr` on a heap buffer): the port and link alone.
pub fn host_memory(target: &PortTarget, plan: Plan) -> Leg {
    let half = plan.message_bytes;
    let mut buf = vec![0u8; 2 * half];
    buf[..half].copy_from_slice(&pattern(half));
    let region = Region {
        addr: buf.as_mut_ptr() as u64,
        len: buf.len(),
        dmabuf_fd: None,
    };
    match loopback(target, region, plan) {
        Ok(outcome) => Leg::Done {
            verified: buf[..half] == buf[half..],
            outcome,
        },
        Err(f) => f.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gbps_from_bytes_and_time() {
        let g = bits_per_sec_gbps(50_000_000_000, Duration::from_secs(1));
        assert!((g - 400.0).abs() < 1e-9);
        assert_eq!(bits_per_sec_gbps(1, Duration::ZERO), 0.0);
    }

    #[test]
    fn plan_larger_than_region_is_refused_before_any_call() {
        let target = PortTarget {
            device: "mlx5_0".into(),
            port: 1,
            roce_gid: None,
        };
        let region = Region {
            addr: 0x1000,
            len: 4096,
            dmabuf_fd: None,
        };
        let plan = Plan {
            message_bytes: 8 << 20,
            bw_messages: 1,
            queue_depth: 1,
            lat_iterations: 1,
            deadline: Instant::now(),
        };
        assert_eq!(loopback(&target, region, plan).unwrap_err().stage, "plan");
    }
}
