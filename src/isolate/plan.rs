//! The isolation planner: which disjoint groups of nodes to test next, from what earlier rounds showed. Pure and
//! deterministic (no I/O, no clock): the same nodes, topology and results always give the same rounds.
//!
//! The search follows NVIDIA Cluster Readiness Engine's design (records 055/056), on node indices `0..n`:
//! 1. **Screen**: every node once, in the topology's groups (a leaf switch, an NVLink clique), else ⌈√n⌉ groups.
//! 2. **Split** each failed group: test one half (padded with a known-good node when it is a single node). A
//!    failing half is narrowed further and the untested half waits for the sweep; a passing half clears its
//!    nodes and leaves the fault in the other half (one faulty node per failing group: NVCRE's OR model).
//! 3. **Confirm** the last suspect with a known-good node it was not tested with. Only a failing confirmation
//!    names a culprit node; a passing one means the OR model was wrong here, and the group last seen failing is
//!    tested again in two halves at once (**Halves**), assuming nothing. Where every known-good node was in the
//!    failing group (a fleet of one screening group, e.g. three nodes), the suspect is confirmed with those, one
//!    at a time: failing with two of them names the node, failing with one and passing with another names the
//!    link between the suspect and the one it failed with.
//! 4. **Cross-boundary probes**: when both halves pass but the whole failed, the fault lies between them (a link
//!    or switch): parts of one side are tested with parts of the other until one node of each side remains, the
//!    culprit link; when no probe fails the failure was not reproduced, and its nodes stay unconfirmed suspects.
//! 5. **Sweep**: one representative of every passed screening group, plus every node left untested by a split,
//!    in one group (the links between groups, and the deferred nodes), once no split is under way.
//!
//! Every round's groups are disjoint, so a round runs at once. A node is healthy only when a group it was in
//! passed; a node never tested is said to be untested, never healthy.

use std::collections::BTreeSet;

pub type NodeId = usize;

/// Where a test sits: its round (from 1) and its index in that round (from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TestRef {
    pub round: usize,
    pub index: usize,
}

impl std::fmt::Display for TestRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r{}t{}", self.round, self.index)
    }
}

/// Why a group is tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Screen,
    Split,
    Confirm,
    Halves,
    Cross,
    Sweep,
}

impl Purpose {
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Screen => "screen",
            Purpose::Split => "split",
            Purpose::Confirm => "confirm",
            Purpose::Halves => "halves",
            Purpose::Cross => "cross",
            Purpose::Sweep => "sweep",
        }
    }
}

/// One group to test: its nodes (padding included, in test order) and which of them are known-good padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Test {
    pub members: Vec<NodeId>,
    pub padding: Vec<NodeId>,
    pub purpose: Purpose,
}

/// What the search concluded about one node, with the tests that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Failed with a known-good node it had not been tested with (`confirmed`), after `failed`. `inside`: where
    /// no known-good node was outside `failed`, its failure with one of that group's own before `confirmed`
    /// (with another of them): one alone cannot tell the node from the link between the two.
    CulpritNode {
        failed: TestRef,
        confirmed: TestRef,
        inside: Option<TestRef>,
    },
    /// Passed with others, failed with `peer` alone (`failed`): the link or switch between them.
    CulpritLink { peer: NodeId, failed: TestRef },
    /// In a failure (`failed`) the search could not pin on a node or link.
    Unconfirmed { failed: TestRef, why: &'static str },
    /// Passed in `passed`, and in no failure left unexplained.
    Healthy { passed: TestRef },
    /// Never in a test that ran.
    Untested,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Unknown,
    Good,
    Bad,
}

/// A group seen failing: its nodes and its test.
#[derive(Debug, Clone)]
struct Failed {
    members: Vec<NodeId>,
    at: TestRef,
}

#[derive(Debug, Clone)]
enum Case {
    /// One of `suspects` is at fault, by the OR model; `observed` is the group last seen failing on this trail.
    /// `inside`: confirmations of the last suspect with known-good nodes of `observed` itself (partner, test,
    /// passed), each inconclusive alone (the link between the two fails the same way).
    Narrow {
        suspects: Vec<NodeId>,
        observed: Failed,
        inside: Vec<(NodeId, TestRef, bool)>,
    },
    /// `failed` failed as a whole: both halves are tested at once.
    Halves { failed: Failed },
    /// Every node passed elsewhere, yet `failed` failed: `probes` (one part of each side) are still to test.
    Cross {
        failed: Failed,
        probes: Vec<(Vec<NodeId>, Vec<NodeId>)>,
    },
}

/// What a scheduled test is for, so its result can be applied.
#[derive(Debug, Clone)]
enum Role {
    Screen,
    Sweep,
    Split { case: usize, rest: Vec<NodeId> },
    Confirm { case: usize },
    Half { case: usize },
    Probe { case: usize, probe: usize },
}

/// The search state; [`Planner::next_round`] and [`Planner::record`] alternate until the former returns None.
#[derive(Debug, Clone)]
pub struct Planner {
    known: Vec<Known>,
    first_pass: Vec<Option<TestRef>>,
    last_fail: Vec<Option<TestRef>>,
    confirmed: Vec<Option<(TestRef, TestRef, Option<TestRef>)>>,
    links: Vec<(NodeId, NodeId, TestRef)>,
    unexplained: Vec<Option<(TestRef, &'static str)>>,
    screening: Vec<Vec<NodeId>>,
    cases: Vec<Case>,
    swept_representatives: bool,
    rounds: Vec<Vec<Test>>,
    roles: Vec<Role>,
    max_rounds: usize,
    finished: bool,
}

/// Screening groups: the topology's groups (split evenly when larger than twice ⌈√n⌉, so one huge group does not
/// make every split deep), then the nodes no group holds (and groups of one) in ⌈√n⌉-sized groups. No group has
/// fewer than two nodes unless `n` < 2.
pub fn screening_groups(n: usize, topology: &[Vec<NodeId>]) -> Vec<Vec<NodeId>> {
    let side = ((n as f64).sqrt().ceil() as usize).max(2);
    let mut placed = vec![false; n];
    let mut groups = Vec::new();
    let mut rest = Vec::new();
    for group in topology {
        let members: Vec<NodeId> = group
            .iter()
            .copied()
            .filter(|&m| m < n && !std::mem::replace(&mut placed[m], true))
            .collect();
        if members.len() < 2 {
            rest.extend(members);
        } else {
            groups.extend(even_chunks(&members, members.len().div_ceil(2 * side)));
        }
    }
    rest.extend((0..n).filter(|&m| !placed[m]));
    rest.sort_unstable();
    match rest.len() {
        0 => {}
        // A node alone tests no link: it joins the last group.
        1 if !groups.is_empty() => groups.last_mut().into_iter().for_each(|g| g.extend(&rest)),
        len => {
            let count = if topology.is_empty() {
                side
            } else {
                len.div_ceil(side)
            };
            groups.extend(even_chunks(&rest, count.min(len / 2).max(1)));
        }
    }
    groups
}

/// `items` in `count` consecutive chunks whose sizes differ by at most one.
fn even_chunks(items: &[NodeId], count: usize) -> Vec<Vec<NodeId>> {
    let count = count.clamp(1, items.len().max(1));
    (0..count)
        .map(|i| items[i * items.len() / count..(i + 1) * items.len() / count].to_vec())
        .collect()
}

/// Halves of `items`, the first the larger.
fn halves(items: &[NodeId]) -> (Vec<NodeId>, Vec<NodeId>) {
    let (a, b) = items.split_at(items.len().div_ceil(2));
    (a.to_vec(), b.to_vec())
}

/// The cross-boundary probes under a failing pair of sides: each part of `x` with each part of `y`, ordered so
/// the disjoint ones come together (x1+y1, x2+y2, then x1+y2, x2+y1).
fn probes_under(x: &[NodeId], y: &[NodeId]) -> Vec<(Vec<NodeId>, Vec<NodeId>)> {
    let parts = |side: &[NodeId]| -> Vec<Vec<NodeId>> {
        if side.len() < 2 {
            vec![side.to_vec()]
        } else {
            let (a, b) = halves(side);
            vec![a, b]
        }
    };
    let (xs, ys) = (parts(x), parts(y));
    let mut probes = Vec::new();
    for shift in 0..ys.len() {
        for (i, xi) in xs.iter().enumerate() {
            if let Some(yj) = ys.get((i + shift) % ys.len()) {
                if !probes.contains(&(xi.clone(), yj.clone())) {
                    probes.push((xi.clone(), yj.clone()));
                }
            }
        }
    }
    probes
}

/// Known-good nodes free this round, handed out lowest first.
struct Pads<'a> {
    known: &'a [Known],
    busy: &'a mut [bool],
    cursor: usize,
}

impl Pads<'_> {
    /// A known-good node not in `avoid` nor busy, marked busy.
    fn take(&mut self, avoid: &[NodeId]) -> Option<NodeId> {
        let mut i = self.cursor;
        while i < self.known.len() {
            if self.known[i] == Known::Good && !self.busy[i] && !avoid.contains(&i) {
                self.busy[i] = true;
                if i == self.cursor {
                    self.cursor += 1;
                }
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Whether any known-good node outside `avoid` exists, free this round or not.
    fn exists(&self, avoid: &[NodeId]) -> bool {
        (0..self.known.len()).any(|i| self.known[i] == Known::Good && !avoid.contains(&i))
    }

    fn free(&self, nodes: &[NodeId]) -> bool {
        nodes.iter().all(|&m| !self.busy[m])
    }

    fn mark(&mut self, nodes: &[NodeId], busy: bool) {
        for &m in nodes {
            self.busy[m] = busy;
        }
    }
}

impl Planner {
    /// A search over `n` nodes; `topology` lists groups of node indices (leaf switches, cliques), possibly none.
    /// At most `max_rounds` rounds are planned; what is open then stays unconfirmed or untested.
    pub fn new(n: usize, topology: &[Vec<NodeId>], max_rounds: usize) -> Planner {
        Planner {
            known: vec![Known::Unknown; n],
            first_pass: vec![None; n],
            last_fail: vec![None; n],
            confirmed: vec![None; n],
            links: Vec::new(),
            unexplained: vec![None; n],
            screening: screening_groups(n, topology),
            cases: Vec::new(),
            swept_representatives: false,
            rounds: Vec::new(),
            roles: Vec::new(),
            max_rounds,
            finished: n < 2,
        }
    }

    /// Every round planned so far.
    pub fn rounds(&self) -> &[Vec<Test>] {
        &self.rounds
    }

    /// The next round's tests, or None when the search is over. Call [`Planner::record`] with its results
    /// before asking again.
    pub fn next_round(&mut self) -> Option<&[Test]> {
        assert!(
            self.roles.is_empty(),
            "the results of the last round were not recorded"
        );
        if self.finished {
            return None;
        }
        if self.rounds.len() >= self.max_rounds {
            self.give_up("the round limit was reached before it was resolved");
            return None;
        }
        let (tests, roles) = if self.rounds.is_empty() {
            let tests = self
                .screening
                .iter()
                .map(|g| Test {
                    members: g.clone(),
                    padding: Vec::new(),
                    purpose: Purpose::Screen,
                })
                .collect::<Vec<_>>();
            let roles = vec![Role::Screen; tests.len()];
            (tests, roles)
        } else {
            self.schedule()
        };
        if tests.is_empty() {
            if !self.cases.is_empty() || self.deferred().next().is_some() {
                self.give_up("no known-good node was free to test it against");
            }
            self.finished = true;
            return None;
        }
        self.roles = roles;
        self.rounds.push(tests);
        self.rounds.last().map(Vec::as_slice)
    }

    /// Nodes in no open case and not yet known: left untested by a split.
    fn deferred(&self) -> impl Iterator<Item = NodeId> + '_ {
        let mut held = vec![false; self.known.len()];
        for case in &self.cases {
            if let Case::Narrow { suspects, .. } = case {
                for &m in suspects {
                    held[m] = true;
                }
            }
        }
        (0..self.known.len()).filter(move |&m| {
            self.known[m] == Known::Unknown && !held[m] && self.last_fail[m].is_some()
        })
    }

    fn schedule(&mut self) -> (Vec<Test>, Vec<Role>) {
        let mut busy = vec![false; self.known.len()];
        let mut pads = Pads {
            known: &self.known,
            busy: &mut busy,
            cursor: 0,
        };
        let (mut tests, mut roles) = (Vec::new(), Vec::new());
        let mut push = |members: Vec<NodeId>, padding: Vec<NodeId>, purpose, role| {
            tests.push(Test {
                members,
                padding,
                purpose,
            });
            roles.push(role);
        };
        for (case_index, case) in self.cases.iter().enumerate() {
            match case {
                Case::Narrow {
                    suspects,
                    observed,
                    inside,
                } if suspects.len() == 1 => {
                    // Confirmation: with a known-good node that was not in the failing group; where none exists,
                    // with one of that group not yet tried.
                    let partner = if pads.exists(&observed.members) {
                        pads.take(&observed.members)
                    } else {
                        let tried: Vec<NodeId> = suspects
                            .iter()
                            .copied()
                            .chain(inside.iter().map(|c| c.0))
                            .collect();
                        pads.take(&tried)
                    };
                    if let Some(partner) = partner {
                        pads.mark(suspects, true);
                        push(
                            vec![suspects[0], partner],
                            vec![partner],
                            Purpose::Confirm,
                            Role::Confirm { case: case_index },
                        );
                    }
                }
                Case::Narrow { suspects, .. } => {
                    let (half, rest) = halves(suspects);
                    let padding = if half.len() < 2 {
                        match pads.take(&[]) {
                            Some(p) => vec![p],
                            None => continue,
                        }
                    } else {
                        Vec::new()
                    };
                    pads.mark(&half, true);
                    push(
                        [half, padding.clone()].concat(),
                        padding,
                        Purpose::Split,
                        Role::Split {
                            case: case_index,
                            rest,
                        },
                    );
                }
                Case::Halves { failed } => {
                    let (x, y) = halves(&failed.members);
                    let mut sides = Vec::new();
                    for side in [x, y] {
                        let padding = if side.len() < 2 {
                            match pads.take(&failed.members) {
                                Some(p) => vec![p],
                                None => break,
                            }
                        } else {
                            Vec::new()
                        };
                        sides.push((side, padding));
                    }
                    if sides.len() < 2 {
                        // Both halves or neither: give back the one padding node taken.
                        for (_, padding) in &sides {
                            pads.mark(padding, false);
                        }
                        continue;
                    }
                    pads.mark(&failed.members, true);
                    for (side, padding) in sides {
                        push(
                            [side, padding.clone()].concat(),
                            padding,
                            Purpose::Halves,
                            Role::Half { case: case_index },
                        );
                    }
                }
                Case::Cross { probes, .. } => {
                    for (probe_index, (x, y)) in probes.iter().enumerate() {
                        let members = [x.clone(), y.clone()].concat();
                        if pads.free(&members) {
                            pads.mark(&members, true);
                            push(
                                members,
                                Vec::new(),
                                Purpose::Cross,
                                Role::Probe {
                                    case: case_index,
                                    probe: probe_index,
                                },
                            );
                        }
                    }
                }
            }
        }
        let splitting = self
            .cases
            .iter()
            .any(|c| matches!(c, Case::Narrow { suspects, .. } if suspects.len() > 1));
        if !splitting {
            let mut members: Vec<NodeId> = Vec::new();
            if !self.swept_representatives {
                // One node of each passed screening group: the links between the groups.
                members.extend(self.screening.iter().filter_map(|g| {
                    g.iter()
                        .copied()
                        .find(|&m| self.known[m] == Known::Good && !pads.busy[m])
                }));
            }
            members.extend(self.deferred().filter(|&m| !pads.busy[m]));
            members.sort_unstable();
            members.dedup();
            // Worth a test: a node not yet known, or the links between the screening groups.
            let unknown = members.iter().any(|&m| !self.is_good(m));
            if unknown || (!self.swept_representatives && members.len() >= 2) {
                let padding: Vec<NodeId> = if members.len() == 1 {
                    pads.take(&members).into_iter().collect()
                } else {
                    Vec::new()
                };
                if members.len() + padding.len() >= 2 {
                    self.swept_representatives = true;
                    pads.mark(&members, true);
                    push(
                        [members, padding.clone()].concat(),
                        padding,
                        Purpose::Sweep,
                        Role::Sweep,
                    );
                }
            } else {
                // One screening group: there is no link between groups to test.
                self.swept_representatives = true;
            }
        }
        (tests, roles)
    }

    fn is_good(&self, node: NodeId) -> bool {
        self.known[node] == Known::Good
    }

    /// Applies the results of the round [`Planner::next_round`] returned last, one per test, in its order.
    pub fn record(&mut self, passed: &[bool]) {
        let round = self.rounds.len();
        let tests = self.rounds.last().cloned().unwrap_or_default();
        assert_eq!(passed.len(), tests.len(), "one result per test");
        let roles = std::mem::take(&mut self.roles);
        for (index, (test, &ok)) in tests.iter().zip(passed).enumerate() {
            let at = TestRef { round, index };
            for &m in &test.members {
                if ok {
                    if self.known[m] == Known::Unknown {
                        self.known[m] = Known::Good;
                    }
                    self.first_pass[m].get_or_insert(at);
                } else {
                    self.last_fail[m] = Some(at);
                }
            }
        }
        let old_cases = std::mem::take(&mut self.cases);
        // The results of each open case, in test order.
        let mut per_case: Vec<Vec<(TestRef, &Test, bool, &Role)>> =
            vec![Vec::new(); old_cases.len()];
        for (index, ((test, &ok), role)) in tests.iter().zip(passed).zip(&roles).enumerate() {
            let at = TestRef { round, index };
            let failed = || Failed {
                members: test.members.clone(),
                at,
            };
            match role {
                Role::Screen | Role::Sweep => {
                    if !ok {
                        let suspects: Vec<NodeId> = test
                            .members
                            .iter()
                            .copied()
                            .filter(|&m| self.known[m] == Known::Unknown)
                            .collect();
                        self.cases.push(if suspects.is_empty() {
                            Case::Halves { failed: failed() }
                        } else {
                            Case::Narrow {
                                suspects,
                                observed: failed(),
                                inside: Vec::new(),
                            }
                        });
                    }
                }
                Role::Split { case, .. }
                | Role::Confirm { case }
                | Role::Half { case }
                | Role::Probe { case, .. } => per_case[*case].push((at, test, ok, role)),
            }
        }
        for (case, results) in old_cases.into_iter().zip(per_case) {
            if results.is_empty() {
                self.cases.push(case); // waited for a free known-good node
                continue;
            }
            self.advance(case, &results);
        }
    }

    /// One open case after its tests of this round.
    fn advance(&mut self, case: Case, results: &[(TestRef, &Test, bool, &Role)]) {
        let core = |test: &Test| -> Vec<NodeId> {
            test.members
                .iter()
                .copied()
                .filter(|m| !test.padding.contains(m))
                .collect()
        };
        match case {
            Case::Narrow {
                suspects,
                observed,
                mut inside,
            } => {
                let (at, test, ok, role) = results[0];
                match role {
                    Role::Split { rest, .. } if ok => self.cases.push(Case::Narrow {
                        suspects: rest.clone(),
                        observed,
                        inside: Vec::new(),
                    }),
                    // The untested half joins the sweep (it is in no case now).
                    Role::Split { .. } => self.cases.push(Case::Narrow {
                        suspects: core(test),
                        observed: Failed {
                            members: test.members.clone(),
                            at,
                        },
                        inside: Vec::new(),
                    }),
                    Role::Confirm { .. } => {
                        let suspect = core(test)[0];
                        let partner = test.padding[0];
                        let outside = !observed.members.contains(&partner);
                        let failed_inside = inside.iter().find(|c| !c.2).copied();
                        let passed_inside = inside.iter().any(|c| c.2);
                        match (ok, failed_inside) {
                            // Failed with a node outside the failing group, or with a second one inside it.
                            (false, f) if outside || f.is_some() => {
                                self.known[suspect] = Known::Bad;
                                self.confirmed[suspect] =
                                    Some((observed.at, at, f.map(|(_, first, _)| first)));
                            }
                            (false, _) if passed_inside => self.links.push((suspect, partner, at)),
                            (true, Some((failed_with, failed_at, _))) => {
                                self.links.push((suspect, failed_with, failed_at))
                            }
                            // Inconclusive alone: try the next node of the failing group, if any is left.
                            _ if !outside
                                && self.untried_inside(suspect, &observed, &inside, partner) =>
                            {
                                inside.push((partner, at, ok));
                                self.cases.push(Case::Narrow {
                                    suspects,
                                    observed,
                                    inside,
                                });
                            }
                            // Passed with a known-good node: the OR model was wrong here; test the failing
                            // group's halves without assuming.
                            _ => self.cases.push(Case::Halves { failed: observed }),
                        }
                    }
                    _ => self.cases.push(Case::Halves { failed: observed }),
                }
            }
            Case::Halves { failed } => {
                let failing: Vec<_> = results.iter().filter(|r| !r.2).collect();
                for &&(at, test, _, _) in &failing {
                    let side = core(test);
                    let observed = Failed {
                        members: test.members.clone(),
                        at,
                    };
                    self.cases.push(if side.len() == 1 {
                        Case::Narrow {
                            suspects: side,
                            observed,
                            inside: Vec::new(),
                        }
                    } else {
                        Case::Halves {
                            failed: Failed { members: side, at },
                        }
                    });
                }
                if failing.is_empty() {
                    let (x, y) = halves(&failed.members);
                    self.cross(x, y, failed);
                }
            }
            Case::Cross { failed, mut probes } => {
                if let Some(&(at, test, _, Role::Probe { probe, .. })) =
                    results.iter().find(|r| !r.2)
                {
                    let (x, y) = probes[*probe].clone();
                    self.cross(
                        x,
                        y,
                        Failed {
                            members: test.members.clone(),
                            at,
                        },
                    );
                    return;
                }
                let tested: BTreeSet<usize> = results
                    .iter()
                    .filter_map(|r| match r.3 {
                        Role::Probe { probe, .. } => Some(*probe),
                        _ => None,
                    })
                    .collect();
                let mut index = 0;
                probes.retain(|_| {
                    index += 1;
                    !tested.contains(&(index - 1))
                });
                if probes.is_empty() {
                    self.unexplain(
                        &failed,
                        "its group's failure did not recur in any smaller group",
                    );
                } else {
                    self.cases.push(Case::Cross { failed, probes });
                }
            }
        }
    }

    /// Whether a known-good node of `observed` is left to confirm `suspect` with, beside `partner` and those in
    /// `inside`.
    fn untried_inside(
        &self,
        suspect: NodeId,
        observed: &Failed,
        inside: &[(NodeId, TestRef, bool)],
        partner: NodeId,
    ) -> bool {
        observed.members.iter().any(|&m| {
            m != suspect && m != partner && self.is_good(m) && !inside.iter().any(|c| c.0 == m)
        })
    }

    /// `x` and `y` each passed, `failed` (holding both) failed: a link when each side is one node, else probes.
    fn cross(&mut self, x: Vec<NodeId>, y: Vec<NodeId>, failed: Failed) {
        if let ([a], [b]) = (x.as_slice(), y.as_slice()) {
            self.links.push((*a, *b, failed.at));
        } else {
            self.cases.push(Case::Cross {
                probes: probes_under(&x, &y),
                failed,
            });
        }
    }

    fn unexplain(&mut self, failed: &Failed, why: &'static str) {
        for &m in &failed.members {
            self.unexplained[m].get_or_insert((failed.at, why));
        }
    }

    /// Ends the search: what is open stays unconfirmed (`why`).
    fn give_up(&mut self, why: &'static str) {
        for case in std::mem::take(&mut self.cases) {
            let failed = match case {
                Case::Narrow { observed, .. } => observed,
                Case::Halves { failed } | Case::Cross { failed, .. } => failed,
            };
            self.unexplain(&failed, why);
        }
        let deferred: Vec<NodeId> = self.deferred().collect();
        for m in deferred {
            if let Some(at) = self.last_fail[m] {
                self.unexplained[m].get_or_insert((at, why));
            }
        }
        self.finished = true;
    }

    /// Every node's verdict, in node order.
    pub fn verdicts(&self) -> Vec<Verdict> {
        (0..self.known.len())
            .map(|m| {
                if let Some((failed, confirmed, inside)) = self.confirmed[m] {
                    return Verdict::CulpritNode {
                        failed,
                        confirmed,
                        inside,
                    };
                }
                if let Some(&(a, b, failed)) =
                    self.links.iter().find(|(a, b, _)| *a == m || *b == m)
                {
                    let peer = if a == m { b } else { a };
                    return Verdict::CulpritLink { peer, failed };
                }
                if let Some((failed, why)) = self.unexplained[m] {
                    return Verdict::Unconfirmed { failed, why };
                }
                match (self.known[m], self.first_pass[m], self.last_fail[m]) {
                    (Known::Good, Some(passed), _) => Verdict::Healthy { passed },
                    (_, _, Some(failed)) => Verdict::Unconfirmed {
                        failed,
                        why: "failed and was not tested again",
                    },
                    _ => Verdict::Untested,
                }
            })
            .collect()
    }
}

/// The round after `results` (one list of pass/fail per round so far), replayed from the start: the planner as a
/// function of the nodes, the topology and the results so far. None when the search is over.
pub fn plan(
    n: usize,
    topology: &[Vec<NodeId>],
    results: &[Vec<bool>],
    max_rounds: usize,
) -> Option<Vec<Test>> {
    let mut planner = Planner::new(n, topology, max_rounds);
    for round in results {
        planner.next_round()?;
        planner.record(round);
    }
    planner.next_round().map(<[Test]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::super::sim::{self, FaultMap};
    use super::*;

    fn culprits(verdicts: &[Verdict]) -> Vec<NodeId> {
        (0..verdicts.len())
            .filter(|&m| matches!(verdicts[m], Verdict::CulpritNode { .. }))
            .collect()
    }

    fn sorted(mut v: Vec<NodeId>) -> Vec<NodeId> {
        v.sort_unstable();
        v
    }

    #[test]
    fn screening_is_about_root_n_groups_or_the_topology() {
        let groups = screening_groups(232, &[]);
        assert_eq!(groups.len(), 16);
        assert!(groups.iter().all(|g| (14..=15).contains(&g.len())));
        assert_eq!(screening_groups(8, &[]).len(), 3);
        assert_eq!(screening_groups(3, &[]), vec![vec![0, 1, 2]]);
        // Two switches and a node no switch lists: it joins the last group, not a group of its own.
        let groups = screening_groups(9, &[vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(groups, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7, 8]]);
        // A clique larger than twice the √n side is split evenly.
        assert_eq!(screening_groups(16, &[(0..16).collect()]).len(), 2);
    }

    #[test]
    fn every_round_is_disjoint_and_the_plan_is_a_function_of_the_results() {
        let faults = FaultMap {
            bad: vec![17, 140],
            ..FaultMap::default()
        };
        let names: Vec<String> = (0..232).map(|i| format!("n{i}")).collect();
        let mut planner = Planner::new(232, &[], 64);
        let mut history = Vec::new();
        while let Some(round) = planner.next_round() {
            let round = round.to_vec();
            assert_eq!(
                plan(232, &[], &history, 64).as_deref(),
                Some(round.as_slice())
            );
            let mut seen = BTreeSet::new();
            for t in &round {
                assert!(t.members.len() >= 2, "{t:?}");
                assert!(
                    t.members.iter().all(|m| seen.insert(*m)),
                    "overlap in {round:?}"
                );
            }
            let results: Vec<bool> = round
                .iter()
                .map(|t| {
                    let (exit, out) = faults.job(&names, &t.members);
                    sim::judge(exit, &out, sim::FLOOR).passed
                })
                .collect();
            planner.record(&results);
            history.push(results);
        }
        assert_eq!(plan(232, &[], &history, 64), None);
        assert_eq!(culprits(&planner.verdicts()), vec![17, 140]);
    }

    #[test]
    fn one_bad_node_in_232_within_nvcre_figures() {
        for seed in 0..20 {
            let bad = sim::spread(232, 1, seed);
            let out = sim::run(
                232,
                &[],
                &FaultMap {
                    bad: bad.clone(),
                    ..FaultMap::default()
                },
            );
            assert_eq!(culprits(&out.verdicts), bad);
            assert!(
                out.rounds <= 7 && out.tests <= 22,
                "seed {seed}: {} rounds, {} tests",
                out.rounds,
                out.tests
            );
            let healthy = out
                .verdicts
                .iter()
                .filter(|v| matches!(v, Verdict::Healthy { .. }))
                .count();
            assert_eq!(healthy, 231);
        }
    }

    #[test]
    fn a_healthy_fleet_in_two_rounds() {
        let out = sim::run(232, &[], &FaultMap::default());
        assert_eq!((out.rounds, out.tests), (2, 17));
        assert!(out
            .verdicts
            .iter()
            .all(|v| matches!(v, Verdict::Healthy { .. })));
    }

    #[test]
    fn five_bad_nodes_slow_and_weak_rails_are_found_exactly() {
        for seed in 0..10 {
            let picked = sim::spread(64, 7, seed);
            let faults = FaultMap {
                bad: picked[..5].to_vec(),
                slow: vec![(picked[5], 0.6)],
                weak_rail: vec![(picked[6], 3)],
                link: None,
            };
            let out = sim::run(64, &[], &faults);
            assert_eq!(
                culprits(&out.verdicts),
                sorted(picked.clone()),
                "seed {seed}: {faults:?} {:?}",
                out.verdicts
            );
        }
    }

    #[test]
    fn a_bad_link_is_named_as_a_link_never_as_a_node() {
        for (a, b) in [(0, 1), (2, 9), (40, 45), (5, 63)] {
            // Same screening group for (0,1), (2,9)? and (40,45); (5,63) crosses groups.
            let faults = FaultMap {
                link: Some((a, b)),
                ..FaultMap::default()
            };
            let out = sim::run(64, &[], &faults);
            assert!(
                culprits(&out.verdicts).is_empty(),
                "{a}-{b}: {:?}",
                out.verdicts
            );
            let same_group = screening_groups(64, &[])
                .iter()
                .any(|g| g.contains(&a) && g.contains(&b));
            if same_group {
                assert!(
                    matches!(out.verdicts[a], Verdict::CulpritLink { peer, .. } if peer == b),
                    "{a}-{b}: {:?}",
                    out.verdicts[a]
                );
            }
            for (m, v) in out.verdicts.iter().enumerate() {
                if m != a && m != b {
                    assert!(matches!(v, Verdict::Healthy { .. }), "{m}: {v:?}");
                }
            }
        }
    }

    /// Three nodes make one screening group, so no known-good node is ever outside the failing group: the
    /// suspect is confirmed with the group's own known-good nodes, one at a time. The last node of the group (the
    /// one a split leaves for last) is named exactly, and a link to it as a link; a fault in the split's tested
    /// half finds no known-good node to pad with, and nobody is named.
    #[test]
    fn three_nodes_name_the_last_one_or_its_link_exactly() {
        let verdicts = |faults: FaultMap| sim::run(3, &[], &faults).verdicts;
        let out = sim::run(
            3,
            &[],
            &FaultMap {
                bad: vec![2],
                ..FaultMap::default()
            },
        );
        assert_eq!(culprits(&out.verdicts), vec![2], "{:?}", out.verdicts);
        assert!(out.verdicts[..2]
            .iter()
            .all(|v| matches!(v, Verdict::Healthy { .. })));
        // Screen, split, then the two confirmations (they share the suspect, so one a round).
        assert_eq!((out.rounds, out.tests), (4, 4));
        let at = |round| Some(TestRef { round, index: 0 });
        assert_eq!(
            out.verdicts[2],
            Verdict::CulpritNode {
                failed: TestRef { round: 1, index: 0 },
                confirmed: TestRef { round: 4, index: 0 },
                inside: at(3),
            }
        );
        for (a, b) in [(0, 2), (1, 2)] {
            let v = verdicts(FaultMap {
                link: Some((a, b)),
                ..FaultMap::default()
            });
            assert!(culprits(&v).is_empty(), "{a}-{b}: {v:?}");
            assert!(
                matches!(v[b], Verdict::CulpritLink { peer, .. } if peer == a),
                "{a}-{b}: {v:?}"
            );
            assert!(
                matches!(v[a], Verdict::CulpritLink { peer, .. } if peer == b),
                "{a}-{b}: {v:?}"
            );
            let other = 1 - a;
            assert!(matches!(v[other], Verdict::Healthy { .. }), "{v:?}");
        }
        for bad in [0, 1] {
            let v = verdicts(FaultMap {
                bad: vec![bad],
                ..FaultMap::default()
            });
            assert!(
                v.iter().all(|v| matches!(v, Verdict::Unconfirmed { .. })),
                "{bad}: {v:?}"
            );
        }
        assert!(verdicts(FaultMap::default())
            .iter()
            .all(|v| matches!(v, Verdict::Healthy { .. })));
    }

    #[test]
    fn with_a_broken_measure_nobody_is_named() {
        let mut planner = Planner::new(8, &[], 64);
        while let Some(round) = planner.next_round() {
            let fails = vec![false; round.len()];
            planner.record(&fails);
        }
        assert!(planner
            .verdicts()
            .iter()
            .all(|v| matches!(v, Verdict::Unconfirmed { .. })));
    }

    #[test]
    fn topology_groups_are_screened_whole() {
        let topology = vec![(0..8).collect::<Vec<_>>(), (8..16).collect()];
        let mut planner = Planner::new(16, &topology, 64);
        let round = planner.next_round().unwrap();
        assert_eq!(round.len(), 2);
        assert_eq!(round[1].members, (8..16).collect::<Vec<_>>());
    }
}
