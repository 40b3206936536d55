//! Rank and peers for `pair --ring`, taken from whatever started the job (never a scheduler of our own):
//! `--peers`/`--rank` by hand, Slurm, a Kubernetes Indexed Job, or an MPI launcher with a hostfile.

use std::collections::BTreeMap;

/// This node's place in the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    pub rank: usize,
    pub nodes: Vec<String>,
    /// A job token the launcher provides (Slurm: job and step id), used when no `--token` is given.
    pub token: Option<String>,
    /// Where rank and peers came from, for the report.
    pub source: String,
}

impl Ring {
    pub fn me(&self) -> &str {
        &self.nodes[self.rank]
    }
    pub fn next(&self) -> &str {
        &self.nodes[(self.rank + 1) % self.nodes.len()]
    }
    pub fn prev(&self) -> &str {
        &self.nodes[(self.rank + self.nodes.len() - 1) % self.nodes.len()]
    }
}

/// `host` or `host:port` (`[v6]:port`): the port an entry names, if any (several ranks on one host).
pub fn port_of(node: &str) -> Option<u16> {
    let (host, port) = node.rsplit_once(':')?;
    if host.contains(':') && !host.ends_with(']') {
        return None; // a bare IPv6 address
    }
    port.parse().ok()
}

/// The HOST:PORT to reach `node` at.
pub fn address(node: &str, default_port: u16) -> String {
    match port_of(node) {
        Some(_) => node.to_string(),
        None if node.contains(':') => format!("[{node}]:{default_port}"),
        None => format!("{node}:{default_port}"),
    }
}

/// What the command line says about the ring.
#[derive(Debug, Clone, Default)]
pub struct RingArgs {
    pub peers: Vec<String>,
    pub rank: Option<usize>,
    pub hostfile: Option<String>,
    /// Kubernetes: the Job's headless Service and the number of completions.
    pub service: Option<String>,
    pub size: Option<usize>,
}

fn num(env: &BTreeMap<String, String>, key: &str) -> Result<Option<usize>, String> {
    env.get(key)
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| format!("{key}={v:?} is not a number"))
        })
        .transpose()
}

/// Resolves the ring from the flags, else the environment (Slurm, then Kubernetes, then MPI).
pub fn discover(
    args: &RingArgs,
    env: &BTreeMap<String, String>,
    read_file: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Ring, String> {
    let ring = if !args.peers.is_empty() {
        let rank = args
            .rank
            .ok_or("--peers needs --rank (this node's index in the list)")?;
        Ring {
            rank,
            nodes: args.peers.clone(),
            token: None,
            source: "--peers/--rank".into(),
        }
    } else if let Some(rank) = num(env, "SLURM_PROCID")? {
        let list = env
            .get("SLURM_JOB_NODELIST")
            .or_else(|| env.get("SLURM_NODELIST"))
            .ok_or("SLURM_PROCID is set but SLURM_JOB_NODELIST is not")?;
        let nodes = expand_nodelist(list)?;
        if let Some(n) = num(env, "SLURM_NTASKS")? {
            if n != nodes.len() {
                return Err(format!(
                    "SLURM_NTASKS={n} but SLURM_JOB_NODELIST has {} nodes: run one task per node (--ntasks-per-node=1)",
                    nodes.len()
                ));
            }
        }
        let token = env.get("SLURM_JOB_ID").map(|job| {
            format!(
                "slurm-{job}.{}",
                env.get("SLURM_STEP_ID").map(String::as_str).unwrap_or("0")
            )
        });
        Ring {
            rank,
            nodes,
            token,
            source: format!("Slurm (SLURM_PROCID, SLURM_JOB_NODELIST={list})"),
        }
    } else if let Some(rank) = num(env, "JOB_COMPLETION_INDEX")? {
        let service = args
            .service
            .clone()
            .ok_or("JOB_COMPLETION_INDEX is set: pass --service (the Job's headless Service)")?;
        let size = args
            .size
            .ok_or("JOB_COMPLETION_INDEX is set: pass --size (the Job's completions)")?;
        // An Indexed Job's pod host name is `<job name>-<index>`.
        let hostname = env.get("HOSTNAME").ok_or("HOSTNAME is not set")?;
        let job = hostname.strip_suffix(&format!("-{rank}")).ok_or_else(|| {
            format!("HOSTNAME {hostname} does not end in -{rank}: not an Indexed Job pod")
        })?;
        Ring {
            rank,
            nodes: (0..size).map(|i| format!("{job}-{i}.{service}")).collect(),
            token: None,
            source: format!("Kubernetes Indexed Job (JOB_COMPLETION_INDEX, Service {service})"),
        }
    } else if let Some(rank) = num(env, "OMPI_COMM_WORLD_RANK")?.or(num(env, "PMI_RANK")?) {
        let path = args
            .hostfile
            .as_deref()
            .ok_or("an MPI rank is set: pass --hostfile (one host per line, as given to mpirun)")?;
        let nodes = parse_hostfile(&read_file(path)?);
        Ring {
            rank,
            nodes,
            token: None,
            source: format!("MPI (rank from the launcher, hosts from {path})"),
        }
    } else {
        return Err("no ring: pass --peers h1,h2,... --rank N, or run under Slurm (srun), a Kubernetes Indexed Job, or mpirun with --hostfile".into());
    };
    if ring.nodes.len() < 2 {
        return Err(format!(
            "a ring needs at least 2 nodes, got {:?}",
            ring.nodes
        ));
    }
    if ring.rank >= ring.nodes.len() {
        return Err(format!(
            "rank {} is outside the {} nodes {:?}",
            ring.rank,
            ring.nodes.len(),
            ring.nodes
        ));
    }
    Ok(ring)
}

/// OpenMPI/MPICH hostfile: a host per line, `slots=`/`:N` and `#` comments ignored, each host once in order.
pub fn parse_hostfile(text: &str) -> Vec<String> {
    let mut hosts: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(word) = line.split_whitespace().next() else {
            continue;
        };
        let host = word.split(':').next().unwrap_or(word).to_string();
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    hosts
}

/// Splits on commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("unbalanced brackets in node list {list:?}"));
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced brackets in node list {list:?}"));
    }
    out.push(&list[start..]);
    Ok(out)
}

/// At most this many nodes from one node list (Slurm's own limit is far lower); stops `a[0-60000]b[0-60000]`.
const MAX_NODES: usize = 65536;

/// Slurm host-list syntax: `node[01-03,07],gpu5` → node01 node02 node03 node07 gpu5; several ranges in one name
/// (`r[1-2]n[1-2]`) expand in order; zero padding is kept.
pub fn expand_nodelist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top(list.trim())? {
        if !item.is_empty() {
            expand_one(item, &mut out)?;
        }
    }
    if out.is_empty() {
        return Err(format!("empty node list {list:?}"));
    }
    Ok(out)
}

fn expand_one(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let too_many = || format!("node list item {item:?} expands to more than {MAX_NODES} nodes");
    let Some(open) = item.find('[') else {
        if out.len() >= MAX_NODES {
            return Err(too_many());
        }
        out.push(item.to_string());
        return Ok(());
    };
    let close = item[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| format!("unbalanced brackets in {item:?}"))?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut tails = Vec::new();
    expand_one(rest, &mut tails)?;
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let bad = || format!("bad range {range:?} in {item:?}");
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if a > b {
            return Err(bad());
        }
        for n in a..=b {
            if out.len() + tails.len() > MAX_NODES {
                return Err(too_many());
            }
            for t in &tails {
                out.push(format!("{prefix}{n:0width$}{t}", width = lo.len()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn no_file(_: &str) -> Result<String, String> {
        Err("no file".into())
    }

    #[test]
    fn slurm_nodelists_expand() {
        assert_eq!(
            expand_nodelist("node[01-03,07],gpu5").unwrap(),
            ["node01", "node02", "node03", "node07", "gpu5"]
        );
        assert_eq!(
            expand_nodelist("r[1-2]n[8-9]").unwrap(),
            ["r1n8", "r1n9", "r2n8", "r2n9"]
        );
        assert_eq!(expand_nodelist("a,b-c").unwrap(), ["a", "b-c"]);
        assert_eq!(
            expand_nodelist("n[098-100]").unwrap(),
            ["n098", "n099", "n100"]
        );
        for bad in [
            "node[01-03",
            "node]1[",
            "n[3-1]",
            "n[a-b]",
            "",
            "n[0-99999999]",
        ] {
            assert!(expand_nodelist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slurm_ring_and_token() {
        let e = env(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "3"),
            ("SLURM_JOB_NODELIST", "gpu[1-3]"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "1"),
        ]);
        let r = discover(&RingArgs::default(), &e, &no_file).unwrap();
        assert_eq!((r.me(), r.prev(), r.next()), ("gpu3", "gpu2", "gpu1"));
        assert_eq!(r.token.as_deref(), Some("slurm-4242.1"));
        let mut e2 = e.clone();
        e2.insert("SLURM_NTASKS".into(), "6".into());
        assert!(discover(&RingArgs::default(), &e2, &no_file)
            .unwrap_err()
            .contains("--ntasks-per-node=1"));
    }

    #[test]
    fn kubernetes_indexed_job() {
        let e = env(&[("JOB_COMPLETION_INDEX", "0"), ("HOSTNAME", "fp-ring-0")]);
        let args = RingArgs {
            service: Some("fp-ring".into()),
            size: Some(3),
            ..Default::default()
        };
        let r = discover(&args, &e, &no_file).unwrap();
        assert_eq!(
            r.nodes,
            [
                "fp-ring-0.fp-ring",
                "fp-ring-1.fp-ring",
                "fp-ring-2.fp-ring"
            ]
        );
        assert_eq!(r.prev(), "fp-ring-2.fp-ring");
        assert!(discover(&RingArgs::default(), &e, &no_file)
            .unwrap_err()
            .contains("--service"));
    }

    #[test]
    fn mpi_with_hostfile() {
        let e = env(&[("PMI_RANK", "1")]);
        let args = RingArgs {
            hostfile: Some("hosts".into()),
            ..Default::default()
        };
        let file = |_: &str| Ok("# cluster\nn1 slots=8\nn2:8\n\nn1\nn3 # last\n".to_string());
        let r = discover(&args, &e, &file).unwrap();
        assert_eq!(r.nodes, ["n1", "n2", "n3"]);
        assert_eq!(r.me(), "n2");
        let e = env(&[("OMPI_COMM_WORLD_RANK", "x")]);
        assert!(discover(&args, &e, &file)
            .unwrap_err()
            .contains("not a number"));
    }

    #[test]
    fn entries_may_name_their_port() {
        assert_eq!(port_of("n1:19001"), Some(19001));
        assert_eq!(port_of("n1"), None);
        assert_eq!(port_of("fe80::1"), None);
        assert_eq!(port_of("[fe80::1]:7"), Some(7));
        assert_eq!(address("n1", 18515), "n1:18515");
        assert_eq!(address("n1:9", 18515), "n1:9");
        assert_eq!(address("fe80::1", 5), "[fe80::1]:5");
    }

    #[test]
    fn by_hand_wins_and_is_checked() {
        let e = env(&[("SLURM_PROCID", "0")]);
        let args = RingArgs {
            peers: vec!["a".into(), "b".into()],
            rank: Some(1),
            ..Default::default()
        };
        let r = discover(&args, &e, &no_file).unwrap();
        assert_eq!((r.prev(), r.next()), ("a", "a"));
        let args = RingArgs {
            peers: vec!["a".into()],
            rank: Some(0),
            ..Default::default()
        };
        assert!(discover(&args, &e, &no_file)
            .unwrap_err()
            .contains("at least 2"));
        assert!(discover(&RingArgs::default(), &BTreeMap::new(), &no_file).is_err());
    }
}
