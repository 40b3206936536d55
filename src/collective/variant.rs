//! The runs `collective --mode` makes of one COMMAND: the job as given; on one node, a NIC loopback and an
//! NVLink-only run side by side (so an NVLink fault is told from a NIC fault); or one communicator per rail.
//! Each is the same COMMAND under its own NCCL settings, judged against its own floor and transport rule: the
//! settings are here, the rules in [`super::judge`].

use std::collections::BTreeMap;

use crate::model::{overall, CheckResult, FindingCode, Remedy, Status};
use crate::profile::NcclExpect;

/// What `collective` runs: the COMMAND as given, or variants of it that isolate one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CollectiveMode {
    /// The COMMAND as given, judged against the single-node or multi-node floor
    Job,
    /// One node, in turn: the COMMAND through the node's own NICs (SHM, P2P and NVLS off; the nic_loopback
    /// floor), then over NVLink only (network off; the single_node floor), judged side by side
    NicLoopback,
    /// One communicator per local rank index (a rail each, nccl-tests' NCCL_TESTS_SPLIT="MOD <rails>"), each
    /// judged against the per_rail floor
    PerRail,
}

pub const ID_ISOLATION: &str = "collective.isolation";

const BOTH_PATHS_FAIL: FindingCode = FindingCode {
    code: "COL731",
    title: "both the NIC loopback and the NVLink-only run fail: what they share is at fault",
    explanation: "A fault in both paths points at what they share: the GPUs, their PCIe links, the driver. Run `fabric-preflight run` on the node (gpu.*, pcie.*, driver.*); a GPU reset clears a wedged GPU.",
    step: Some(Remedy::ResetGpu),
};
const NIC_FAULT: FindingCode = FindingCode {
    code: "COL732",
    title: "a NIC fault: the NIC loopback fails while NVLink-only does not",
    explanation: "The NIC path alone fails: the loopback's transport result names the NIC. See its rdma.link, rdma.counters and gdr.kernel_path, and `pair` it with a known-good node.",
    step: Some(Remedy::ServiceRma),
};
const NVLINK_FAULT: FindingCode = FindingCode {
    code: "COL733",
    title: "an NVLink fault: the NVLink-only run fails while the NIC loopback does not",
    explanation: "The NVLink path alone fails: links down or the NVSwitch fabric (gpu.nvlink, `nvidia-smi nvlink --status`).",
    step: Some(Remedy::ResetGpu),
};
const PATHS_UNJUDGED: FindingCode = FindingCode {
    code: "COL734",
    title: "a run was not judged: the NIC and NVLink paths cannot be told apart",
    explanation: "One of the two runs ended in an error (its own results say why), so a shared cause is not ruled out.",
    step: None,
};
const PATHS_WARN: FindingCode = FindingCode {
    code: "COL735",
    title: "neither path fails, but not every result was judged",
    explanation: "A floor missing from the profile, or a warning in one of the runs: their own results say which.",
    step: None,
};

/// Every finding this file's results can carry, by check id (gathered by `commands::findings`).
pub const FINDINGS: &[(&str, &[&FindingCode])] = &[(
    ID_ISOLATION,
    &[
        &BOTH_PATHS_FAIL,
        &NIC_FAULT,
        &NVLINK_FAULT,
        &PATHS_UNJUDGED,
        &PATHS_WARN,
    ],
)];

/// One run of the COMMAND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The COMMAND as given.
    Job,
    /// One node, every byte through its NICs: SHM, P2P and NVLS off (the single-node test Azure gates on).
    NicLoopback,
    /// One node, NVLink only: the network off, P2P allowed only over NVLink, SHM off, so a GPU pair without
    /// NVLink shows as a NET/Socket channel instead of hiding in shared memory.
    NvlinkOnly,
    /// One communicator per local rank index: a rail each, one GPU per node.
    PerRail { rails: u32 },
}

impl Variant {
    /// The runs of `mode`, in the order they are made. The NIC loopback is the network-only run (NVLink off by
    /// the same settings), so a third job would repeat it.
    pub fn of_mode(mode: CollectiveMode, rails: u32) -> Vec<Variant> {
        match mode {
            CollectiveMode::Job => vec![Variant::Job],
            CollectiveMode::NicLoopback => vec![Variant::NicLoopback, Variant::NvlinkOnly],
            CollectiveMode::PerRail => vec![Variant::PerRail { rails }],
        }
    }

    /// Its name in subjects and log directories.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Job => "job",
            Variant::NicLoopback => "nic-loopback",
            Variant::NvlinkOnly => "nvlink-only",
            Variant::PerRail { .. } => "per-rail",
        }
    }

    /// The floor its busbw is judged against (`thresholds.nccl_busbw_gbytes_per_sec.<collective>.<scope>`);
    /// the job's depends on whether the traffic crossed nodes.
    pub fn scope(self, multi_node: bool) -> &'static str {
        match self {
            Variant::Job if multi_node => "multi_node",
            Variant::Job | Variant::NvlinkOnly => "single_node",
            Variant::NicLoopback => "nic_loopback",
            Variant::PerRail { .. } => "per_rail",
        }
    }

    /// The NCCL settings this run needs, over the user's (each override said in the notes). GPUDirect RDMA as
    /// the expectation asks: `NCCL_NET_GDR_LEVEL=SYS` (as Azure's and GCP's loopback gates set it) unless the
    /// user chose a level.
    pub fn env(
        self,
        expect: NcclExpect,
        user: &BTreeMap<String, String>,
    ) -> (Vec<(String, String)>, Vec<String>) {
        let mut wanted: Vec<(&str, String)> = match self {
            Variant::Job => vec![],
            Variant::NicLoopback => vec![
                ("NCCL_SHM_DISABLE", "1".into()),
                ("NCCL_P2P_DISABLE", "1".into()),
                ("NCCL_NVLS_ENABLE", "0".into()),
            ],
            Variant::NvlinkOnly => vec![
                ("NCCL_P2P_DISABLE", "0".into()),
                ("NCCL_P2P_LEVEL", "NVL".into()),
                ("NCCL_SHM_DISABLE", "1".into()),
                ("NCCL_IB_DISABLE", "1".into()),
                ("NCCL_NET", "Socket".into()),
            ],
            Variant::PerRail { rails } => vec![("NCCL_TESTS_SPLIT", format!("MOD {rails}"))],
        };
        if self == Variant::NicLoopback
            && crate::nccl::judge::wants_gdr(expect)
            && !user.contains_key("NCCL_NET_GDR_LEVEL")
        {
            wanted.push(("NCCL_NET_GDR_LEVEL", "SYS".into()));
        }
        let mut notes = Vec::new();
        for (key, value) in &wanted {
            if let Some(theirs) = user.get(*key).filter(|v| *v != value) {
                notes.push(format!(
                    "{key}={theirs} set to {value} for the {} run",
                    self.name()
                ));
            }
        }
        let set = wanted
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        (set, notes)
    }

    /// Arguments the built-in workload needs for this run (its equivalent of NCCL_TESTS_SPLIT).
    pub fn workload_args(self) -> Vec<String> {
        match self {
            Variant::PerRail { rails } => vec!["--split-mod".into(), rails.to_string()],
            _ => vec![],
        }
    }

    /// Its results named by the run: `nic-loopback: all_reduce >= 128 MiB`, or `nic-loopback`.
    pub fn label(self, results: &mut [CheckResult]) {
        if self == Variant::Job {
            return;
        }
        for r in results {
            r.subject = Some(match r.subject.take() {
                Some(s) => format!("{}: {s}", self.name()),
                None => self.name().to_string(),
            });
        }
    }
}

/// The NIC loopback and the NVLink-only run side by side: which path failed. A fault in one only is that path's
/// (a NIC, its cable or GDR; an NVLink or NVSwitch); both failing points at what they share (the GPUs, their
/// PCIe links, the driver). A run not judged leaves the question open, never passed.
pub fn isolation(network: &[CheckResult], nvlink: &[CheckResult]) -> CheckResult {
    let (net, nvl) = (overall(network), overall(nvlink));
    let first_bad = |results: &[CheckResult], status: Status| {
        results
            .iter()
            .find(|r| r.status == status)
            .map(|r| r.summary.clone())
            .unwrap_or_default()
    };
    let net_text = format!("{} ({})", net, first_bad(network, net));
    let nvl_text = format!("{} ({})", nvl, first_bad(nvlink, nvl));
    let r = match (net, nvl) {
        (Status::Fail, Status::Fail) => CheckResult::fail(
            ID_ISOLATION,
            "both paths fail, the NIC loopback and NVLink-only: look first at what they share (the GPUs, their \
             PCIe links, the driver)",
        )
        .fix("`fabric-preflight run` on this node (gpu.*, pcie.*, driver.*), then rerun")
        .code(&BOTH_PATHS_FAIL),
        (Status::Fail, other) => CheckResult::fail(
            ID_ISOLATION,
            format!(
                "a NIC fault: the NIC loopback fails while NVLink-only {}",
                side(other)
            ),
        )
        .fix(
            "`fabric-preflight run --only rdma.link,rdma.counters,gdr.kernel_path` and `fabric-preflight pair` with a \
             known-good node; the loopback's transport result names the NIC",
        )
        .code(&NIC_FAULT),
        (other, Status::Fail) => CheckResult::fail(
            ID_ISOLATION,
            format!(
                "an NVLink fault: NVLink-only fails while the NIC loopback {}",
                side(other)
            ),
        )
        .fix("`fabric-preflight run --only gpu.nvlink` (links down, NVSwitch fabric state), `nvidia-smi nvlink --status`")
        .code(&NVLINK_FAULT),
        (Status::Error, _) | (_, Status::Error) => CheckResult::error(
            ID_ISOLATION,
            "a run was not judged: the paths cannot be told apart",
        )
        .code(&PATHS_UNJUDGED),
        (Status::Warn, _) | (_, Status::Warn) => CheckResult::warn(
            ID_ISOLATION,
            "neither path fails, but not every result was judged (a floor missing from the profile, a warning)",
        )
        .code(&PATHS_WARN),
        _ => CheckResult::pass(
            ID_ISOLATION,
            "both paths pass: the NICs (loopback) and NVLink (network off)",
        ),
    };
    r.evidence("nic-loopback", net_text)
        .evidence("nvlink-only", nvl_text)
}

fn side(status: Status) -> &'static str {
    match status {
        Status::Error => "could not be judged (so a shared cause is not ruled out)",
        Status::Warn => "does not fail (with a warning)",
        _ => "passes",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_forces_the_nics_and_gdr_unless_the_user_chose_a_level() {
        let user: BTreeMap<String, String> =
            [("NCCL_P2P_DISABLE".to_string(), "0".to_string())].into();
        let (set, notes) = Variant::NicLoopback.env(NcclExpect::IbGdrdma, &user);
        assert!(set.contains(&("NCCL_P2P_DISABLE".into(), "1".into())));
        assert!(set.contains(&("NCCL_NET_GDR_LEVEL".into(), "SYS".into())));
        assert_eq!(
            notes,
            ["NCCL_P2P_DISABLE=0 set to 1 for the nic-loopback run"]
        );
        let user: BTreeMap<String, String> =
            [("NCCL_NET_GDR_LEVEL".to_string(), "PHB".to_string())].into();
        let (set, _) = Variant::NicLoopback.env(NcclExpect::Gdrdma, &user);
        assert!(!set.iter().any(|(k, _)| k == "NCCL_NET_GDR_LEVEL"));
        let (set, _) = Variant::NicLoopback.env(NcclExpect::Ib, &BTreeMap::new());
        assert!(!set.iter().any(|(k, _)| k == "NCCL_NET_GDR_LEVEL"));
        let (set, _) = Variant::PerRail { rails: 8 }.env(NcclExpect::Gdrdma, &BTreeMap::new());
        assert_eq!(set, [("NCCL_TESTS_SPLIT".to_string(), "MOD 8".to_string())]);
    }

    #[test]
    fn a_fault_on_one_path_is_that_paths() {
        let pass = [CheckResult::pass("collective.busbw", "ok")];
        let fail = [CheckResult::fail("collective.transport", "socket")];
        let error = [CheckResult::error("collective.command", "exit 1")];
        assert_eq!(isolation(&pass, &pass).status, Status::Pass);
        assert!(isolation(&fail, &pass).summary.starts_with("a NIC fault"));
        assert!(isolation(&pass, &fail)
            .summary
            .starts_with("an NVLink fault"));
        assert!(isolation(&fail, &fail)
            .summary
            .starts_with("both paths fail"));
        assert_eq!(isolation(&error, &pass).status, Status::Error);
        let r = isolation(&fail, &error);
        assert_eq!(r.status, Status::Fail);
        assert!(r.summary.contains("could not be judged"), "{}", r.summary);
    }
}
