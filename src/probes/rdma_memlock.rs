//! `rdma.memlock`: this process may lock enough memory to register RDMA buffers.

use crate::host::{Host, ReadError};
use crate::measure::rdma_loopback::HOST_LOOPBACK;
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Measurement, Probe, ProbeMeta, Remedy,
    Status,
};
use crate::profile::Expect;
use crate::rules::presence::{Stack, Survey};
use crate::sysfs::infiniband::read_device_names;

pub struct RdmaMemlock;

const ID: &str = "rdma.memlock";
/// Bit of CAP_IPC_LOCK in the capability sets: with it, RLIMIT_MEMLOCK does not apply.
const CAP_IPC_LOCK: u32 = 14;
/// Below this NCCL and perftest registrations fail on any real job (containers commonly get 8 MiB or 64 KiB).
const DEFAULT_MIN_MIB: u64 = 64 * 1024;

const FIX: &str = "raise the limit for the workload: `ulimit -l unlimited` / `LimitMEMLOCK=infinity` (systemd) / \
`--ulimit memlock=-1:-1` (Docker) / `* - memlock unlimited` in /etc/security/limits.conf; or grant CAP_IPC_LOCK \
(Kubernetes: securityContext.capabilities.add: [IPC_LOCK])";

const BELOW_ONE_REGISTRATION: FindingCode = FindingCode {
    code: "RDM401",
    title: "memlock is below one registration and CAP_IPC_LOCK is not set",
    explanation: "RLIMIT_MEMLOCK is smaller than the memory one RDMA registration pins: ibv_reg_mr fails and RDMA cannot run. Raise the limit (`ulimit -l unlimited`, systemd LimitMEMLOCK, Kubernetes/containerd defaults) or grant CAP_IPC_LOCK.",
    step: Some(Remedy::Reconfigure),
};
const NOT_UNLIMITED: FindingCode = FindingCode {
    code: "RDM402",
    title: "memlock is limited and the profile requires unlimited",
    explanation: "The profile requires an unlimited memlock (`expect.memlock_unlimited`) and CAP_IPC_LOCK is not set. Raise the limit or grant CAP_IPC_LOCK.",
    step: Some(Remedy::Reconfigure),
};
const BELOW_MINIMUM: FindingCode = FindingCode {
    code: "RDM403",
    title: "memlock is below what NCCL's registrations need",
    explanation: "Without CAP_IPC_LOCK a memlock below the minimum makes NCCL's registrations run out and fall back to sockets. A failure where the profile cares, else a warning.",
    step: Some(Remedy::Reconfigure),
};
const GETRLIMIT_FAILED: FindingCode = FindingCode {
    code: "RDM404",
    title: "getrlimit(RLIMIT_MEMLOCK) failed",
    explanation: "An error: the limit could not be read.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "RLIMIT_MEMLOCK and CAP_IPC_LOCK of this process allow RDMA memory registration",
    explain: Explain {
        reads: "getrlimit(RLIMIT_MEMLOCK) and CapEff from /proc/self/status of this very process (not the root \
                tree: the limit that matters is the one the workload inherits)",
        why: "ibv_reg_mr pins memory and counts it against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK. \
              Containers often get 8 MiB; registration then fails with ENOMEM and NCCL silently falls back to \
              TCP sockets.",
        fixes: &[("memlock limit too low and no CAP_IPC_LOCK", FIX)],
    },
    findings: &[
        &BELOW_ONE_REGISTRATION,
        &NOT_UNLIMITED,
        &BELOW_MINIMUM,
        &GETRLIMIT_FAILED,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for RdmaMemlock {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let (soft, hard) = match memlock_limits() {
        Ok(l) => l,
        Err(e) => {
            return Ok(vec![CheckResult::error(
                ID,
                format!("getrlimit(RLIMIT_MEMLOCK) failed: {e}"),
            )
            .code(&GETRLIMIT_FAILED)])
        }
    };
    let cap_ipc_lock = cap_effective().map(|caps| caps & (1 << CAP_IPC_LOCK) != 0);
    // Whether RDMA devices exist decides between a skip and a verdict: an unreadable list is no answer.
    let has_rdma = !read_device_names(cx.host)?.is_empty();
    let r = judge(
        Limits { soft, hard },
        cap_ipc_lock,
        has_rdma,
        &cx.profile.expect,
    );
    Ok(vec![skip_only_if_absent(r, cx.host)])
}

/// A SKIP for "no RDMA device" stands only where the PCI bus shows none either: a NIC whose driver is missing
/// (or a bus that could not be read) is the presence rule's verdict, not absence.
fn skip_only_if_absent(r: CheckResult, host: &Host) -> CheckResult {
    if r.status != Status::Skip {
        return r;
    }
    Survey::read(host, Stack::Rdma)
        .gate(ID, false)
        .filter(|gated| gated.status != Status::Skip)
        .unwrap_or(r)
}

/// RLIMIT_MEMLOCK in bytes; `None` = unlimited.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// `64 KiB`, `2 MiB`, `1.5 KiB`, `512 bytes`: the largest binary unit the value reaches.
pub fn size_text(b: u64) -> String {
    match [(30, "GiB"), (20, "MiB"), (10, "KiB")]
        .into_iter()
        .find(|(shift, _)| b >= 1 << shift)
    {
        Some((shift, unit)) if b.is_multiple_of(1 << shift) => format!("{} {unit}", b >> shift),
        Some((shift, unit)) => format!("{:.1} {unit}", b as f64 / (1u64 << shift) as f64),
        None => format!("{b} bytes"),
    }
}

/// `65536 bytes (64 KiB)`, or `unlimited`.
fn show_bytes(limit: Option<u64>) -> String {
    match limit {
        None => "unlimited".into(),
        Some(b) if b < 1024 => format!("{b} bytes"),
        Some(b) => format!("{b} bytes ({})", size_text(b)),
    }
}

/// The verdict for this process's limits. Below what one registration of rdma.loopback pins, the stack refuses
/// the registration outright (seen on rxe: 64 KiB refuses a 1 MiB `ibv_reg_mr`): a failure under any profile.
/// Between that and the profile's minimum, NCCL's many registrations run out: a warning, or a failure where the
/// profile asks for RDMA.
pub fn judge(
    limits: Limits,
    cap_ipc_lock: Result<bool, String>,
    has_rdma: bool,
    expect: &Expect,
) -> CheckResult {
    let show = show_bytes;
    let evidence = [
        format!(
            "getrlimit(RLIMIT_MEMLOCK) = soft {}, hard {}",
            show(limits.soft),
            show(limits.hard)
        ),
        format!(
            "/proc/self/status CapEff CAP_IPC_LOCK = {}",
            match &cap_ipc_lock {
                Ok(true) => "set".to_string(),
                Ok(false) => "not set".to_string(),
                Err(e) => format!("<{e}>"),
            }
        ),
    ];
    let min_mib = expect.memlock_min_mib.unwrap_or(DEFAULT_MIN_MIB);
    let has_cap = cap_ipc_lock == Ok(true);
    let profile_cares = expect.memlock_min_mib.is_some()
        || expect.memlock_unlimited == Some(true)
        || expect.gdr == Some(true);
    let soft = limits.soft;

    let mut r = match soft {
        None => CheckResult::pass(ID, "memlock unlimited"),
        Some(_) if has_cap => CheckResult::pass(
            ID,
            format!(
                "memlock {} but CAP_IPC_LOCK is set, so the limit does not apply",
                show(soft)
            ),
        ),
        Some(_) if !has_rdma && !profile_cares => CheckResult::skip(
            ID,
            format!(
                "no RDMA device, so memlock does not limit anything here ({})",
                show(soft)
            ),
        ).code(&common::ABSENT),
        Some(bytes) if bytes < HOST_LOOPBACK.region_bytes() as u64 => CheckResult::fail(
            ID,
            format!(
                "memlock {} without CAP_IPC_LOCK, below the {} that one rdma.loopback registration pins: \
                 ibv_reg_mr fails, RDMA cannot run",
                show(soft),
                size_text(HOST_LOOPBACK.region_bytes() as u64)
            ),
        )
        .fix(FIX).code(&BELOW_ONE_REGISTRATION),
        Some(_) if expect.memlock_unlimited == Some(true) => CheckResult::fail(
            ID,
            format!(
                "memlock {} and no CAP_IPC_LOCK; the profile requires unlimited",
                show(soft)
            ),
        )
        .fix(FIX).code(&NOT_UNLIMITED),
        Some(bytes) if bytes < min_mib * 1024 * 1024 => {
            let summary = format!(
                "memlock {} without CAP_IPC_LOCK, below {min_mib} MiB: NCCL's registrations run out and it falls back to sockets",
                show(soft)
            );
            if profile_cares {
                CheckResult::fail(ID, summary).fix(FIX).code(&BELOW_MINIMUM)
            } else {
                CheckResult::warn(ID, summary).fix(FIX).code(&BELOW_MINIMUM)
            }
        }
        Some(_) => CheckResult::pass(
            ID,
            format!("memlock {} (at least {min_mib} MiB)", show(soft)),
        ),
    };
    r.evidence.extend(evidence);
    if let Some(bytes) = soft {
        r = r.measure(Measurement::new("memlock_soft", bytes as f64, "bytes"));
    }
    r
}

/// (soft, hard); `None` = unlimited.
fn memlock_limits() -> std::io::Result<(Option<u64>, Option<u64>)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let finite = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok((finite(lim.rlim_cur), finite(lim.rlim_max)))
}

/// Effective capabilities of this process, from its own /proc/self/status.
fn cap_effective() -> Result<u64, String> {
    let file = std::fs::File::open("/proc/self/status").map_err(|e| e.to_string())?;
    let status = <procfs_core::process::Status as procfs_core::FromRead>::from_read(file)
        .map_err(|e| e.to_string())?;
    Ok(status.capeff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(bytes: u64) -> Limits {
        Limits {
            soft: Some(bytes),
            hard: Some(bytes),
        }
    }

    #[test]
    fn limit_below_one_registration_fails_under_any_profile() {
        // Seen on rxe: as `nobody` with `ulimit -l 64`, a 1 MiB ibv_reg_mr is refused.
        let r = judge(limited(64 << 10), Ok(false), true, &Expect::default());
        assert_eq!(r.status, Status::Fail, "{}", r.summary);
        assert!(r.summary.contains("65536 bytes (64 KiB)"), "{}", r.summary);
        assert!(
            r.evidence[0].contains("soft 65536 bytes (64 KiB)"),
            "{:?}",
            r.evidence
        );
    }

    #[test]
    fn limit_above_one_registration_but_below_the_minimum_warns_unless_the_profile_cares() {
        let r = judge(limited(8 << 20), Ok(false), true, &Expect::default());
        assert_eq!(r.status, Status::Warn, "{}", r.summary);
        assert!(r.summary.contains("(8 MiB)"), "{}", r.summary);
        let gdr = Expect {
            gdr: Some(true),
            ..Expect::default()
        };
        assert_eq!(
            judge(limited(8 << 20), Ok(false), true, &gdr).status,
            Status::Fail
        );
    }

    #[test]
    fn capability_or_no_rdma_device_lifts_the_limit() {
        let r = judge(limited(64 << 10), Ok(true), true, &Expect::default());
        assert_eq!(r.status, Status::Pass);
        let r = judge(limited(64 << 10), Ok(false), false, &Expect::default());
        assert_eq!(r.status, Status::Skip);
    }

    /// Reproduced: RDMA NICs on the PCI bus whose driver is not loaded (no /sys/class/infiniband) gave SKIP
    /// "no RDMA device".
    #[test]
    fn nics_on_the_bus_without_their_driver_fail_not_skip() {
        let skip = judge(limited(8 << 20), Ok(false), false, &Expect::default());
        assert_eq!(skip.status, Status::Skip);
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        std::fs::remove_dir_all(dir.path().join("sys/class/infiniband")).unwrap();
        let host = Host::at(dir.path()).unwrap();
        let r = skip_only_if_absent(skip.clone(), &host);
        assert_eq!(r.status, Status::Fail, "{r:#?}");
        assert!(
            r.summary.contains("on the PCI bus without"),
            "{}",
            r.summary
        );
        // No RDMA hardware on the bus: the skip stands.
        let empty = tempfile::tempdir().unwrap();
        let host = Host::at(empty.path()).unwrap();
        assert_eq!(skip_only_if_absent(skip, &host).status, Status::Skip);
    }

    #[test]
    fn sizes_read_in_their_unit() {
        assert_eq!(size_text(65536), "64 KiB");
        assert_eq!(size_text(8 << 20), "8 MiB");
        assert_eq!(size_text(1536), "1.5 KiB");
        assert_eq!(size_text(512), "512 bytes");
        assert_eq!(show_bytes(None), "unlimited");
    }
}
