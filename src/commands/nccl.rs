//! `fabric-preflight nccl [FILE…|-]`: what NCCL chose and what carried the data, judged against `--expect`.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::bail;
use serde::Serialize;

use crate::cli::{NcclArgs, ViewFormat};
use crate::exit::Exit;
use crate::input::Accept;
use crate::model::CheckResult;
use crate::nccl::{self, expect_name, judge, Judgement, Summary};
use crate::profile::NcclExpect;

/// `--format json`: the summary plus how it stands against `--expect`.
#[derive(Serialize)]
struct Report<'a> {
    expect: &'static str,
    judgement: &'a Judgement,
    exit_code: u8,
    #[serde(flatten)]
    summary: &'a Summary,
}

pub fn main(args: NcclArgs) -> anyhow::Result<u8> {
    let files = if args.files.is_empty() {
        if std::io::stdin().is_terminal() {
            bail!("no NCCL log given: name files, or pipe a log into `fabric-preflight nccl -`");
        }
        vec![PathBuf::from("-")]
    } else {
        args.files
    };
    for f in &files {
        nccl::check_log_path(f).map_err(anyhow::Error::msg)?;
    }
    // The paths were checked: failing to read one now (EIO, a pipe torn down) is "could not run", not usage.
    let summary = match nccl::analyze_paths(&files, Accept::RegularOrPipe, None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fabric-preflight: {e}");
            return Ok(Exit::COULD_NOT_RUN);
        }
    };
    let judgement = judge(&summary, args.expect);
    let code = exit_code(&judgement);
    let text = match args.format {
        ViewFormat::Json => {
            let report = Report {
                expect: expect_name(args.expect),
                judgement: &judgement,
                exit_code: code,
                summary: &summary,
            };
            serde_json::to_string_pretty(&report)? + "\n"
        }
        // Host and interface names come from the log: no control character reaches the terminal.
        ViewFormat::Table => crate::report::fit(
            &crate::report::escape_controls(&render_table(&summary, args.expect, &judgement, code)),
            crate::report::output::terminal_width(),
        ),
    };
    Ok(super::emit(&text, code))
}

pub fn exit_code(judgement: &Judgement) -> u8 {
    let status = judgement.status();
    crate::exit::for_checks(&[CheckResult::new("nccl", status, "")], false)
}

fn or_none(list: &[String]) -> String {
    if list.is_empty() {
        "-".into()
    } else {
        list.join(", ")
    }
}

/// `16 processes: 14 ok, 1 recovered, 1 fatal (gpu-a02 pid 3602 ranks 3)`: how the ranks came out of init.
fn init_outcomes(s: &Summary) -> String {
    use crate::nccl::RankState;
    let count = |state| s.ranks.iter().filter(|r| r.outcome == state).count();
    let mut text = format!("{} process(es):", s.ranks.len());
    for (state, name) in [
        (RankState::Ok, "ok"),
        (RankState::Recovered, "recovered"),
        (RankState::Fatal, "fatal"),
        (RankState::Unknown, "unknown"),
    ] {
        let n = count(state);
        if n > 0 {
            text.push_str(&format!(" {n} {name},"));
        }
    }
    text.pop();
    let failed: Vec<String> = s
        .ranks
        .iter()
        .filter(|r| r.outcome == RankState::Fatal)
        .take(4)
        .map(|r| format!("{} pid {} ranks {}", r.host, r.pid, nccl::ranges(&r.ranks)))
        .collect();
    if !failed.is_empty() {
        text.push_str(&format!(" (fatal: {})", failed.join("; ")));
    }
    text
}

pub fn render_table(s: &Summary, expect: NcclExpect, judgement: &Judgement, code: u8) -> String {
    let mut out = String::new();
    let judged = match judgement {
        Judgement::Met => "met".to_string(),
        Judgement::NotMet(why) => format!("NOT met: {why}"),
        Judgement::Undetermined(why) => format!("undetermined: {why}"),
    };
    let mut field = |name: &str, value: String| out.push_str(&format!("{name:<15}{value}\n"));
    field("verdict", s.verdict_named());
    field(
        "expected",
        format!("{} ({judged}; exit {code})", expect_name(expect)),
    );
    field("nccl version", or_none(&s.nccl_versions));
    field("selected", or_none(&s.network_selected));
    if !s.net_plugins_loaded.is_empty() || !s.net_plugins_failed.is_empty() {
        field(
            "plugins",
            format!(
                "loaded: {}; failed: {}",
                or_none(&s.net_plugins_loaded),
                or_none(&s.net_plugins_failed)
            ),
        );
    }
    if !s.no_device.is_empty() {
        field("no device", or_none(&s.no_device));
    }
    if !s.ofi_platforms.is_empty() {
        field("instance type", or_none(&s.ofi_platforms));
    }
    if !s.ofi_providers.is_empty() || !s.ofi_dmabuf.is_empty() || !s.ofi_gdr_disabled.is_empty() {
        let dmabuf: Vec<String> = s.ofi_dmabuf.iter().map(bool::to_string).collect();
        let gdr_off: Vec<String> = s.ofi_gdr_disabled.iter().map(|r| r.text.clone()).collect();
        field(
            "ofi",
            format!(
                "provider {}; DMA-BUF registrations: {}; GDR turned off: {}",
                or_none(&s.ofi_providers),
                or_none(&dmabuf),
                or_none(&gdr_off)
            ),
        );
    }
    field("net devices", or_none(&s.net_devices));
    field(
        "bootstrap",
        format!("{} (out-of-band, not the data path)", or_none(&s.bootstrap)),
    );
    if let Some(n) = s.nnodes {
        field("nodes", n.to_string());
    }
    if !s.ranks.is_empty() {
        field("init", init_outcomes(s));
    }
    if !s.transports.is_empty() {
        let mut table = comfy_table::Table::new();
        table
            .load_style(comfy_table::presets::NOTHING)
            .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
            .set_width(crate::report::output::terminal_width())
            .force_no_tty();
        table.set_header([
            "TRANSPORT",
            "CHANNELS",
            "RANKS",
            "HOSTS",
            "DEVICES",
            "FIRST SEEN",
        ]);
        for t in &s.transports {
            let ranks: Vec<u32> = t.ranks.iter().copied().collect();
            let devices: Vec<u32> = t.devices.iter().copied().collect();
            let hosts: Vec<&str> = t.hosts.iter().map(String::as_str).collect();
            table.add_row([
                t.transport.clone(),
                t.channels.to_string(),
                nccl::ranges(&ranks),
                hosts.join(","),
                nccl::ranges(&devices),
                t.first_seen.clone(),
            ]);
        }
        out.push('\n');
        out.push_str(&table.to_string());
        out.push('\n');
    }
    if !s.ranks_on_socket.is_empty() || !s.hosts_on_socket.is_empty() {
        out.push_str(&format!(
            "\non Socket: ranks {} on {}\n",
            nccl::ranges(&s.ranks_on_socket),
            or_none(&s.hosts_on_socket)
        ));
    }
    if s.net_channels.gdrdma > 0 && s.net_channels.without_gdrdma > 0 {
        out.push_str(&format!(
            "\nwithout GDRDMA: ranks {} on {}, NET devices {}\n",
            nccl::ranges(&s.ranks_without_gdrdma),
            or_none(&s.hosts_without_gdrdma),
            nccl::ranges(&s.devices_without_gdrdma)
        ));
    }
    if !s.gdr_disabled.is_empty() {
        out.push_str("\nGPU Direct RDMA disabled:\n");
        for r in &s.gdr_disabled {
            out.push_str(&format!(
                "  {} (x{}, first {})\n",
                r.text, r.count, r.first_seen
            ));
        }
    }
    for (label, list, total) in [
        ("errors, fatal", &s.errors, s.errors_total),
        (
            "errors, outcome unknown",
            &s.unknown_errors,
            s.unknown_errors_total,
        ),
        (
            "errors NCCL recovered from",
            &s.recovered_errors,
            s.recovered_errors_total,
        ),
    ] {
        if total == 0 {
            continue;
        }
        out.push_str(&format!("\n{label} ({total}):\n"));
        for e in list {
            let rank = e.rank.map_or(String::new(), |r| format!(" rank {r}"));
            out.push_str(&format!(
                "  {}:{} {} {}{rank} {} {}\n    {}\n",
                e.source,
                e.line,
                e.kind.as_str(),
                e.host.as_deref().unwrap_or("-"),
                e.location.as_deref().unwrap_or("-"),
                e.message,
                e.why
            ));
        }
        if total > list.len() as u64 {
            out.push_str(&format!("  … {} more\n", total - list.len() as u64));
        }
    }
    if !s.notes.is_empty() {
        out.push_str("\nnotes:\n");
        for n in &s.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    if !matches!(judgement, Judgement::Met) {
        if let Some(advice) = nccl::advice_for(s) {
            out.push_str(&format!("\nfix: {advice}\n"));
        }
    }
    out
}
