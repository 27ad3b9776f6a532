//! Memory access rights ([`AccessFlags`]): what the local NIC and peers may do with
//! registered memory (regions, memory windows) and with a queue pair's remote access.

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::error::{Error, InvalidInputKind, Result};

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

    /// The bits named above: what a registration may ask for.
    const NAMED: AccessFlags = AccessFlags::LOCAL_WRITE
        .union(AccessFlags::REMOTE_WRITE)
        .union(AccessFlags::REMOTE_READ)
        .union(AccessFlags::REMOTE_ATOMIC)
        .union(AccessFlags::MW_BIND)
        .union(AccessFlags::ON_DEMAND)
        .union(AccessFlags::RELAXED_ORDERING);

    /// Refuses bits without a name here (a newer rdma-core's, or none at all): a region
    /// registered with them could be addressed or reached otherwise than this crate's checks
    /// assume (`IBV_ACCESS_ZERO_BASED` moves its IOVA to 0, for one), and a kernel that does
    /// not know them answers a bare `EINVAL`.
    pub(crate) fn check_named(self) -> Result<()> {
        let unknown = self.difference(AccessFlags::NAMED);
        if unknown.is_empty() {
            return Ok(());
        }
        Err(Error::invalid(
            InvalidInputKind::UnknownAccess,
            format!(
                "access flags {:#x} hold bits this crate does not name ({:#x}): it cannot tell \
                 what they let the NIC or peers do with the memory; register with the \
                 AccessFlags constants only (LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, \
                 REMOTE_ATOMIC, MW_BIND, ON_DEMAND, RELAXED_ORDERING)",
                self.bits(),
                unknown.bits()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_flag_may_be_registered_and_no_other_bit() {
        for (name, flag) in AccessFlags::all().iter_names() {
            assert!(flag.check_named().is_ok(), "{name}");
        }
        let zero_based = AccessFlags::from_bits_retain(1 << 5);
        let e = (AccessFlags::LOCAL_WRITE | zero_based).check_named().unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::UnknownAccess));
        assert!(
            e.to_string()
                .starts_with("access flags 0x21 hold bits this crate does not name (0x20)"),
            "{e}"
        );
    }
}
