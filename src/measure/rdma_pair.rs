//! One port of this node against one port of another, over an RC queue pair (`measure::rc`): RDMA WRITE and
//! RDMA READ bandwidth with the data checked at the receiving end, and SEND/RECV ping-pong latency (one-way =
//! half the round trip, as perftest's `ib_send_lat` reports), each echo checked against the sequence number
//! sent where the CPU can read the memory. The initiator drives; the responder serves and checks. The caller
//! gives the memory (host or GPU, `measure::memory`); both sides synchronise through a [`Channel`] (the `pair`
//! TCP connection); nothing here knows sockets or verdicts.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sideway::ibverbs::queue_pair::QueuePair;

use crate::child::breadcrumb;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::queue_pair::BasicQueuePair;

use crate::measure::memory::{TestMemory, CUDA};
use crate::measure::rc::{
    self, fail, Failure, Op, PortTarget, Region, Registration, Remote, RoundTrips,
};
use crate::measure::rdma_loopback::{bits_per_sec_gbps, pattern_from, percentile_us};

/// What the two ends tell each other during a measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Sync {
    /// The sender's QP and buffer: `addr..addr+len`, source half first, and how it registered it.
    Endpoint {
        remote: Remote,
        addr: u64,
        rkey: u32,
        len: u64,
        registration: Registration,
    },
    /// The sender's QP is connected and its first receive posted.
    Ready,
    /// The initiator finished writing into the responder's destination half.
    WriteDone,
    /// The responder's destination half equals the pattern.
    WriteChecked { verified: bool },
    /// The initiator starts the ping-pong.
    PingStart,
    /// The initiator's numbers, so both reports carry the same result.
    Outcome(PairOutcome),
    /// The sender stopped here.
    Failed(Failure),
}

/// The control channel: ordered, reliable, bounded in time; its errors name the peer.
pub trait Channel {
    fn send(&mut self, step: Sync) -> Result<(), Failure>;
    fn recv(&mut self, during: &str) -> Result<Sync, Failure>;
    /// The peer closed its end (its process ended); checked while waiting for completions.
    fn peer_gone(&mut self) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Initiator,
    Responder,
}

/// Serializable so that `pair` can hand it to the child process that measures (`commands::pair`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PairPlan {
    pub message_bytes: usize,
    pub bw_messages: u32,
    pub queue_depth: u32,
    pub pings: u32,
    /// Each phase (WRITE, READ, ping-pong) ends after its count or this long, whichever comes first.
    pub phase_time: Duration,
    /// The queue pair's local ACK timeout, the verbs exponent (`--ack-timeout`).
    pub ack_timeout: u8,
    /// Hard end: a phase cut by it is `cut_short`.
    #[serde(with = "crate::child::deadline")]
    pub deadline: Instant,
}

impl PairPlan {
    /// The memory one end registers: its source half, then its destination half.
    pub fn region_bytes(&self) -> usize {
        2 * self.message_bytes
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairOutcome {
    /// How this end registered its memory, and the peer.
    pub registration: Registration,
    pub peer_registration: Registration,
    pub write_gbps: f64,
    pub writes: u32,
    pub write_verified: bool,
    pub read_gbps: f64,
    pub reads: u32,
    pub read_verified: bool,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub pings: u32,
    /// Round trips whose echo was not the ping sent (wrong length, or where readable, wrong sequence number).
    pub echoes_mismatched: u32,
    /// The deadline ended a phase early.
    pub cut_short: bool,
}

impl PairOutcome {
    /// The numbers the shared leg rule judges.
    pub fn numbers(&self) -> crate::rules::transfer_verdict::LegNumbers {
        crate::rules::transfer_verdict::LegNumbers {
            write_gbps: self.write_gbps,
            read_gbps: self.read_gbps,
            writes: self.writes,
            reads: self.reads,
            round_trips: self.pings,
            latency_p50_us: self.latency_p50_us,
            latency_p99_us: self.latency_p99_us,
            verified: self.write_verified && self.read_verified && self.echoes_mismatched == 0,
            cut_short: self.cut_short,
        }
    }
}

const PING_BYTES: u32 = 8;
/// The last ping is shorter: its length, which the responder sees even in GPU memory, says stop.
const STOP_BYTES: u32 = 4;
/// A responder that gets no ping for this long decides the initiator is gone.
const PING_IDLE: Duration = Duration::from_secs(5);
/// How often a wait for completions looks whether the peer is still there.
const LIVENESS_EVERY: Duration = Duration::from_millis(200);

/// Waits for completions on `cq` until `until`, in slices; between slices a peer that closed its control
/// connection ends the wait at once (a dead peer never acknowledges, so waiting out the deadline tells nothing).
fn completions(
    cq: &BasicCompletionQueue,
    until: Instant,
    what: &str,
    ch: &mut dyn Channel,
) -> Result<Vec<(u64, u32)>, Failure> {
    loop {
        match rc::poll_lengths(cq, until.min(Instant::now() + LIVENESS_EVERY), what) {
            Err(f) if rc::timed_out(&f) && Instant::now() < until => {
                if ch.peer_gone() {
                    return Err(fail(
                        &format!("peer: {what}"),
                        format!("the peer closed its control connection while {what} was in flight: it died mid-transfer"),
                    ));
                }
            }
            other => return other,
        }
    }
}

/// Runs one port pair through `memory` (at least [`PairPlan::region_bytes`]; host or GPU, the caller's). A
/// failure is sent to the peer (best effort) before it is returned.
pub fn run(
    role: Role,
    target: &PortTarget,
    plan: PairPlan,
    memory: &mut TestMemory,
    ch: &mut dyn Channel,
) -> Result<PairOutcome, Failure> {
    let mut endpoint_sent = false;
    let result = run_inner(role, target, plan, memory, ch, &mut endpoint_sent);
    if let Err(f) = &result {
        if !f.stage.starts_with("peer") && !f.stage.starts_with("control") {
            if endpoint_sent {
                let _ = ch.send(Sync::Failed(f.clone()));
            } else {
                stop_before_endpoint(ch, f);
            }
        }
    }
    result
}

/// This end stopped before sending its endpoint (memory, port or registration): tell the peer, and take the
/// peer's first message (its endpoint, or its own failure), which it sent meanwhile, so the next leg on this
/// connection does not read it as its own.
pub fn stop_before_endpoint(ch: &mut dyn Channel, f: &Failure) {
    let _ = ch.send(Sync::Failed(f.clone()));
    let _ = ch.recv("endpoint exchange");
}

fn run_inner(
    role: Role,
    target: &PortTarget,
    plan: PairPlan,
    memory: &mut TestMemory,
    ch: &mut dyn Channel,
    endpoint_sent: &mut bool,
) -> Result<PairOutcome, Failure> {
    let half = plan.message_bytes;
    if half < PING_BYTES as usize || half > u32::MAX as usize {
        return Err(fail("plan", format!("message size {half} out of range")));
    }
    let region = Region {
        len: plan.region_bytes(),
        ..memory.region()
    };
    if memory.region().len < region.len {
        return Err(fail("plan", "the test memory is smaller than the plan"));
    }
    memory.fill(|buf| {
        stamp_source(buf, half, Phase::Write);
        buf[half..].fill(0);
    })?;
    let (addr, host_visible) = (region.addr, region.host_visible);
    let (src, dst) = (addr, addr + half as u64);

    let depth = plan.queue_depth.max(1);
    let port = rc::open_port(target, depth)?;
    let (mr, mut registration) = port.register(region).map_err(|mut f| {
        f.refused_registrations.splice(0..0, memory.refused());
        f
    })?;
    registration.refused.splice(0..0, memory.refused());
    let send_cq = port.create_cq(depth + 4)?;
    let recv_cq = port.create_cq(4)?;
    let mut qp = port.create_qp(&send_cq, &recv_cq, depth + 2, 2)?;
    let lkey = mr.lkey();
    let psn = match role {
        Role::Initiator => 0x1000,
        Role::Responder => 0x2000,
    };
    ch.send(Sync::Endpoint {
        remote: Remote {
            qpn: qp.qp_number(),
            psn,
            lid: port.lid,
            gid: target.roce_gid.map(|(_, raw)| raw),
        },
        addr,
        rkey: mr.rkey(),
        len: region.len as u64,
        registration: registration.clone(),
    })?;
    *endpoint_sent = true;
    let (peer, peer_addr, peer_rkey, peer_len, peer_registration) =
        match expect(ch, "endpoint exchange")? {
            Sync::Endpoint {
                remote,
                addr,
                rkey,
                len,
                registration,
            } => (remote, addr, rkey, len, registration),
            other => return Err(unexpected("endpoint exchange", &other)),
        };
    let (peer_src, peer_dst) = peer_halves(peer_addr, peer_len, region.len as u64, half as u64)?;
    port.connect(&mut qp, target, &peer, psn, plan.ack_timeout)?;
    // Receives need a connected QP (rxe refuses them in RESET). The ping buffer is the start of the destination
    // half; the first ping comes only after both ends said Ready, so this receive is there in time.
    rc::post_recv(&mut qp, 0, lkey, dst, PING_BYTES)?;
    ch.send(Sync::Ready)?;
    match expect(ch, "connect")? {
        Sync::Ready => {}
        other => return Err(unexpected("connect", &other)),
    }
    // A copy back that fails (GPU memory) is that call's failure, not a data mismatch.
    let arrived = |m: &mut TestMemory, phase| m.read_back().map(|b| arrived(b, half, phase));

    let outcome = match role {
        Role::Initiator => {
            let mut cut_short = false;
            // WRITE our source half into the peer's destination half; the peer checks it.
            let write = Op::Write {
                rkey: peer_rkey,
                remote: peer_dst,
            };
            let (write_gbps, writes, cut) = stream(&mut qp, &send_cq, write, lkey, src, plan, ch)?;
            cut_short |= cut;
            ch.send(Sync::WriteDone)?;
            // As for READ: no completed WRITE proves nothing, whatever the peer's buffer holds.
            let write_verified = match expect(ch, "RDMA WRITE check")? {
                Sync::WriteChecked { verified } => writes > 0 && verified,
                other => return Err(unexpected("RDMA WRITE check", &other)),
            };
            // READ the peer's source half, which it re-stamped with the READ pattern, into our destination
            // half, then compare.
            memory.fill(|b| b[half..].fill(0))?;
            let read = Op::Read {
                rkey: peer_rkey,
                remote: peer_src,
            };
            let (read_gbps, reads, cut) = stream(&mut qp, &send_cq, read, lkey, dst, plan, ch)?;
            cut_short |= cut;
            let read_verified = arrived(memory, Phase::Read)? && reads > 0;
            ch.send(Sync::PingStart)?;
            let pings = ping(
                &mut qp,
                &send_cq,
                &recv_cq,
                lkey,
                (src, dst),
                host_visible,
                plan,
                ch,
            )?;
            cut_short |= pings.cut_short;
            let outcome = PairOutcome {
                registration,
                peer_registration,
                write_gbps,
                writes,
                write_verified,
                read_gbps,
                reads,
                read_verified,
                latency_p50_us: percentile_us(&pings.samples, 50),
                latency_p99_us: percentile_us(&pings.samples, 99),
                pings: pings.samples.len() as u32,
                echoes_mismatched: pings.mismatched,
                cut_short,
            };
            ch.send(Sync::Outcome(outcome.clone()))?;
            outcome
        }
        Role::Responder => {
            match expect(ch, "RDMA WRITE")? {
                Sync::WriteDone => {}
                other => return Err(unexpected("RDMA WRITE", &other)),
            }
            let verified = arrived(memory, Phase::Write)?;
            // Our destination half now holds the WRITE pattern: a READ aimed at it must not verify.
            memory.fill(|b| stamp_source(b, half, Phase::Read))?;
            ch.send(Sync::WriteChecked { verified })?;
            match expect(ch, "RDMA READ")? {
                Sync::PingStart => {}
                other => return Err(unexpected("RDMA READ", &other)),
            }
            echo(&mut qp, &send_cq, &recv_cq, lkey, dst, plan, ch)?;
            match expect(ch, "latency")? {
                // The numbers are the initiator's; the registrations seen from this end.
                Sync::Outcome(o) => PairOutcome {
                    peer_registration: o.registration.clone(),
                    registration,
                    ..o
                },
                other => return Err(unexpected("latency", &other)),
            }
        }
    };
    breadcrumb("ibv teardown (ibv_destroy_qp, ibv_dereg_mr, ibv_destroy_cq, ibv_dealloc_pd, ibv_close_device)");
    drop(qp);
    drop(mr);
    Ok(outcome)
}

/// Which bulk phase a pattern belongs to: each carries its own, so data that came from the wrong half does not
/// verify (after WRITE the responder's destination half holds the WRITE pattern).
#[derive(Debug, Clone, Copy)]
enum Phase {
    Write = 0,
    Read = 1,
}

impl Phase {
    fn pattern(self, half: usize) -> Vec<u8> {
        pattern_from(self as usize, half)
    }
}

/// Puts `phase`'s pattern in the source half (the first `half` bytes) of `buf`.
fn stamp_source(buf: &mut [u8], half: usize, phase: Phase) {
    buf[..half].copy_from_slice(&phase.pattern(half));
}

/// The destination half of `buf` holds `phase`'s pattern.
fn arrived(buf: &[u8], half: usize, phase: Phase) -> bool {
    buf[half..2 * half] == phase.pattern(half)
}

/// The peer's source and destination halves from the endpoint it sent (`addr`, `len`): its length must be the
/// plan's, and its buffer must fit in the address space (an address from the network is not trusted to add).
fn peer_halves(addr: u64, len: u64, plan_len: u64, half: u64) -> Result<(u64, u64), Failure> {
    if len != plan_len {
        return Err(fail(
            "endpoint exchange",
            format!(
                "peer registered {len} bytes, this node {plan_len}: run both ends with the same --message-size"
            ),
        ));
    }
    match (addr.checked_add(len), addr.checked_add(half)) {
        (Some(_), Some(dst)) if half <= len => Ok((addr, dst)),
        _ => Err(fail(
            "endpoint exchange",
            format!(
                "the peer sent a buffer of {len} bytes at {addr:#x}, past the end of the address space: its endpoint is corrupt"
            ),
        )),
    }
}

/// The next step from the peer; a `Failed` from it becomes our failure, naming its stage.
fn expect(ch: &mut dyn Channel, during: &str) -> Result<Sync, Failure> {
    match ch.recv(during)? {
        Sync::Failed(f) => Err(relayed(&f)),
        s => Ok(s),
    }
}

const PEER_STOPPED: &str = "the peer stopped: ";
/// What a relayed failure's stage starts with.
const RELAYED_STAGE: &str = "peer: ";

/// The failure the peer reported (`Sync::Failed`) as this end's: its stage under "peer: ".
pub fn relayed(theirs: &Failure) -> Failure {
    fail(
        &format!("{RELAYED_STAGE}{}", theirs.stage),
        format!("{PEER_STOPPED}{}", theirs.message),
    )
}

/// The peer reported this failure itself before it stopped: it did not die mid-transfer.
pub fn is_relayed(f: &Failure) -> bool {
    f.message.starts_with(PEER_STOPPED)
}

/// The failure shows the path broken (an error or missing completion, memory the NIC would not register, a
/// CUDA call on the test memory) rather than a call that could not be made or a peer that went away. A relayed
/// failure is classified by the stage it had at the peer, so both ends give one verdict for it.
pub fn breaks_path(f: &Failure) -> bool {
    let stage = match f.stage.strip_prefix(RELAYED_STAGE) {
        Some(theirs) if is_relayed(f) => theirs,
        _ => f.stage.as_str(),
    };
    stage.ends_with(rc::COMPLETION) || [rc::REGISTER_MEMORY, CUDA].contains(&stage)
}

fn unexpected(during: &str, got: &Sync) -> Failure {
    fail(
        "control",
        format!("unexpected {got:?} from the peer during {during}"),
    )
}

fn read_u64(addr: u64) -> u64 {
    // SAFETY: `addr` is the start of our own live buffer, at least 8 bytes long; the HCA finished writing it
    // (its receive completion was polled).
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}

fn write_u64(addr: u64, v: u64) {
    // SAFETY: as in `read_u64`; no work request reads these bytes while we write them.
    unsafe { std::ptr::write_volatile(addr as *mut u64, v) }
}

/// The echo of ping `sent` is intact: its length, and where the CPU can read it (`got`), its number.
fn echo_intact(sent: u64, got: Option<u64>, len: u32) -> bool {
    len == PING_BYTES && got.is_none_or(|g| g == sent)
}

/// Initiator: `plan.pings` round trips of 8 bytes from the source half into the destination half, then a
/// short stop ping. In host memory each ping carries its number and the echo must bring it back.
#[allow(clippy::too_many_arguments)]
fn ping(
    qp: &mut BasicQueuePair,
    send_cq: &BasicCompletionQueue,
    recv_cq: &BasicCompletionQueue,
    lkey: u32,
    (src, dst): (u64, u64),
    host_visible: bool,
    plan: PairPlan,
    ch: &mut dyn Channel,
) -> Result<RoundTrips, Failure> {
    let phase_end = (Instant::now() + plan.phase_time).min(plan.deadline);
    // The source half's pattern is needed nowhere after the bulk phases: it carries the numbers.
    let pings = rc::round_trips(plan.pings, phase_end, plan.deadline, |i| {
        if host_visible {
            write_u64(src, i);
        }
        let t = Instant::now();
        rc::post(qp, Op::Send, i, lkey, src, PING_BYTES)?;
        completions(send_cq, plan.deadline, "SEND", ch)?;
        let got = completions(recv_cq, plan.deadline, "RECV", ch)?;
        let took = t.elapsed();
        let len = got.first().map_or(0, |(_, len)| *len);
        let intact = echo_intact(i, host_visible.then(|| read_u64(dst)), len);
        rc::post_recv(qp, i + 1, lkey, dst, PING_BYTES)?;
        Ok((took, intact))
    })?;
    rc::post(qp, Op::Send, u64::MAX, lkey, src, STOP_BYTES)?;
    completions(send_cq, plan.deadline, "SEND", ch)?;
    Ok(pings)
}

/// Responder: send every ping back as it came (from where it landed, so GPU memory echoes too) until the
/// short stop ping; silence for [`PING_IDLE`] means the initiator is gone.
fn echo(
    qp: &mut BasicQueuePair,
    send_cq: &BasicCompletionQueue,
    recv_cq: &BasicCompletionQueue,
    lkey: u32,
    dst: u64,
    plan: PairPlan,
    ch: &mut dyn Channel,
) -> Result<(), Failure> {
    for n in 1u64.. {
        let wait_until = plan.deadline.min(Instant::now() + PING_IDLE);
        let got = completions(recv_cq, wait_until, "RECV", ch).map_err(|f| {
            fail(
                "peer: latency",
                format!(
                    "no ping from the peer ({}): it stopped mid-transfer",
                    f.message
                ),
            )
        })?;
        if got.first().is_some_and(|(_, len)| *len == STOP_BYTES) {
            break;
        }
        // The next ping cannot arrive before the initiator has this echo, which the NIC reads out first.
        rc::post_recv(qp, n, lkey, dst, PING_BYTES)?;
        rc::post(qp, Op::Send, n, lkey, dst, PING_BYTES)?;
        completions(send_cq, plan.deadline, "SEND", ch)?;
    }
    Ok(())
}

/// Keeps `plan.queue_depth` signalled `op`s of one message from `local` in flight until `plan.bw_messages`
/// completed or the phase time is up; returns Gb/s, how many completed, and whether the deadline cut it short.
fn stream(
    qp: &mut BasicQueuePair,
    cq: &BasicCompletionQueue,
    op: Op,
    lkey: u32,
    local: u64,
    plan: PairPlan,
    ch: &mut dyn Channel,
) -> Result<(f64, u32, bool), Failure> {
    let (len, count) = (plan.message_bytes as u32, plan.bw_messages);
    let started = Instant::now();
    let phase_end = (started + plan.phase_time).min(plan.deadline);
    let completed = rc::keep_in_flight(
        count,
        plan.queue_depth,
        phase_end,
        |n| rc::post(qp, op, u64::from(n), lkey, local, len),
        || {
            Ok(completions(cq, plan.deadline, op.name(), ch)?
                .into_iter()
                .map(|(id, _)| id)
                .collect())
        },
        |_| {},
    )?;
    let gbps = bits_per_sec_gbps(u64::from(completed) * u64::from(len), started.elapsed());
    let cut = completed < count && Instant::now() >= plan.deadline;
    Ok((gbps, completed, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_round_trips_through_json() {
        let s = Sync::Endpoint {
            remote: Remote {
                qpn: 7,
                psn: 0x1000,
                lid: 3,
                gid: Some([1; 16]),
            },
            addr: 0xdead,
            rkey: 9,
            len: 16,
            registration: Registration {
                call: "ibv_reg_mr".into(),
                refused: vec!["DMA-BUF export = CUDA_ERROR_NOT_SUPPORTED".into()],
            },
        };
        let back: Sync = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    /// A control channel over two queues, for what `run` says and reads.
    struct Script {
        sent: Vec<Sync>,
        inbox: std::collections::VecDeque<Sync>,
    }

    impl Channel for Script {
        fn send(&mut self, step: Sync) -> Result<(), Failure> {
            self.sent.push(step);
            Ok(())
        }
        fn recv(&mut self, during: &str) -> Result<Sync, Failure> {
            self.inbox
                .pop_front()
                .ok_or_else(|| fail(&format!("peer: {during}"), "closed"))
        }
        fn peer_gone(&mut self) -> bool {
            self.inbox.is_empty()
        }
    }

    /// An end that stops before its endpoint (here: a plan it refuses) tells the peer and takes the endpoint the
    /// peer sent meanwhile; left unread, the next leg on the connection read it as its own peer's endpoint and
    /// connected to a queue pair that no longer existed.
    #[test]
    fn a_failure_before_the_endpoint_leaves_the_channel_in_step() {
        let peer_endpoint = Sync::Endpoint {
            remote: Remote {
                qpn: 7,
                psn: 0x2000,
                lid: 0,
                gid: None,
            },
            addr: 0,
            rkey: 1,
            len: 8,
            registration: Registration {
                call: "ibv_reg_mr".into(),
                refused: vec![],
            },
        };
        let mut ch = Script {
            sent: vec![],
            inbox: [peer_endpoint, Sync::Ready].into(),
        };
        let mut memory = TestMemory::host(8);
        let f = run(Role::Initiator, &target(), plan(4), &mut memory, &mut ch).unwrap_err();
        assert_eq!(f.stage, "plan");
        assert!(
            matches!(ch.sent.as_slice(), [Sync::Failed(_)]),
            "{:?}",
            ch.sent
        );
        assert_eq!(ch.inbox.into_iter().collect::<Vec<_>>(), [Sync::Ready]);
    }

    /// Memory smaller than the plan is refused before it is filled (the fill indexed past it and panicked).
    #[test]
    fn memory_smaller_than_the_plan_is_refused() {
        let mut ch = Script {
            sent: vec![],
            inbox: [Sync::Ready].into(),
        };
        let mut memory = TestMemory::host(8);
        let f = run(Role::Initiator, &target(), plan(16), &mut memory, &mut ch).unwrap_err();
        assert_eq!(f.stage, "plan");
    }

    /// The smallest plan: one of each, `message_bytes` per message, a second to run.
    fn plan(message_bytes: usize) -> PairPlan {
        PairPlan {
            message_bytes,
            bw_messages: 1,
            queue_depth: 1,
            pings: 1,
            phase_time: Duration::from_secs(1),
            ack_timeout: crate::measure::rc::DEFAULT_ACK_TIMEOUT,
            deadline: Instant::now() + Duration::from_secs(1),
        }
    }

    fn target() -> PortTarget {
        PortTarget {
            device: "rxe0".into(),
            port: 1,
            roce_gid: None,
        }
    }

    /// Item 6 of issue 13: the echo is compared with the ping sent, by length always and by number where the
    /// CPU can read it (before, any 8 bytes back counted as a round trip).
    #[test]
    fn an_echo_must_carry_the_ping_sent() {
        assert!(echo_intact(7, Some(7), PING_BYTES));
        assert!(!echo_intact(7, Some(6), PING_BYTES));
        assert!(!echo_intact(7, Some(7), STOP_BYTES));
        // GPU memory: the number cannot be read; the length still must match.
        assert!(echo_intact(7, None, PING_BYTES));
        assert!(!echo_intact(7, None, 0));
    }

    /// The peer's endpoint is checked before its address is added to: a buffer past the end of the address space
    /// (debug builds panicked on the addition, release builds wrapped) or of another length is a failure naming
    /// the peer.
    #[test]
    fn a_peer_endpoint_that_does_not_fit_is_refused() {
        assert_eq!(peer_halves(0x1000, 16, 16, 8).unwrap(), (0x1000, 0x1008));
        let wraps = peer_halves(u64::MAX - 8, 16, 16, 8).unwrap_err();
        assert_eq!(wraps.stage, "endpoint exchange");
        assert!(wraps.message.contains("the peer sent"), "{}", wraps.message);
        assert!(peer_halves(u64::MAX - 4, 16, 16, 8).is_err());
        let other_size = peer_halves(0x1000, 32, 16, 8).unwrap_err();
        assert!(other_size.message.contains("peer registered 32 bytes"));
    }

    /// The bulk phases through two buffers (an initiator's, a responder's), with RDMA as copies at the addresses
    /// the initiator computes: a READ aimed at the responder's destination half, which holds the WRITE pattern by
    /// then, must not verify (before, both halves held one pattern and it did), nor a WRITE into its source half.
    #[test]
    fn a_misdirected_read_or_write_does_not_verify() {
        let half = 64;
        let fresh = || {
            let mut b = vec![0xaa; 2 * half];
            stamp_source(&mut b, half, Phase::Write);
            b[half..].fill(0);
            b
        };
        // One-sided copies between the buffers, addresses relative to the responder's buffer at 0.
        let copy = |from: &[u8], at: u64, to: &mut [u8], to_at: u64| {
            let (at, to_at) = (at as usize, to_at as usize);
            to[to_at..to_at + half].copy_from_slice(&from[at..at + half]);
        };
        let (src, dst) = peer_halves(0, 2 * half as u64, 2 * half as u64, half as u64).unwrap();
        for (write_to, read_from, intact) in [
            (dst, src, (true, true)),
            (dst, dst, (true, false)),
            (src, src, (false, true)),
        ] {
            let (mut initiator, mut responder) = (fresh(), fresh());
            copy(&initiator.clone(), 0, &mut responder, write_to);
            let write_ok = arrived(&responder, half, Phase::Write);
            stamp_source(&mut responder, half, Phase::Read);
            initiator[half..].fill(0);
            copy(&responder, read_from, &mut initiator, half as u64);
            let read_ok = arrived(&initiator, half, Phase::Read);
            assert_eq!(
                (write_ok, read_ok),
                intact,
                "WRITE to {write_to}, READ from {read_from}"
            );
        }
    }
}
