//! `fabric-preflight isolate`: find the node or link behind a failing multi-node test through the site's own
//! engine. `plan` is the pure planner, `measure` runs and judges one group's job, `report` renders the outcome,
//! `topology` reads switch and clique groups, and `sim` is the stand-in fleet the benchmark and tests run on.

pub(crate) mod measure;
pub mod plan;
pub(crate) mod report;
pub mod sim;
pub(crate) mod topology;
