//! `nccl.transport`: the transport NCCL actually used in the logs given with `run --nccl-log`, judged against
//! the profile's `expect.nccl_transport`.

use std::time::Duration;

use crate::input::Accept;
use crate::nccl::{self, expect_name, judge, Judgement, Summary, Verdict};
use crate::probe::{
    common, CheckResult, Context, Explain, FindingCode, Measurement, Need, Probe, ProbeMeta,
    Remedy, Status,
};

pub struct NcclTransport;

const ID: &str = "nccl.transport";
/// Evidence lines per list (warnings, GDR reasons): the JSON of `fabric-preflight nccl` has them all.
const EVIDENCE_PER_LIST: usize = 5;

const NOT_MET: FindingCode = FindingCode {
    code: "NCC101",
    title: "NCCL's logs fail the profile's transport expectation, or show a fatal NCCL error",
    explanation: "With an expectation (`expect.nccl_transport`): the transport NCCL used is not the expected one (sockets where RDMA was expected, no GPUDirect RDMA where GDR was); without one, a fatal NCCL failure. The summary says which; the fix quotes NCCL's own advice where the log gives it.",
    step: Some(Remedy::Reconfigure),
};
const DEGRADED: FindingCode = FindingCode {
    code: "NCC102",
    title: "NCCL used sockets, a socket/RDMA mix or GPUDirect RDMA on some channels only",
    explanation: "Without an expectation, a transport that marks a node set up unlike the others warns, as does an NCCL error the log leaves unresolved. See nccl.env, gdr.kernel_path and rdma.link.",
    step: Some(Remedy::Reconfigure),
};
const UNDETERMINED: FindingCode = FindingCode {
    code: "NCC103",
    title: "the NCCL logs do not show the data path",
    explanation: "A skip: no channel lines (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including INIT,NET is needed), so which transport NCCL used is unknown.",
    step: None,
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "NCCL used the expected transport (IB/RoCE with GPUDirect RDMA, not sockets) in the given logs",
    needs: &[Need::NcclLog],
    timeout: // Multi-GB logs at several hundred MB/s.
    Duration::from_secs(60),
    explain: Explain {
        reads: "the NCCL_DEBUG=INFO logs given with --nccl-log (user files, read directly, streamed): channel lines \
                (`Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA` and every older shape), selection lines \
                (`Using network …`, `NET/IB : No device found.`), `GPU Direct RDMA Disabled …`, NCCL WARN lines, error \
                return codes and error names; Docker json-file and CRI container logs are decoded",
        why: "NCCL silently falls back from InfiniBand/RoCE with GPUDirect RDMA to host-staged copies or plain TCP \
              sockets when anything in the fabric is off. Jobs still run, 5-20x slower. Only the channel lines prove \
              which transport carried the data; selection lines say what was chosen, not what was used.",
        fixes: &[
            ("socket / mixed-socket: channels over TCP sockets", "on the host(s) on Socket: ports ACTIVE (`ibv_devinfo`), \
              /dev/infiniband visible in the container, `ulimit -l unlimited`, NCCL_IB_DISABLE / NCCL_NET=Socket unset"),
            ("ib / partial-gdrdma: channels without GDRDMA", "`modprobe nvidia-peermem` or DMA-BUF (NCCL_DMABUF_ENABLE=1), \
              NCCL_NET_GDR_LEVEL unset, GPU and NIC under one PCIe switch (`nvidia-smi topo -m`)"),
            ("undetermined: no channel lines", "capture a run that completes a collective across nodes with \
              NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"),
            ("errors: WARN lines, return codes (`net_ib.cc:911 -> 2`), completion errors, ncclSystemError …",
             "a failing job fails whatever the transport: read the first error listed; completion errors \
              (status 12) point at the link or fabric (`fabric-preflight run --only rdma.link,rdma.counters`)"),
        ],
    },
    findings: &[
        &NOT_MET,
        &DEGRADED,
        &UNDETERMINED,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for NcclTransport {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        if cx.inputs.nccl_logs.is_empty() {
            return vec![CheckResult::skip(ID, "no --nccl-log given").code(&common::ABSENT)];
        }
        let summary = match nccl::analyze_paths(
            &cx.inputs.nccl_logs,
            Accept::RegularOrPipe,
            Some(cx.deadline),
        ) {
            Ok(s) => s,
            Err(e) => {
                return vec![CheckResult::error(ID, e.to_string())
                    .evidence(&e.path, &e.stop)
                    .code(&common::UNREAD)]
            }
        };
        vec![judged(&summary, cx.profile.expect.nccl_transport)]
    }
}

/// Status and summary line. With an expectation, `Judgement::status`: met → pass, not met → fail, cannot tell → error. Without one,
/// the verdict alone: RDMA (with or without GDR) passes; sockets, a socket/RDMA mix and a GDR mix warn (each is
/// the mark of a node set up unlike the others); no data path skips unless Socket was selected (warn).
fn judged(s: &Summary, expect: Option<crate::profile::NcclExpect>) -> CheckResult {
    let v = s.verdict;
    let (status, summary) = match expect {
        Some(e) => {
            let judgement = judge(s, e);
            let summary = match &judgement {
                Judgement::Met => format!(
                    "NCCL used {}, as expected ({})",
                    s.verdict_named(),
                    expect_name(e)
                ),
                Judgement::NotMet(why) => why.clone(),
                Judgement::Undetermined(why) => format!("{why} (expected {})", expect_name(e)),
            };
            (judgement.status(), summary)
        }
        None => match v {
            Verdict::IbGdrdma | Verdict::OfiGdrdma | Verdict::PluginGdrdma => {
                (Status::Pass, format!("NCCL used {}", s.verdict_named()))
            }
            Verdict::Ib | Verdict::Ofi | Verdict::Plugin => (
                Status::Pass,
                format!(
                    "NCCL used {} without GPUDirect RDMA (no expectation in the profile)",
                    s.verdict_named()
                ),
            ),
            Verdict::IntraNodeOnly => (
                Status::Pass,
                "NCCL used intra-node transports only (no NET channel)".into(),
            ),
            Verdict::PartialGdrdma | Verdict::Socket | Verdict::MixedSocket => {
                (Status::Warn, format!("NCCL used {v}"))
            }
            Verdict::Undetermined => {
                let socket = s
                    .network_selected
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case("socket"));
                if socket {
                    (
                        Status::Warn,
                        "no channel lines; NCCL selected Socket".into(),
                    )
                } else {
                    (
                        Status::Skip,
                        "no channel lines: the log does not show the data path".into(),
                    )
                }
            }
        },
    };
    // Without an expectation, a fatal NCCL failure still fails and an unresolved one warns (with one,
    // `judge` already weighed them).
    let (status, summary) = match nccl::judge_errors(s) {
        Judgement::NotMet(errors) if expect.is_none() => {
            (Status::Fail, format!("{summary}; {errors}"))
        }
        Judgement::Undetermined(errors) if expect.is_none() && status == Status::Pass => {
            (Status::Warn, format!("{summary}; {errors}"))
        }
        _ => (status, summary),
    };
    let mut r = CheckResult::new(ID, status, summary)
        .code(match status {
            Status::Fail => &NOT_MET,
            Status::Warn => &DEGRADED,
            _ => &UNDETERMINED,
        })
        .evidence("logs", s.input.files.join(", "))
        .evidence("verdict", v)
        .evidence("nccl version", or_dash(&s.nccl_versions))
        .evidence("network selected", or_dash(&s.network_selected))
        .measure(Measurement::new(
            "net_channels_gdrdma",
            s.net_channels.gdrdma as f64,
            "channels",
        ))
        .measure(Measurement::new(
            "net_channels_without_gdrdma",
            s.net_channels.without_gdrdma as f64,
            "channels",
        ))
        .measure(Measurement::new(
            "net_channels_socket",
            s.net_channels.socket as f64,
            "channels",
        ));
    if !s.no_device.is_empty() {
        r = r.evidence("no device found", s.no_device.join(", "));
    }
    if !s.ofi_platforms.is_empty() {
        r = r.evidence("instance type (aws-ofi-nccl)", s.ofi_platforms.join(", "));
    }
    for g in s.ofi_gdr_disabled.iter().chain(&s.ofi_getinfo_failed) {
        r = r.evidence(&g.first_seen, format!("NET/OFI {} (x{})", g.text, g.count));
    }
    for t in &s.transports {
        let ranks: Vec<u32> = t.ranks.iter().copied().collect();
        let hosts: Vec<&str> = t.hosts.iter().map(String::as_str).collect();
        r = r.evidence(
            &t.first_seen,
            format!(
                "{}: {} channel line(s), ranks {}, hosts {}",
                t.transport,
                t.channels,
                nccl::ranges(&ranks),
                if hosts.is_empty() {
                    "-".into()
                } else {
                    hosts.join(",")
                }
            ),
        );
    }
    for g in s.gdr_disabled.iter().take(EVIDENCE_PER_LIST) {
        r = r.evidence(&g.first_seen, format!("{} (x{})", g.text, g.count));
    }
    let listed = [
        ("fatal", &s.errors),
        ("unresolved", &s.unknown_errors),
        ("recovered", &s.recovered_errors),
    ];
    for (label, list) in listed {
        for e in list.iter().take(EVIDENCE_PER_LIST) {
            r = r.evidence(
                &format!("{}:{}", e.source, e.line),
                format!(
                    "{label} {} {} {} ({})",
                    e.kind.as_str(),
                    e.location.as_deref().unwrap_or("-"),
                    e.message,
                    e.why
                ),
            );
        }
    }
    for n in &s.notes {
        r = r.note(n.clone());
    }
    if matches!(r.status, Status::Fail | Status::Warn | Status::Skip) {
        if let Some(advice) = nccl::advice_for(s) {
            r = r.fix(advice);
        }
    }
    r
}

fn or_dash(list: &[String]) -> String {
    if list.is_empty() {
        "-".into()
    } else {
        list.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::analyze_text as summary;
    use crate::profile::NcclExpect;

    const SOCKET: &str =
        "h:1:2 [0] NCCL INFO Channel 00/0 : 3[0] -> 4[0] [send] via NET/Socket/0\n";
    const GDR: &str =
        "h:1:2 [0] NCCL INFO Channel 00/0 : 3[0] -> 4[0] [send] via NET/IB/0/GDRDMA\n";

    #[test]
    fn transport_socket_with_gdr_expected_fails() {
        let r = judged(&summary(SOCKET), Some(NcclExpect::IbGdrdma));
        assert_eq!(r.status, Status::Fail);
        assert!(r.remediation.is_some());
    }

    #[test]
    fn transport_gdr_with_gdr_expected_passes() {
        assert_eq!(
            judged(&summary(GDR), Some(NcclExpect::IbGdrdma)).status,
            Status::Pass
        );
    }

    #[test]
    fn transport_without_expectation_warns_on_socket_passes_on_ib() {
        assert_eq!(judged(&summary(SOCKET), None).status, Status::Warn);
        assert_eq!(judged(&summary(GDR), None).status, Status::Pass);
        let selected_socket = summary("h:1:2 [0] NCCL INFO Using network Socket\n");
        assert_eq!(judged(&selected_socket, None).status, Status::Warn);
        assert_eq!(judged(&summary("noise\n"), None).status, Status::Skip);
    }

    const VERSION: &str = "h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n";
    const COMPLETE: &str =
        "h:1:1 [0] NCCL INFO comm 0x51 rank 3 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE\n";

    #[test]
    fn transport_nccl_errors_fail_with_or_without_expectation() {
        for error in [
            "h:1:2 [0] net_ib.cc:1 NCCL WARN NET/IB : Got completion with error 12\n",
            "h:1:2 [0] NCCL INFO transport/net_ib.cc:911 -> 2\n",
            "h:1:2 [0] init.cc:9 NCCL WARN boom\n",
            "ncclRemoteError: A call failed possibly due to a network error\n",
        ] {
            let s = summary(&format!("{VERSION}{GDR}{error}"));
            for expect in [None, Some(NcclExpect::IbGdrdma), Some(NcclExpect::Any)] {
                let r = judged(&s, expect);
                assert_eq!(r.status, Status::Fail, "{error} {expect:?}");
                assert!(r.summary.contains("ib-gdrdma"), "{}", r.summary);
            }
        }
    }

    #[test]
    fn transport_recovered_errors_pass_unknown_ones_do_not() {
        let recovered = summary(&format!(
            "h:1:2 [0] NCCL INFO net.cc:79 -> 3\n{COMPLETE}{GDR}"
        ));
        for expect in [None, Some(NcclExpect::IbGdrdma)] {
            let r = judged(&recovered, expect);
            assert_eq!(r.status, Status::Pass, "{expect:?}: {}", r.summary);
            assert!(r.evidence.iter().any(|e| e.contains("recovered")));
        }
        // No init line and no version: whether NCCL recovered cannot be told.
        let unknown = summary(&format!("h:1:2 [0] NCCL INFO net.cc:79 -> 3\n{GDR}"));
        assert_eq!(judged(&unknown, None).status, Status::Warn);
        // With an expectation the log cannot prove: an error (exit 3), never a skip that exits 0.
        assert_eq!(
            judged(&unknown, Some(NcclExpect::IbGdrdma)).status,
            Status::Error
        );
        let no_channels = summary(VERSION);
        for expect in [NcclExpect::IbGdrdma, NcclExpect::Gdrdma, NcclExpect::Socket] {
            let r = judged(&no_channels, Some(expect));
            assert_eq!(r.status, Status::Error, "{expect:?}: {}", r.summary);
        }
    }
}
