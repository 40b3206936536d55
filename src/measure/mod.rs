//! Measurements that move data through the run-time-loaded libraries (`crate::dynlib`): host↔device and peer
//! copies, cuFile reads, RDMA loopbacks (WRITE, READ, SEND/RECV). Each returns raw facts (timings, counters,
//! data checks, the stage a run stopped at) that are recorded as vendor answers, so a replay judges the same
//! numbers. Probes judge; nothing here decides a status.

pub mod copy;
pub mod cufile_read;
pub mod efa_registration;
pub mod gdr;
pub mod memory;
pub mod rc;
pub mod rdma_loopback;
pub mod rdma_pair;
