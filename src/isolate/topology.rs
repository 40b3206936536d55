//! `isolate --topology FILE`: which nodes share a leaf switch or an NVLink clique, so screening tests each group
//! whole. Two forms, told apart line by line:
//! - Slurm's `scontrol show topology` output (or `topology.conf`): `SwitchName=leaf1 Level=0 LinkSpeed=1
//!   Nodes=gpu[01-16]`; only switches that list `Nodes=` form groups (upper levels list `Switches=`).
//! - `NODE GROUP` per line, e.g. node labels from `kubectl get nodes -o
//!   custom-columns=N:.metadata.name,G:.metadata.labels.nvidia\.com/gpu\.clique --no-headers`.
//!
//! `#` starts a comment; a node listed twice is an error (it would be screened in two groups).

use crate::pair::ring::expand_nodelist;

/// Groups in order of first appearance: a name and its nodes.
pub type Groups = Vec<(String, Vec<String>)>;

/// At most this much of a topology file is read.
pub const MAX_BYTES: u64 = 4 << 20;

pub fn parse(text: &str) -> Result<Groups, String> {
    let mut groups: Groups = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", i + 1);
        let (name, nodes) = if line.contains('=') {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            };
            let Some(switch) = field("SwitchName") else {
                return Err(at(format!("{line:?} has no SwitchName=")));
            };
            match field("Nodes") {
                Some(list) => (switch.to_string(), expand_nodelist(list).map_err(at)?),
                None => continue, // a switch of switches
            }
        } else {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [node, group] = words[..] else {
                return Err(at(format!(
                    "{line:?} is neither `SwitchName=… Nodes=…` nor `NODE GROUP`"
                )));
            };
            (group.to_string(), vec![node.to_string()])
        };
        for node in &nodes {
            if let Some(other) = seen.insert(node.clone(), name.clone()) {
                return Err(at(format!("node {node} is in both {other} and {name}")));
            }
        }
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, members)) => members.extend(nodes),
            None => groups.push((name, nodes)),
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_show_topology() {
        let text = "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[01-03]\n\
                    SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=gpu[04-05],cpu1\n\
                    SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2]\n";
        assert_eq!(
            parse(text).unwrap(),
            vec![
                (
                    "leaf1".into(),
                    vec!["gpu01".into(), "gpu02".into(), "gpu03".into()]
                ),
                (
                    "leaf2".into(),
                    vec!["gpu04".into(), "gpu05".into(), "cpu1".into()]
                ),
            ]
        );
    }

    #[test]
    fn node_label_pairs() {
        let text =
            "# kubectl get nodes -o custom-columns=...\nn1 clique-a\nn2 clique-b\nn3 clique-a\n";
        assert_eq!(
            parse(text).unwrap(),
            vec![
                ("clique-a".into(), vec!["n1".into(), "n3".into()]),
                ("clique-b".into(), vec!["n2".into()]),
            ]
        );
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(
            parse("n1 a\nn1 b\n").unwrap_err(),
            "line 2: node n1 is in both a and b"
        );
        assert!(parse("n1 a extra\n").unwrap_err().starts_with("line 1: "));
        assert!(parse("Level=0 Nodes=n1\n")
            .unwrap_err()
            .contains("no SwitchName="));
        assert!(parse("SwitchName=s Nodes=n[1-\n")
            .unwrap_err()
            .starts_with("line 1: "));
    }
}
