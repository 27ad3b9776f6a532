//! The checks of every posted work request, as a paranoid NIC would make them before
//! touching memory (see [`Rule`]).

use std::ptr;

use rdma_verbs_sys::bindings::*;

use crate::mw::check_bind;
use crate::registry::{MrInfo, QpInfo, RecvWork, Registry, SendWork};
use crate::rule::{Broken, Rule};

/// Whether `opcode` is an atomic.
pub(crate) fn is_atomic(opcode: ibv_wr_opcode) -> bool {
    matches!(opcode, IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD)
}

/// The live MR an SGE of `pd` names, with its bytes inside it; `LOCAL_WRITE` too when
/// `write`. Zero-length SGEs touch nothing and pass.
pub(crate) fn check_sge(
    reg: &Registry,
    pd: *mut ibv_pd,
    sge: &ibv_sge,
    write: bool,
) -> Result<(), Broken> {
    if sge.length == 0 {
        return Ok(());
    }
    let what = format!("SGE {:#x}+{} lkey {:#x}", sge.addr, sge.length, sge.lkey);
    let Some(mr) = reg.mrs.get(&sge.lkey) else {
        return Err((Rule::SgeOutsideMr, format!("{what}: no live MR has the lkey")));
    };
    if mr.pd != pd {
        return Err((Rule::LkeyOfOtherPd, format!("{what}: the MR is of another PD")));
    }
    if mr.cpu(sge.addr, sge.length.into()).is_none() {
        let range = format!("{:#x}..{:#x}", mr.iova, mr.iova + mr.len as u64);
        return Err((Rule::SgeOutsideMr, format!("{what}: outside the MR's IOVA range {range}")));
    }
    if write && mr.access & IBV_ACCESS_LOCAL_WRITE == 0 {
        return Err((Rule::MissingLocalWrite, format!("{what}: the MR lacks LOCAL_WRITE")));
    }
    Ok(())
}

/// The CPU address of a checked SGE's bytes, if its MR is still live.
pub(crate) fn sge_cpu(reg: &Registry, sge: &ibv_sge) -> Option<*mut u8> {
    reg.mrs.get(&sge.lkey).and_then(|mr: &MrInfo| mr.cpu(sge.addr, sge.length.into()))
}

/// Reads inline data from CPU memory, as a provider copies it at post time: `(addr, len)`
/// chunks, each inside some live MR's CPU range or memory the caller owns, but never inside
/// the IOVA range of an MR registered away from its address (an IOVA is no CPU pointer).
pub(crate) fn read_inline(reg: &Registry, chunks: &[(usize, usize)]) -> Result<Vec<u8>, Broken> {
    let mut bytes = Vec::new();
    for &(addr, len) in chunks.iter().filter(|&&(_, len)| len != 0) {
        let cpu = reg.mrs.values().any(|mr| mr.holds_cpu(addr, len));
        let iova_only = reg.mrs.values().any(|mr| {
            mr.iova != mr.addr as u64
                && (addr as u64) < mr.iova + mr.len as u64
                && mr.iova < addr as u64 + len as u64
        });
        if !cpu && iova_only {
            let detail = format!("{addr:#x}+{len} is an IOVA of a live MR, not CPU memory");
            return Err((Rule::InlineNotCpuMemory, detail));
        }
        let start = bytes.len();
        bytes.resize(start + len, 0);
        // SAFETY: the caller of the post promised `len` readable bytes at `addr` (inline data
        // is read by the CPU at post time); an address that is only an IOVA was refused above.
        unsafe { ptr::copy_nonoverlapping(addr as *const u8, bytes[start..].as_mut_ptr(), len) };
    }
    Ok(bytes)
}

/// Checks a send work request against its QP (`qp` of number `qpn`); `earlier` are the work
/// requests before it in the same post, not yet counted outstanding.
pub(crate) fn check_send(
    reg: &Registry,
    qp: &QpInfo,
    wr: &SendWork,
    earlier: &[SendWork],
) -> Result<(), Broken> {
    let raw = qp.raw();
    let earlier_ids: Vec<u64> = earlier.iter().map(|w| w.wr_id).collect();
    check_wr_id(reg, wr.wr_id, &earlier_ids)?;
    if wr.inline.is_none() && wr.sges.len() > qp.max_send_sge as usize {
        let detail = format!("{} SGEs, max_send_sge {}", wr.sges.len(), qp.max_send_sge);
        return Err((Rule::TooManySges, detail));
    }
    if super::qp::is_datagram(raw.qp_type) {
        match reg.ahs.get(&wr.ah) {
            None => return Err((Rule::MissingAh, format!("AH {:#x} is not live", wr.ah))),
            Some(&pd) if pd != raw.pd => {
                return Err((Rule::AhOfOtherPd, format!("AH {:#x} is of another PD", wr.ah)))
            }
            Some(_) => {}
        }
    }
    if is_atomic(wr.opcode) {
        check_atomic(raw.qp_type, wr)?;
    }
    if wr.opcode == IBV_WR_BIND_MW {
        let Some(bind) = &wr.bind else {
            return Err((Rule::BindOutsideMr, "a bind whose request could not be read".into()));
        };
        check_bind(reg, raw.pd, bind)?;
    }
    let write = wr.opcode == IBV_WR_RDMA_READ || is_atomic(wr.opcode);
    if write && wr.inline.is_some() {
        return Err((
            Rule::InlineReadOrAtomic,
            format!("opcode {} with IBV_SEND_INLINE", wr.opcode),
        ));
    }
    if wr.inline.is_none() {
        for sge in &wr.sges {
            check_sge(reg, raw.pd, sge, write)?;
        }
        let buffers = earlier.iter().filter(|w| w.wr_id & crate::registry::BUFFER_TIER_BIT != 0);
        let earlier = buffers.filter(|w| w.inline.is_none()).flat_map(|w| &w.sges);
        check_buffer_bytes(reg, wr.wr_id, &wr.sges, earlier)?;
    }
    Ok(())
}

/// An atomic's own rules: RC only, one 8-byte SGE, both addresses 8-byte aligned.
fn check_atomic(qp_type: ibv_qp_type, wr: &SendWork) -> Result<(), Broken> {
    if qp_type != IBV_QPT_RC {
        return Err((Rule::AtomicNotRc, format!("QP type {qp_type}")));
    }
    let [sge] = wr.sges[..] else {
        return Err((Rule::AtomicShape, format!("{} SGEs", wr.sges.len())));
    };
    if sge.length != 8 {
        return Err((Rule::AtomicShape, format!("an SGE of {} bytes", sge.length)));
    }
    if !sge.addr.is_multiple_of(8) || !wr.remote_addr.is_multiple_of(8) {
        let detail = format!("local {:#x}, remote {:#x}", sge.addr, wr.remote_addr);
        return Err((Rule::AtomicMisaligned, detail));
    }
    Ok(())
}

/// Checks a receive work request for a queue of `pd` taking at most `max_sge` SGEs.
pub(crate) fn check_recv(
    reg: &Registry,
    pd: *mut ibv_pd,
    max_sge: u32,
    wr: &RecvWork,
    earlier: &[u64],
) -> Result<(), Broken> {
    check_wr_id(reg, wr.wr_id, earlier)?;
    if wr.sges.len() > max_sge as usize {
        let detail = format!("{} SGEs, max_recv_sge {max_sge}", wr.sges.len());
        return Err((Rule::TooManySges, detail));
    }
    wr.sges.iter().try_for_each(|sge| check_sge(reg, pd, sge, true))?;
    check_buffer_bytes(reg, wr.wr_id, &wr.sges, [].iter())
}

/// [`Rule::BufferInFlight`], for a buffer-tier work request: its SGEs against those of the
/// outstanding ones, and the `earlier` SGEs of its own post.
fn check_buffer_bytes<'a>(
    reg: &Registry,
    wr_id: u64,
    sges: &[ibv_sge],
    earlier: impl Iterator<Item = &'a ibv_sge> + Clone,
) -> Result<(), Broken> {
    if wr_id & crate::registry::BUFFER_TIER_BIT == 0 {
        return Ok(());
    }
    let overlap = |a: &ibv_sge, b: &ibv_sge| {
        a.lkey == b.lkey
            && a.addr < b.addr + u64::from(b.length)
            && b.addr < a.addr + u64::from(a.length)
    };
    for sge in sges.iter().filter(|g| g.length != 0) {
        let what = format!("SGE {:#x}+{} lkey {:#x}", sge.addr, sge.length, sge.lkey);
        if let Some(other) = reg.buffer_in_flight(sge) {
            return Err((Rule::BufferInFlight, format!("{what}: wr_id {other:#x} names it")));
        }
        if earlier.clone().any(|e| e.length != 0 && overlap(sge, e)) {
            return Err((
                Rule::BufferInFlight,
                format!("{what}: a WR before it in the post names it"),
            ));
        }
    }
    Ok(())
}

/// [`Rule::WrIdInFlight`].
fn check_wr_id(reg: &Registry, wr_id: u64, earlier: &[u64]) -> Result<(), Broken> {
    if reg.in_flight(wr_id)
        || (wr_id & crate::registry::BUFFER_TIER_BIT != 0 && earlier.contains(&wr_id))
    {
        return Err((Rule::WrIdInFlight, format!("wr_id {wr_id:#x} is outstanding")));
    }
    Ok(())
}
