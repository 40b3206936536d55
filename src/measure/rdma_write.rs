//! An RDMA WRITE loopback through one port: one device, one protection domain, one memory region holding a
//! source half and a destination half, two RC queue pairs on the same port connected to each other (IB: by
//! LID; RoCE: by the RoCE v2 GID). Queue pair A RDMA-WRITEs the source half into the destination half through
//! the port. The caller owns the memory (host or GPU) and says what the data should be; no verdicts here.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{BasicCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use crate::dynlib::verbs::chain;
use crate::isolate::breadcrumb;

/// Which port and how to address it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortTarget {
    pub device: String,
    pub port: u8,
    /// RoCE: the RoCE v2 GID index and value. IB: `None` (LID addressing).
    pub roce_gid: Option<(u32, [u8; 16])>,
}

/// Memory to register: `len` bytes at `addr`, the first half the source, the second the destination.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    pub addr: u64,
    pub len: usize,
    /// A DMA-BUF fd exporting exactly this range (GPU memory on the DMA-BUF path).
    pub dmabuf_fd: Option<i32>,
}

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

/// How the memory got registered, and each refused attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// `ibv_reg_dmabuf_mr` or `ibv_reg_mr`.
    pub call: String,
    pub refused: Vec<String>,
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

/// Where the loopback stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// `open device`, `register memory`, `connect`, `RDMA WRITE`, …
    pub stage: String,
    pub message: String,
    /// Registration attempts made before the failure (to say which path was refused).
    pub refused_registrations: Vec<String>,
}

fn fail(stage: &str, message: impl Into<String>) -> Failure {
    Failure {
        stage: stage.into(),
        message: message.into(),
        refused_registrations: Vec::new(),
    }
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
    let list = DeviceList::new().map_err(|e| fail("ibv_get_device_list", chain(&e)))?;
    let device = list
        .iter()
        .find(|d| d.name() == target.device)
        .ok_or_else(|| {
            fail(
                "find device",
                format!("{} not in the device list", target.device),
            )
        })?;
    breadcrumb("ibv_open_device");
    let ctx = device
        .open()
        .map_err(|e| fail("ibv_open_device", chain(&e)))?;
    breadcrumb("ibv_query_port");
    let port = ctx
        .query_port(target.port)
        .map_err(|e| fail("ibv_query_port", chain(&e)))?;
    let lid = port.lid();
    // sideway panics on MTU codes it does not know; read the raw value through its Debug-free path.
    let mtu = active_mtu(&port);
    breadcrumb("ibv_alloc_pd");
    let pd = ctx
        .alloc_pd()
        .map_err(|e| fail("ibv_alloc_pd", chain(&e)))?;
    let (mr, registration) = register(&pd, region)?;
    breadcrumb("ibv_create_cq");
    let depth = plan.queue_depth.max(1);
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(depth * 2 + 4)
        .build()
        .map_err(|e| fail("ibv_create_cq", chain(&e)))?;
    let mut qp_a = create_qp(&pd, &cq, depth)?;
    let mut qp_b = create_qp(&pd, &cq, depth)?;
    let (qpn_a, qpn_b) = (qp_a.qp_number(), qp_b.qp_number());
    connect(&mut qp_a, target, lid, mtu, qpn_b, PSN_A, PSN_B)?;
    connect(&mut qp_b, target, lid, mtu, qpn_a, PSN_B, PSN_A)?;

    let src = region.addr;
    let dst = region.addr + half as u64;
    let lkey = mr.lkey();
    let rkey = mr.rkey();

    // Bandwidth: keep `depth` writes of `message_bytes` in flight.
    let mut cut_short = false;
    let mut posted = 0u32;
    let mut completed = 0u32;
    let started = Instant::now();
    while completed < plan.bw_messages {
        while posted < plan.bw_messages && posted - completed < depth {
            if Instant::now() >= plan.deadline {
                cut_short = true;
                break;
            }
            post_write(
                &mut qp_a,
                posted as u64,
                lkey,
                src,
                rkey,
                dst,
                plan.message_bytes as u32,
            )?;
            posted += 1;
        }
        if posted == completed {
            break;
        }
        completed += wait_completions(&cq, plan.deadline)?;
    }
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
        post_write(
            &mut qp_a,
            u64::from(lat_samples),
            lkey,
            src,
            rkey,
            dst,
            LAT_BYTES,
        )?;
        wait_completions(&cq, plan.deadline)?;
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

fn active_mtu(port: &sideway::ibverbs::device_context::PortAttr) -> Mtu {
    // `active_mtu()` converts with a panic on unknown codes; 1024 is safe on every link layer.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| port.active_mtu()))
        .unwrap_or(Mtu::Mtu1024)
}

fn access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

/// DMA-BUF first where an fd is given (no peer-memory module needed), then the plain pointer (host memory,
/// or GPU memory with nvidia_peermem loaded).
fn register(
    pd: &Arc<ProtectionDomain>,
    region: Region,
) -> Result<(Arc<MemoryRegion>, Registration), Failure> {
    let mut refused = Vec::new();
    if let Some(fd) = region.dmabuf_fd {
        breadcrumb("ibv_reg_dmabuf_mr");
        // SAFETY: `fd` exports exactly [addr, addr+len) (the caller got it for that range) and stays open.
        match unsafe { pd.reg_dmabuf_mr(0, region.len, region.addr, fd, access()) } {
            Ok(mr) => {
                return Ok((
                    mr,
                    Registration {
                        call: "ibv_reg_dmabuf_mr".into(),
                        refused,
                    },
                ))
            }
            Err(e) => refused.push(format!("ibv_reg_dmabuf_mr = {}", chain(&e))),
        }
    }
    breadcrumb("ibv_reg_mr");
    // SAFETY: the caller's allocation spans `len` bytes at `addr` and outlives the memory region.
    match unsafe { pd.reg_mr(region.addr as usize, region.len, access()) } {
        Ok(mr) => Ok((
            mr,
            Registration {
                call: "ibv_reg_mr".into(),
                refused,
            },
        )),
        Err(e) => {
            refused.push(format!("ibv_reg_mr = {}", chain(&e)));
            Err(Failure {
                stage: "register memory".into(),
                message: refused.join("; "),
                refused_registrations: refused,
            })
        }
    }
}

fn create_qp(
    pd: &Arc<ProtectionDomain>,
    cq: &Arc<BasicCompletionQueue>,
    depth: u32,
) -> Result<BasicQueuePair, Failure> {
    breadcrumb("ibv_create_qp");
    pd.create_qp_builder()
        .setup_send_cq(Arc::clone(cq))
        .setup_recv_cq(Arc::clone(cq))
        .setup_max_send_wr(depth)
        .setup_max_recv_wr(1)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1)
        .build()
        .map_err(|e| fail("ibv_create_qp", chain(&e)))
}

/// INIT → RTR → RTS towards `remote_qpn` on the same port.
fn connect(
    qp: &mut BasicQueuePair,
    target: &PortTarget,
    lid: u16,
    mtu: Mtu,
    remote_qpn: u32,
    own_psn: u32,
    remote_psn: u32,
) -> Result<(), Failure> {
    breadcrumb("ibv_modify_qp(INIT)");
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(target.port)
        .setup_access_flags(access());
    qp.modify(&init)
        .map_err(|e| fail("ibv_modify_qp(INIT)", chain(&e)))?;

    let mut av = AddressHandleAttribute::new();
    av.setup_port(target.port).setup_service_level(0);
    match target.roce_gid {
        Some((index, raw)) => {
            av.setup_dest_lid(0)
                .setup_grh_dest_gid(&Gid { raw })
                .setup_grh_src_gid_index(index as u8)
                .setup_grh_hop_limit(1);
        }
        None => {
            av.setup_dest_lid(lid);
        }
    }
    breadcrumb("ibv_modify_qp(RTR)");
    let mut rtr = QueuePairAttribute::new();
    rtr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(mtu)
        .setup_dest_qp_num(remote_qpn)
        .setup_rq_psn(remote_psn)
        .setup_max_dest_read_atomic(1)
        .setup_min_rnr_timer(12)
        .setup_address_vector(&av);
    qp.modify(&rtr)
        .map_err(|e| fail("ibv_modify_qp(RTR)", chain(&e)))?;

    breadcrumb("ibv_modify_qp(RTS)");
    let mut rts = QueuePairAttribute::new();
    rts.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(own_psn)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(1);
    qp.modify(&rts)
        .map_err(|e| fail("ibv_modify_qp(RTS)", chain(&e)))
}

fn post_write(
    qp: &mut BasicQueuePair,
    wr_id: u64,
    lkey: u32,
    src: u64,
    rkey: u32,
    dst: u64,
    len: u32,
) -> Result<(), Failure> {
    let mut guard = qp.start_post_send();
    let wr = guard
        .construct_wr(wr_id, WorkRequestFlags::Signaled)
        .setup_write(rkey, dst);
    // SAFETY: [src, src+len) lies in the registered region, which outlives the work request.
    unsafe { wr.setup_sge(lkey, src, len) };
    guard
        .post()
        .map_err(|e| fail("ibv_post_send(RDMA WRITE)", chain(&e)))
}

/// Polls until at least one completion arrives; an error status or the deadline is a failure.
fn wait_completions(cq: &BasicCompletionQueue, deadline: Instant) -> Result<u32, Failure> {
    loop {
        match cq.start_poll() {
            Ok(poller) => {
                let mut n = 0;
                for wc in poller {
                    if wc.status() != WorkCompletionStatus::Success as u32 {
                        return Err(fail(
                            "RDMA WRITE completion",
                            format!(
                                "work completion status {} (vendor error {:#x})",
                                wc.status(),
                                wc.vendor_err()
                            ),
                        ));
                    }
                    n += 1;
                }
                return Ok(n);
            }
            Err(sideway::ibverbs::completion::PollCompletionQueueError::CompletionQueueEmpty) => {
                if Instant::now() >= deadline {
                    return Err(fail(
                        "RDMA WRITE completion",
                        "no completion before the deadline (port down, or the path drops packets)",
                    ));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(fail("ibv_poll_cq", chain(&e))),
        }
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
