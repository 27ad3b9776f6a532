//! Address handles: how a UD QP reaches its peers.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

mod rate;
mod vector;

pub use rate::StaticRate;
pub use vector::{AddressVector, GlobalRoute};

use crate::endpoint::Qpn;
use crate::error::{check_errno, check_ptr, Result};
use crate::gid::Gid;
use crate::leak::drop_by;
use crate::pd::ProtectionDomain;

/// An address handle (`struct ibv_ah`, `ibv_create_ah(3)`): the route to one peer port, for
/// UD sends. On RoCE its [`AddressVector`] needs a GRH.
///
/// It must outlive the UD QPs that send with it, for the NIC reads it until a send
/// completes: declare it before them. The buffer tier's UD sends
/// ([`QueuePair::post_send_buffer_to`](crate::QueuePair::post_send_buffer_to), …) demand it
/// of the compiler; the raw tier's contract demands it of the caller.
///
/// ```compile_fail,E0597
/// # use rdma_verbs::*;
/// # fn f<'a>(
/// #     pd: &'a ProtectionDomain<'a>,
/// #     qp: &QueuePair<'a, Rts, Ud>,
/// #     pool: &'a BufferPool<'a>,
/// #     av: &AddressVector,
/// # ) -> Result<()> {
/// let ah = pd.create_ah(av)?;
/// let dest = UdDestination { ah: &ah, qpn: Qpn::new(0x12)?, qkey: 0x1111_1111 };
/// // error: `ah` does not live as long as the QP
/// qp.post_send_buffer_to(pool.take().unwrap(), &dest, None)?;
/// # Ok(()) }
/// ```
#[must_use = "the address handle is destroyed when dropped"]
pub struct AddressHandle<'pd> {
    raw: NonNull<sys::ibv_ah>,
    pd: &'pd ProtectionDomain<'pd>,
}

// SAFETY: an AH is immutable after creation; verbs on it are thread-safe.
unsafe impl Send for AddressHandle<'_> {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle<'_> {}

impl<'pd> ProtectionDomain<'pd> {
    /// `ibv_create_ah(3)`—An address handle for `av`.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_create_ah` (`EINVAL`: no GRH on RoCE, or
    /// a source GID index that does not exist).
    #[doc(alias = "ibv_create_ah")]
    pub fn create_ah(&'pd self, av: &AddressVector) -> Result<AddressHandle<'pd>> {
        let mut attr = av.to_raw();
        // SAFETY: a live PD and a valid attribute struct.
        let raw = unsafe { (self.context().library().fns.ibv_create_ah)(self.as_raw(), &mut attr) };
        Ok(AddressHandle { raw: check_ptr(raw, "ibv_create_ah")?, pd: self })
    }
}

impl AddressHandle<'_> {
    /// The raw AH pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_ah {
        self.raw.as_ptr()
    }

    /// The PD the AH was created in.
    pub fn pd(&self) -> &ProtectionDomain<'_> {
        self.pd
    }

    /// `ibv_destroy_ah(3)`—Destroys the AH, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_destroy_ah`; the AH is then leaked.
    #[doc(alias = "ibv_destroy_ah")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).destroy_raw()
    }

    fn destroy_raw(&self) -> Result<()> {
        // SAFETY: a live AH, destroyed once; WRs naming it borrowed it while posted.
        let ret = unsafe { (self.pd.context().library().fns.ibv_destroy_ah)(self.as_raw()) };
        check_errno(ret, "ibv_destroy_ah")
    }
}

drop_by!(AddressHandle<'_>, destroy_raw, |_| "an address handle");

impl std::fmt::Debug for AddressHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle").finish_non_exhaustive()
    }
}

/// Where a UD send goes: an address handle, the peer's QP number and its Q_Key. The address
/// handle must outlive the UD QPs that send to it (see [`AddressHandle`]).
#[derive(Clone, Copy, Debug)]
pub struct UdDestination<'a> {
    /// The route to the peer's port.
    pub ah: &'a AddressHandle<'a>,
    /// The peer's UD QP.
    pub qpn: Qpn,
    /// The Q_Key the peer's QP was given.
    pub qkey: u32,
}

/// The 40 bytes at the start of every UD receive (`struct ibv_grh`): the Global Route Header
/// of an InfiniBand or RoCE v1 packet, or, on RoCE v2 over IPv4, the IPv4 header in its last
/// 20 bytes. The payload starts after it, at [`Grh::LEN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh([u8; Grh::LEN]);

impl Grh {
    /// Its size in bytes: receive buffers of UD QPs need this much room before the payload.
    pub const LEN: usize = 40;

    /// The header at the start of a UD receive, `None` when `received` is shorter.
    pub fn from_receive(received: &[u8]) -> Option<Grh> {
        Some(Grh(received.get(..Self::LEN)?.try_into().expect("40 bytes")))
    }

    /// Whether it holds an IPv4 header (RoCE v2 over IPv4), told apart as rdma-core does
    /// (`ibv_init_ah_from_wc`): when the first byte does not carry IP version 6, it is IPv4
    /// if the last 20 bytes carry version 4; when it does, only an IPv4 header of 5 words
    /// whose checksum is right says IPv4. (Soft-RoCE delivers loopback datagrams with the
    /// IPv4 checksum unset, so the checksum alone would miss them.)
    pub fn is_ipv4(&self) -> bool {
        let ip = &self.0[20..];
        if self.0[0] >> 4 != 6 {
            return ip[0] >> 4 == 4;
        }
        if ip[0] & 0x0f != 5 {
            return false;
        }
        let sum: u32 = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        (folded & 0xffff) + (folded >> 16) == 0xffff
    }

    /// The sender's GID: the GRH's source GID, or the IPv4 source address as an IPv4-mapped
    /// GID.
    pub fn source_gid(&self) -> Gid {
        if self.is_ipv4() {
            let mut gid = [0u8; 16];
            gid[10] = 0xff;
            gid[11] = 0xff;
            gid[12..].copy_from_slice(&self.0[32..36]);
            Gid::new(gid)
        } else {
            Gid::new(self.0[8..24].try_into().expect("16 bytes"))
        }
    }

    /// The raw 40 bytes.
    pub fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 40 bytes before a RoCE v2 IPv4 datagram's payload: 20 zero bytes, then `ip`.
    fn behind_zeros(ip: [u8; 20]) -> [u8; 40] {
        let mut grh = [0u8; 40];
        grh[20..].copy_from_slice(&ip);
        grh
    }

    #[test]
    fn a_roce_v2_ipv4_header_gives_the_mapped_source() {
        // An IPv4 header 192.0.2.1 → 192.0.2.1, UDP, with a valid checksum.
        let mut grh = behind_zeros([
            0x45, 0, 0, 0x3c, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 192, 0, 2, 1, 192, 0, 2, 1,
        ]);
        let sum: u32 =
            grh[20..].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        let check = !((folded & 0xffff) + (folded >> 16)) as u16;
        grh[30..32].copy_from_slice(&check.to_be_bytes());
        assert!(Grh::from_receive(&grh).unwrap().is_ipv4());
        // Even behind a first byte that reads as IP version 6, a valid checksum says IPv4.
        grh[0] = 0x60;
        let grh = Grh::from_receive(&grh).unwrap();
        assert!(grh.is_ipv4());
        assert_eq!(grh.source_gid().to_string(), "::ffff:192.0.2.1");
    }

    #[test]
    fn an_ipv4_header_without_checksum_is_recognised_by_its_version() {
        // What rxe delivers for a loopback datagram: 20 zero bytes, then an IPv4 header whose
        // checksum was never computed.
        let grh = behind_zeros([
            0x45, 0, 0x04, 0x20, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 192, 0, 2, 1, 192, 0, 2, 7,
        ]);
        let grh = Grh::from_receive(&grh).unwrap();
        assert!(grh.is_ipv4());
        assert_eq!(grh.source_gid().to_string(), "::ffff:192.0.2.1");
        // A first byte of version 6 needs the checksum to be believed.
        let mut with_v6 = *grh.as_bytes();
        with_v6[0] = 0x60;
        assert!(!Grh::from_receive(&with_v6).unwrap().is_ipv4());
    }

    #[test]
    fn a_grh_gives_its_source_gid() {
        let mut grh = [0u8; 40];
        grh[0] = 0x60;
        grh[8..24].copy_from_slice(&"fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        let grh = Grh::from_receive(&grh).unwrap();
        assert!(!grh.is_ipv4());
        assert_eq!(grh.source_gid().to_string(), "fe80::1");
        assert_eq!(Grh::from_receive(&[0; 39]), None);
    }
}
