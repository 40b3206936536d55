//! Judgement: how a [`Summary`] stands against the transport a node should give, and what to do about it.

use serde::Serialize;

use super::line::NetFamily;
use super::summary::{FailureKind, Summary, Verdict};
use crate::model::Status;
use crate::profile::NcclExpect;

/// How a summary stands against an expected transport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "reason", rename_all = "kebab-case")]
pub enum Judgement {
    Met,
    /// Not met, and why.
    NotMet(String),
    /// The log cannot tell, and why.
    Undetermined(String),
}

impl Judgement {
    /// The one mapping of a judgement to a status, for every caller (`nccl`'s exit code, the `nccl.transport`
    /// check, `collective`): a log that cannot tell whether the expectation was met is an error, never a skip, so
    /// it never reads as a pass.
    pub fn status(&self) -> Status {
        match self {
            Judgement::Met => Status::Pass,
            Judgement::NotMet(_) => Status::Fail,
            Judgement::Undetermined(_) => Status::Error,
        }
    }
}

pub fn expect_name(expect: NcclExpect) -> &'static str {
    match expect {
        NcclExpect::Gdrdma => "gdrdma",
        NcclExpect::IbGdrdma => "ib-gdrdma",
        NcclExpect::OfiGdrdma => "ofi-gdrdma",
        NcclExpect::PluginGdrdma => "plugin-gdrdma",
        NcclExpect::Plugin => "plugin",
        NcclExpect::Ib => "ib",
        NcclExpect::Ofi => "ofi",
        NcclExpect::Socket => "socket",
        NcclExpect::Any => "any",
    }
}

/// NET families that can meet `expect` (empty: any).
pub fn allowed_families(expect: NcclExpect) -> &'static [NetFamily] {
    match expect {
        NcclExpect::Gdrdma => &[NetFamily::Ib, NetFamily::Ofi, NetFamily::Plugin],
        NcclExpect::IbGdrdma | NcclExpect::Ib => &[NetFamily::Ib],
        NcclExpect::OfiGdrdma | NcclExpect::Ofi => &[NetFamily::Ofi],
        NcclExpect::PluginGdrdma | NcclExpect::Plugin => &[NetFamily::Plugin],
        NcclExpect::Socket => &[NetFamily::Socket],
        NcclExpect::Any => &[],
    }
}

/// Judges the log against `expect`: a fatal failure (by the recovered-vs-fatal rule, see [`judge_errors`])
/// makes it not met whatever the transport; otherwise the data path decides, and failures whose outcome the
/// logs cannot show leave a met transport undetermined.
pub fn judge(s: &Summary, expect: NcclExpect) -> Judgement {
    let transport = judge_transport(s, expect);
    match (judge_errors(s), transport) {
        (Judgement::Met, transport) => transport,
        (Judgement::NotMet(errors), transport) => Judgement::NotMet(match transport {
            Judgement::Met => format!("NCCL used {}, but {errors}", s.verdict_named()),
            Judgement::NotMet(why) | Judgement::Undetermined(why) => {
                format!("{why} (verdict {}); {errors}", s.verdict_named())
            }
        }),
        (Judgement::Undetermined(errors), Judgement::Met) => {
            Judgement::Undetermined(format!("NCCL used {}, but {errors}", s.verdict_named()))
        }
        (Judgement::Undetermined(_), transport) => transport,
    }
}

/// The failures alone, by NCCL's own outcome: met when none is fatal or unknown (recovered ones do not
/// count), not met on the first fatal one, undetermined when the logs cannot tell. The `collective` command
/// uses this for its errors verdict.
pub fn judge_errors(s: &Summary) -> Judgement {
    let describe = |total: u64, label: &str, f: &super::summary::Failure| {
        format!(
            "{total} {label} NCCL error(s), first at {}:{}: {}{} ({})",
            f.source,
            f.line,
            f.location
                .as_deref()
                .map_or(String::new(), |l| format!("{l} ")),
            f.message,
            f.why
        )
    };
    let unlisted =
        |total: u64, label: &str| format!("{total} {label} NCCL error(s) (past the listing cap)");
    if s.errors_total > 0 {
        return Judgement::NotMet(s.errors.first().map_or_else(
            || unlisted(s.errors_total, "fatal"),
            |f| describe(s.errors_total, "fatal", f),
        ));
    }
    if s.unknown_errors_total > 0 {
        return Judgement::Undetermined(s.unknown_errors.first().map_or_else(
            || unlisted(s.unknown_errors_total, "unresolved"),
            |f| describe(s.unknown_errors_total, "unresolved", f),
        ));
    }
    Judgement::Met
}

/// Judges the data path against `expect`. With no data path (or none through the network), the selection
/// still decides when it already proves the failure (Socket selected, or IB found no device, while an RDMA
/// family is expected).
pub fn judge_transport(s: &Summary, expect: NcclExpect) -> Judgement {
    let name = expect_name(expect);
    let no_network_path = match s.verdict {
        Verdict::Undetermined => true,
        Verdict::IntraNodeOnly => expect != NcclExpect::Any,
        _ => false,
    };
    if no_network_path {
        if let Some(why) = selection_refutes(s, expect) {
            return Judgement::NotMet(why);
        }
        return Judgement::Undetermined(match s.verdict {
            Verdict::Undetermined => "no channel lines: the log does not show the data path".into(),
            _ => "no NET channel: only intra-node transports in the log".into(),
        });
    }
    let v = s.verdict;
    let partial_of = |family| v == Verdict::PartialGdrdma && s.net_channels.family() == family;
    let met = match expect {
        NcclExpect::Any => true,
        NcclExpect::Gdrdma => matches!(
            v,
            Verdict::IbGdrdma | Verdict::OfiGdrdma | Verdict::PluginGdrdma
        ),
        NcclExpect::IbGdrdma => v == Verdict::IbGdrdma,
        NcclExpect::OfiGdrdma => v == Verdict::OfiGdrdma,
        NcclExpect::PluginGdrdma => v == Verdict::PluginGdrdma,
        NcclExpect::Ib => matches!(v, Verdict::Ib | Verdict::IbGdrdma) || partial_of(NetFamily::Ib),
        NcclExpect::Ofi => {
            matches!(v, Verdict::Ofi | Verdict::OfiGdrdma) || partial_of(NetFamily::Ofi)
        }
        NcclExpect::Plugin => {
            matches!(v, Verdict::Plugin | Verdict::PluginGdrdma) || partial_of(NetFamily::Plugin)
        }
        NcclExpect::Socket => v == Verdict::Socket,
    };
    if met {
        Judgement::Met
    } else {
        Judgement::NotMet(format!(
            "verdict {} does not meet expected {name}{}",
            s.verdict_named(),
            culprits(s)
        ))
    }
}

/// `: on Socket ranks 8-15 (gpu-a02)`: who to look at, for a one-line summary.
fn culprits(s: &Summary) -> String {
    let who = |label: &str, ranks: &[u32], hosts: &[String]| {
        let mut hosts_text = hosts.iter().take(4).cloned().collect::<Vec<_>>().join(",");
        if hosts.len() > 4 {
            hosts_text.push_str(",…");
        }
        format!(": {label} ranks {} ({hosts_text})", super::ranges(ranks))
    };
    if !s.ranks_on_socket.is_empty() && s.verdict == Verdict::MixedSocket {
        who("on Socket", &s.ranks_on_socket, &s.hosts_on_socket)
    } else if !s.ranks_without_gdrdma.is_empty() && s.verdict == Verdict::PartialGdrdma {
        who(
            "without GDRDMA",
            &s.ranks_without_gdrdma,
            &s.hosts_without_gdrdma,
        )
    } else {
        String::new()
    }
}

fn selection_refutes(s: &Summary, expect: NcclExpect) -> Option<String> {
    let allowed = allowed_families(expect);
    if allowed.is_empty() {
        return None;
    }
    let name = expect_name(expect);
    if let Some(bad) = s
        .network_selected
        .iter()
        .find(|n| !allowed.contains(&NetFamily::of(n)))
    {
        return Some(format!(
            "NCCL selected network {bad}, which cannot meet expected {name}"
        ));
    }
    let usable_selected = s
        .network_selected
        .iter()
        .chain(&s.net_plugins_loaded)
        .any(|n| allowed.contains(&NetFamily::of(n)) && !s.net_plugins_failed.contains(n));
    // aws-ofi-nccl's own lines disprove GDR (or the plugin itself) where OFI is the only candidate.
    let only_ofi = allowed == [NetFamily::Ofi]
        || (!s.network_selected.is_empty()
            && s.network_selected
                .iter()
                .all(|n| NetFamily::of(n) == NetFamily::Ofi));
    if only_ofi {
        if let Some(r) = s.ofi_getinfo_failed.first() {
            if s.ofi_providers.is_empty() {
                return Some(format!(
                    "aws-ofi-nccl found no libfabric provider ({}, first at {}): the OFI plugin cannot carry {name}",
                    r.text, r.first_seen
                ));
            }
        }
        if let Some(r) = s.ofi_gdr_disabled.first() {
            if wants_gdr(expect) {
                return Some(format!(
                    "aws-ofi-nccl turned GPUDirect RDMA off ({}, first at {}), which cannot meet expected {name}",
                    r.text, r.first_seen
                ));
            }
        }
    }
    if allowed.contains(&NetFamily::Ib) && s.no_device.iter().any(|n| n == "IB") && !usable_selected
    {
        return Some(format!(
            "NET/IB : No device found, and no other network that could meet expected {name} was selected"
        ));
    }
    None
}

pub(crate) fn wants_gdr(expect: NcclExpect) -> bool {
    matches!(
        expect,
        NcclExpect::Gdrdma
            | NcclExpect::IbGdrdma
            | NcclExpect::OfiGdrdma
            | NcclExpect::PluginGdrdma
    )
}

/// What to do about a verdict that is not what the node should give (`None`: nothing to fix).
pub fn advice(verdict: Verdict) -> Option<&'static str> {
    match verdict {
        Verdict::Socket | Verdict::MixedSocket => Some(
            "on the host(s) on Socket: `ibv_devinfo` must show ports PORT_ACTIVE, /dev/infiniband must be visible \
             (containers: mount it and add IPC_LOCK), `ulimit -l` unlimited, NCCL_IB_DISABLE and NCCL_NET=Socket unset, \
             NCCL_IB_HCA naming present devices (`fabric-preflight run --only nccl.env,rdma.memlock`)",
        ),
        Verdict::Ib | Verdict::Ofi | Verdict::Plugin | Verdict::PartialGdrdma => Some(
            "on the ranks without GDRDMA: `modprobe nvidia-peermem` (or DMA-BUF: open kernel module, NCCL >= 2.19, \
             NCCL_DMABUF_ENABLE=1), NCCL_NET_GDR_LEVEL / NCCL_NET_GDR_READ unset, GPU and NIC under one PCIe switch \
             (`nvidia-smi topo -m`; `fabric-preflight explain gdr.kernel_path`)",
        ),
        Verdict::Undetermined | Verdict::IntraNodeOnly => Some(
            "capture a run that completes a collective across nodes with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
             (e.g. nccl-tests `all_reduce_perf -b 1G -e 1G` on two nodes)",
        ),
        Verdict::IbGdrdma | Verdict::OfiGdrdma | Verdict::PluginGdrdma => None,
    }
}

/// What to do about the first failure NCCL logged.
fn failure_advice(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Completion => {
            "RDMA completion errors (status 12: retry exceeded, 5: flushed after an earlier error) mean a link or \
             fabric fault on the named HCA or its peer: `ibstat` / `ibv_devinfo` port state, `fabric-preflight run \
             --only rdma.link,rdma.counters` (symbol errors, link downed), cable and switch port; then rerun the job"
        }
        FailureKind::Warn
        | FailureKind::ReturnCode
        | FailureKind::NcclError
        | FailureKind::Abort => {
            "read the first failure listed (file:line, then the WARN before it): memory registration errors \
             (`ibv_reg_mr … Cannot allocate memory`) need `ulimit -l unlimited` and nvidia-peermem or DMA-BUF; \
             `Connection closed by remote peer` and ncclRemoteError point at the peer's log; rerun with \
             NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET for the whole chain"
        }
    }
}

/// Advice for a summary: a transport that is not right comes first, then a failure NCCL logged (first of all
/// when the log shows no network data path). With no data path in the log, a selection that already shows the fallback (Socket selected, IB without device) gets the
/// socket advice.
pub fn advice_for(s: &Summary) -> Option<&'static str> {
    let failure = s.errors.first().map(|f| failure_advice(f.kind));
    match s.verdict {
        Verdict::Undetermined | Verdict::IntraNodeOnly => failure.or_else(|| transport_advice(s)),
        _ => transport_advice(s).or(failure),
    }
}

fn transport_advice(s: &Summary) -> Option<&'static str> {
    let fell_back = s
        .network_selected
        .iter()
        .any(|n| NetFamily::of(n) == NetFamily::Socket)
        || s.no_device.iter().any(|n| n == "IB");
    match s.verdict {
        Verdict::Undetermined | Verdict::IntraNodeOnly if fell_back => advice(Verdict::Socket),
        v => advice(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::analyze_text as analyze;
    use crate::nccl::test_lines::*;

    #[test]
    fn judge_uses_selection_when_no_data_path() {
        let sel = |net: &str| analyze(&format!("h:1:2 [0] NCCL INFO Using network {net}\n"));
        assert!(matches!(
            judge(&sel("Socket"), NcclExpect::Gdrdma),
            Judgement::NotMet(_)
        ));
        assert!(matches!(
            judge(&sel("IB"), NcclExpect::Gdrdma),
            Judgement::Undetermined(_)
        ));
        assert!(matches!(
            judge(&sel("IB"), NcclExpect::Any),
            Judgement::Undetermined(_)
        ));
        let no_dev = analyze("h:1:2 [0] NCCL INFO NET/IB : No device found.\n");
        assert!(matches!(
            judge(&no_dev, NcclExpect::IbGdrdma),
            Judgement::NotMet(_)
        ));
        assert!(matches!(
            judge(&no_dev, NcclExpect::Socket),
            Judgement::Undetermined(_)
        ));
    }

    #[test]
    fn judge_expectations_against_verdicts() {
        let partial = analyze(&format!("{IB_GDR}{IB_NO_GDR}"));
        assert_eq!(judge(&partial, NcclExpect::Ib), Judgement::Met);
        assert!(matches!(
            judge(&partial, NcclExpect::Gdrdma),
            Judgement::NotMet(_)
        ));
        let gdr = analyze(IB_GDR);
        for e in [
            NcclExpect::Gdrdma,
            NcclExpect::IbGdrdma,
            NcclExpect::Ib,
            NcclExpect::Any,
        ] {
            assert_eq!(judge(&gdr, e), Judgement::Met, "{e:?}");
        }
        for e in [NcclExpect::OfiGdrdma, NcclExpect::Ofi, NcclExpect::Socket] {
            assert!(matches!(judge(&gdr, e), Judgement::NotMet(_)), "{e:?}");
        }
        assert_eq!(judge(&analyze(P2P), NcclExpect::Any), Judgement::Met);
        assert!(matches!(
            judge(&analyze(P2P), NcclExpect::Gdrdma),
            Judgement::Undetermined(_)
        ));
    }
}
