//! The grammar of NCCL's device-list variables (`NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`), as NCCL's
//! `parseStringList` / `matchIfList` read them: an optional `^` (exclude the listed names), then an optional
//! `=` (exact names instead of prefixes), then comma-separated `name[:port]`.

/// A parsed `NCCL_IB_HCA` / `NCCL_SOCKET_IFNAME` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfList {
    /// `^`: the entries name what NCCL must not use.
    pub exclude: bool,
    /// `=`: names match exactly; otherwise an entry is a prefix (`mlx5` matches `mlx5_0`, `eth` matches `eth0`).
    pub exact: bool,
    pub entries: Vec<IfEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfEntry {
    pub name: String,
    /// `mlx5_0:1`: only that port (IB lists only).
    pub port: Option<u32>,
}

impl IfList {
    pub fn parse(value: &str) -> IfList {
        let mut rest = value.trim();
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let entries = rest
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once(':') {
                Some((name, port)) => IfEntry {
                    name: name.to_string(),
                    port: port.trim().parse().ok(),
                },
                None => IfEntry {
                    name: e.to_string(),
                    port: None,
                },
            })
            .collect();
        IfList {
            exclude,
            exact,
            entries,
        }
    }

    /// Whether `entry` names device `name` (port `None` = any port).
    pub fn entry_matches(&self, entry: &IfEntry, name: &str, port: Option<u32>) -> bool {
        let name_ok = if self.exact {
            name == entry.name
        } else {
            name.starts_with(&entry.name)
        };
        let port_ok = match (entry.port, port) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        name_ok && port_ok
    }

    /// Whether NCCL keeps device `name` (port `port`) under this list.
    pub fn keeps(&self, name: &str, port: Option<u32>) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let listed = self
            .entries
            .iter()
            .any(|e| self.entry_matches(e, name, port));
        listed != self.exclude
    }
}

impl IfEntry {
    pub fn display(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.name),
            None => self.name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iflist_prefixes_and_ports_parse() {
        let l = IfList::parse("^=mlx5_0:1,mlx5_3");
        assert!(l.exclude && l.exact);
        assert_eq!(
            l.entries,
            vec![
                IfEntry {
                    name: "mlx5_0".into(),
                    port: Some(1)
                },
                IfEntry {
                    name: "mlx5_3".into(),
                    port: None
                }
            ]
        );
    }

    #[test]
    fn iflist_prefix_match_keeps_longer_names() {
        let l = IfList::parse("mlx5");
        assert!(l.keeps("mlx5_0", Some(1)));
        assert!(!l.keeps("irdma0", Some(1)));
        let exact = IfList::parse("=mlx5");
        assert!(!exact.keeps("mlx5_0", Some(1)));
    }

    #[test]
    fn iflist_exclude_inverts_and_port_restricts() {
        let l = IfList::parse("^docker,lo");
        assert!(!l.keeps("lo", None));
        assert!(l.keeps("eth0", None));
        let p = IfList::parse("mlx5_0:2");
        assert!(!p.keeps("mlx5_0", Some(1)));
        assert!(p.keeps("mlx5_0", Some(2)));
    }
}
