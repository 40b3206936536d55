//! `pair`'s child processes (`__pair`, on the machinery of [`crate::child`]): one lists this node's ports and
//! GPUs, and one per port pair measures it over the control socket it inherits. The measuring child returns the
//! legs it measured, numbers and where they stopped; the parent judges them (`pair::link`).

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::child::{self, ChildFailure};
use crate::host::Host;
use crate::measure::memory::{self, MemoryChoice, TestMemory};
use crate::measure::rc::{self, PortTarget};
use crate::measure::rdma_pair::{self, PairPlan, Role};
use crate::model::common;
use crate::pair::inventory::{self, Inventory};
use crate::pair::judge::LegRun;
use crate::pair::session::{Handoff, Peer};
use crate::pair::wire::{self, PortInfo};
use crate::recording::Answers;

/// A measuring child is killed this long after the deadline: its phases end at the deadline and it still has to
/// send its reply. Shorter than the supervisor's grace, so the report names the call that did not return.
pub const CHILD_GRACE: Duration = Duration::from_secs(1);
/// Listing the ports and GPUs takes at most this long, and at most half the deadline: a hung library must leave
/// time to tell the peer. Generous, because `cuInit` on eight GPUs without persistence mode takes seconds.
const INVENTORY_LIMIT: Duration = Duration::from_secs(20);

/// What a `__pair` child process does.
#[derive(Debug, Serialize, Deserialize)]
enum Job {
    /// List the ports of this node and the GPUs whose memory they move (`root`: a recorded tree; none: the
    /// live host).
    Inventory {
        root: Option<PathBuf>,
        memory: MemoryChoice,
    },
    /// Measure one port pair over the inherited control socket.
    Measure(Box<MeasureJob>),
}

#[derive(Debug, Serialize, Deserialize)]
struct MeasureJob {
    peer: Handoff,
    role: Role,
    mine: PortInfo,
    target: PortTarget,
    theirs: PortInfo,
    plan: PairPlan,
}

/// What a `__pair` child answers, one for each [`Job`].
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Inventory(Box<Inventory>),
    Measured(Box<MeasuredLegs>),
}

impl child::Job for Job {
    const SUBCOMMAND: &'static str = "__pair";
    type Reply = Reply;
}

/// A port pair's legs as measured: numbers, or where each stopped. No verdict: the parent judges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredLegs {
    /// Host memory at both ends: always, the control.
    pub host: LegRun,
    /// Present when either end brought GPU memory.
    pub gpu: Option<LegRun>,
}

/// A reply to another job than the one sent: a bug, reported like an unreadable reply.
fn wrong_reply(reply: Reply) -> ChildFailure {
    ChildFailure {
        summary: format!("the child process answered another job: {reply:?}"),
        evidence: vec![],
        timed_out: false,
        last_call: None,
        interrupted: false,
    }
}

/// How long listing the ports may take before a run that ends at `deadline`.
pub fn inventory_limit(deadline: Instant) -> Duration {
    INVENTORY_LIMIT.min(deadline.saturating_duration_since(Instant::now()) / 2)
}

/// This node's ports and GPUs, listed in a child process killed after `limit`.
pub fn list_ports(root: Option<PathBuf>, memory: MemoryChoice, limit: Duration) -> Inventory {
    let job = Job::Inventory { root, memory };
    let listed = child::run(&job, limit, |_| {}).and_then(|reply| match reply {
        Reply::Inventory(inv) => Ok(*inv),
        other => Err(wrong_reply(other)),
    });
    listed.unwrap_or_else(|f| {
        Inventory::failed(
            format!("listing this node's RDMA ports and GPUs: {}", f.summary),
            f.code(),
        )
    })
}

/// Entry point of `fabric-preflight __pair`.
pub fn child_main() -> i32 {
    child::serve(|job: Job| match job {
        Job::Inventory { root, memory } => {
            let host = match root {
                Some(dir) => Host::at(&dir),
                None => Ok(Host::live()),
            };
            let inv = host
                .and_then(|h| Ok((Answers::for_host(&h)?, h)))
                .map(|(answers, host)| {
                    let gpus = inventory::gpu_source(&host, memory, &memory::cuda_gpus);
                    inventory::inventory(&host, &answers, gpus)
                })
                .unwrap_or_else(|e| Inventory::failed(format!("{e:#}"), &common::UNREAD));
            Reply::Inventory(Box::new(inv))
        }
        Job::Measure(job) => {
            // SAFETY: the parent cleared close-on-exec on this descriptor for this child alone; nothing else here
            // owns it.
            let mut peer = unsafe { Peer::adopt(job.peer) };
            Reply::Measured(Box::new(measure(
                &mut peer,
                job.role,
                &job.mine,
                &job.target,
                &job.theirs,
                &job.plan,
            )))
        }
    })
}

/// Runs [`measure`] in a child process that inherits the control socket, killed a moment after the deadline.
/// `Err`: the child was killed or crashed, or the socket could not be handed over.
pub fn measure_in_child(
    peer: &Peer,
    role: Role,
    mine: &PortInfo,
    target: &PortTarget,
    theirs: &PortInfo,
    plan: &PairPlan,
) -> Result<MeasuredLegs, ChildFailure> {
    let (handoff, socket) = peer.handoff().map_err(|e| ChildFailure {
        summary: format!("cannot hand the control socket to a child process: {e}"),
        evidence: vec![],
        timed_out: false,
        last_call: None,
        interrupted: false,
    })?;
    let fd = socket.as_raw_fd();
    let job = Job::Measure(Box::new(MeasureJob {
        peer: handoff,
        role,
        mine: mine.clone(),
        target: target.clone(),
        theirs: theirs.clone(),
        plan: *plan,
    }));
    let timeout = plan.deadline.saturating_duration_since(Instant::now()) + CHILD_GRACE;
    let measured = child::run(&job, timeout, |cmd| {
        // SAFETY: between fork and exec only fcntl, which is async-signal-safe, on a descriptor this process
        // owns: the duplicate stays open in this child alone.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    });
    drop(socket);
    measured.and_then(|reply| match reply {
        Reply::Measured(legs) => Ok(*legs),
        other => Err(wrong_reply(other)),
    })
}

/// The host leg always (the control); the GPU leg when either end brings GPU memory. Both ends decide from the
/// same two announcements, so they run the same legs in the same order. A failed host leg ends the pair: both
/// ends saw it fail (a failure is sent to the peer), so both skip the GPU leg, and a failure mid-leg can leave
/// the control channel out of step for another leg.
fn measure(
    peer: &mut Peer,
    role: Role,
    mine: &PortInfo,
    target: &PortTarget,
    theirs: &PortInfo,
    plan: &PairPlan,
) -> MeasuredLegs {
    let host = leg(peer, role, target, plan, None);
    let gpu = wire::gpu_leg(&mine.memory, &theirs.memory).then(|| match &host {
        LegRun::Done(_) if !peer.is_gone() => leg(peer, role, target, plan, mine.memory.gpu()),
        LegRun::Done(_) => LegRun::NotRun("the peer went away after the host-memory leg".into()),
        _ => LegRun::NotRun("the host-memory leg failed first".into()),
    });
    MeasuredLegs { host, gpu }
}

/// One leg through this end's memory: the GPU at `gpu`, or host memory.
fn leg(
    peer: &mut Peer,
    role: Role,
    target: &PortTarget,
    plan: &PairPlan,
    gpu: Option<&str>,
) -> LegRun {
    let len = plan.region_bytes();
    let memory = match gpu {
        Some(bus_id) => TestMemory::gpu(bus_id, len),
        None => Ok(TestMemory::host(len)),
    };
    let result = match memory {
        Ok(mut memory) => rdma_pair::run(role, target, *plan, &mut memory, peer),
        Err(f) => {
            rdma_pair::stop_before_endpoint(peer, &f);
            Err(f)
        }
    };
    match result {
        Ok(outcome) => LegRun::Done(outcome),
        Err(failure) => leg_failed(peer, failure),
    }
}

/// A leg that stopped at `failure`. A failure the peer reported is its verdict on the path, even when its
/// process has ended by now (a ring node ends as soon as both its links are done): the peer did not go away.
fn leg_failed(peer: &mut Peer, failure: rc::Failure) -> LegRun {
    LegRun::Failed {
        peer_gone: !rdma_pair::is_relayed(&failure) && peer.is_gone(),
        failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pair::session;

    /// In the three-VM ring, vm-c reported its retry-exceeded completion and ended before vm-a judged the link:
    /// vm-a called that an error ("went away mid-transfer") instead of the fabric failure it was.
    #[test]
    fn a_completion_failure_the_peer_reported_fails_after_it_left() {
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut here, there) = session::connected_peers(deadline);
        drop(there);
        let theirs = rc::fail(
            "RDMA WRITE completion",
            "work completion status 12 (transport retry counter exceeded: no ACK from the peer)",
        );
        let LegRun::Failed { peer_gone, .. } = leg_failed(&mut here, rdma_pair::relayed(&theirs))
        else {
            panic!("not failed")
        };
        assert!(!peer_gone);
        // The peer that vanished without a word is still gone.
        let LegRun::Failed { peer_gone, .. } = leg_failed(
            &mut here,
            rc::fail("peer: RDMA WRITE", "closed the connection"),
        ) else {
            panic!("not failed")
        };
        assert!(peer_gone);
    }
}
