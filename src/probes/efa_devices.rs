//! `efa.devices`: the AWS Elastic Fabric Adapters on the PCI bus (vendor 1d0f, device efa0–efa4, whatever they
//! are named), each bound to the `efa` driver with its RDMA device, libefa beside libibverbs, and as many as the
//! instance type has. A short count shortly after boot is named as possibly still initialising (P5en brings
//! some EFAs up late). Whether each RDMA device opens through `/dev/infiniband/uverbsN` is `rdma.devices`'.

use crate::dynlib::efa::{load_libefa, Loaded, LIBEFA, LIBEFA_KEY};
use crate::host::ReadError;
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Kind, Library, Probe, ProbeMeta, Remedy,
    Status,
};
use crate::probes::shared::facts::LIBEFA_LOADED;
use crate::sysfs::efa::{self, EfaFunction};

pub struct EfaDevices;

const ID: &str = "efa.devices";
/// Within this long after boot a short EFA count may still be the driver probing devices (P5en).
const LATE_INIT_SECS: f64 = 15.0 * 60.0;

const FIX_DRIVER: &str =
    "load the EFA driver: `modprobe efa` (AWS's aws-efa-installer installs it; on the DLAMI it is \
there); see `dmesg | grep -i efa` for why it did not bind";
const FIX_LIBEFA: &str =
    "install rdma-core's EFA provider (`ibverbs-providers` / `rdma-core`, or aws-efa-installer's \
libibverbs with libefa); in a container, mount libefa.so.1 and /etc/libibverbs.d beside libibverbs";
const FIX_COUNT: &str = "attach the instance type's full set of EFA interfaces at launch (network cards × \
`InterfaceType=efa` or `efa-only`); after a reboot give late EFAs a few minutes, then check `dmesg | grep -i efa`";

const EXPECTED_NONE: FindingCode = FindingCode {
    code: "EFA001",
    title: "no EFA on the PCI bus while the profile expects some",
    explanation: "The instance shows no EFA function (1d0f:efa0..efa4) but the profile expects `expect.efa_device_count`: the instance was launched without EFA interfaces, or on a type without them. Attach them at launch.",
    step: Some(Remedy::ServiceRma),
};
const UNBOUND: FindingCode = FindingCode {
    code: "EFA002",
    title: "EFAs on the PCI bus without the efa driver",
    explanation: "EFA functions are on the bus but the efa kernel module is not bound to them: load it (`modprobe efa`; the AWS EFA installer ships it).",
    step: Some(Remedy::LoadModule),
};
const NO_RDMA_DEVICE: FindingCode = FindingCode {
    code: "EFA003",
    title: "EFAs bound to efa registered no RDMA device",
    explanation: "The efa driver is bound but registered no RDMA device: ib_core/ib_uverbs missing or the driver failed to initialise (dmesg). Reload it.",
    step: Some(Remedy::LoadModule),
};
const LIBEFA_MISSING: FindingCode = FindingCode {
    code: "EFA004",
    title: "the efa driver is bound but libefa cannot be loaded",
    explanation: "The user-space provider (rdma-core's libefa) cannot be loaded: install rdma-core from the AWS EFA installer, or mount it into the container.",
    step: Some(Remedy::Reconfigure),
};
const TOO_FEW: FindingCode = FindingCode {
    code: "EFA005",
    title: "fewer EFA devices than the profile expects",
    explanation: "Fewer EFAs than `expect.efa_device_count` for this instance type: interfaces were not attached, or failed. Stop and start the instance, or attach the missing interfaces.",
    step: Some(Remedy::ServiceRma),
};
const TOO_MANY: FindingCode = FindingCode {
    code: "EFA006",
    title: "more EFA devices than the profile expects",
    explanation:
        "More EFAs than the profile expects: the profile may be written for another instance type.",
    step: Some(Remedy::Reconfigure),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "AWS EFA devices: on the bus, bound to the efa driver, libefa present, as many as the instance type has",
    kind: Kind::Library,
    libraries: &[Library::Efa],
    facts: &[&LIBEFA_LOADED],
    explain: Explain {
        reads: "/sys/bus/pci/devices/*/{vendor,device,driver} (EFA = 1d0f:efa0..efa4), /sys/class/infiniband/*/device, \
                dlopen(libefa.so.1), /proc/uptime",
        why: "aws-ofi-nccl reaches EFA through libfabric's efa provider, which opens each EFA through libibverbs and \
              libefa. An EFA on the bus without the efa driver, or a node without libefa, leaves NCCL on TCP \
              sockets (about 100x slower across nodes). EFAs are told apart by PCI id and driver, not by name: \
              they are `rdmapXsY` or `efa_N`, and on Blackwell instances other RDMA devices sit beside them.",
        fixes: &[
            ("EFA without the efa driver", FIX_DRIVER),
            ("libefa.so.1 missing", FIX_LIBEFA),
            ("fewer EFAs than the profile expects", FIX_COUNT),
        ],
    },
    findings: &[
        &EXPECTED_NONE,
        &UNBOUND,
        &NO_RDMA_DEVICE,
        &LIBEFA_MISSING,
        &TOO_FEW,
        &TOO_MANY,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for EfaDevices {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let functions = efa::read_functions(cx.host)?;
    let libefa = if functions.is_empty() {
        None
    } else {
        match cx.answers.obtain(LIBEFA_KEY, load_libefa) {
            Ok(o) => Some(o.value),
            Err(e) => {
                return Ok(vec![
                    CheckResult::error(ID, e).code(&common::LIBRARY_UNANSWERED)
                ])
            }
        }
    };
    let expected = cx.profile.expect.efa_device_count;
    // Read only where it changes the words: a count short of the profile's.
    let uptime = expected
        .filter(|&want| (functions.len() as u32) < want)
        .map(|_| efa::read_uptime(cx.host).map_err(|e| e.to_string()));
    Ok(vec![judge(&functions, libefa.as_ref(), uptime, expected)])
}

fn uptime_text(secs: f64) -> String {
    let s = secs as u64;
    if s < 3600 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{} h {} min", s / 3600, (s % 3600) / 60)
    }
}

pub fn judge(
    functions: &[EfaFunction],
    libefa: Option<&Loaded>,
    uptime: Option<Result<f64, String>>,
    expected: Option<u32>,
) -> CheckResult {
    let mut evidence: Vec<String> = functions
        .iter()
        .map(|f| {
            format!(
                "{} 1d0f:{:04x} driver {} rdma [{}]",
                f.bdf,
                f.device_id,
                f.driver_evidence(),
                f.rdma_devices.join(", ")
            )
        })
        .collect();
    match &uptime {
        Some(Ok(s)) => evidence.push(format!(
            "{} = {s:.0} s ({})",
            efa::PROC_UPTIME,
            uptime_text(*s)
        )),
        Some(Err(e)) => evidence.push(e.clone()),
        None => {}
    }
    if let Some(Loaded(l)) = libefa {
        evidence.push(format!(
            "dlopen({LIBEFA}) = {}",
            l.as_ref().map_or_else(|e| e.clone(), |_| "loaded".into())
        ));
    }
    let early = uptime
        .as_ref()
        .and_then(|u| u.as_ref().ok())
        .filter(|s| **s < LATE_INIT_SECS);
    let late_note = || {
        match early {
        Some(s) => format!(
            " — the node booted {} ago: EFAs may still be initialising (P5en brings some up late); rerun in a few minutes",
            uptime_text(*s)
        ),
        None => String::new(),
    }
    };
    let with = |mut r: CheckResult| {
        r.evidence.splice(0..0, evidence.iter().cloned());
        r
    };
    if functions.is_empty() {
        return with(match expected {
            Some(n) if n > 0 => CheckResult::fail(
                ID,
                format!(
                    "no EFA on the PCI bus, but the profile expects {n}{}",
                    late_note()
                ),
            )
            .fix(FIX_COUNT)
            .code(&EXPECTED_NONE),
            _ => CheckResult::skip(
                ID,
                "no EFA on this host (no 1d0f:efa0..efa4 function on the PCI bus)",
            )
            .code(&common::ABSENT),
        });
    }
    let unbound: Vec<String> = functions
        .iter()
        .filter(|f| !f.has_efa_driver())
        .map(|f| match &f.driver {
            Some(d) => format!("{} (bound to {d})", f.bdf),
            None => f.bdf.clone(),
        })
        .collect();
    if !unbound.is_empty() {
        return with(
            CheckResult::fail(
                ID,
                format!(
                    "{} EFA(s) on the PCI bus without the efa driver: {}",
                    unbound.len(),
                    unbound.join(", ")
                ),
            )
            .fix(FIX_DRIVER)
            .code(&UNBOUND),
        );
    }
    let silent: Vec<&str> = functions
        .iter()
        .filter(|f| f.rdma_devices.is_empty())
        .map(|f| f.bdf.as_str())
        .collect();
    if !silent.is_empty() {
        return with(
            CheckResult::fail(
                ID,
                format!(
                    "{} EFA(s) bound to efa registered no RDMA device: {}",
                    silent.len(),
                    silent.join(", ")
                ),
            )
            .fix("see `dmesg | grep -i efa` (device init or admin queue errors); reload with `modprobe -r efa && modprobe efa`").code(&NO_RDMA_DEVICE),
        );
    }
    if let Some(Loaded(Err(e))) = libefa {
        return with(
            CheckResult::error(
                ID,
                format!("the efa driver is bound but {LIBEFA} cannot be loaded: {e}"),
            )
            .fix(FIX_LIBEFA)
            .code(&LIBEFA_MISSING),
        );
    }
    let n = functions.len();
    let ids: Vec<String> = {
        let mut ids: Vec<String> = functions
            .iter()
            .map(|f| format!("1d0f:{:04x}", f.device_id))
            .collect();
        ids.dedup();
        ids
    };
    match expected {
        Some(want) if (n as u32) < want => with(
            CheckResult::fail(
                ID,
                format!(
                    "{n} EFA device(s), the profile expects {want}{}",
                    late_note()
                ),
            )
            .fix(FIX_COUNT).code(&TOO_FEW),
        ),
        Some(want) if (n as u32) > want => with(CheckResult::warn(
            ID,
            format!("{n} EFA device(s), more than the {want} the profile expects: is this the instance type the profile is for?"),
        ).code(&TOO_MANY)),
        _ => with(CheckResult::new(
            ID,
            Status::Pass,
            format!(
                "{n} EFA device(s) ({}), bound to efa, {LIBEFA} loadable{}",
                ids.join(", "),
                expected.map_or(String::new(), |w| format!(", as the profile expects ({w})"))
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(bdf: &str, driver: Option<&str>, rdma: &[&str]) -> EfaFunction {
        EfaFunction {
            bdf: bdf.into(),
            device_id: 0xefa3,
            driver: driver.map(str::to_string),
            rdma_devices: rdma.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn ok() -> Loaded {
        Loaded(Ok(LIBEFA.into()))
    }

    #[test]
    fn the_cases() {
        let bound = function("0000:44:00.0", Some("efa"), &["rdmap68s0"]);
        let r = judge(std::slice::from_ref(&bound), Some(&ok()), None, Some(1));
        assert_eq!(r.status, Status::Pass, "{r:#?}");
        // No driver, another driver: the presence rule's FAIL, naming the function.
        for f in [
            function("0000:45:00.0", None, &[]),
            function("0000:45:00.0", Some("vfio-pci"), &[]),
        ] {
            let r = judge(&[bound.clone(), f], Some(&ok()), None, None);
            assert_eq!(r.status, Status::Fail);
            assert!(r.summary.contains("0000:45:00.0"), "{}", r.summary);
        }
        let r = judge(
            std::slice::from_ref(&bound),
            Some(&Loaded(Err(
                "libefa.so.1: cannot open shared object file".into()
            ))),
            None,
            None,
        );
        assert_eq!(r.status, Status::Error);
        assert_eq!(judge(&[], None, None, None).status, Status::Skip);
        assert_eq!(judge(&[], None, None, Some(16)).status, Status::Fail);
    }

    /// Reproduced: an EFA with its RDMA device but no `driver` link (a recorded tree, a container's sysfs) was
    /// reported "without the efa driver" beside the very RDMA device only that driver registers.
    #[test]
    fn an_rdma_device_on_the_function_is_the_efa_driver_in_effect() {
        for rdma in [&["rdmap68s0"][..], &["rdmap68s0", "efa_1"][..]] {
            let f = function("0000:44:00.0", None, rdma);
            let r = judge(std::slice::from_ref(&f), Some(&ok()), None, Some(1));
            assert_eq!(r.status, Status::Pass, "{r:#?}");
            assert!(
                r.evidence.iter().any(|e| e.contains("efa in effect")),
                "{:#?}",
                r.evidence
            );
            // Beside a truly unbound one, only that one is named.
            let r = judge(
                &[f, function("0000:45:00.0", None, &[])],
                Some(&ok()),
                None,
                None,
            );
            assert_eq!(r.status, Status::Fail);
            assert!(r.summary.starts_with("1 EFA(s)"), "{}", r.summary);
            assert!(!r.summary.contains("0000:44:00.0"), "{}", r.summary);
        }
        // Bound to another driver stays unbound, RDMA device or not.
        let r = judge(
            &[function("0000:44:00.0", Some("vfio-pci"), &["rdmap68s0"])],
            Some(&ok()),
            None,
            None,
        );
        assert_eq!(r.status, Status::Fail);
    }

    /// A short count is a failure either way; shortly after boot it says the EFAs may still be coming up.
    #[test]
    fn a_short_count_after_boot_is_named_as_late_initialisation() {
        let one = [function("0000:44:00.0", Some("efa"), &["rdmap68s0"])];
        let early = judge(&one, Some(&ok()), Some(Ok(187.0)), Some(16));
        assert_eq!(early.status, Status::Fail);
        assert!(
            early.summary.contains("may still be initialising"),
            "{}",
            early.summary
        );
        assert!(early.summary.contains("3 min 7 s"), "{}", early.summary);
        let later = judge(&one, Some(&ok()), Some(Ok(86400.0)), Some(16));
        assert_eq!(later.status, Status::Fail);
        assert!(!later.summary.contains("initialising"), "{}", later.summary);
    }
}
