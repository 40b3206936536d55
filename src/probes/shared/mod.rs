//! What several probes share and no probe owns: the facts gathered once per run for every probe that names
//! them, and the helpers GPU and EFA probes start from. No probe imports another; they meet here.

pub mod efa;
pub mod facts;
pub mod gpu;
pub mod set_aside;
