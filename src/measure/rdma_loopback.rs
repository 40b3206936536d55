//! An RDMA loopback through one port: one device, one protection domain, one memory region, two RC queue pairs
//! on the same port connected to each other (IB: by LID; RoCE: by the RoCE v2 GID). Queue pair A RDMA-WRITEs
//! source slots into destination slots, then RDMA-READs them back, `depth` transfers in flight; then A and B
//! ping-pong small SENDs for the latency. The caller gives the memory (host or GPU, `measure::memory`); every
//! destination slot is cleared before each phase and compared in full with its source slot after it (GPU memory
//! through its staging copy), and in host memory every transfer is checked too (a sequence stamp at both ends
//! of each message). No verdicts here: a judge reads the [`Outcome`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};

use crate::child::breadcrumb;
use crate::measure::memory::TestMemory;
use crate::measure::rc::{self, fail, mtu_bytes, poll, post_recv, recv_one, Remote};
pub use crate::measure::rc::{Failure, PortTarget, Region, Registration};

/// What one loopback moves (a probe's constant); the memory it needs is [`Plan::region_bytes`].
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Bytes per RDMA WRITE/READ in the bandwidth phases.
    pub message_bytes: usize,
    /// Transfers in flight; each has its own source and destination slot, so none overwrites another.
    pub depth: u32,
    /// Each bandwidth phase ends after this many transfers or `phase_time`, whichever comes first.
    pub bw_messages: u32,
    pub phase_time: Duration,
    /// SEND/RECV round trips for the latency (also bounded by `phase_time`).
    pub lat_iterations: u32,
}

/// Bytes of one latency message: its sequence number.
const PING_BYTES: usize = 8;

/// `rdma.loopback`'s plan, here rather than in the probe because `rdma.memlock` judges whether its memory can
/// be registered. 256 KiB transfers, 8 in flight: past the bandwidth-delay product of a 400 Gb/s port (perftest
/// reaches line rate from 64 KiB), and 4 MiB to register, which an 8 MiB memlock limit still allows. Up to 4096
/// per phase (1 GiB, 21 ms at 400 Gb/s) or one second on slow ports; 1000 round trips.
pub const HOST_LOOPBACK: Plan = Plan {
    message_bytes: 256 << 10,
    depth: 8,
    bw_messages: 4096,
    phase_time: Duration::from_secs(1),
    lat_iterations: 1000,
};

impl Plan {
    /// Source slots, destination slots, then four ping buffers (A send, B receive, B send, A receive).
    pub const fn region_bytes(&self) -> usize {
        let slots = if self.depth == 0 {
            1
        } else {
            self.depth as usize
        };
        2 * slots * self.message_bytes + 4 * PING_BYTES
    }
    fn slots(&self) -> usize {
        self.depth.max(1) as usize
    }
    fn src(&self, base: u64, slot: usize) -> u64 {
        base + (slot * self.message_bytes) as u64
    }
    fn dst(&self, base: u64, slot: usize) -> u64 {
        base + ((self.slots() + slot) * self.message_bytes) as u64
    }
    fn ping(&self, base: u64, which: usize) -> u64 {
        base + (2 * self.slots() * self.message_bytes + which * PING_BYTES) as u64
    }
    /// Bytes of all source slots (the destination slots follow, as many).
    fn slot_bytes(&self) -> usize {
        self.slots() * self.message_bytes
    }
    /// Each source slot gets its pattern (shifted per slot), each destination slot zeros.
    fn fill_slots(&self, region: &mut [u8]) {
        for (slot, chunk) in region[..self.slot_bytes()]
            .chunks_mut(self.message_bytes)
            .enumerate()
        {
            chunk.copy_from_slice(&pattern_from(slot, self.message_bytes));
        }
        self.clear_destinations(region);
    }
    fn clear_destinations(&self, region: &mut [u8]) {
        region[self.slot_bytes()..2 * self.slot_bytes()].fill(0);
    }
    /// Every destination slot equals its source slot.
    fn slots_equal(&self, region: &[u8]) -> bool {
        let n = self.slot_bytes();
        region[..n] == region[n..2 * n]
    }
}

/// One bandwidth phase (RDMA WRITE or RDMA READ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub gbps: f64,
    pub bytes: u64,
    pub transfers: u32,
    /// Transfers whose stamps were checked on completion (host memory: all of them; GPU memory: none).
    pub checked: u32,
    /// Checked transfers whose destination did not hold what was sent.
    pub mismatched: u32,
    /// Every destination slot equals its source slot after the phase (cleared before it). `None` only in
    /// recordings made before GPU memory was compared after each phase.
    pub slots_equal: Option<bool>,
}

/// SEND/RECV ping-pong between the two queue pairs: half of each round trip, as perftest's `ib_send_lat` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub samples: u32,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Round trips whose receives completed with the wrong id or length, or (host memory) carried the wrong
    /// sequence number.
    pub mismatched: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub registration: Registration,
    /// RoCE/IB path MTU the queue pairs used, in bytes.
    pub path_mtu: u32,
    pub write: Throughput,
    pub read: Throughput,
    pub latency: Latency,
    /// The deadline ended a phase before its transfer count or time.
    pub cut_short: bool,
}

const PSN_A: u32 = 0x1000;
const PSN_B: u32 = 0x2000;
/// Work request ids of the ping-pong (the bandwidth phases use the transfer number).
const WR_PING: u64 = u64::MAX - 1;
const WR_PONG: u64 = u64::MAX - 2;

/// Runs the loopback on `target` through `memory`, ending by `deadline` (a phase cut by it is `cut_short`).
pub fn loopback(
    target: &PortTarget,
    memory: &mut TestMemory,
    plan: Plan,
    deadline: Instant,
) -> Result<Outcome, Failure> {
    let region = memory.region();
    if plan.message_bytes < 2 * STAMP
        || plan.message_bytes > u32::MAX as usize
        || region.len < plan.region_bytes()
    {
        return Err(fail(
            "plan",
            format!(
                "{} slots of {} bytes need a {}-byte region, got {} bytes",
                plan.slots(),
                plan.message_bytes,
                plan.region_bytes(),
                region.len
            ),
        ));
    }
    let depth = plan.depth.max(1);
    let port = rc::open_port(target, depth)?;
    let (mr, registration) = port.register(region)?;
    let send_cq = port.create_cq(2 * depth + 4)?;
    let recv_cq = port.create_cq(4)?;
    let mut qp_a = port.create_qp(&send_cq, &recv_cq, depth + 2, 2)?;
    let mut qp_b = port.create_qp(&send_cq, &recv_cq, depth + 2, 2)?;
    let remote = |qpn, psn| Remote {
        qpn,
        psn,
        lid: port.lid,
        gid: target.roce_gid.map(|(_, raw)| raw),
    };
    let (qpn_a, qpn_b) = (qp_a.qp_number(), qp_b.qp_number());
    // One port talking to itself: no fabric whose pauses a longer ACK timeout would have to ride out.
    let ack = rc::DEFAULT_ACK_TIMEOUT;
    port.connect(&mut qp_a, target, &remote(qpn_b, PSN_B), PSN_A, ack)?;
    port.connect(&mut qp_b, target, &remote(qpn_a, PSN_A), PSN_B, ack)?;

    let mut run = Run {
        plan,
        deadline,
        region,
        lkey: mr.lkey(),
        rkey: mr.rkey(),
        send_cq: &send_cq,
        recv_cq: &recv_cq,
        cut_short: false,
    };
    memory.fill(|b| plan.fill_slots(b))?;
    let write = checked_phase(memory, plan, Op::Write, |_| {
        run.bandwidth(&mut qp_a, Op::Write)
    })?;
    let read = checked_phase(memory, plan, Op::Read, |_| {
        run.bandwidth(&mut qp_a, Op::Read)
    })?;
    let latency = run.latency(&mut qp_a, &mut qp_b)?;
    let cut_short = run.cut_short;
    breadcrumb("ibv_dereg_mr");
    drop(mr);
    // The QPs, CQs, PD and device context go when this returns (ibv_destroy_qp … ibv_close_device).
    breadcrumb("ibv teardown (ibv_destroy_qp, ibv_destroy_cq, ibv_dealloc_pd, ibv_close_device)");
    Ok(Outcome {
        registration,
        path_mtu: mtu_bytes(port.mtu),
        write,
        read,
        latency,
        cut_short,
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Write,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "RDMA WRITE",
            Op::Read => "RDMA READ",
        }
    }
}

/// Bytes at each end of a message that carry its transfer number.
const STAMP: usize = 8;

struct Run<'a> {
    plan: Plan,
    deadline: Instant,
    region: Region,
    lkey: u32,
    rkey: u32,
    send_cq: &'a BasicCompletionQueue,
    recv_cq: &'a BasicCompletionQueue,
    cut_short: bool,
}

impl Run<'_> {
    fn base(&self) -> u64 {
        self.region.addr
    }

    /// Writes transfer `n`'s number at both ends of the source slot (host memory only).
    fn stamp(&self, slot: usize, n: u64) {
        let p = &self.plan;
        let at = p.src(self.base(), slot);
        // SAFETY: both stamps lie inside the slot; no transfer reads this slot while it is being stamped.
        unsafe {
            std::ptr::write_volatile(at as *mut u64, n);
            std::ptr::write_volatile((at + (p.message_bytes - STAMP) as u64) as *mut u64, n);
        }
    }

    /// The destination slot carries transfer `n`'s number at both ends. A completion is written after the data
    /// it reports, so the first look normally decides; a mismatch is looked at again for up to a millisecond
    /// before it counts, so a platform that reorders the two writes does not report a false mismatch.
    fn stamped(&self, slot: usize, n: u64) -> bool {
        let p = &self.plan;
        let at = p.dst(self.base(), slot);
        let tail = at + (p.message_bytes - STAMP) as u64;
        let look = || {
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            // SAFETY: both stamps lie inside the slot; the transfer into it has completed.
            unsafe {
                std::ptr::read_volatile(at as *const u64) == n
                    && std::ptr::read_volatile(tail as *const u64) == n
            }
        };
        let until = Instant::now() + Duration::from_millis(1);
        loop {
            if look() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Keeps `depth` transfers of one kind in flight until the count, the phase time or the deadline. The
    /// slots are compared by [`checked_phase`].
    fn bandwidth(&mut self, qp: &mut BasicQueuePair, op: Op) -> Result<Throughput, Failure> {
        let p = self.plan;
        let host = self.region.host_visible;
        let mut mismatched = 0u32;
        let started = Instant::now();
        let phase_end = (started + p.phase_time).min(self.deadline);
        let this = &*self;
        let completed = rc::keep_in_flight(
            p.bw_messages,
            p.depth,
            phase_end,
            |n| {
                let slot = n as usize % p.slots();
                if host {
                    this.stamp(slot, u64::from(n));
                }
                post_rdma(
                    qp,
                    op,
                    u64::from(n),
                    this.lkey,
                    this.rkey,
                    &p,
                    this.base(),
                    slot,
                )
            },
            || poll(this.send_cq, this.deadline, op.name()),
            |wr_id| {
                if host && !this.stamped(wr_id as usize % p.slots(), wr_id) {
                    mismatched += 1;
                }
            },
        )?;
        if Instant::now() >= self.deadline && completed < p.bw_messages {
            self.cut_short = true;
        }
        let elapsed = started.elapsed();
        let bytes = u64::from(completed) * p.message_bytes as u64;
        Ok(Throughput {
            gbps: bits_per_sec_gbps(bytes, elapsed),
            bytes,
            transfers: completed,
            checked: if host { completed } else { 0 },
            mismatched,
            slots_equal: None,
        })
    }

    /// A sends its number to B, B sends it back; half of each round trip is one sample.
    fn latency(
        &mut self,
        a: &mut BasicQueuePair,
        b: &mut BasicQueuePair,
    ) -> Result<Latency, Failure> {
        let p = self.plan;
        let host = self.region.host_visible;
        let [a_send, b_recv, b_send, a_recv] = [0, 1, 2, 3].map(|i| p.ping(self.base(), i));
        let phase_end = (Instant::now() + p.phase_time).min(self.deadline);
        let this = &*self;
        let pings = rc::round_trips(p.lat_iterations, phase_end, self.deadline, |n| {
            post_recv(b, WR_PING, this.lkey, b_recv, PING_BYTES as u32)?;
            post_recv(a, WR_PONG, this.lkey, a_recv, PING_BYTES as u32)?;
            if host {
                // SAFETY: the ping buffers lie in the caller's host memory; nothing is in flight.
                unsafe { std::ptr::write_volatile(a_send as *mut u64, n) };
            }
            let t = Instant::now();
            post_send(a, WR_PING, this.lkey, a_send)?;
            let got = recv_one(this.recv_cq, this.deadline)?;
            if host {
                // SAFETY: as above; B's receive has completed.
                let echo = unsafe { std::ptr::read_volatile(b_recv as *const u64) };
                unsafe { std::ptr::write_volatile(b_send as *mut u64, echo) };
            }
            post_send(b, WR_PONG, this.lkey, b_send)?;
            let back = recv_one(this.recv_cq, this.deadline)?;
            let took = t.elapsed();
            // SAFETY: as above; A's receive has completed.
            let wrong_data = host && unsafe { std::ptr::read_volatile(a_recv as *const u64) } != n;
            let wrong_completion =
                got != (WR_PING, PING_BYTES as u32) || back != (WR_PONG, PING_BYTES as u32);
            // Both SENDs' own completions, so the send queue never fills.
            let mut sends = 0;
            while sends < 2 {
                sends += poll(this.send_cq, this.deadline, "SEND")?.len();
            }
            Ok((took, !(wrong_data || wrong_completion)))
        })?;
        self.cut_short |= pings.cut_short;
        Ok(Latency {
            samples: pings.samples.len() as u32,
            p50_us: percentile_us(&pings.samples, 50),
            p99_us: percentile_us(&pings.samples, 99),
            mismatched: pings.mismatched,
        })
    }
}

/// The `pct`th percentile (nearest rank) of sorted samples, in µs; 0 for none.
pub fn percentile_us(sorted: &[Duration], pct: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (pct * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e6
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

/// WRITE: source slot → destination slot. READ: the destination slot fetches the source slot.
#[allow(clippy::too_many_arguments)]
fn post_rdma(
    qp: &mut BasicQueuePair,
    op: Op,
    wr_id: u64,
    lkey: u32,
    rkey: u32,
    plan: &Plan,
    base: u64,
    slot: usize,
) -> Result<(), Failure> {
    let (src, dst) = (plan.src(base, slot), plan.dst(base, slot));
    let (local, op) = match op {
        Op::Write => (src, rc::Op::Write { rkey, remote: dst }),
        Op::Read => (dst, rc::Op::Read { rkey, remote: src }),
    };
    rc::post(qp, op, wr_id, lkey, local, plan.message_bytes as u32)
}

fn post_send(qp: &mut BasicQueuePair, wr_id: u64, lkey: u32, addr: u64) -> Result<(), Failure> {
    rc::post(qp, rc::Op::Send, wr_id, lkey, addr, PING_BYTES as u32)
}

/// One loopback through one kind of memory, with its data check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Leg {
    Done {
        outcome: Outcome,
        /// Every destination equals its source afterwards, and no checked transfer mismatched.
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

/// A slot's contents: no two neighbouring bytes equal and each slot shifted, so a shifted, partial or
/// misdirected transfer shows.
pub fn pattern_from(slot: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i + slot * 7) as u8).wrapping_mul(31).wrapping_add(7))
        .collect()
}

impl Outcome {
    /// The numbers the shared leg rule judges.
    pub fn numbers(&self, verified: bool) -> crate::rules::transfer_verdict::LegNumbers {
        crate::rules::transfer_verdict::LegNumbers {
            write_gbps: self.write.gbps,
            read_gbps: self.read.gbps,
            writes: self.write.transfers,
            reads: self.read.transfers,
            round_trips: self.latency.samples,
            latency_p50_us: self.latency.p50_us,
            latency_p99_us: self.latency.p99_us,
            verified,
            cut_short: self.cut_short,
        }
    }

    /// Every slot compared equal after each phase and nothing checked mismatched.
    pub fn checks_pass(&self) -> bool {
        [&self.write, &self.read]
            .iter()
            .all(|t| t.mismatched == 0 && t.slots_equal == Some(true))
            && self.latency.mismatched == 0
    }
}

/// One bandwidth phase between clean slates: the destination slots cleared before (so a READ cannot pass on
/// what the WRITEs left there), every slot compared after. `transfer` runs the phase.
fn checked_phase(
    memory: &mut TestMemory,
    plan: Plan,
    op: Op,
    transfer: impl FnOnce(&mut TestMemory) -> Result<Throughput, Failure>,
) -> Result<Throughput, Failure> {
    if op == Op::Read {
        memory.fill(|b| plan.clear_destinations(b))?;
    }
    let mut phase = transfer(memory)?;
    phase.slots_equal = Some(plan.slots_equal(memory.read_back()?));
    Ok(phase)
}

/// The loopback through `memory`, its registration paths refused before `ibv_*_mr` named.
pub fn leg(target: &PortTarget, mut memory: TestMemory, plan: Plan, deadline: Instant) -> Leg {
    let refused = memory.refused();
    match loopback(target, &mut memory, plan, deadline) {
        Ok(mut outcome) => {
            outcome.registration.refused.splice(0..0, refused);
            Leg::Done {
                verified: outcome.checks_pass(),
                outcome,
            }
        }
        Err(mut f) => {
            f.refused_registrations.splice(0..0, refused);
            f.into()
        }
    }
}

/// The loopback through ordinary host memory (`ibv_reg_mr` on a heap buffer): the port and link alone.
pub fn host_memory(target: &PortTarget, plan: Plan, deadline: Instant) -> Leg {
    leg(
        target,
        TestMemory::host(plan.region_bytes()),
        plan,
        deadline,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            message_bytes: 4096,
            depth: 4,
            bw_messages: 1,
            phase_time: Duration::from_secs(1),
            lat_iterations: 1,
        }
    }

    #[test]
    fn slots_and_ping_buffers_do_not_overlap() {
        let p = plan();
        assert_eq!(p.region_bytes(), 2 * 4 * 4096 + 32);
        assert_eq!(p.src(0, 3), 3 * 4096);
        assert_eq!(p.dst(0, 0), 4 * 4096);
        assert_eq!(p.dst(0, 3) + 4096, p.ping(0, 0));
        assert_eq!(p.ping(0, 3) + PING_BYTES as u64, p.region_bytes() as u64);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let us = |n: u64| Duration::from_micros(n);
        let sorted: Vec<Duration> = (1..=100).map(us).collect();
        assert_eq!(percentile_us(&sorted, 50), 50.0);
        assert_eq!(percentile_us(&sorted, 99), 99.0);
        assert_eq!(percentile_us(&[us(7)], 99), 7.0);
        assert_eq!(percentile_us(&[], 50), 0.0);
    }

    #[test]
    fn gbps_from_bytes_and_time() {
        let g = bits_per_sec_gbps(50_000_000_000, Duration::from_secs(1));
        assert!((g - 400.0).abs() < 1e-9);
        assert_eq!(bits_per_sec_gbps(1, Duration::ZERO), 0.0);
    }

    #[test]
    fn region_smaller_than_the_plan_is_refused_before_any_call() {
        let target = PortTarget {
            device: "mlx5_0".into(),
            port: 1,
            roce_gid: None,
        };
        assert_eq!(
            loopback(&target, &mut TestMemory::host(4096), plan(), Instant::now())
                .unwrap_err()
                .stage,
            "plan"
        );
    }

    /// A READ phase that moves nothing cannot pass on what the WRITEs left in the destination slots. Before, GPU
    /// memory was compared once after both phases with the destinations never cleared between them, so only
    /// the WRITEs were verified.
    #[test]
    fn a_read_that_moves_nothing_does_not_verify() {
        let p = plan();
        let phase = |_: &mut TestMemory| {
            Ok(Throughput {
                gbps: 1.0,
                bytes: 1,
                transfers: 1,
                checked: 0,
                mismatched: 0,
                slots_equal: None,
            })
        };
        let copy_slots = |m: &mut TestMemory| {
            m.fill(|b| {
                let n = p.slot_bytes();
                b.copy_within(..n, n);
            })?;
            phase(m)
        };
        let mut memory = TestMemory::host(p.region_bytes());
        memory.fill(|b| p.fill_slots(b)).unwrap();
        let write = checked_phase(&mut memory, p, Op::Write, copy_slots).unwrap();
        assert_eq!(write.slots_equal, Some(true));
        let read = checked_phase(&mut memory, p, Op::Read, phase).unwrap();
        assert_eq!(read.slots_equal, Some(false));
        let read = checked_phase(&mut memory, p, Op::Read, copy_slots).unwrap();
        assert_eq!(read.slots_equal, Some(true));
    }

    #[test]
    fn slot_patterns_differ_and_neighbours_differ() {
        let (a, b) = (pattern_from(0, 64), pattern_from(1, 64));
        assert_ne!(a, b);
        assert!(a.windows(2).all(|w| w[0] != w[1]));
    }
}
