//! Measurements that move data through the run-time-loaded libraries (`crate::dynlib`): host↔device and peer
//! copies, cuFile reads, RDMA loopbacks (WRITE, READ, SEND/RECV). Each returns raw facts (timings, counters,
//! data checks, the stage a run stopped at) that are recorded as vendor answers, so a replay judges the same
//! numbers. Probes judge; nothing here decides a status.

pub(crate) mod copy;
pub(crate) mod cufile_read;
pub(crate) mod efa_registration;
pub(crate) mod gdr;
pub(crate) mod memory;
pub(crate) mod rc;
pub(crate) mod rdma_loopback;
pub(crate) mod rdma_pair;
