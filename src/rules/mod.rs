//! The domain rules: what a healthy node's hardware looks like, with no idea which probe asks. The PCIe tree and
//! its placements (`topology`), what a transfer leg or an RDMA transport needs (`transfer_verdict`,
//! `rdma_transport`, `gds_p2pdma`), and the judgements several checks share: hardware present without its
//! driver (`presence`), a NIC's role (`nic_role`), GPUDirect Storage targets (`gds_target`), the Grace platform
//! (`grace`) and the multi-node NVLink domain (`nvlink_domain`); and where the node runs (`environment`: bare metal
//! or a VM, in a container or not), which the report records.

pub(crate) mod environment;
pub(crate) mod gds_p2pdma;
pub(crate) mod gds_target;
pub(crate) mod grace;
pub(crate) mod nic_role;
pub(crate) mod nvlink_domain;
pub(crate) mod presence;
pub(crate) mod rdma_transport;
pub mod topology;
pub(crate) mod transfer_verdict;
