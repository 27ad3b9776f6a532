//! Memory access rights ([`AccessFlags`]): what the local NIC and peers may do with
//! registered memory (regions, memory windows) and with a queue pair's remote access.

use bitflags::bitflags;
use rdma_verbs_sys as sys;

bitflags! {
    /// Memory region access rights (`enum ibv_access_flags`), `ibv_reg_mr(3)`.
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`: the NIC may write (receives, RDMA READ results).
        const LOCAL_WRITE = sys::IBV_ACCESS_LOCAL_WRITE;
        /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA WRITE into it.
        const REMOTE_WRITE = sys::IBV_ACCESS_REMOTE_WRITE;
        /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA READ from it.
        const REMOTE_READ = sys::IBV_ACCESS_REMOTE_READ;
        /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomics on it.
        const REMOTE_ATOMIC = sys::IBV_ACCESS_REMOTE_ATOMIC;
        /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to it.
        const MW_BIND = sys::IBV_ACCESS_MW_BIND;
        /// `IBV_ACCESS_ON_DEMAND`: on-demand paging (ODP): pages are not pinned at
        /// registration but faulted in when the NIC touches them. Only some devices have it
        /// (mlx5 reports it in `ibv_query_device_ex`'s `odp_caps`); Soft-RoCE in Linux 6.1
        /// refuses it (`EINVAL`).
        const ON_DEMAND = sys::IBV_ACCESS_ON_DEMAND;
        /// `IBV_ACCESS_RELAXED_ORDERING`: optional; ignored by kernels that lack it.
        const RELAXED_ORDERING = sys::IBV_ACCESS_RELAXED_ORDERING;
        // Bits of newer rdma-core survive a round trip.
        const _ = !0;
    }
}

impl AccessFlags {
    /// The rights that let a peer write the memory.
    pub const REMOTE_WRITES: AccessFlags =
        AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_ATOMIC);
}
