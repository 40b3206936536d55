//! `rdma.memlock`: this process may lock enough memory to register RDMA buffers.

use crate::probe::{CheckResult, Context, Explain, Measurement, Probe};
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

impl Probe for RdmaMemlock {
    fn id(&self) -> &'static str {
        ID
    }
    fn title(&self) -> &'static str {
        "RLIMIT_MEMLOCK and CAP_IPC_LOCK of this process allow RDMA memory registration"
    }
    fn explain(&self) -> Explain {
        Explain {
            reads: "getrlimit(RLIMIT_MEMLOCK) and CapEff from /proc/self/status of this very process (not the root \
                    tree: the limit that matters is the one the workload inherits)",
            why: "ibv_reg_mr pins memory and counts it against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK. \
                  Containers often get 8 MiB; registration then fails with ENOMEM and NCCL silently falls back to \
                  TCP sockets.",
            fixes: &[("memlock limit too low and no CAP_IPC_LOCK", FIX)],
        }
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let (soft, hard) = match memlock_limits() {
            Ok(l) => l,
            Err(e) => {
                return vec![CheckResult::error(
                    ID,
                    format!("getrlimit(RLIMIT_MEMLOCK) failed: {e}"),
                )]
            }
        };
        let cap_ipc_lock = cap_effective().map(|caps| caps & (1 << CAP_IPC_LOCK) != 0);
        let show = |l: Option<u64>| {
            l.map(|b| format!("{b} bytes ({} MiB)", b / (1024 * 1024)))
                .unwrap_or("unlimited".into())
        };
        let evidence = [
            format!(
                "getrlimit(RLIMIT_MEMLOCK) = soft {}, hard {}",
                show(soft),
                show(hard)
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
        let expect = &cx.profile.expect;
        let min_mib = expect.memlock_min_mib.unwrap_or(DEFAULT_MIN_MIB);
        let has_cap = cap_ipc_lock == Ok(true);
        let has_rdma = read_device_names(cx.host)
            .map(|d| !d.is_empty())
            .unwrap_or(false);
        let profile_cares = expect.memlock_min_mib.is_some()
            || expect.memlock_unlimited == Some(true)
            || expect.gdr == Some(true);

        let mut r = match soft {
            None => CheckResult::pass(ID, "memlock unlimited"),
            Some(_) if has_cap => CheckResult::pass(
                ID,
                format!(
                    "memlock {} but CAP_IPC_LOCK is set, so the limit does not apply",
                    show(soft)
                ),
            ),
            Some(_) if expect.memlock_unlimited == Some(true) => CheckResult::fail(
                ID,
                format!(
                    "memlock {} and no CAP_IPC_LOCK; the profile requires unlimited",
                    show(soft)
                ),
            )
            .fix(FIX),
            Some(bytes) if bytes < min_mib * 1024 * 1024 => {
                let summary = format!(
                    "memlock {} without CAP_IPC_LOCK, below {min_mib} MiB: RDMA registration fails and NCCL falls back to sockets",
                    show(soft)
                );
                if !has_rdma && !profile_cares {
                    CheckResult::skip(
                        ID,
                        format!(
                            "no RDMA device, so memlock does not limit anything here ({})",
                            show(soft)
                        ),
                    )
                } else if profile_cares {
                    CheckResult::fail(ID, summary).fix(FIX)
                } else {
                    CheckResult::warn(ID, summary).fix(FIX)
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
        vec![r]
    }
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
