//! `nccl.env`: NCCL variables in this environment that silently change the transport.

use crate::host::{optional, Host, ReadError};
use crate::nccl::conf::{self, ConfFile, Setting, Settings};
use crate::nccl::env::IfList;
use crate::nccl::expect_name;
use crate::nccl::judge::allowed_families;
use crate::nccl::line::NetFamily;
use crate::probe::{
    CheckResult, Context, Explain, FindingCode, Inputs, Probe, ProbeMeta, Remedy, Status,
};
use crate::profile::NcclExpect;
use crate::rules::grace;
use crate::rules::topology::{PciTree, Role};
use crate::sysfs::infiniband::{
    gid_path, gid_type_path, read_device_names, read_gid, read_gid_type, read_port,
    read_port_numbers, CLASS_INFINIBAND,
};
use crate::sysfs::net::{read_interface_names, CLASS_NET};

pub struct NcclEnv;

const ID: &str = "nccl.env";
/// NCCL's own default when NCCL_IB_GID_INDEX is unset or -1 (2.21+): pick the GID itself.
const GID_AUTO: i64 = -1;
const HCA_VAR: &str = "NCCL_IB_HCA";
const SOCKET_VAR: &str = "NCCL_SOCKET_IFNAME";
const GID_VAR: &str = "NCCL_IB_GID_INDEX";
/// NCCL 2.23+: GDR through a CPU-attached NIC when the GPU reaches the CPU over NVLink-C2C (default 1).
const C2C_VAR: &str = "NCCL_NET_GDR_C2C";

const IB_DISABLED: FindingCode = FindingCode {
    code: "NCC001",
    title: "NCCL_IB_DISABLE=1: NCCL will not use InfiniBand or RoCE",
    explanation: "NCCL falls back to TCP sockets. A failure where the profile expects IB/RoCE, else a warning. Unset it (the environment or the NCCL configuration file that sets it).",
    step: Some(Remedy::Reconfigure),
};
const NET_SOCKET: FindingCode = FindingCode {
    code: "NCC002",
    title: "NCCL_NET forces TCP sockets",
    explanation: "NCCL_NET=Socket: no RDMA. Unset NCCL_NET, or name the RDMA plugin (IB, or the OFI plugin's name).",
    step: Some(Remedy::Reconfigure),
};
const NET_WRONG_PLUGIN: FindingCode = FindingCode {
    code: "NCC003",
    title: "NCCL_NET names a plugin the profile does not expect",
    explanation: "The network plugin NCCL_NET names is of another family than the profile's transport: unset it or name the expected one.",
    step: Some(Remedy::Reconfigure),
};
const GDR_LEVEL_OFF: FindingCode = FindingCode {
    code: "NCC004",
    title: "NCCL_NET_GDR_LEVEL or NCCL_IB_GDR_LEVEL turns GPUDirect RDMA off",
    explanation: "LOC or 0: NCCL never uses GPUDirect RDMA and stages data through host memory. Unset it: NCCL enables GDR by PCIe distance.",
    step: Some(Remedy::Reconfigure),
};
const GDR_READ_OFF: FindingCode = FindingCode {
    code: "NCC005",
    title: "NCCL_NET_GDR_READ=0: sends are staged through host memory",
    explanation: "No GDRDMA on send channels. Unset it.",
    step: Some(Remedy::Reconfigure),
};
const GDR_C2C_OFF: FindingCode = FindingCode {
    code: "NCC006",
    title: "NCCL_NET_GDR_C2C=0 on a Grace node turns GPUDirect RDMA off for every GPU",
    explanation: "The NICs of a Grace node sit on the CPU, reached over NVLink-C2C: with C2C GDR off no GPU uses GPUDirect RDMA. Unset it.",
    step: Some(Remedy::Reconfigure),
};
const IB_HCA_NONE: FindingCode = FindingCode {
    code: "NCC007",
    title: "NCCL_IB_HCA keeps no RDMA port of this host",
    explanation: "The list matches or excludes every port: NCCL finds no IB device and falls back to sockets. List devices from /sys/class/infiniband, or unset it.",
    step: Some(Remedy::Reconfigure),
};
const IB_HCA_ABSENT: FindingCode = FindingCode {
    code: "NCC008",
    title: "NCCL_IB_HCA names devices absent from this host",
    explanation:
        "NCCL ignores the absent entries silently: the list was written for another node shape.",
    step: Some(Remedy::Reconfigure),
};
const SOCKET_IFNAME_NONE: FindingCode = FindingCode {
    code: "NCC009",
    title: "NCCL_SOCKET_IFNAME keeps no interface: NCCL cannot bootstrap",
    explanation: "`no socket interface found`: name interfaces from /sys/class/net, or unset it.",
    step: Some(Remedy::Reconfigure),
};
const GID_INDEX_INVALID: FindingCode = FindingCode {
    code: "NCC010",
    title: "NCCL_IB_GID_INDEX is not a GID index",
    explanation: "Set a GID index (a number from `show_gids`) or unset it.",
    step: Some(Remedy::Reconfigure),
};
const GID_EMPTY: FindingCode = FindingCode {
    code: "NCC011",
    title: "NCCL_IB_GID_INDEX points at an empty GID slot on a RoCE port",
    explanation: "NCCL cannot address the port through that GID: pick the RoCE v2 index from `show_gids` (or unset it: NCCL 2.21 and later choose).",
    step: Some(Remedy::Reconfigure),
};
const GID_NOT_V2: FindingCode = FindingCode {
    code: "NCC012",
    title: "NCCL_IB_GID_INDEX names a GID that is not RoCE v2",
    explanation: "A RoCE v1 or link-local GID is not routable and carries no ECN: pick the RoCE v2 index from `show_gids`.",
    step: Some(Remedy::Reconfigure),
};
const CONF_RELATIVE: FindingCode = FindingCode {
    code: "NCC013",
    title: "NCCL_CONF_FILE is relative: not read, its settings are not judged",
    explanation: "NCCL resolves it against the job's working directory: set an absolute path.",
    step: Some(Remedy::Reconfigure),
};
const CONF_SYNTAX: FindingCode = FindingCode {
    code: "NCC014",
    title: "a line of an NCCL configuration file is not NAME=value",
    explanation: "NCCL skips it: write it as NAME=value (no spaces around `=`), or make it a comment with `#` in column 1.",
    step: Some(Remedy::Reconfigure),
};

const META: ProbeMeta = ProbeMeta {
    id: ID,
    title: "No NCCL_* variable (environment or nccl.conf) disables IB/GDR or names devices, interfaces or GIDs this host lacks",
    explain: Explain {
        reads: "the environment of this process (NCCL_IB_DISABLE, NCCL_NET, NCCL_NET_GDR_LEVEL, NCCL_IB_GDR_LEVEL, \
                NCCL_NET_GDR_READ, NCCL_NET_GDR_C2C, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_IB_GID_INDEX) merged as NCCL merges it with \
                $NCCL_CONF_FILE (2.23+) or $HOME/.nccl.conf and /etc/nccl.conf (the environment wins, then the user's \
                file; first line per name), /sys/class/infiniband \
                (devices, ports/<p>/link_layer, ports/<p>/gids/<n>, ports/<p>/gid_attrs/types/<n>), /sys/class/net",
        why: "These variables are set once in a container image or job template and forgotten. NCCL obeys them without \
              complaint: IB disabled or no matching HCA means TCP sockets, GDR level LOC means host-staged copies, an \
              interface list that matches nothing stops bootstrap, and an empty or RoCE v1 GID breaks or slows RoCE.",
        fixes: &[
            ("NCCL_IB_DISABLE=1 or NCCL_NET=Socket", "unset it in the job environment / image"),
            ("NCCL_NET_GDR_LEVEL=LOC or NCCL_NET_GDR_READ=0", "unset it (NCCL picks GDR by PCIe distance)"),
            ("NCCL_NET_GDR_C2C=0 on a Grace node", "unset it (NCCL uses GDR over NVLink-C2C by default)"),
            ("NCCL_IB_HCA names devices absent here", "list devices from `ls /sys/class/infiniband` (prefix, `=exact`, `^exclude`, `:port`)"),
            ("NCCL_SOCKET_IFNAME matches no interface", "name interfaces from `ls /sys/class/net` (prefix, `=exact`, `^exclude`)"),
            ("NCCL_IB_GID_INDEX empty or not RoCE v2", "pick the RoCE v2 index from `show_gids` (or unset it: NCCL >= 2.21 chooses)"),
        ],
    },
    findings: &[
        &IB_DISABLED,
        &NET_SOCKET,
        &NET_WRONG_PLUGIN,
        &GDR_LEVEL_OFF,
        &GDR_READ_OFF,
        &GDR_C2C_OFF,
        &IB_HCA_NONE,
        &IB_HCA_ABSENT,
        &SOCKET_IFNAME_NONE,
        &GID_INDEX_INVALID,
        &GID_EMPTY,
        &GID_NOT_V2,
        &CONF_RELATIVE,
        &CONF_SYNTAX,
    ],
    ..ProbeMeta::STATIC
};

impl Probe for NcclEnv {
    fn meta(&self) -> &'static ProbeMeta {
        &META
    }

    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
        let facts = Facts::read(cx.host, cx.inputs);
        judge(cx.profile.expect.nccl_transport, &facts)
    }
}

/// What the check reads from the host, before it judges: only what the variables set make it look at.
struct Facts {
    /// The environment merged with NCCL's configuration files, and what reading those gave.
    settings: Settings,
    files: FilesRead,
    /// RDMA devices and their ports, when NCCL_IB_HCA or NCCL_IB_GID_INDEX names some.
    rdma: Option<Result<RdmaPorts, ReadError>>,
    /// Network interfaces, when NCCL_SOCKET_IFNAME names some.
    interfaces: Option<Result<Vec<String>, ReadError>>,
    /// For NCCL_IB_GID_INDEX: each port NCCL would use, and what it holds at that index.
    gid_slots: Vec<GidSlot>,
    /// When NCCL_NET_GDR_C2C is set: whether a GPU on the bus reaches its CPU over NVLink-C2C (Grace).
    c2c_gpus: Option<Result<bool, ReadError>>,
}

struct RdmaPorts {
    devices: Vec<String>,
    /// `(device, port)` pairs present on this host.
    ports: Vec<(String, u32)>,
}

/// One port NCCL_IB_GID_INDEX applies to: its link layer, and on RoCE the GID and its type at the index
/// (each read only when the one before says it matters).
struct GidSlot {
    device: String,
    port: u32,
    link_layer: Result<Option<String>, ReadError>,
    gid: Option<Result<Option<String>, ReadError>>,
    gid_type: Option<Result<Option<String>, ReadError>>,
}

impl Facts {
    fn read(host: &Host, inputs: &Inputs) -> Facts {
        let (settings, files) = read_settings(host, inputs);
        let value = |var| settings.get(var).map(|s| s.value.as_str());
        let hca = value(HCA_VAR).map(IfList::parse);
        let index = value(GID_VAR).and_then(|v| gid_index_set(v).ok().flatten());
        let lists_hcas = hca.as_ref().is_some_and(|l| !l.entries.is_empty());
        let rdma = (lists_hcas || index.is_some()).then(|| read_rdma_ports(host));
        let interfaces = value(SOCKET_VAR)
            .is_some_and(|v| !IfList::parse(v).entries.is_empty())
            .then(|| read_interface_names(host));
        let mut gid_slots = Vec::new();
        if let (Some(index), Some(Ok(rdma))) = (index, &rdma) {
            for (dev, port) in &rdma.ports {
                if hca.as_ref().is_some_and(|l| !l.keeps(dev, Some(*port))) {
                    continue;
                }
                let link_layer = optional(read_port(host, dev, *port).link_layer);
                let roce =
                    matches!(&link_layer, Ok(Some(ll)) if ll.eq_ignore_ascii_case("ethernet"));
                let gid =
                    roce.then(|| optional(read_gid(host, dev, *port, index)).map(Option::flatten));
                let gid_type = matches!(gid, Some(Ok(Some(_))))
                    .then(|| optional(read_gid_type(host, dev, *port, index)).map(Option::flatten));
                gid_slots.push(GidSlot {
                    device: dev.clone(),
                    port: *port,
                    link_layer,
                    gid,
                    gid_type,
                });
            }
        }
        let c2c_gpus = settings.get(C2C_VAR).map(|_| {
            PciTree::read(host).map(|t| {
                t.with_role(Role::Gpu)
                    .iter()
                    .any(|&g| grace::c2c_attached(&t.nodes[g].attrs))
            })
        });
        Facts {
            settings,
            files,
            rdma,
            interfaces,
            gid_slots,
            c2c_gpus,
        }
    }
}

fn read_rdma_ports(host: &Host) -> Result<RdmaPorts, ReadError> {
    let devices = read_device_names(host)?;
    let mut ports = Vec::new();
    for d in &devices {
        ports.extend(
            read_port_numbers(host, d)?
                .into_iter()
                .map(|p| (d.clone(), p)),
        );
    }
    Ok(RdmaPorts { devices, ports })
}

/// NCCL_IB_GID_INDEX as NCCL takes it: an index, `None` for NCCL's own choice, `Err` when it is no index.
fn gid_index_set(v: &str) -> Result<Option<u32>, ()> {
    match v.trim().parse::<i64>() {
        Ok(GID_AUTO) => Ok(None),
        Ok(n) if (0..=u32::MAX as i64).contains(&n) => Ok(Some(n as u32)),
        _ => Err(()),
    }
}

fn judge(expect: Option<NcclExpect>, facts: &Facts) -> Vec<CheckResult> {
    let wants = Wants::from(expect);
    let s = &facts.settings;
    let mut results = Vec::new();
    results.extend(ib_disable(s, &wants));
    results.extend(net_plugin(s, expect, &wants));
    results.extend(gdr_settings(s, &wants));
    results.extend(gdr_c2c(s, facts, &wants));
    results.extend(ib_hca(s, facts, &wants));
    results.extend(socket_ifname(s, facts));
    results.extend(gid_index(s, facts));
    results.extend(facts.files.problems.iter().cloned());
    results.extend(s.issues.iter().map(|issue| {
        CheckResult::warn(ID, format!("{}: {}", issue.at, issue.why))
            .subject(issue.at.to_string())
            .evidence(&issue.at.to_string(), &issue.text)
            .fix("write the line as NAME=value (no spaces around `=`), or make it a comment with `#` in column 1").code(&CONF_SYNTAX)
    }));
    if results.is_empty() {
        let mut pass = CheckResult::pass(
            ID,
            "no NCCL variable disables IB/GDR or names absent devices",
        );
        if s.nccl().next().is_none() {
            pass = pass.note("no NCCL_* variable set");
        }
        for (k, setting) in s.nccl() {
            pass = with_overridden(pass.evidence(&setting.label(k), &setting.value), k, setting);
        }
        results.push(pass);
    }
    for r in &mut results {
        r.evidence.extend(facts.files.files.iter().cloned());
    }
    results
}

/// What reading NCCL's configuration files gave besides their settings.
struct FilesRead {
    /// `<path> = <state>` evidence for each file NCCL would read.
    files: Vec<String>,
    /// Files that are there but could not be read, or could not be located.
    problems: Vec<CheckResult>,
}

/// Longest configuration file read (NCCL reads any size; this bounds a garbage file).
const MAX_CONF_BYTES: u64 = 1 << 20;

/// The environment merged with NCCL's configuration files, read through the host root in NCCL's order.
fn read_settings(host: &Host, inputs: &Inputs) -> (Settings, FilesRead) {
    let env = &inputs.env;
    let mut read = FilesRead {
        files: Vec::new(),
        problems: Vec::new(),
    };
    let mut files = Vec::new();
    let paths = conf::user_file(env)
        .into_iter()
        .chain([conf::SYSTEM_FILE.to_string()]);
    for path in paths {
        if !path.starts_with('/') {
            read.problems.push(
                CheckResult::warn(
                    ID,
                    format!("NCCL_CONF_FILE={path} is relative to the job's working directory: not read, its settings are not judged"),
                )
                .subject("NCCL_CONF_FILE")
                .evidence("env NCCL_CONF_FILE", &path)
                .fix("set NCCL_CONF_FILE to an absolute path").code(&CONF_RELATIVE),
            );
            continue;
        }
        match host.read_bytes(&path, MAX_CONF_BYTES) {
            Ok(bytes) => {
                read.files
                    .push(format!("{path} = read ({} bytes)", bytes.len()));
                files.push(ConfFile {
                    path,
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                });
            }
            Err(e) if e.is_not_found() => read.files.push(format!("{path} = absent")),
            Err(e) => {
                read.files.push(format!("{path} = {}", e.reason()));
                read.problems.push(
                    CheckResult::read_error(ID, &e)
                        .subject(&path)
                        .note("NCCL reads this file at init: its settings are not judged"),
                );
            }
        }
    }
    if env.get("NCCL_CONF_FILE").is_some_and(|f| !f.is_empty()) && env.contains_key("HOME") {
        read.files.push(
            "NCCL < 2.23 = ignores NCCL_CONF_FILE and reads $HOME/.nccl.conf instead".to_string(),
        );
    }
    read.files.push(
        "precedence = environment > NCCL_CONF_FILE (2.23+) or $HOME/.nccl.conf > /etc/nccl.conf; first line per name wins (NCCL src/misc/param.cc)"
            .to_string(),
    );
    (Settings::merge(env, &files), read)
}

/// Adds the lower-precedence values `setting` overrides (`/etc/nccl.conf:4 NCCL_IB_DISABLE = 1 (overridden by env)`).
fn with_overridden(mut r: CheckResult, name: &str, setting: &Setting) -> CheckResult {
    for (at, value) in &setting.overridden {
        r = r.evidence(
            &format!("{at} {name}"),
            format!("{value} (overridden by {})", setting.origin),
        );
    }
    r
}

/// What the profile's expected transport makes a requirement (a finding against it fails, otherwise warns).
struct Wants {
    rdma: bool,
    ib: bool,
    gdr: bool,
}

impl Wants {
    fn from(expect: Option<NcclExpect>) -> Self {
        use NcclExpect::*;
        Wants {
            rdma: matches!(
                expect,
                Some(Gdrdma | IbGdrdma | OfiGdrdma | PluginGdrdma | Ib | Ofi | Plugin)
            ),
            ib: matches!(expect, Some(Gdrdma | IbGdrdma | Ib)),
            gdr: matches!(expect, Some(Gdrdma | IbGdrdma | OfiGdrdma | PluginGdrdma)),
        }
    }
}

fn severity(required: bool) -> Status {
    if required {
        Status::Fail
    } else {
        Status::Warn
    }
}

fn finding(
    code: &FindingCode,
    var: &str,
    status: Status,
    summary: String,
    setting: &Setting,
) -> CheckResult {
    let r = CheckResult::new(ID, status, format!("{summary}{}", setting.origin_note()))
        .subject(var)
        .evidence(&setting.label(var), &setting.value)
        .code(code);
    with_overridden(r, var, setting)
}

fn unreadable(var: &str, err: &ReadError) -> CheckResult {
    CheckResult::read_error(ID, err).subject(var)
}

fn ib_disable(s: &Settings, wants: &Wants) -> Option<CheckResult> {
    let setting = s.get("NCCL_IB_DISABLE")?;
    let v = setting.value.as_str();
    (v.trim() == "1").then(|| {
        finding(
            &IB_DISABLED,
            "NCCL_IB_DISABLE",
            severity(wants.ib),
            "NCCL_IB_DISABLE=1: NCCL will not use InfiniBand/RoCE and falls back to TCP sockets"
                .into(),
            setting,
        )
        .fix(setting.how_to_unset("NCCL_IB_DISABLE"))
    })
}

fn net_plugin(s: &Settings, expect: Option<NcclExpect>, wants: &Wants) -> Option<CheckResult> {
    let setting = s.get("NCCL_NET")?;
    let v = setting.value.as_str();
    let family = NetFamily::of(v);
    if family == NetFamily::Socket {
        return Some(
            finding(
                &NET_SOCKET,
                "NCCL_NET",
                severity(wants.rdma),
                format!("NCCL_NET={v} forces TCP sockets"),
                setting,
            )
            .fix("unset NCCL_NET (or name the RDMA plugin: IB, or the OFI plugin's name)"),
        );
    }
    let expect = expect?;
    let allowed = allowed_families(expect);
    (!allowed.is_empty() && !allowed.contains(&family)).then(|| {
        finding(
            &NET_WRONG_PLUGIN,
            "NCCL_NET",
            Status::Warn,
            format!(
                "NCCL_NET={v} names a {} plugin; the profile expects {}",
                family.as_str(),
                expect_name(expect)
            ),
            setting,
        )
        .fix("unset NCCL_NET or name the plugin the profile expects")
    })
}

fn gdr_settings(s: &Settings, wants: &Wants) -> Vec<CheckResult> {
    let mut out = Vec::new();
    for var in ["NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL"] {
        if let Some(setting) = s.get(var) {
            let t = setting.value.trim();
            if t.eq_ignore_ascii_case("LOC") || t == "0" {
                out.push(
                    finding(&GDR_LEVEL_OFF,
                        var,
                        severity(wants.gdr),
                        format!("{var}={t}: GPUDirect RDMA never used (data staged through host memory)"),
                        setting,
                    )
                    .fix(format!("{} (NCCL enables GDR by PCIe distance)", setting.how_to_unset(var))),
                );
            }
        }
    }
    if let Some(setting) = s.get("NCCL_NET_GDR_READ") {
        if setting.value.trim() == "0" {
            out.push(
                finding(&GDR_READ_OFF,
                    "NCCL_NET_GDR_READ",
                    severity(wants.gdr),
                    "NCCL_NET_GDR_READ=0: sends are staged through host memory (no GDRDMA on send channels)".into(),
                    setting,
                )
                .fix(setting.how_to_unset("NCCL_NET_GDR_READ")),
            );
        }
    }
    out
}

/// `NCCL_NET_GDR_C2C=0` on a Grace node turns off GPUDirect RDMA for every GPU: its NICs hang off the CPU,
/// reached over C2C (before the variable, GDR was off on GH200/GB200: NVIDIA/nccl#1579). Elsewhere it changes
/// nothing and is not judged.
fn gdr_c2c(s: &Settings, facts: &Facts, wants: &Wants) -> Option<CheckResult> {
    let setting = s.get(C2C_VAR)?;
    let v = setting.value.trim();
    if v != "0" {
        return None;
    }
    match facts.c2c_gpus.as_ref()? {
        Err(e) => Some(unreadable(C2C_VAR, e)),
        Ok(false) => None,
        Ok(true) => Some(
            finding(&GDR_C2C_OFF,
                C2C_VAR,
                severity(wants.gdr),
                format!(
                    "{C2C_VAR}={v} on a Grace node (GPUs on NVLink-C2C): its NICs sit on the CPU, so no GPU uses \
                     GPUDirect RDMA (data staged through host memory)"
                ),
                setting,
            )
            .fix(setting.how_to_unset(C2C_VAR)),
        ),
    }
}

fn ib_hca(s: &Settings, facts: &Facts, wants: &Wants) -> Option<CheckResult> {
    const VAR: &str = HCA_VAR;
    let setting = s.get(VAR)?;
    let v = setting.value.as_str();
    let list = IfList::parse(v);
    if list.entries.is_empty() {
        return None;
    }
    let RdmaPorts {
        devices: devs,
        ports,
    } = match facts.rdma.as_ref()? {
        Ok(r) => r,
        Err(e) => return Some(unreadable(VAR, e)),
    };
    let kept: Vec<String> = ports
        .iter()
        .filter(|(d, p)| list.keeps(d, Some(*p)))
        .map(|(d, p)| format!("{d}:{p}"))
        .collect();
    let present = if devs.is_empty() {
        "<none>".to_string()
    } else {
        devs.join(" ")
    };
    let with_evidence = |r: CheckResult| {
        r.evidence(CLASS_INFINIBAND, &present)
            .evidence("ports NCCL would use", if kept.is_empty() { "<none>".into() } else { kept.join(" ") })
            .fix("list devices from `ls /sys/class/infiniband` (prefix match; `=` exact, `^` exclude, `:port`), or unset NCCL_IB_HCA")
    };
    if kept.is_empty() {
        let why = if list.exclude {
            "excludes every RDMA port"
        } else {
            "matches no RDMA port"
        };
        return Some(with_evidence(finding(&IB_HCA_NONE,
            VAR,
            severity(wants.ib),
            format!("NCCL_IB_HCA={v} {why} on this host: NCCL finds no IB device and falls back to sockets"),
            setting,
        )));
    }
    if list.exclude {
        return None;
    }
    // Entries naming devices (or ports) absent here: NCCL ignores them silently.
    let missing: Vec<String> = list
        .entries
        .iter()
        .filter(|e| {
            !ports
                .iter()
                .any(|(d, p)| list.entry_matches(e, d, Some(*p)))
        })
        .map(|e| e.display())
        .collect();
    (!missing.is_empty()).then(|| {
        with_evidence(finding(
            &IB_HCA_ABSENT,
            VAR,
            Status::Warn,
            format!(
                "NCCL_IB_HCA names device(s) absent from this host: {}",
                missing.join(", ")
            ),
            setting,
        ))
    })
}

fn socket_ifname(s: &Settings, facts: &Facts) -> Option<CheckResult> {
    const VAR: &str = SOCKET_VAR;
    let setting = s.get(VAR)?;
    let v = setting.value.as_str();
    let list = IfList::parse(v);
    if list.entries.is_empty() {
        return None;
    }
    let ifs = match facts.interfaces.as_ref()? {
        Ok(i) => i,
        Err(e) => return Some(unreadable(VAR, e)),
    };
    let kept: Vec<&String> = ifs.iter().filter(|i| list.keeps(i, None)).collect();
    if !kept.is_empty() {
        return None;
    }
    let why = if list.exclude {
        "excludes every interface"
    } else {
        "matches no interface"
    };
    Some(
        finding(&SOCKET_IFNAME_NONE,
            VAR,
            Status::Fail,
            format!("NCCL_SOCKET_IFNAME={v} {why}: NCCL cannot bootstrap (`no socket interface found`)"),
            setting,
        )
        .evidence(CLASS_NET, if ifs.is_empty() { "<none>".into() } else { ifs.join(" ") })
        .fix("name interfaces from `ls /sys/class/net` (prefix match; `=` exact, `^` exclude), or unset NCCL_SOCKET_IFNAME"),
    )
}

fn gid_index(s: &Settings, facts: &Facts) -> Vec<CheckResult> {
    const VAR: &str = GID_VAR;
    let Some(setting) = s.get(VAR) else {
        return Vec::new();
    };
    let v = setting.value.as_str();
    let index = match gid_index_set(v) {
        Ok(Some(index)) => index,
        Ok(None) => return Vec::new(),
        Err(()) => {
            return vec![finding(
                &GID_INDEX_INVALID,
                VAR,
                Status::Warn,
                format!("NCCL_IB_GID_INDEX={v} is not a GID index"),
                setting,
            )
            .fix("set a GID index (a number from `show_gids`) or unset it")]
        }
    };
    if let Some(Err(e)) = &facts.rdma {
        return vec![unreadable(VAR, e)];
    }
    let mut out = Vec::new();
    for slot in &facts.gid_slots {
        let (dev, port) = (&slot.device, slot.port);
        // NCCL uses the GID index on RoCE (Ethernet link layer) ports only.
        if let Err(e) = &slot.link_layer {
            out.push(unreadable(VAR, e));
            continue;
        }
        let subject = format!("{dev}:{port}");
        let gid = match &slot.gid {
            None => continue,
            Some(Ok(g)) => g,
            Some(Err(e)) => {
                out.push(unreadable(VAR, e).subject(subject));
                continue;
            }
        };
        let Some(gid) = gid else {
            out.push(
                CheckResult::fail(
                    ID,
                    format!("NCCL_IB_GID_INDEX={index} points at an empty GID slot on RoCE port {subject}"),
                )
                .subject(&subject)
                .evidence(&setting.label(VAR), v)
                .evidence(&gid_path(dev, port, index), "<empty>")
                .fix("pick the RoCE v2 index from `show_gids` (or unset NCCL_IB_GID_INDEX: NCCL >= 2.21 chooses)").code(&GID_EMPTY),
            );
            continue;
        };
        let kind = match &slot.gid_type {
            Some(Ok(k)) => k,
            Some(Err(e)) => {
                out.push(unreadable(VAR, e).subject(subject));
                continue;
            }
            None => &None,
        };
        if kind.as_deref() != Some("RoCE v2") {
            out.push(
                CheckResult::warn(
                    ID,
                    format!(
                        "NCCL_IB_GID_INDEX={index} on RoCE port {subject} is {}, not RoCE v2 (not routable, no ECN)",
                        kind.as_deref().unwrap_or("of unknown type")
                    ),
                )
                .subject(&subject)
                .evidence(&setting.label(VAR), v)
                .evidence(&gid_path(dev, port, index), gid)
                .evidence(&gid_type_path(dev, port, index), kind.as_deref().unwrap_or("<missing>"))
                .fix("pick the RoCE v2 index from `show_gids` (or unset NCCL_IB_GID_INDEX: NCCL >= 2.21 chooses)").code(&GID_NOT_V2),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Inputs;
    use crate::profile::Profile;
    use std::fs;
    use std::path::Path;

    /// A host tree with mlx5_0 (IB, port 1) and mlx5_1 (RoCE, port 1: GID 0 v1, GID 3 v2, GID 5 empty),
    /// interfaces eth0 and ib0.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let port = |dev: &str, ll: &str| {
            let p = r.join(format!("sys/class/infiniband/{dev}/ports/1"));
            fs::create_dir_all(p.join("gids")).unwrap();
            fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
            fs::write(p.join("link_layer"), format!("{ll}\n")).unwrap();
            p
        };
        port("mlx5_0", "InfiniBand");
        let roce = port("mlx5_1", "Ethernet");
        fs::write(
            roce.join("gids/0"),
            "fe80:0000:0000:0000:0a00:27ff:fe00:0001\n",
        )
        .unwrap();
        fs::write(roce.join("gid_attrs/types/0"), "IB/RoCE v1\n").unwrap();
        fs::write(
            roce.join("gids/3"),
            "0000:0000:0000:0000:0000:ffff:0a01:0203\n",
        )
        .unwrap();
        fs::write(roce.join("gid_attrs/types/3"), "RoCE v2\n").unwrap();
        fs::write(
            roce.join("gids/5"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        )
        .unwrap();
        for i in ["eth0", "ib0", "lo"] {
            fs::create_dir_all(r.join(format!("sys/class/net/{i}"))).unwrap();
        }
        dir
    }

    fn run(root: &Path, env: &[(&str, &str)], expect: Option<NcclExpect>) -> Vec<CheckResult> {
        let mut profile = Profile::default();
        profile.expect.nccl_transport = expect;
        let inputs = Inputs {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Inputs::default()
        };
        crate::probes::testing::run_with(&NcclEnv, root, &profile, &inputs)
    }

    fn statuses(results: &[CheckResult]) -> Vec<(Option<&str>, Status)> {
        results
            .iter()
            .map(|r| (r.subject.as_deref(), r.status))
            .collect()
    }

    #[test]
    fn env_nothing_set_passes() {
        let d = tree();
        assert_eq!(
            statuses(&run(d.path(), &[("PATH", "/bin")], None)),
            vec![(None, Status::Pass)]
        );
    }

    #[test]
    fn env_ib_disable_fails_when_ib_expected_warns_otherwise() {
        let d = tree();
        let env = [("NCCL_IB_DISABLE", "1")];
        assert_eq!(
            statuses(&run(d.path(), &env, Some(NcclExpect::IbGdrdma))),
            vec![(Some("NCCL_IB_DISABLE"), Status::Fail)]
        );
        assert_eq!(
            statuses(&run(d.path(), &env, None)),
            vec![(Some("NCCL_IB_DISABLE"), Status::Warn)]
        );
    }

    #[test]
    fn env_net_socket_and_gdr_level_loc_are_reported() {
        let d = tree();
        let env = [
            ("NCCL_NET", "Socket"),
            ("NCCL_NET_GDR_LEVEL", "LOC"),
            ("NCCL_NET_GDR_READ", "0"),
        ];
        assert_eq!(
            statuses(&run(d.path(), &env, Some(NcclExpect::Gdrdma))),
            vec![
                (Some("NCCL_NET"), Status::Fail),
                (Some("NCCL_NET_GDR_LEVEL"), Status::Fail),
                (Some("NCCL_NET_GDR_READ"), Status::Fail)
            ]
        );
        let ok = [("NCCL_NET_GDR_LEVEL", "PHB"), ("NCCL_NET", "IB")];
        assert_eq!(
            statuses(&run(d.path(), &ok, Some(NcclExpect::Gdrdma))),
            vec![(None, Status::Pass)]
        );
    }

    /// NCCL_NET_GDR_C2C=0 turns GDR off on a Grace tray (testdata/hosts/gb200-tray) and nowhere else; any other
    /// value is NCCL's default behaviour.
    #[test]
    fn gdr_c2c_off_is_judged_on_grace_only() {
        let grace = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts/gb200-tray");
        let off = [(C2C_VAR, "0")];
        let r = run(&grace, &off, Some(NcclExpect::IbGdrdma));
        assert_eq!(statuses(&r), vec![(Some(C2C_VAR), Status::Fail)]);
        assert!(r[0].summary.contains("Grace node"), "{}", r[0].summary);
        assert_eq!(
            statuses(&run(&grace, &off, None)),
            vec![(Some(C2C_VAR), Status::Warn)]
        );
        assert_eq!(
            statuses(&run(&grace, &[(C2C_VAR, "1")], Some(NcclExpect::IbGdrdma))),
            vec![(None, Status::Pass)]
        );
        // An x86 HGX board: the variable changes nothing there.
        let hgx = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts/hgx-healthy");
        assert_eq!(
            statuses(&run(&hgx, &off, Some(NcclExpect::IbGdrdma))),
            vec![(None, Status::Pass)]
        );
    }

    #[test]
    fn env_ib_hca_absent_devices_warn_none_matching_fails() {
        let d = tree();
        let some_missing = [("NCCL_IB_HCA", "mlx5_0,mlx5_7:1")];
        assert_eq!(
            statuses(&run(d.path(), &some_missing, Some(NcclExpect::IbGdrdma))),
            vec![(Some("NCCL_IB_HCA"), Status::Warn)]
        );
        let none = [("NCCL_IB_HCA", "=mlx5")];
        assert_eq!(
            statuses(&run(d.path(), &none, Some(NcclExpect::IbGdrdma))),
            vec![(Some("NCCL_IB_HCA"), Status::Fail)]
        );
        let wrong_port = [("NCCL_IB_HCA", "mlx5_0:2")];
        assert_eq!(
            statuses(&run(d.path(), &wrong_port, None)),
            vec![(Some("NCCL_IB_HCA"), Status::Warn)]
        );
        let prefix = [("NCCL_IB_HCA", "mlx5")];
        assert_eq!(
            statuses(&run(d.path(), &prefix, None)),
            vec![(None, Status::Pass)]
        );
        let exclude_all = [("NCCL_IB_HCA", "^mlx5")];
        assert_eq!(
            statuses(&run(d.path(), &exclude_all, None)),
            vec![(Some("NCCL_IB_HCA"), Status::Warn)]
        );
        let exclude_absent = [("NCCL_IB_HCA", "^mlx5_9")];
        assert_eq!(
            statuses(&run(d.path(), &exclude_absent, None)),
            vec![(None, Status::Pass)]
        );
    }

    #[test]
    fn env_socket_ifname_matching_nothing_fails() {
        let d = tree();
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_SOCKET_IFNAME", "ens,bond")], None)),
            vec![(Some("NCCL_SOCKET_IFNAME"), Status::Fail)]
        );
        assert_eq!(
            statuses(&run(
                d.path(),
                &[("NCCL_SOCKET_IFNAME", "^eth,ib,lo")],
                None
            )),
            vec![(Some("NCCL_SOCKET_IFNAME"), Status::Fail)]
        );
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_SOCKET_IFNAME", "eth,ens")], None)),
            vec![(None, Status::Pass)]
        );
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_SOCKET_IFNAME", "=ib0")], None)),
            vec![(None, Status::Pass)]
        );
    }

    #[test]
    fn env_gid_index_empty_fails_v1_warns_v2_passes() {
        let d = tree();
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_IB_GID_INDEX", "5")], None)),
            vec![(Some("mlx5_1:1"), Status::Fail)]
        );
        // Slot 7 does not exist at all (EINVAL or missing): empty too.
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_IB_GID_INDEX", "7")], None)),
            vec![(Some("mlx5_1:1"), Status::Fail)]
        );
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_IB_GID_INDEX", "0")], None)),
            vec![(Some("mlx5_1:1"), Status::Warn)]
        );
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_IB_GID_INDEX", "3")], None)),
            vec![(None, Status::Pass)]
        );
        assert_eq!(
            statuses(&run(d.path(), &[("NCCL_IB_GID_INDEX", "-1")], None)),
            vec![(None, Status::Pass)]
        );
        // RoCE port filtered out by NCCL_IB_HCA: nothing to judge.
        assert_eq!(
            statuses(&run(
                d.path(),
                &[("NCCL_IB_GID_INDEX", "5"), ("NCCL_IB_HCA", "=mlx5_0")],
                None
            )),
            vec![(None, Status::Pass)]
        );
    }
    fn write(root: &Path, path: &str, text: &[u8]) {
        let p = root.join(path.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    fn evidence_of(results: &[CheckResult]) -> String {
        results
            .iter()
            .flat_map(|r| r.evidence.iter().cloned())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn conf_system_file_setting_is_judged_like_the_environment() {
        let d = tree();
        write(
            d.path(),
            "/etc/nccl.conf",
            b"# site defaults\nNCCL_DEBUG=WARN\nNCCL_IB_DISABLE=1\nNCCL_NET_GDR_LEVEL=LOC\n",
        );
        let r = run(d.path(), &[("HOME", "/root")], Some(NcclExpect::IbGdrdma));
        assert_eq!(
            statuses(&r),
            vec![
                (Some("NCCL_IB_DISABLE"), Status::Fail),
                (Some("NCCL_NET_GDR_LEVEL"), Status::Fail)
            ]
        );
        assert!(
            r[0].summary.contains("from /etc/nccl.conf:3"),
            "{}",
            r[0].summary
        );
        assert!(r[0]
            .remediation
            .as_deref()
            .unwrap()
            .contains("/etc/nccl.conf:3"));
        let evidence = evidence_of(&r);
        assert!(
            evidence.contains("/etc/nccl.conf:3 NCCL_IB_DISABLE = 1"),
            "{evidence}"
        );
        assert!(evidence.contains("/root/.nccl.conf = absent"), "{evidence}");
    }

    #[test]
    fn conf_environment_wins_over_the_files() {
        let d = tree();
        write(d.path(), "/etc/nccl.conf", b"NCCL_IB_DISABLE=1\n");
        let r = run(
            d.path(),
            &[("NCCL_IB_DISABLE", "0")],
            Some(NcclExpect::IbGdrdma),
        );
        assert_eq!(statuses(&r), vec![(None, Status::Pass)]);
        let evidence = evidence_of(&r);
        assert!(evidence.contains("env NCCL_IB_DISABLE = 0"), "{evidence}");
        assert!(
            evidence.contains("/etc/nccl.conf:1 NCCL_IB_DISABLE = 1 (overridden by env)"),
            "{evidence}"
        );
    }

    #[test]
    fn conf_user_file_wins_over_the_system_file() {
        let d = tree();
        write(d.path(), "/etc/nccl.conf", b"NCCL_NET_GDR_LEVEL=PHB\n");
        write(
            d.path(),
            "/home/ml/.nccl.conf",
            b"NCCL_NET_GDR_LEVEL=LOC\r\n",
        );
        let r = run(d.path(), &[("HOME", "/home/ml")], Some(NcclExpect::Gdrdma));
        assert_eq!(
            statuses(&r),
            vec![(Some("NCCL_NET_GDR_LEVEL"), Status::Fail)]
        );
        assert!(
            r[0].summary.contains("/home/ml/.nccl.conf:1"),
            "{}",
            r[0].summary
        );
        // The other way round: the user's PHB wins over the system's LOC.
        write(d.path(), "/etc/nccl.conf", b"NCCL_NET_GDR_LEVEL=LOC\n");
        write(d.path(), "/home/ml/.nccl.conf", b"NCCL_NET_GDR_LEVEL=PHB\n");
        let r = run(d.path(), &[("HOME", "/home/ml")], Some(NcclExpect::Gdrdma));
        assert_eq!(statuses(&r), vec![(None, Status::Pass)]);
    }

    #[test]
    fn conf_nccl_conf_file_replaces_the_home_file() {
        let d = tree();
        write(d.path(), "/home/ml/.nccl.conf", b"NCCL_IB_DISABLE=1\n");
        write(d.path(), "/opt/job/nccl.conf", b"NCCL_IB_HCA==mlx5_9\n");
        let env = [
            ("HOME", "/home/ml"),
            ("NCCL_CONF_FILE", "/opt/job/nccl.conf"),
        ];
        let r = run(d.path(), &env, Some(NcclExpect::IbGdrdma));
        assert_eq!(statuses(&r), vec![(Some("NCCL_IB_HCA"), Status::Fail)]);
        assert!(
            r[0].summary.contains("/opt/job/nccl.conf:1"),
            "{}",
            r[0].summary
        );
        assert!(evidence_of(&r).contains("NCCL < 2.23"));
        // A relative NCCL_CONF_FILE is the job's working directory's: not read, said so.
        let r = run(d.path(), &[("NCCL_CONF_FILE", "nccl.conf")], None);
        assert_eq!(statuses(&r), vec![(Some("NCCL_CONF_FILE"), Status::Warn)]);
    }

    #[test]
    fn conf_garbage_lines_are_reported_with_file_and_line() {
        let d = tree();
        write(
            d.path(),
            "/etc/nccl.conf",
            b"# ok\n\n  \nNCCL_IB_DISABLE = 1\nthis is not a setting\n\xff\xfe\x00garbage\nNCCL_DEBUG=INFO",
        );
        let r = run(d.path(), &[], Some(NcclExpect::IbGdrdma));
        assert_eq!(
            statuses(&r),
            vec![
                (Some("/etc/nccl.conf:4"), Status::Warn),
                (Some("/etc/nccl.conf:5"), Status::Warn),
                (Some("/etc/nccl.conf:6"), Status::Warn)
            ]
        );
        assert!(r[0].summary.contains("spaces"), "{}", r[0].summary);
        // A file that cannot be read is an error naming it, never a silent pass.
        let d = tree();
        fs::create_dir_all(d.path().join("etc/nccl.conf")).unwrap();
        let r = run(d.path(), &[], None);
        assert_eq!(statuses(&r), vec![(Some("/etc/nccl.conf"), Status::Error)]);
    }
}
