//! `fabric-preflight nccl [FILE…|-]`: what NCCL chose and what carried the data, judged against `--expect`.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::bail;
use serde::Serialize;

use crate::cli::{NcclArgs, ViewFormat};
use crate::exit::Exit;
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
    let summary = match nccl::analyze_paths(&files, None) {
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
        ViewFormat::Table => crate::report::fit(
            &render_table(&summary, args.expect, &judgement, code),
            crate::report::output::terminal_width(),
        ),
    };
    Ok(super::emit(&text, code))
}

pub fn exit_code(judgement: &Judgement) -> u8 {
    match judgement {
        Judgement::Met => Exit::OK,
        Judgement::NotMet(_) => Exit::CHECK_FAILED,
        Judgement::Undetermined(_) => Exit::COULD_NOT_RUN,
    }
}

fn or_none(list: &[String]) -> String {
    if list.is_empty() {
        "-".into()
    } else {
        list.join(", ")
    }
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
    field("net devices", or_none(&s.net_devices));
    field(
        "bootstrap",
        format!("{} (out-of-band, not the data path)", or_none(&s.bootstrap)),
    );
    if let Some(n) = s.nnodes {
        field("nodes", n.to_string());
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
    if s.errors_total > 0 {
        out.push_str(&format!("\nerrors ({}):\n", s.errors_total));
        for e in &s.errors {
            out.push_str(&format!(
                "  {}:{} {} {} {} {}\n",
                e.source,
                e.line,
                e.kind.as_str(),
                e.host.as_deref().unwrap_or("-"),
                e.location.as_deref().unwrap_or("-"),
                e.message
            ));
        }
        if s.errors_total > s.errors.len() as u64 {
            out.push_str(&format!(
                "  … {} more\n",
                s.errors_total - s.errors.len() as u64
            ));
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
