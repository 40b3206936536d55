//! Issue 32 §5: the isolation planner at scale, on the stand-in fleet of `isolate::sim` (a fault map decides
//! what each group's job prints in nccl-tests' format; `collective`'s parser reads the table back and the busbw
//! is judged against the floor). N = 8, 64, 232, 1024 with d = 0, 1, 5 bad nodes, a slow node that completes,
//! a rail below its floor, and a bad link; 20 placements of the faults each. Checks that no healthy node is ever
//! named and prints the README's table; then the planner's own time for N = 4096.
//!
//!   cargo bench --bench isolate_scale

use std::time::Duration;

use fabric_preflight::isolate::plan::{screening_groups, Verdict};
use fabric_preflight::isolate::sim::{self, FaultMap};

const SEEDS: usize = 20;

struct Row {
    rounds: Vec<usize>,
    tests: Vec<usize>,
    exact: usize,
    unconfirmed: usize,
    healthy_named: usize,
    planner: Duration,
}

fn scenario(n: usize, name: &str, seed: usize) -> (FaultMap, Vec<usize>, Option<(usize, usize)>) {
    let groups = screening_groups(n, &[]);
    let picked = sim::spread(n, 5.min(n), seed);
    let group = &groups[seed % groups.len()];
    match name {
        "d=0" => (FaultMap::default(), vec![], None),
        "d=1" => (
            FaultMap {
                bad: picked[..1].to_vec(),
                ..FaultMap::default()
            },
            picked[..1].to_vec(),
            None,
        ),
        "d=5" => (
            FaultMap {
                bad: picked.clone(),
                ..FaultMap::default()
            },
            picked,
            None,
        ),
        "slow node (60%)" => (
            FaultMap {
                slow: vec![(picked[0], 0.6)],
                ..FaultMap::default()
            },
            picked[..1].to_vec(),
            None,
        ),
        "rail 3 at 25%" => (
            FaultMap {
                weak_rail: vec![(picked[0], 3)],
                ..FaultMap::default()
            },
            picked[..1].to_vec(),
            None,
        ),
        "link, same group" => {
            let link = (group[seed % (group.len() - 1)], group[group.len() - 1]);
            (
                FaultMap {
                    link: Some(link),
                    ..FaultMap::default()
                },
                vec![],
                Some(link),
            )
        }
        _ => {
            // Between two screening groups' first nodes (their representatives in the sweep).
            let other = &groups[(seed + 1) % groups.len()];
            let link = (group[0].min(other[0]), group[0].max(other[0]));
            (
                FaultMap {
                    link: Some(link),
                    ..FaultMap::default()
                },
                vec![],
                Some(link),
            )
        }
    }
}

fn main() {
    // `cargo bench` passes --bench; a filter argument is not used.
    println!("| N | faults | rounds (max) | tests (max) | found exactly | left unconfirmed | healthy nodes named | planner time (max) |");
    println!("|---|---|---|---|---|---|---|---|");
    let names = [
        "d=0",
        "d=1",
        "d=5",
        "slow node (60%)",
        "rail 3 at 25%",
        "link, same group",
        "link, between groups",
    ];
    for n in [8, 64, 232, 1024] {
        for name in names {
            let mut row = Row {
                rounds: vec![],
                tests: vec![],
                exact: 0,
                unconfirmed: 0,
                healthy_named: 0,
                planner: Duration::ZERO,
            };
            for seed in 0..SEEDS {
                let (faults, bad, link) = scenario(n, name, seed);
                let out = sim::run(n, &[], &faults);
                row.rounds.push(out.rounds);
                row.tests.push(out.tests);
                row.planner = row.planner.max(out.planner_time);
                let mut culprits = Vec::new();
                let mut links = Vec::new();
                for (m, v) in out.verdicts.iter().enumerate() {
                    let faulty = bad.contains(&m) || link.is_some_and(|(a, b)| a == m || b == m);
                    match v {
                        Verdict::CulpritNode { .. } => culprits.push(m),
                        Verdict::CulpritLink { peer, .. } if m < *peer => links.push((m, *peer)),
                        Verdict::Unconfirmed { .. } => row.unconfirmed += 1,
                        _ => {}
                    }
                    let named =
                        matches!(v, Verdict::CulpritNode { .. } | Verdict::CulpritLink { .. });
                    if named && !faulty {
                        row.healthy_named += 1;
                    }
                }
                let mut want = bad.clone();
                want.sort_unstable();
                if culprits == want && links == link.into_iter().collect::<Vec<_>>() {
                    row.exact += 1;
                }
            }
            assert_eq!(
                row.healthy_named, 0,
                "N={n} {name}: a healthy node was named"
            );
            if name == "d=1" && n == 232 {
                assert!(row.rounds.iter().all(|&r| r <= 7) && row.tests.iter().all(|&t| t <= 22));
            }
            if name == "d=0" && n == 232 {
                assert!(row.rounds.iter().all(|&r| r <= 3) && row.tests.iter().all(|&t| t <= 28));
            }
            println!(
                "| {n} | {name} | {} | {} | {}/{SEEDS} | {} | {} | {:.2} ms |",
                row.rounds.iter().max().unwrap_or(&0),
                row.tests.iter().max().unwrap_or(&0),
                row.exact,
                row.unconfirmed,
                row.healthy_named,
                row.planner.as_secs_f64() * 1e3
            );
        }
    }
    for (name, faults) in [
        ("d=0", FaultMap::default()),
        (
            "d=1",
            FaultMap {
                bad: vec![1234],
                ..FaultMap::default()
            },
        ),
        (
            "d=5",
            FaultMap {
                bad: sim::spread(4096, 5, 7),
                ..FaultMap::default()
            },
        ),
    ] {
        let out = sim::run(4096, &[], &faults);
        println!(
            "N=4096 {name}: planner {:.2} ms for {} rounds, {} tests",
            out.planner_time.as_secs_f64() * 1e3,
            out.rounds,
            out.tests
        );
        assert!(out.planner_time < Duration::from_secs(1));
    }
}
