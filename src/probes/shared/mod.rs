//! What several probes share and no probe owns: the facts gathered once per run for every probe that names
//! them, and the helpers GPU and EFA probes start from. No probe imports another; they meet here.

pub(crate) mod efa;
pub(crate) mod facts;
pub(crate) mod gpu;
pub(crate) mod set_aside;
