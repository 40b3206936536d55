//! `efa.libfabric`: libfabric's `efa` provider offers a reliable-datagram endpoint (`FI_EP_RDM`) on the EFAs,
//! with GPU memory (`FI_HMEM`) where GPUs are present: what aws-ofi-nccl asks `fi_getinfo` for before NCCL uses
//! EFA. No provider on a node whose EFAs are present means NCCL falls back to TCP sockets.

use crate::dynlib::fabric::{self, Query};
use crate::host::ReadError;
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Kind, Library, Probe, ProbeMeta, Remedy,
    Status,
};
use crate::probes::shared::facts::EFA_OFFERS;
use crate::rules::topology::{PciTree, Role};
use crate::sysfs::efa;

pub struct EfaLibfabric;

const ID: &str = "efa.libfabric";

const FIX_INSTALL: &str = "install AWS's EFA software (aws-efa-installer: libfabric with the efa provider in \
/opt/amazon/efa) or a libfabric built with `--enable-efa`; in a container, mount /opt/amazon/efa and set \
LD_LIBRARY_PATH; check with `fi_info -p efa -t FI_EP_RDM`";
const FIX_HMEM: &str =
    "libfabric's efa provider found no GPU memory support: it needs libcuda at run time and the \
efa driver's peer path (DMA-BUF with the open NVIDIA module, or efa_nv_peermem); see efa.gdr, and \
`FI_LOG_LEVEL=warn fi_info -p efa -c FI_HMEM`";

const LIBFABRIC_MISSING: FindingCode = FindingCode {
    code: "EFA301",
    title: "EFA present but libfabric cannot be loaded",
    explanation: "NCCL reaches EFA through libfabric (aws-ofi-nccl): without it NCCL falls back to TCP sockets. Install the AWS EFA installer's libfabric, or mount it into the container.",
    step: Some(Remedy::Reconfigure),
};
const HMEM_NOT_ASKED: FindingCode = FindingCode {
    code: "EFA302",
    title: "libfabric was asked without FI_HMEM while GPUs are on the bus",
    explanation: "An error: whether NCCL can use GPU memory over EFA was not asked (a recording made without it).",
    step: None,
};
const NO_HMEM: FindingCode = FindingCode {
    code: "EFA303",
    title: "libfabric's efa provider offers FI_EP_RDM but not FI_HMEM: no GPU memory over EFA",
    explanation: "NCCL logs `GDR disabled` and stages every transfer through host memory: the libfabric build lacks CUDA/HMEM support, or GPUDirect on EFA is unavailable (see efa.gdr). Install the EFA installer's libfabric.",
    step: Some(Remedy::Reconfigure),
};
const NO_PROVIDER: FindingCode = FindingCode {
    code: "EFA304",
    title: "libfabric has no efa provider for FI_EP_RDM: NCCL falls back to TCP sockets",
    explanation: "fi_getinfo finds no efa provider: libfabric was built without it, or the EFA devices are not usable by it. Install the EFA installer's libfabric.",
    step: Some(Remedy::Reconfigure),
};
const DEVICES_MISSING: FindingCode = FindingCode {
    code: "EFA305",
    title: "libfabric's efa provider offers fewer EFAs than the host has",
    explanation: "Some EFAs are not offered by libfabric: NCCL uses fewer NICs. Check `fi_info -p efa` and `dmesg | grep -i efa`.",
    step: Some(Remedy::RestartService),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "libfabric's efa provider offers FI_EP_RDM on the EFAs (with FI_HMEM where GPUs are present), as aws-ofi-nccl needs",
    kind: Kind::Library,
    libraries: &[Library::Fabric],
    facts: &[&EFA_OFFERS],
    explain: Explain {
        reads: "the EFA functions on the PCI bus; libfabric.so.1 (or /opt/amazon/efa/lib) opened at run time, \
                fi_getinfo(provider efa, FI_EP_RDM, FI_HMEM when NVIDIA GPUs are on the bus)",
        why: "aws-ofi-nccl carries NCCL over libfabric's efa provider. Without it NCCL silently uses TCP \
              sockets (hundreds of GB/s become a few); without FI_HMEM it stages every transfer through host \
              memory (`GDR disabled`).",
        fixes: &[
            ("no efa provider", FIX_INSTALL),
            ("the provider refuses FI_HMEM", FIX_HMEM),
        ],
    },
    findings: &[
        &LIBFABRIC_MISSING,
        &HMEM_NOT_ASKED,
        &NO_HMEM,
        &NO_PROVIDER,
        &DEVICES_MISSING,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for EfaLibfabric {
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
    let devices: Vec<String> = functions
        .iter()
        .flat_map(|f| f.rdma_devices.clone())
        .collect();
    if functions.is_empty() {
        return Ok(vec![
            CheckResult::skip(ID, "no EFA on this host").code(&common::ABSENT)
        ]);
    }
    let tree = PciTree::read(cx.host)?;
    let gpus = !tree.with_role(Role::Gpu).is_empty();
    let obtained = match cx
        .answers
        .obtain(fabric::EFA_QUERY_KEY, || fabric::query_efa(true))
    {
        Ok(o) => o,
        Err(e) => {
            return Ok(vec![
                CheckResult::error(ID, e).code(&common::LIBRARY_UNANSWERED)
            ])
        }
    };
    let mut r = judge(&obtained.value, &devices, gpus);
    if obtained.replayed {
        r = r.note("libfabric's answers replayed from the recording");
    }
    // An unread function may be a GPU: whether FI_HMEM was due is then not known.
    Ok(tree.completed(ID, crate::rules::topology::GPUS, vec![r]))
}

/// `gpus`: NVIDIA GPUs are on the bus, so FI_HMEM is due.
pub fn judge(q: &Query, efa_devices: &[String], gpus: bool) -> CheckResult {
    // Without GPUs FI_HMEM is not due: where it found nothing, the answer without it is the one judged.
    let plain;
    let q = match &q.without_hmem {
        Some(offers) if !gpus && q.hmem_requested && q.error.is_some() => {
            plain = Query {
                hmem_requested: false,
                providers: offers.clone(),
                error: q.error.clone().filter(|_| offers.is_empty()),
                without_hmem: None,
                library: q.library.clone(),
            };
            &plain
        }
        _ => q,
    };
    let mut evidence = vec![format!(
        "libfabric = {}",
        q.library.clone().unwrap_or_else(|e| e)
    )];
    let call = format!(
        "fi_getinfo(prov efa, FI_EP_RDM{})",
        if q.hmem_requested { ", FI_HMEM" } else { "" }
    );
    let version = match &q.library {
        Ok(v) => v,
        Err(e) => {
            let mut r = CheckResult::error(
                ID,
                format!("EFA present but libfabric cannot be loaded: {e}"),
            )
            .fix(FIX_INSTALL)
            .code(&LIBFABRIC_MISSING);
            r.evidence = evidence;
            return r;
        }
    };
    if gpus && !q.hmem_requested {
        return CheckResult::error(
            ID,
            "libfabric was asked without FI_HMEM while NVIDIA GPUs are on the bus: whether NCCL can use GPU \
             memory over EFA was not asked",
        )
        .evidence("answer", call).code(&HMEM_NOT_ASKED);
    }
    let offered = Query::devices(&q.providers);
    evidence.push(format!(
        "{call} = {}",
        match &q.error {
            Some(e) => format!("{} ({})", e.code, e.text),
            None => format!(
                "{} offer(s): {}",
                q.providers.len(),
                q.providers
                    .iter()
                    .map(|o| format!("{}/{}", o.fabric, o.domain))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    ));
    if let Some(plain) = &q.without_hmem {
        evidence.push(format!(
            "fi_getinfo(prov efa, FI_EP_RDM) without FI_HMEM = {} offer(s)",
            plain.len()
        ));
    }
    let mut r = match (&q.error, &q.without_hmem) {
        (Some(_), Some(plain)) if !plain.is_empty() => CheckResult::fail(
            ID,
            format!(
                "libfabric {version}'s efa provider offers FI_EP_RDM but not FI_HMEM: NCCL cannot use GPU memory over EFA (`GDR disabled`)"
            ),
        )
        .fix(FIX_HMEM).code(&NO_HMEM),
        (Some(e), _) => CheckResult::fail(
            ID,
            format!(
                "libfabric {version} has no efa provider for FI_EP_RDM{} ({}): NCCL would fall back to TCP sockets",
                if q.hmem_requested { " with FI_HMEM" } else { "" },
                e.text
            ),
        )
        .fix(FIX_INSTALL).code(&NO_PROVIDER),
        (None, _) => {
            let missing: Vec<&String> = efa_devices.iter().filter(|d| !offered.contains(d)).collect();
            let fabrics = {
                let mut f: Vec<&str> = q.providers.iter().map(|o| o.fabric.as_str()).collect();
                f.sort_unstable();
                f.dedup();
                f.join(", ")
            };
            if missing.is_empty() {
                CheckResult::pass(
                    ID,
                    format!(
                        "libfabric {version}: provider efa, fabric {fabrics}, FI_EP_RDM{} on {} EFA(s)",
                        if q.hmem_requested { " with FI_HMEM" } else { "" },
                        offered.len()
                    ),
                )
            } else {
                CheckResult::new(
                    ID,
                    Status::Warn,
                    format!(
                        "libfabric's efa provider offers {} of {} EFA(s); missing: {}: NCCL uses fewer NICs",
                        efa_devices.len() - missing.len(),
                        efa_devices.len(),
                        missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                )
                .fix("check `fi_info -p efa` and `dmesg | grep -i efa` for the missing devices").code(&DEVICES_MISSING)
            }
        }
    };
    r.evidence = evidence;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynlib::fabric::{GetInfoError, Offer};

    fn offer(d: &str) -> Offer {
        Offer {
            fabric: "efa-direct".into(),
            domain: format!("{d}-rdm"),
            provider: "efa".into(),
        }
    }

    fn query(providers: Vec<Offer>, error: Option<i32>, without: Option<Vec<Offer>>) -> Query {
        Query {
            library: Ok("1.22".into()),
            hmem_requested: true,
            providers,
            error: error.map(|code| GetInfoError {
                code,
                text: "No data available".into(),
            }),
            without_hmem: without,
        }
    }

    #[test]
    fn the_cases() {
        let devs = vec!["rdmap68s0".to_string(), "rdmap69s0".to_string()];
        let r = judge(
            &query(vec![offer("rdmap68s0"), offer("rdmap69s0")], None, None),
            &devs,
            true,
        );
        assert_eq!(r.status, Status::Pass, "{r:#?}");
        assert_eq!(
            judge(&query(vec![offer("rdmap68s0")], None, None), &devs, true).status,
            Status::Warn
        );
        let none = judge(&query(vec![], Some(-61), Some(vec![])), &devs, true);
        assert_eq!(none.status, Status::Fail);
        assert!(none.summary.contains("TCP sockets"), "{}", none.summary);
        let no_hmem = judge(
            &query(vec![], Some(-61), Some(vec![offer("rdmap68s0")])),
            &devs,
            true,
        );
        assert_eq!(no_hmem.status, Status::Fail);
        assert!(
            no_hmem.summary.contains("not FI_HMEM"),
            "{}",
            no_hmem.summary
        );
        let mut absent = query(vec![], None, None);
        absent.library = Err("libfabric not found (libfabric.so.1: cannot open)".into());
        assert_eq!(judge(&absent, &devs, true).status, Status::Error);
    }

    /// The one answer (asked with FI_HMEM, and without it where that found nothing) serves a node without GPUs:
    /// its plain offers are judged, and no GPU means no FI_HMEM verdict.
    #[test]
    fn without_gpus_the_offers_without_hmem_are_judged() {
        let devs = vec!["rdmap68s0".to_string()];
        let plain_only = query(vec![], Some(-61), Some(vec![offer("rdmap68s0")]));
        let r = judge(&plain_only, &devs, false);
        assert_eq!(r.status, Status::Pass, "{r:#?}");
        assert!(!r.summary.contains("FI_HMEM"), "{}", r.summary);
        let both = query(vec![offer("rdmap68s0")], None, None);
        assert_eq!(judge(&both, &devs, false).status, Status::Pass);
        let neither = judge(&query(vec![], Some(-61), Some(vec![])), &devs, false);
        assert_eq!(neither.status, Status::Fail, "{neither:#?}");
        // A recording asked without FI_HMEM says nothing about GPU memory: on a GPU node that is not a pass.
        let mut asked_plain = query(vec![offer("rdmap68s0")], None, None);
        asked_plain.hmem_requested = false;
        assert_eq!(judge(&asked_plain, &devs, false).status, Status::Pass);
        assert_eq!(judge(&asked_plain, &devs, true).status, Status::Error);
    }
}
