//! Reliable-connected queue pairs through one port, shared by every verbs measurement: open the port, register
//! memory, create a QP and connect it to a remote one (the same port for `rdma_loopback`, another node's for
//! `rdma_pair`), post RDMA WRITE / READ / SEND / RECV, and poll completions under a deadline. No verdicts here.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, PollCompletionQueueError, WorkCompletionStatus,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use crate::child::breadcrumb;
use crate::dynlib::verbs::chain;

/// Which port and how to address it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortTarget {
    pub device: String,
    pub port: u8,
    /// RoCE: the RoCE v2 GID index and value. IB: `None` (LID addressing).
    pub roce_gid: Option<(u32, [u8; 16])>,
}

impl PortTarget {
    /// How to address `port`: InfiniBand by LID, RoCE by its RoCE v2 GID; `None` for a RoCE port without one,
    /// the error when its GIDs could not be read.
    pub fn of(
        host: &crate::host::Host,
        port: &crate::sysfs::infiniband::PortAttrs,
    ) -> Result<Option<Self>, crate::host::ReadError> {
        let roce_gid = if port.is_ethernet() {
            match crate::sysfs::infiniband::roce_v2_gid(host, &port.device, port.port)? {
                Some(gid) => Some(gid),
                None => return Ok(None),
            }
        } else {
            None
        };
        Ok(Some(PortTarget {
            device: port.device.clone(),
            port: port.port as u8,
            roce_gid,
        }))
    }
}

/// Memory to register: `len` bytes at `addr`.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    pub addr: u64,
    pub len: usize,
    /// A DMA-BUF fd exporting exactly this range (GPU memory on the DMA-BUF path).
    pub dmabuf_fd: Option<i32>,
    /// The CPU can read and write it (host memory): every transfer is then checked as it completes.
    pub host_visible: bool,
}

/// How the memory got registered, and each refused attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// `ibv_reg_dmabuf_mr` or `ibv_reg_mr`.
    pub call: String,
    pub refused: Vec<String>,
}

/// Where a transfer stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// `ibv_open_device`, `register memory`, `ibv_modify_qp(RTR)`, `RDMA WRITE completion`, …
    pub stage: String,
    pub message: String,
    /// Registration attempts made before the failure (to say which path was refused).
    pub refused_registrations: Vec<String>,
}

/// The stage of a registration the NIC refused on every path.
pub const REGISTER_MEMORY: &str = "register memory";
/// What the stage of a failed or missing work completion ends with (`RDMA WRITE completion`).
pub const COMPLETION: &str = " completion";

pub fn fail(stage: &str, message: impl Into<String>) -> Failure {
    Failure {
        stage: stage.into(),
        message: message.into(),
        refused_registrations: Vec::new(),
    }
}

/// The local ACK timeout of a queue pair, as the verbs exponent: each try waits 4.096 µs × 2^exponent for the
/// peer's ACK, and a work request fails with "retry counter exceeded" after [`RETRIES`] retries. 14 (67 ms a
/// try, about half a second in all) is perftest's default: enough for a healthy fabric.
pub const DEFAULT_ACK_TIMEOUT: u8 = 14;
/// Not 7: rxe takes a retry count of 7 as "retry forever" (rxe_comp.c), so a path dropping RoCE never completed
/// with an error and the transfer hung until the deadline (seen in the three-VM ring).
const RETRIES: u8 = 6;

/// The queue pair to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remote {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    /// RoCE: its RoCE v2 GID.
    pub gid: Option<[u8; 16]>,
}

/// An opened port: device context, protection domain and what connecting needs.
pub struct Port {
    pub ctx: Arc<DeviceContext>,
    pub pd: Arc<ProtectionDomain>,
    pub lid: u16,
    pub mtu: Mtu,
    /// RDMA READs in flight: what both ends of a queue pair allow, at most the requested depth.
    pub reads: u8,
}

pub fn open_port(target: &PortTarget, depth: u32) -> Result<Port, Failure> {
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
    breadcrumb("ibv_query_device");
    let attr = ctx
        .query_device()
        .map_err(|e| fail("ibv_query_device", chain(&e)))?;
    let reads = attr
        .max_qp_rd_atom()
        .min(attr.max_qp_init_rd_atom())
        .clamp(1, depth.clamp(1, 16) as i32) as u8;
    breadcrumb("ibv_query_port");
    let port = ctx
        .query_port(target.port)
        .map_err(|e| fail("ibv_query_port", chain(&e)))?;
    let lid = port.lid();
    // `active_mtu()` converts with a panic on unknown codes; 1024 is safe on every link layer.
    let mtu = catch_unwind(AssertUnwindSafe(|| port.active_mtu())).unwrap_or(Mtu::Mtu1024);
    breadcrumb("ibv_alloc_pd");
    let pd = ctx
        .alloc_pd()
        .map_err(|e| fail("ibv_alloc_pd", chain(&e)))?;
    Ok(Port {
        ctx,
        pd,
        lid,
        mtu,
        reads,
    })
}

pub fn mtu_bytes(mtu: Mtu) -> u32 {
    match mtu {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

fn access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

impl Port {
    pub fn create_cq(&self, entries: u32) -> Result<Arc<BasicCompletionQueue>, Failure> {
        breadcrumb("ibv_create_cq");
        self.ctx
            .create_cq_builder()
            .setup_cqe(entries)
            .build()
            .map_err(|e| fail("ibv_create_cq", chain(&e)))
    }

    pub fn create_qp(
        &self,
        send_cq: &Arc<BasicCompletionQueue>,
        recv_cq: &Arc<BasicCompletionQueue>,
        send_wr: u32,
        recv_wr: u32,
    ) -> Result<BasicQueuePair, Failure> {
        breadcrumb("ibv_create_qp");
        self.pd
            .create_qp_builder()
            .setup_send_cq(Arc::clone(send_cq))
            .setup_recv_cq(Arc::clone(recv_cq))
            .setup_max_send_wr(send_wr)
            .setup_max_recv_wr(recv_wr)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .build()
            .map_err(|e| fail("ibv_create_qp", chain(&e)))
    }

    /// DMA-BUF first where an fd is given (no peer-memory module needed), then the plain pointer (host memory,
    /// or GPU memory with nvidia_peermem loaded).
    pub fn register(&self, region: Region) -> Result<(Arc<MemoryRegion>, Registration), Failure> {
        let mut refused = Vec::new();
        if let Some(fd) = region.dmabuf_fd {
            breadcrumb("ibv_reg_dmabuf_mr");
            // SAFETY: `fd` exports exactly [addr, addr+len) (the caller got it for that range) and stays open.
            match unsafe {
                self.pd
                    .reg_dmabuf_mr(0, region.len, region.addr, fd, access())
            } {
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
        match unsafe { self.pd.reg_mr(region.addr as usize, region.len, access()) } {
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
                    stage: REGISTER_MEMORY.into(),
                    message: refused.join("; "),
                    refused_registrations: refused,
                })
            }
        }
    }

    /// INIT → RTR → RTS towards `remote` through `target` (GRH with the RoCE v2 GIDs where both ends have one);
    /// `ack_timeout` is the verbs exponent (see [`DEFAULT_ACK_TIMEOUT`]).
    pub fn connect(
        &self,
        qp: &mut BasicQueuePair,
        target: &PortTarget,
        remote: &Remote,
        own_psn: u32,
        ack_timeout: u8,
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
        match (target.roce_gid, remote.gid) {
            (Some((index, _)), Some(raw)) => {
                av.setup_dest_lid(0)
                    .setup_grh_dest_gid(&Gid { raw })
                    .setup_grh_src_gid_index(index as u8)
                    .setup_grh_hop_limit(64);
            }
            _ => {
                av.setup_dest_lid(remote.lid);
            }
        }
        breadcrumb("ibv_modify_qp(RTR)");
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(self.mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(self.reads)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&av);
        qp.modify(&rtr)
            .map_err(|e| fail("ibv_modify_qp(RTR)", chain(&e)))?;

        breadcrumb("ibv_modify_qp(RTS)");
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(own_psn)
            .setup_timeout(ack_timeout)
            .setup_retry_cnt(RETRIES)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(self.reads);
        qp.modify(&rts)
            .map_err(|e| fail("ibv_modify_qp(RTS)", chain(&e)))
    }
}

/// One signalled work request on the send queue; the local buffer is given to [`post`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// RDMA WRITE of the local buffer to `remote` under `rkey`.
    Write {
        rkey: u32,
        remote: u64,
    },
    /// RDMA READ of `remote` under `rkey` into the local buffer.
    Read {
        rkey: u32,
        remote: u64,
    },
    Send,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Write { .. } => "RDMA WRITE",
            Op::Read { .. } => "RDMA READ",
            Op::Send => "SEND",
        }
    }
}

/// Posts `op` on the local `[addr, addr+len)` under `lkey`.
pub fn post(
    qp: &mut BasicQueuePair,
    op: Op,
    wr_id: u64,
    lkey: u32,
    addr: u64,
    len: u32,
) -> Result<(), Failure> {
    let mut guard = qp.start_post_send();
    let wr = guard.construct_wr(wr_id, WorkRequestFlags::Signaled);
    let wr = match op {
        Op::Write { rkey, remote } => wr.setup_write(rkey, remote),
        Op::Read { rkey, remote } => wr.setup_read(rkey, remote),
        Op::Send => wr.setup_send(),
    };
    // SAFETY: the caller's buffer lies in the registered region, which outlives the work request.
    unsafe { wr.setup_sge(lkey, addr, len) };
    guard
        .post()
        .map_err(|e| fail(&format!("ibv_post_send({})", op.name()), chain(&e)))
}

/// Posts one receive of `len` bytes into `[addr, addr+len)`.
pub fn post_recv(
    qp: &mut BasicQueuePair,
    wr_id: u64,
    lkey: u32,
    addr: u64,
    len: u32,
) -> Result<(), Failure> {
    let mut guard = qp.start_post_recv();
    let wr = guard.construct_wr(wr_id);
    // SAFETY: as in `post`.
    unsafe { wr.setup_sge(lkey, addr, len) };
    guard.post().map_err(|e| fail("ibv_post_recv", chain(&e)))
}

/// The bandwidth loop of every measurement here: keeps up to `depth` signalled work requests in flight until
/// `count` have completed or `phase_end` has passed (those in flight are still waited for). `post(n)` posts the
/// n-th, `wait()` returns the ids of completions that have arrived (at least one), `done(id)` sees each.
/// Returns how many completed.
pub fn keep_in_flight(
    count: u32,
    depth: u32,
    phase_end: Instant,
    mut post: impl FnMut(u32) -> Result<(), Failure>,
    mut wait: impl FnMut() -> Result<Vec<u64>, Failure>,
    mut done: impl FnMut(u64),
) -> Result<u32, Failure> {
    let depth = depth.max(1);
    let (mut posted, mut completed) = (0u32, 0u32);
    loop {
        while posted < count && posted - completed < depth && Instant::now() < phase_end {
            post(posted)?;
            posted += 1;
        }
        if posted == completed {
            return Ok(completed);
        }
        for id in wait()? {
            done(id);
            completed += 1;
        }
    }
}

/// What a ping-pong measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundTrips {
    /// One-way latencies (half of each round trip, as perftest's `ib_send_lat`), sorted.
    pub samples: Vec<std::time::Duration>,
    /// Round trips whose data did not come back intact.
    pub mismatched: u32,
    /// The deadline ended the phase.
    pub cut_short: bool,
}

/// The latency loop of every measurement here: `one(n)` makes round trip n and returns how long it took and
/// whether it came back intact; runs `count` of them or until `phase_end`.
pub fn round_trips(
    count: u32,
    phase_end: Instant,
    deadline: Instant,
    mut one: impl FnMut(u64) -> Result<(std::time::Duration, bool), Failure>,
) -> Result<RoundTrips, Failure> {
    let mut samples = Vec::with_capacity(count as usize);
    let (mut mismatched, mut cut_short) = (0, false);
    for n in 0..u64::from(count) {
        if Instant::now() >= phase_end {
            cut_short = Instant::now() >= deadline;
            break;
        }
        let (took, intact) = one(n)?;
        samples.push(took / 2);
        mismatched += u32::from(!intact);
    }
    samples.sort_unstable();
    Ok(RoundTrips {
        samples,
        mismatched,
        cut_short,
    })
}

/// One receive completion: its work request id and length.
pub fn recv_one(cq: &BasicCompletionQueue, deadline: Instant) -> Result<(u64, u32), Failure> {
    loop {
        match cq.start_poll() {
            Ok(poller) => {
                if let Some(wc) = poller.into_iter().next() {
                    check_status(wc.status(), wc.vendor_err(), "RECV")?;
                    return Ok((wc.wr_id(), wc.byte_len()));
                }
            }
            Err(PollCompletionQueueError::CompletionQueueEmpty) => idle(deadline, "RECV")?,
            Err(e) => return Err(fail("ibv_poll_cq", chain(&e))),
        }
    }
}

/// The work request ids of the completions that have arrived (at least one); an error status or the
/// deadline is a failure of `what`.
pub fn poll(cq: &BasicCompletionQueue, deadline: Instant, what: &str) -> Result<Vec<u64>, Failure> {
    Ok(poll_lengths(cq, deadline, what)?
        .into_iter()
        .map(|(id, _)| id)
        .collect())
}

/// [`poll`] with each completion's byte count (what a receive got).
pub fn poll_lengths(
    cq: &BasicCompletionQueue,
    deadline: Instant,
    what: &str,
) -> Result<Vec<(u64, u32)>, Failure> {
    loop {
        match cq.start_poll() {
            Ok(poller) => {
                let mut done = Vec::new();
                for wc in poller {
                    check_status(wc.status(), wc.vendor_err(), what)?;
                    done.push((wc.wr_id(), wc.byte_len()));
                }
                return Ok(done);
            }
            Err(PollCompletionQueueError::CompletionQueueEmpty) => idle(deadline, what)?,
            Err(e) => return Err(fail("ibv_poll_cq", chain(&e))),
        }
    }
}

/// The message of a wait that reached its deadline without a completion.
pub const NO_COMPLETION: &str =
    "no completion before the deadline (port down, peer gone, or the path drops packets)";

/// The failure is a wait that ran out of time (rather than an error completion or a failed call).
pub fn timed_out(f: &Failure) -> bool {
    f.message == NO_COMPLETION
}

fn idle(deadline: Instant, what: &str) -> Result<(), Failure> {
    if Instant::now() >= deadline {
        return Err(fail(&format!("{what}{COMPLETION}"), NO_COMPLETION));
    }
    std::hint::spin_loop();
    Ok(())
}

fn check_status(status: u32, vendor_err: u32, what: &str) -> Result<(), Failure> {
    if status == WorkCompletionStatus::Success as u32 {
        return Ok(());
    }
    Err(fail(
        &format!("{what}{COMPLETION}"),
        format!(
            "work completion status {status} ({}, vendor error {vendor_err:#x})",
            status_name(status)
        ),
    ))
}

/// `ibv_wc_status_str` for the statuses a broken path or a dead peer produces.
fn status_name(status: u32) -> &'static str {
    match status {
        1 => "local length error",
        2 => "local QP operation error",
        4 => "local protection error",
        5 => "work request flushed: the queue pair went to error",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded: no ACK from the peer",
        13 => "RNR retry counter exceeded",
        _ => "see ibv_wc_status_str",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn keep_in_flight_holds_the_depth_and_sees_every_completion() {
        let far = Instant::now() + Duration::from_secs(60);
        let (mut in_flight, mut most, mut seen) = (Vec::new(), 0, Vec::new());
        let in_flight = std::cell::RefCell::new(&mut in_flight);
        let completed = keep_in_flight(
            10,
            3,
            far,
            |n| {
                in_flight.borrow_mut().push(u64::from(n));
                most = most.max(in_flight.borrow().len());
                Ok(())
            },
            || Ok(vec![in_flight.borrow_mut().remove(0)]),
            |id| seen.push(id),
        )
        .unwrap();
        assert_eq!(completed, 10);
        assert_eq!(most, 3);
        assert_eq!(seen, (0..10).collect::<Vec<u64>>());
        // Past the phase end nothing is posted, and nothing is waited for.
        let none = keep_in_flight(
            10,
            3,
            Instant::now(),
            |_| unreachable!(),
            || unreachable!(),
            |_| {},
        );
        assert_eq!(none.unwrap(), 0);
    }

    #[test]
    fn round_trips_halve_sort_and_count_mismatches() {
        let far = Instant::now() + Duration::from_secs(60);
        let r = round_trips(5, far, far, |n| Ok((Duration::from_millis(10 - n), n != 3))).unwrap();
        assert_eq!(r.samples.len(), 5);
        assert_eq!(r.samples[0], Duration::from_millis(3));
        assert!(r.samples.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!((r.mismatched, r.cut_short), (1, false));
        let now = Instant::now();
        let cut = round_trips(5, now, now, |_| unreachable!()).unwrap();
        assert!(cut.samples.is_empty() && cut.cut_short);
        let failed = round_trips(5, far, far, |_| Err(fail("RECV completion", "x")));
        assert_eq!(failed.unwrap_err().stage, "RECV completion");
    }
}
