//! `fabric-preflight topo`: the GPU/NIC/NVMe matrix of PCIe distances (as `nvidia-smi topo -m` labels them),
//! each device's NUMA node and the narrowest link on its path to the root port.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cli::{TopoArgs, ViewFormat};
use crate::exit::Exit;
use crate::host::Host;
use crate::rules::nic_role::{self, Use};
use crate::rules::topology::{numa_label, PathLink, PciTree, Role};

/// Each RDMA device's ports with their role (`compute`, `storage`, `disabled` by design), by device name; or
/// why the roles could not be read.
pub type PortRoles = Result<BTreeMap<String, Vec<(u32, &'static str)>>, String>;

/// The roles the checks give the ports (README: NIC roles), with `NCCL_IB_HCA` from this process's
/// environment; no profile here, so no rail count.
pub fn port_roles(host: &Host) -> PortRoles {
    let hca = std::env::var("NCCL_IB_HCA").ok();
    let devices = nic_role::read(host, hca.as_deref(), None).map_err(|e| e.to_string())?;
    Ok(devices
        .devices
        .into_iter()
        .map(|(dev, ports)| {
            let roles = ports
                .into_iter()
                .map(|(p, usage)| {
                    let role = match usage {
                        Use::DisabledByDesign => "disabled",
                        Use::Role(a) => a.role.as_str(),
                        Use::Unplaced(_) => "unknown",
                    };
                    (p.port, role)
                })
                .collect();
            (dev, roles)
        })
        .collect())
}

/// `mlx5_0/1 compute`; a device's ports disabled by design counted, not listed.
fn roles_text(dev: &str, roles: &[(u32, &str)]) -> String {
    let disabled = roles.iter().filter(|(_, r)| *r == "disabled").count();
    let mut parts: Vec<String> = roles
        .iter()
        .filter(|(_, r)| *r != "disabled")
        .map(|(p, r)| format!("{dev}/{p} {r}"))
        .collect();
    if disabled > 0 {
        parts.push(format!("{disabled} port(s) of {dev} disabled by design"));
    }
    parts.join(", ")
}

pub fn main(args: TopoArgs) -> anyhow::Result<u8> {
    let host = match &args.root {
        Some(dir) => Host::at(dir)?,
        None => Host::live(),
    };
    let tree = PciTree::read(&host)?;
    let roles = port_roles(&host);
    let text = match args.format {
        // Device and interface names come from the host: no control character reaches the terminal.
        ViewFormat::Table => crate::report::escape_controls(&render_table(
            &tree,
            &roles,
            crate::report::output::terminal_width(),
        ))
        .into_owned(),
        ViewFormat::Json => {
            let mut s = serde_json::to_string_pretty(&to_json(&tree, &roles, &host))?;
            s.push('\n');
            s
        }
    };
    Ok(super::emit(&text, Exit::OK))
}

/// GPUs, then NICs with an RDMA device, then NVMe drives: the rows and columns of the matrix.
pub fn members(tree: &PciTree) -> Vec<usize> {
    let mut m = tree.with_role(Role::Gpu);
    m.extend(tree.rdma_nics());
    m.extend(tree.with_role(Role::Nvme));
    m
}

fn link_text(tree: &PciTree, link: Option<PathLink>) -> String {
    match link {
        None => "-".into(),
        Some(l) => format!(
            "{} x{}{} ({})",
            l.current_speed,
            l.current_width,
            if l.is_degraded() { " DEGRADED" } else { "" },
            match l.upper {
                Some(u) => format!("{}→{}", tree.nodes[u].bdf, tree.nodes[l.lower].bdf),
                None => format!("host bridge→{}", tree.nodes[l.lower].bdf),
            }
        ),
    }
}

/// The matrix with NUMA node and narrowest link per row when it fits `width`; otherwise the matrix in blocks
/// of columns that fit, and the narrowest link of each device in the legend.
pub fn render_table(tree: &PciTree, roles: &PortRoles, width: u16) -> String {
    let members = members(tree);
    if members.is_empty() {
        return "no GPU, RDMA NIC or NVMe drive on the PCI bus\n".into();
    }
    let width = usize::from(width.max(crate::report::table::MIN_WIDTH));
    let whole = matrix(tree, &members, &members, true);
    let (body, links_in_legend) = if widest(&whole) <= width {
        (whole, false)
    } else {
        let blocks: Vec<String> = column_blocks(tree, &members, width)
            .into_iter()
            .map(|columns| matrix(tree, &members, columns, false))
            .collect();
        (blocks.join("\n\n"), true)
    };
    let mut out = format!("{body}\n\nLegend:\n");
    for &i in &members {
        let n = &tree.nodes[i];
        out.push_str(&format!(
            "  {:<6} {} {}{}{}\n",
            tree.short_name(i),
            n.bdf,
            n.role.as_str(),
            if n.rdma_devices.is_empty() {
                String::new()
            } else {
                let shown: Vec<String> = n
                    .rdma_devices
                    .iter()
                    .map(|d| match roles.as_ref().ok().and_then(|r| r.get(d)) {
                        Some(ports) => roles_text(d, ports),
                        None => d.clone(),
                    })
                    .collect();
                format!(" ({})", shown.join(", "))
            },
            if links_in_legend {
                format!(
                    ", NUMA {}\n         narrowest link {}",
                    numa_label(n),
                    link_text(tree, tree.narrowest_link(i))
                )
            } else {
                String::new()
            }
        ));
    }
    if let Err(why) = roles {
        out.push_str(&format!("  RDMA port roles unknown: {why}\n"));
    }
    out.push_str(
        "\n  X    = self\n  PIX  = at most one PCIe switch between them\n  PXB  = several PCIe switches, no host bridge\n  \
         PHB  = through a PCIe host bridge (root complex)\n  NODE = across host bridges within one NUMA node\n  \
         SYS  = across the CPU interconnect (another NUMA node)\n",
    );
    crate::report::fit(&out, width as u16)
}

/// Rows for every member, columns for `columns`; the NUMA and narrowest-link columns when `with_links`.
fn matrix(tree: &PciTree, rows: &[usize], columns: &[usize], with_links: bool) -> String {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING);
    let mut header: Vec<String> = vec![String::new()];
    header.extend(columns.iter().map(|&i| tree.short_name(i)));
    if with_links {
        header.extend(["NUMA".into(), "NARROWEST LINK".into()]);
    }
    table.set_header(header);
    for &a in rows {
        let mut row = vec![tree.short_name(a)];
        for &b in columns {
            row.push(if a == b {
                "X".into()
            } else {
                format!("{:?}", tree.distance(a, b))
            });
        }
        if with_links {
            row.push(numa_label(&tree.nodes[a]));
            row.push(link_text(tree, tree.narrowest_link(a)));
        }
        table.add_row(row);
    }
    table.to_string()
}

/// Consecutive runs of `members` as matrix columns, each the most that fit in `width` beside the row names (at
/// least one). Widths are computed from the cells, not by rendering: the table style has no borders, so a
/// column is its widest cell plus one space of padding each side.
fn column_blocks<'a>(tree: &PciTree, members: &'a [usize], width: usize) -> Vec<&'a [usize]> {
    let padded = |text_width: usize| text_width + 2;
    let row_names = padded(
        members
            .iter()
            .map(|&i| tree.short_name(i).chars().count())
            .max()
            .unwrap_or(0),
    );
    let widths: Vec<usize> = members
        .iter()
        .map(|&b| {
            let widest_cell = members
                .iter()
                .map(|&a| {
                    if a == b {
                        1
                    } else {
                        format!("{:?}", tree.distance(a, b)).len()
                    }
                })
                .max()
                .unwrap_or(0);
            padded(widest_cell.max(tree.short_name(b).chars().count()))
        })
        .collect();
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < members.len() {
        let mut used = row_names;
        let take = widths[start..]
            .iter()
            .take_while(|&&w| {
                used += w;
                used <= width
            })
            .count()
            .max(1);
        blocks.push(&members[start..start + take]);
        start += take;
    }
    blocks
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

pub fn to_json(tree: &PciTree, roles: &PortRoles, host: &Host) -> Value {
    let members = members(tree);
    let link_json = |l: Option<PathLink>| match l {
        None => Value::Null,
        Some(l) => json!({
            "upper": l.upper.map(|u| tree.nodes[u].bdf.to_string()),
            "lower": tree.nodes[l.lower].bdf.to_string(),
            "speed_gts": l.current_speed.gts(),
            "width": l.current_width,
            "capable_speed_gts": l.capable_speed.gts(),
            "capable_width": l.capable_width,
            "degraded": l.is_degraded(),
        }),
    };
    let devices: Vec<Value> = members
        .iter()
        .map(|&i| {
            let n = &tree.nodes[i];
            json!({
                "name": tree.short_name(i),
                "bdf": n.bdf.to_string(),
                "role": n.role.as_str(),
                "vendor": format!("0x{:04x}", n.attrs.vendor),
                "device": format!("0x{:04x}", n.attrs.device),
                "numa_node": n.attrs.numa_node,
                "host_bridge": n.host_bridge,
                "rdma_devices": n.rdma_devices,
                "rdma_ports": n.rdma_devices.iter().flat_map(|d| {
                    let ports = roles.as_ref().ok().and_then(|r| r.get(d)).cloned().unwrap_or_default();
                    ports.into_iter().map(move |(p, role)| json!({"port": format!("{d}/{p}"), "role": role}))
                }).collect::<Vec<_>>(),
                "narrowest_link": link_json(tree.narrowest_link(i)),
            })
        })
        .collect();
    let matrix: serde_json::Map<String, Value> = members
        .iter()
        .map(|&a| {
            let row: serde_json::Map<String, Value> = members
                .iter()
                .filter(|&&b| b != a)
                .map(|&b| {
                    (
                        tree.short_name(b),
                        json!(format!("{:?}", tree.distance(a, b))),
                    )
                })
                .collect();
            (tree.short_name(a), Value::Object(row))
        })
        .collect();
    let mut report = json!({
        "schema_version": 1,
        "root": host.root().display().to_string(),
        "devices": devices,
        "matrix": matrix,
    });
    if let Err(why) = roles {
        report["rdma_roles_error"] = json!(why);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn hgx() -> (Host, PciTree) {
        let host =
            Host::at(&Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts/hgx-healthy"))
                .unwrap();
        let tree = PciTree::read(&host).unwrap();
        (host, tree)
    }

    #[test]
    fn hgx_matrix_labels_pairs_like_nvidia_smi() {
        let (host, tree) = hgx();
        let v = to_json(&tree, &port_roles(&host), &host);
        assert_eq!(v["devices"].as_array().unwrap().len(), 20);
        assert_eq!(v["matrix"]["GPU0"]["NIC0"], "PIX");
        assert_eq!(v["matrix"]["GPU0"]["NVMe0"], "PIX");
        assert_eq!(v["matrix"]["GPU0"]["GPU1"], "NODE");
        assert_eq!(v["matrix"]["GPU0"]["NIC4"], "SYS");
        assert_eq!(v["devices"][0]["narrowest_link"]["width"], 16);
    }

    #[test]
    fn table_has_legend_and_numa() {
        let (host, tree) = hgx();
        let t = render_table(&tree, &port_roles(&host), 250);
        assert!(
            t.contains("NIC0   0000:19:00.0 NIC (mlx5_0/1 compute)\n"),
            "{t}"
        );
        assert!(t.contains("NARROWEST LINK"));
    }

    /// The widths the split computes are the widths the table renders, and each block takes the most columns
    /// that fit: one more would overflow.
    #[test]
    fn column_blocks_fill_each_block_to_the_width() {
        let (_h, tree) = hgx();
        let members = members(&tree);
        for width in [40, 80, 120] {
            let blocks = column_blocks(&tree, &members, width);
            assert_eq!(blocks.concat(), members);
            let mut start = 0;
            for block in &blocks {
                assert!(widest(&matrix(&tree, &members, block, false)) <= width);
                let end = start + block.len();
                if end < members.len() {
                    let one_more = &members[start..=end];
                    assert!(widest(&matrix(&tree, &members, one_more, false)) > width);
                }
                start = end;
            }
        }
    }

    #[test]
    fn narrow_table_splits_the_matrix_and_moves_links_to_the_legend() {
        let (host, tree) = hgx();
        let t = render_table(&tree, &port_roles(&host), 80);
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        // Every pair is still there: 20 rows in each block, every column header once.
        for name in ["GPU0", "NIC7", "NVMe3"] {
            let headers = t
                .lines()
                .filter(|l| l.starts_with(' ') && l.contains(&format!(" {name} ")))
                .count();
            assert!(headers >= 1, "{name}\n{t}");
        }
        assert!(
            t.contains(
                "NIC0   0000:19:00.0 NIC (mlx5_0/1 compute), NUMA 0\n         narrowest link 32.0 GT/s x16"
            ),
            "{t}"
        );
    }
}
