//! Reliable-connected queue pairs through one port: open the port, register memory, create and connect a QP to a
//! remote one (the same port for a loopback, another node's for `pair`), post RDMA WRITE / READ / SEND / RECV,
//! and wait for completions under a deadline. Shared by every verbs measurement; no verdicts here.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{BasicCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
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

/// Memory to register: `len` bytes at `addr`.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    pub addr: u64,
    pub len: usize,
    /// A DMA-BUF fd exporting exactly this range (GPU memory on the DMA-BUF path).
    pub dmabuf_fd: Option<i32>,
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
    /// `open device`, `register memory`, `connect`, `RDMA WRITE`, …
    pub stage: String,
    pub message: String,
    /// Registration attempts made before the failure (to say which path was refused).
    pub refused_registrations: Vec<String>,
}

pub fn fail(stage: &str, message: impl Into<String>) -> Failure {
    Failure {
        stage: stage.into(),
        message: message.into(),
        refused_registrations: Vec::new(),
    }
}

/// The other end of a connection: what a QP needs to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remote {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    /// RoCE: the remote RoCE v2 GID.
    pub gid: Option<[u8; 16]>,
}

/// An opened port: device context, protection domain, and its addressing facts.
pub struct Port {
    pub ctx: Arc<DeviceContext>,
    pub pd: Arc<ProtectionDomain>,
    pub lid: u16,
    pub mtu: Mtu,
}

pub fn open_port(target: &PortTarget) -> Result<Port, Failure> {
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
    // `active_mtu()` converts with a panic on unknown codes; 1024 is safe on every link layer.
    let mtu = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| port.active_mtu()))
        .unwrap_or(Mtu::Mtu1024);
    breadcrumb("ibv_alloc_pd");
    let pd = ctx
        .alloc_pd()
        .map_err(|e| fail("ibv_alloc_pd", chain(&e)))?;
    Ok(Port { ctx, pd, lid, mtu })
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
        send_depth: u32,
        recv_depth: u32,
    ) -> Result<BasicQueuePair, Failure> {
        breadcrumb("ibv_create_qp");
        self.pd
            .create_qp_builder()
            .setup_send_cq(Arc::clone(send_cq))
            .setup_recv_cq(Arc::clone(recv_cq))
            .setup_max_send_wr(send_depth)
            .setup_max_recv_wr(recv_depth)
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
                    stage: "register memory".into(),
                    message: refused.join("; "),
                    refused_registrations: refused,
                })
            }
        }
    }
}

fn access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

/// INIT → RTR → RTS towards `remote` through `local` (GRH with the RoCE v2 GIDs where both ends have one).
pub fn connect(
    qp: &mut BasicQueuePair,
    local: &PortTarget,
    mtu: Mtu,
    remote: &Remote,
    own_psn: u32,
) -> Result<(), Failure> {
    breadcrumb("ibv_modify_qp(INIT)");
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(local.port)
        .setup_access_flags(access());
    qp.modify(&init)
        .map_err(|e| fail("ibv_modify_qp(INIT)", chain(&e)))?;

    let mut av = AddressHandleAttribute::new();
    av.setup_port(local.port).setup_service_level(0);
    match (local.roce_gid, remote.gid) {
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
        .setup_path_mtu(mtu)
        .setup_dest_qp_num(remote.qpn)
        .setup_rq_psn(remote.psn)
        .setup_max_dest_read_atomic(1)
        .setup_min_rnr_timer(12)
        .setup_address_vector(&av);
    qp.modify(&rtr)
        .map_err(|e| fail("ibv_modify_qp(RTR)", chain(&e)))?;

    breadcrumb("ibv_modify_qp(RTS)");
    let mut rts = QueuePairAttribute::new();
    // timeout 14 (67 ms) x retry 7: a peer that stops answering fails the work request in about half a second.
    rts.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(own_psn)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(1);
    qp.modify(&rts)
        .map_err(|e| fail("ibv_modify_qp(RTS)", chain(&e)))
}

/// One signalled work request on the send queue.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// RDMA WRITE of local `len` bytes at `src` to `dst` under `rkey`.
    Write {
        rkey: u32,
        dst: u64,
    },
    /// RDMA READ of `len` remote bytes at `src_remote` into the local buffer.
    Read {
        rkey: u32,
        src_remote: u64,
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

/// Posts `op` on `[local, local+len)` under `lkey`.
pub fn post(
    qp: &mut BasicQueuePair,
    op: Op,
    wr_id: u64,
    lkey: u32,
    local: u64,
    len: u32,
) -> Result<(), Failure> {
    let mut guard = qp.start_post_send();
    let wr = guard.construct_wr(wr_id, WorkRequestFlags::Signaled);
    let wr = match op {
        Op::Write { rkey, dst } => wr.setup_write(rkey, dst),
        Op::Read { rkey, src_remote } => wr.setup_read(rkey, src_remote),
        Op::Send => wr.setup_send(),
    };
    // SAFETY: [local, local+len) lies in the registered region, which outlives the work request.
    unsafe { wr.setup_sge(lkey, local, len) };
    guard
        .post()
        .map_err(|e| fail(&format!("ibv_post_send({})", op.name()), chain(&e)))
}

/// Posts one receive of `len` bytes into `[local, local+len)`.
pub fn post_recv(
    qp: &mut BasicQueuePair,
    wr_id: u64,
    lkey: u32,
    local: u64,
    len: u32,
) -> Result<(), Failure> {
    let mut guard = qp.start_post_recv();
    let wr = guard.construct_wr(wr_id);
    // SAFETY: as in `post`.
    unsafe { wr.setup_sge(lkey, local, len) };
    guard.post().map_err(|e| fail("ibv_post_recv", chain(&e)))
}

/// What a failed work completion means, in words (the statuses a broken path or a dead peer produces).
pub fn completion_status_text(status: u32) -> String {
    let words = match status {
        s if s == WorkCompletionStatus::WorkRequestFlushedError as u32 => {
            "flushed: the queue pair went to the error state"
        }
        s if s == WorkCompletionStatus::RemoteAccessError as u32 => {
            "remote access error: the peer refused the memory key"
        }
        s if s == WorkCompletionStatus::RemoteInvalidRequestError as u32 => {
            "remote invalid request"
        }
        s if s == WorkCompletionStatus::RetryCounterExceededError as u32 => {
            "transport retry counter exceeded: the peer stopped acknowledging (dead, or the path drops packets)"
        }
        s if s == WorkCompletionStatus::ResponderNotReadyRetryCounterExceededError as u32 => {
            "receiver-not-ready retries exceeded: the peer posted no receive"
        }
        _ => "see ibv_wc_status_str",
    };
    format!("work completion status {status} ({words})")
}

/// Polls until at least one completion arrives on `cq`; an error status or the deadline is a failure of `what`.
pub fn wait_completions(
    cq: &BasicCompletionQueue,
    deadline: Instant,
    what: &str,
) -> Result<u32, Failure> {
    loop {
        match cq.start_poll() {
            Ok(poller) => {
                let mut n = 0;
                for wc in poller {
                    if wc.status() != WorkCompletionStatus::Success as u32 {
                        return Err(fail(
                            &format!("{what} completion"),
                            format!(
                                "{} (vendor error {:#x})",
                                completion_status_text(wc.status()),
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
                        &format!("{what} completion"),
                        "no completion before the deadline (port down, peer gone, or the path drops packets)",
                    ));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(fail("ibv_poll_cq", chain(&e))),
        }
    }
}

/// Keeps `depth` signalled `op`s of `len` bytes in flight until `count` completed or `deadline`; returns the
/// number completed and whether the deadline cut the run short.
#[allow(clippy::too_many_arguments)]
pub fn stream(
    qp: &mut BasicQueuePair,
    cq: &BasicCompletionQueue,
    op: Op,
    lkey: u32,
    local: u64,
    len: u32,
    count: u32,
    depth: u32,
    deadline: Instant,
) -> Result<(u32, bool), Failure> {
    let depth = depth.max(1);
    let (mut posted, mut completed, mut cut_short) = (0u32, 0u32, false);
    while completed < count {
        while posted < count && posted - completed < depth {
            if Instant::now() >= deadline {
                cut_short = true;
                break;
            }
            post(qp, op, u64::from(posted), lkey, local, len)?;
            posted += 1;
        }
        if posted == completed {
            break;
        }
        completed += wait_completions(cq, deadline, op.name())?;
    }
    Ok((completed, cut_short))
}
