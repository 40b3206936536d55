//! The integration test binary: runs the built `fabric-preflight` against recorded trees and bad input.
//! One module per area; shared helpers in `util`.

mod collective;
mod deploy;
mod deps;
mod efa;
mod fabric;
mod faults;
mod findings;
mod fleet_pcie;
mod fleet_rdma;
mod gds;
mod golden;
mod gpu;
mod h200;
mod healthy_shapes;
mod hostile;
mod isolate;
mod nccl;
mod nvlink;
mod pair;
mod presence;
mod reports;
mod robustness;
mod usage;
mod util;
