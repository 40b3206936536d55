//! `fabric-preflight isolate`: find the node or link behind a failing multi-node test through the site's own
//! engine. `plan` is the pure planner; `sim` the stand-in fleet its benchmark and tests run on.

pub mod plan;
pub mod sim;
