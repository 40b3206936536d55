//! `pcie.aer`: the PCIe AER error counters of every GPU, RDMA NIC and NVMe drive and of every bridge on its path
//! to the root port: no fatal or non-fatal error, corrected errors below a rate.

use crate::host::{Host, ReadError};
use crate::model::{worst, Limit};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Measurement, Probe, ProbeMeta, Remedy,
    Status,
};
use crate::rules::topology::{PciTree, Role, DATA_PATHS};
use crate::sysfs::aer::{self, Counts, Severity, ROOT_PORT_TOTALS};

pub struct PcieAer;

const ID: &str = "pcie.aer";

const UPTIME: &str = "/proc/uptime";

/// Corrected errors per hour of uptime, when the profile sets no limit. A healthy link corrects an error now
/// and then (a replayed TLP, a receiver error at a speed change): a few a week. More than one an hour on
/// average since boot is a link that degrades, and precedes retraining to a lower speed or width; it never
/// fails the node by itself (the data got through).
pub const CORRECTABLE_PER_HOUR: Limit = Limit::new(Some(1.0), None);

const FIX_UNCORRECTABLE: &str = "see `dmesg | grep -i aer` for the failing TLPs and the device that reported them; reseat \
the device and its riser/cable; errors that return after a reseat mean a bad card, riser or slot (RMA); the counters \
reset at reboot";

const FIX_CORRECTABLE: &str =
    "watch the rate (`dmesg | grep -i 'corrected error'`, or read the counter again later); \
reseat the device and its riser/cable, and replace the riser or cable if the rate keeps rising";

const UNCORRECTABLE: FindingCode = FindingCode {
    code: "PCI101",
    title: "fatal or non-fatal (uncorrectable) AER errors on a data-path PCIe function",
    explanation: "The function's AER counters (aer_dev_fatal, aer_dev_nonfatal) are not zero since boot: transactions were lost on a GPU, NIC or NVMe link. Check dmesg for the error source; reseat, then service the card or riser if they recur.",
    step: Some(Remedy::ServiceRma),
};
const UNCORRECTABLE_BELOW: FindingCode = FindingCode {
    code: "PCI102",
    title: "a root port counts uncorrectable AER errors reported from below",
    explanation: "The root port's aer_rootport_total_err_fatal/nonfatal count errors from a device below it on a data path. Check dmesg for which device; reseat, then service it if they recur.",
    step: Some(Remedy::ServiceRma),
};
const CORRECTED_RATE: FindingCode = FindingCode {
    code: "PCI103",
    title: "corrected AER errors above the rate since boot",
    explanation: "Corrected errors (replays, bad TLPs) an hour since boot above the limit (`thresholds.pcie_aer_correctable_per_hour`): a marginal link that costs bandwidth and precedes uncorrectable errors. Reseat the card or cable.",
    step: Some(Remedy::ServiceRma),
};
const NO_AER: FindingCode = FindingCode {
    code: "PCI104",
    title: "no AER counters: PCIe errors are not judged",
    explanation: "A skip: the kernel exposes no AER counters for the functions (CONFIG_PCIEAER off, pci=noaer, or firmware-first error handling).",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "PCIe AER counters of GPUs, RDMA NICs, NVMe drives and the bridges above them: no fatal or non-fatal error",
    explain: Explain {
        reads: "/sys/bus/pci/devices/<bdf>/aer_dev_{fatal,nonfatal,correctable} of each GPU, RDMA NIC and NVMe \
                drive and of each port on its path to the root port; aer_rootport_total_err_{fatal,nonfatal,cor} \
                of root ports; /proc/uptime for the corrected-error rate",
        why: "A fatal or non-fatal PCIe error means a transaction was lost or poisoned: the driver may have reset \
              the link, the GPU may fall off the bus next (Xid 79), and GPUDirect transfers may have been \
              dropped. A rising corrected-error rate is a link degrading before it retrains lower. All of it \
              happens while every functional check still passes.",
        fixes: &[
            ("fatal or non-fatal AER errors", FIX_UNCORRECTABLE),
            ("corrected errors above thresholds.pcie_aer_correctable_per_hour", FIX_CORRECTABLE),
            ("no AER counters", "build the kernel with CONFIG_PCIEAER=y (every distribution kernel has it) and do not boot with `pci=noaer`; firmware-first platforms (`HEST` in ACPI) report through the BMC's event log instead"),
        ],
    },
    findings: &[
        &UNCORRECTABLE,
        &UNCORRECTABLE_BELOW,
        &CORRECTED_RATE,
        &NO_AER,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for PcieAer {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        CheckResult::or_read_error(ID, results(cx))
    }
}

/// The results, or the first input that could not be read.
fn results(cx: &Context<'_>) -> Result<Vec<CheckResult>, ReadError> {
    let tree = PciTree::read(cx.host)?;
    let functions = on_data_paths(&tree);
    if functions.is_empty() {
        let nothing = CheckResult::skip(ID, "no GPU, RDMA NIC or NVMe drive on the PCI bus")
            .code(&common::ABSENT);
        return Ok(vec![tree.nothing_found(ID, DATA_PATHS, nothing)]);
    }
    let read: Vec<(usize, FunctionAer)> = functions
        .into_iter()
        .map(|i| (i, FunctionAer::read(cx.host, &tree, i)))
        .collect();
    if read.iter().all(|(_, f)| f.is_absent()) {
        let r = CheckResult::skip(
            ID,
            format!(
                "no AER counters on any of the {} function(s) on the GPU, NIC and NVMe paths (kernel without CONFIG_PCIEAER, booted with pci=noaer, or firmware-first error handling): PCIe errors are not judged",
                read.len()
            ),
        )
        .evidence(
            &format!("{}/{}/aer_dev_fatal", crate::sysfs::pci::PCI_DEVICES, tree.nodes[read[0].0].bdf),
            "<missing>",
        ).code(&NO_AER);
        return Ok(tree.completed(ID, DATA_PATHS, vec![r]));
    }
    let uptime = read_uptime_hours(cx.host);
    let limit = cx
        .profile
        .thresholds
        .pcie_aer_correctable_per_hour
        .unwrap_or_default()
        .or(CORRECTABLE_PER_HOUR);
    let (absent, reporting): (Vec<_>, Vec<_>) = read.iter().partition(|(_, f)| f.is_absent());
    let mut results: Vec<CheckResult> = reporting
        .iter()
        .map(|(i, f)| judge(f, &uptime, &limit).subject(tree.subject(*i)))
        .collect();
    // Functions without the AER capability (or whose kernel hides it), named once.
    if !absent.is_empty() {
        let names: Vec<String> = absent.iter().map(|(i, _)| tree.subject(*i)).collect();
        let mut r = CheckResult::skip(
            ID,
            format!(
                "{} function(s) on the data paths report no AER counters: their PCIe errors are not judged",
                absent.len()
            ),
        ).code(&NO_AER);
        r.evidence = names;
        results.push(r);
    }
    Ok(tree.completed(ID, DATA_PATHS, results))
}

/// The GPUs, RDMA NICs and NVMe drives and every bridge above them, each once, in the tree's order.
fn on_data_paths(tree: &PciTree) -> Vec<usize> {
    let mut wanted = vec![false; tree.nodes.len()];
    for role in [Role::Gpu, Role::Nic, Role::Nvme] {
        for i in tree.with_role(role) {
            wanted[i] = true;
            for a in tree.ancestors(i) {
                wanted[a] = true;
            }
        }
    }
    (0..tree.nodes.len()).filter(|&i| wanted[i]).collect()
}

/// A root port total as read: None where the kernel does not provide it.
type RootTotal = Result<Option<u64>, ReadError>;

/// What one function's AER files say.
#[derive(Debug)]
struct FunctionAer {
    dir: String,
    /// Per-device files, fatal first.
    files: Vec<(Severity, Result<Option<Counts>, ReadError>)>,
    /// A root port's totals of what it received from below (empty for other functions).
    root_totals: Vec<(&'static str, Severity, RootTotal)>,
}

impl FunctionAer {
    fn read(host: &Host, tree: &PciTree, i: usize) -> Self {
        let dir = tree.nodes[i].sysfs_path.clone();
        let files = Severity::ALL
            .iter()
            .map(|&s| (s, aer::read(host, &dir, s)))
            .collect();
        let root_totals = if tree.nodes[i].role == Role::RootPort {
            ROOT_PORT_TOTALS
                .iter()
                .map(|&(name, s)| (name, s, aer::read_root_port_total(host, &dir, name)))
                .collect()
        } else {
            Vec::new()
        };
        FunctionAer {
            dir,
            files,
            root_totals,
        }
    }

    /// No AER file at all (read or not): the kernel or the function does not report AER.
    fn is_absent(&self) -> bool {
        self.files.iter().all(|(_, f)| matches!(f, Ok(None)))
            && self
                .root_totals
                .iter()
                .all(|(_, _, t)| matches!(t, Ok(None)))
    }
}

/// Hours since boot, or why it is not known.
fn read_uptime_hours(host: &Host) -> Result<f64, String> {
    let text = host.read(UPTIME).map_err(|e| e.reason())?;
    text.split_whitespace()
        .next()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| s / 3600.0)
        .ok_or_else(|| format!("<not seconds: {:?}>", text.trim()))
}

/// One function's verdict: unreadable → error; fatal or non-fatal → fail; corrected above the rate → warn.
fn judge(f: &FunctionAer, uptime: &Result<f64, String>, limit: &Limit) -> CheckResult {
    let mut problems: Vec<(Status, String, &'static FindingCode)> = Vec::new();
    let mut evidence = Vec::new();
    let mut measurements = Vec::new();
    let mut fixes: Vec<&str> = Vec::new();
    // Under an hour since boot, a handful of errors is not yet a rate.
    let hours = uptime.as_ref().map(|h| h.max(1.0)).unwrap_or(1.0);
    let mut correctable =
        |what: String, count: u64, problems: &mut Vec<(Status, String, &'static FindingCode)>| {
            let rate = count as f64 / hours;
            measurements.push(
                Measurement::new("aer_correctable_per_hour", rate, "per hour").judged_by(limit),
            );
            let status = limit.judge_max(rate);
            if status != Status::Pass {
                problems.push((
                    status,
                    format!("{what}: {rate:.1} corrected error(s) an hour since boot"),
                    &CORRECTED_RATE,
                ));
                true
            } else {
                false
            }
        };
    let mut any = false;
    for (severity, file) in &f.files {
        let path = format!("{}/{}", f.dir, severity.file());
        match file {
            Err(e) => {
                problems.push((
                    Status::Error,
                    format!("cannot read {} = {}", e.path, e.reason()),
                    &common::UNREAD,
                ));
                evidence.push(format!("{} = {}", e.path, e.reason()));
            }
            Ok(None) => evidence.push(format!("{path} = <missing>")),
            Ok(Some(c)) => {
                any = true;
                evidence.push(format!("{path} = total {}{}", c.total, detail(c)));
                if c.total == 0 {
                    continue;
                }
                let what = format!(
                    "{} {} {} error(s) ({})",
                    severity.file(),
                    c.total,
                    severity.as_str(),
                    c.nonzero()
                );
                match severity {
                    Severity::Fatal | Severity::NonFatal => {
                        problems.push((Status::Fail, what, &UNCORRECTABLE));
                        fixes.push(FIX_UNCORRECTABLE);
                    }
                    Severity::Correctable => {
                        if correctable(what, c.total, &mut problems) {
                            fixes.push(FIX_CORRECTABLE);
                        }
                    }
                }
            }
        }
    }
    for (name, severity, total) in &f.root_totals {
        let path = format!("{}/{name}", f.dir);
        match total {
            Err(e) => {
                problems.push((
                    Status::Error,
                    format!("cannot read {} = {}", e.path, e.reason()),
                    &common::UNREAD,
                ));
                evidence.push(format!("{} = {}", e.path, e.reason()));
            }
            Ok(None) => evidence.push(format!("{path} = <missing>")),
            Ok(Some(0)) => {
                any = true;
                evidence.push(format!("{path} = 0"));
            }
            Ok(Some(n)) => {
                any = true;
                evidence.push(format!("{path} = {n}"));
                let what = format!(
                    "{name} = {n} ({} error(s) reported to this root port from below)",
                    severity.as_str()
                );
                if *severity == Severity::Correctable {
                    if correctable(what, *n, &mut problems) {
                        fixes.push(FIX_CORRECTABLE);
                    }
                } else {
                    problems.push((Status::Fail, what, &UNCORRECTABLE_BELOW));
                    fixes.push(FIX_UNCORRECTABLE);
                }
            }
        }
    }
    match uptime {
        Ok(h) => evidence.push(format!("{UPTIME} = {h:.1} h")),
        Err(why) => evidence.push(format!("{UPTIME} = {why} (rate judged as if up one hour)")),
    }
    let status = worst(problems.iter().map(|(s, ..)| *s));
    let mut r = if problems.is_empty() && !any {
        CheckResult::skip(ID, "no AER counters on this function").code(&NO_AER)
    } else if problems.is_empty() {
        CheckResult::pass(
            ID,
            "no fatal or non-fatal AER error; corrected errors within the rate",
        )
    } else {
        let texts: Vec<&str> = problems.iter().map(|(_, p, _)| p.as_str()).collect();
        let mut r = CheckResult::new(ID, status, texts.join("; "));
        problems.sort_by_key(|(s, ..)| std::cmp::Reverse(*s));
        for (status, text, code) in problems {
            r = r.finding(code, status, text);
        }
        r
    };
    fixes.sort_unstable();
    fixes.dedup();
    if !fixes.is_empty() {
        r = r.fix(fixes.join("; "));
    }
    r.evidence = evidence;
    for m in measurements {
        r = r.measure(m);
    }
    r
}

/// ` (MalfTLP 1)` for a file that counted, else nothing.
fn detail(c: &Counts) -> String {
    let nonzero = c.nonzero();
    if nonzero.is_empty() {
        String::new()
    } else {
        format!(" ({nonzero})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(total: u64, name: &str) -> Option<Counts> {
        Some(Counts {
            by_name: vec![(name.to_string(), total)],
            total,
        })
    }

    fn function(fatal: u64, nonfatal: u64, cor: u64) -> FunctionAer {
        FunctionAer {
            dir: "/sys/devices/pci0000:15/0000:15:01.0".into(),
            files: vec![
                (Severity::Fatal, Ok(counts(fatal, "MalfTLP"))),
                (Severity::NonFatal, Ok(counts(nonfatal, "CmpltTO"))),
                (Severity::Correctable, Ok(counts(cor, "BadTLP"))),
            ],
            root_totals: vec![],
        }
    }

    #[test]
    fn the_rule() {
        let day = Ok(24.0);
        let l = CORRECTABLE_PER_HOUR;
        assert_eq!(judge(&function(0, 0, 0), &day, &l).status, Status::Pass);
        assert_eq!(judge(&function(0, 0, 20), &day, &l).status, Status::Pass);
        let r = judge(&function(0, 0, 100), &day, &l);
        assert_eq!(r.status, Status::Warn);
        assert!(r.summary.contains("BadTLP 100"), "{}", r.summary);
        let r = judge(&function(1, 0, 0), &day, &l);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.summary
                .contains("aer_dev_fatal 1 fatal error(s) (MalfTLP 1)"),
            "{}",
            r.summary
        );
        assert_eq!(judge(&function(0, 3, 0), &day, &l).status, Status::Fail);
    }

    /// Right after boot the count is judged over one hour, not over a few seconds.
    #[test]
    fn a_young_boot_is_not_a_high_rate() {
        let r = judge(&function(0, 0, 1), &Ok(0.01), &CORRECTABLE_PER_HOUR);
        assert_eq!(r.status, Status::Pass);
    }

    #[test]
    fn an_unreadable_file_is_an_error_naming_it() {
        let mut f = function(0, 0, 0);
        f.files[0].1 = Err(ReadError {
            path: "/x/aer_dev_fatal".into(),
            kind: crate::host::ReadErrorKind::Other("not a count".into()),
        });
        let r = judge(&f, &Ok(24.0), &CORRECTABLE_PER_HOUR);
        assert_eq!(r.status, Status::Error);
        assert!(r.summary.contains("/x/aer_dev_fatal"), "{}", r.summary);
    }
}
