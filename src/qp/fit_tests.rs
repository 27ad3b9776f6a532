//! The one-comparison check of a post against the exact ones, over every QP shape the mock
//! provider makes and a grid of work requests: a WR whose demand fits a QP's slack must pass
//! every check of `check_send_fully` and, on the extended path, be one the fast batch
//! builds; and the common WRs must fit (or the fast path would serve nobody).

use std::net::Ipv6Addr;

use rdma_verbs_mock::{self as mock, ContextConfig, Mock, Optional};

use super::extended::ExQp;
use super::{HasSendQueue, QpCapabilities, QpInitAttr, QueuePair, Rc, Rts, Uc, Ud};
use crate::wr::{SendFlags, SendWr, Sge, INLINE_BUFS};
use crate::{
    AddressHandle, AddressVector, Context, Endpoint, Gid, LKey, Lid, Mtu, Psn, Qpn, RKey,
    RemoteAddr, ToInitAttr, ToRtrAttr, ToRtsAttr, UdDestination, UdToInitAttr, VerbsPath,
};

/// Which verbs, and which release of rxe's library (whose list setters count wrong before
/// rdma-core 64).
#[derive(Clone, Copy, Debug)]
enum Path {
    Legacy,
    Extended,
    ExtendedRxe44,
}

fn context(mock: &Mock, path: Path) -> Context {
    let (config, lib) = match path {
        Path::Legacy => (ContextConfig::default(), mock::library(Optional::ALL)),
        Path::Extended => (ContextConfig::extended_verbs(), mock::library(Optional::ALL)),
        Path::ExtendedRxe44 => (
            ContextConfig { vendor_id: mock::RXE_VENDOR_ID, ..ContextConfig::extended_verbs() },
            mock::library_with_release(Optional::ALL, "44.0"),
        ),
    };
    let raw = mock.context(config);
    // SAFETY: a fresh context of the mock library, dropped before the mock.
    unsafe { Context::from_raw(lib, raw, mock::DEVICE_NAME.into()) }
}

/// A RoCE peer: index 3 of the mock port's GID table is its RoCE v2 IPv4-mapped entry.
fn peer() -> Endpoint {
    let gid = Gid::from("::ffff:192.0.2.9".parse::<Ipv6Addr>().expect("an IPv6 address"));
    Endpoint { lid: Lid::new(0), qpn: Qpn::new(0x12).unwrap(), psn: Psn::new(1).unwrap(), gid }
}

/// The WR shapes tried: every opcode but binds (which never fit: `fit::SLOW`), 0 to 5 SGEs
/// of a few lengths (one past the 16-bit fields), inline or not, aligned or not, addressed
/// or not.
fn wrs<'a>(sges: &'a [Vec<Sge>], dest: &UdDestination<'a>) -> Vec<SendWr<'a>> {
    let mut wrs = Vec::new();
    for sges in sges {
        for remote in [0x1_0000, 0x1_0004] {
            let remote = RemoteAddr { addr: remote, rkey: RKey::new(9) };
            let build = |opcode: usize| match opcode {
                0 => SendWr::send(1, sges),
                1 => SendWr::send_with_imm(1, sges, 7),
                2 => SendWr::send_with_inv(1, sges, RKey::new(3)),
                3 => SendWr::rdma_write(1, sges, remote),
                4 => SendWr::rdma_write_with_imm(1, sges, remote, 7),
                5 => SendWr::rdma_read(1, sges, remote),
                6 => SendWr::compare_swap(1, sges, remote, 1, 2),
                7 => SendWr::fetch_add(1, sges, remote, 1),
                _ => SendWr::local_inv(1, RKey::new(3)),
            };
            for opcode in 0..9 {
                let inline = SendFlags::SIGNALED | SendFlags::INLINE;
                wrs.extend([
                    build(opcode),
                    build(opcode).flags(inline),
                    build(opcode).to(dest),
                    build(opcode).flags(inline).to(dest),
                ]);
            }
        }
    }
    wrs
}

/// Every WR of `wrs` that fits `qp`'s slack passes the exact checks (and builds on the fast
/// batch); returns how many fit.
fn check_all<T: HasSendQueue>(qp: &QueuePair<'_, Rts, T>, wrs: &[SendWr<'_>]) -> usize {
    let mut fit = 0;
    for wr in wrs {
        if !wr.demand().fits(qp.slack) {
            continue;
        }
        fit += 1;
        if let Err(e) = qp.check_send_fully(wr) {
            panic!("{wr:?} fits {} QP {:?} but fails its check: {e}", T::NAME, qp.caps);
        }
        if let Some(ex) = &qp.ex {
            fast_batch_builds(ex, wr);
        }
    }
    fit
}

/// What the fast batch takes for granted of a WR that fits an extended QP.
fn fast_batch_builds(ex: &ExQp, wr: &SendWr<'_>) {
    let (raw, n) = (wr.as_raw(), wr.num_sge());
    let inline = wr.send_flags().contains(SendFlags::INLINE);
    assert!(ex.builds(raw.opcode), "{wr:?}: no builder");
    assert!(n <= 1 || ex.lists_right(), "{wr:?}: several SGEs where the list setters count wrong");
    assert!(!inline || n <= 1 || ex.has_inline_list(), "{wr:?}: no inline list setter");
    assert!(!inline || n <= INLINE_BUFS, "{wr:?}: more inline buffers than a batch takes");
}

#[test]
fn a_wr_that_fits_the_slack_passes_every_exact_check_and_the_common_ones_fit() {
    let lkey = LKey::new(5);
    // 0 to 5 SGEs of 8 bytes at an aligned address; then (6) one of 8 at a misaligned one,
    // (7) one of 40, (8) one past the 16-bit length field.
    let mut sges: Vec<Vec<Sge>> =
        (0..=5).map(|n| (0..n).map(|i| Sge::new(0x1000 + 8 * i, 8, lkey)).collect()).collect();
    sges.extend([
        vec![Sge::new(0x1004, 8, lkey)],
        vec![Sge::new(0x1000, 40, lkey)],
        vec![Sge::new(0x1000, 70_000, lkey)],
    ]);
    for path in [Path::Legacy, Path::Extended, Path::ExtendedRxe44] {
        let mock = Mock::new();
        let ctx = context(&mock, path);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let ah: AddressHandle<'_> =
            pd.create_ah(&AddressVector::to_endpoint(&peer(), 1, Some(3))).unwrap();
        let dest = UdDestination { ah: &ah, qpn: Qpn::new(0x12).unwrap(), qkey: 7 };
        let wrs = wrs(&sges, &dest);
        let verbs_path = Some(match path {
            Path::Legacy => VerbsPath::Legacy,
            Path::Extended | Path::ExtendedRxe44 => VerbsPath::Extended,
        });
        for (max_send_sge, max_inline_data) in [(1, 0), (2, 16), (4, 64)] {
            let cap = QpCapabilities { max_send_sge, max_inline_data, ..Default::default() };
            let attr = QpInitAttr { cap, verbs_path, ..QpInitAttr::new(&cq) };
            let rtr = ToRtrAttr::to_endpoint(&peer(), 1, Some(3), Mtu::MTU_1024);
            for max_rd_atomic in [0, 1] {
                let rts = ToRtsAttr { max_rd_atomic, ..ToRtsAttr::new(Psn::new(1).unwrap()) };
                let rc = pd.create_qp::<Rc>(&attr).unwrap();
                let rc = rc.into_init(&ToInitAttr::default()).unwrap().into_rtr(&rtr).unwrap();
                let rc = rc.into_rts(&rts).unwrap();
                let fit = check_all(&rc, &wrs);
                // A WRITE or SEND of one SGE, not inline, fits every RC QP; a READ only
                // where `max_rd_atomic` lets it complete.
                let plain =
                    SendWr::rdma_write(1, &sges[1], RemoteAddr { addr: 0, rkey: RKey::new(1) });
                assert!(plain.demand().fits(rc.slack), "{path:?} {:?}", rc.caps);
                let read =
                    SendWr::rdma_read(1, &sges[1], RemoteAddr { addr: 0, rkey: RKey::new(1) });
                assert_eq!(read.demand().fits(rc.slack), max_rd_atomic > 0, "{path:?}");
                assert!(SendWr::send(1, &sges[8]).demand().fits(rc.slack), "any length on RC");
                assert!(fit > 0);
            }
            let uc = pd.create_qp::<Uc>(&attr).unwrap();
            let uc = uc.into_init(&ToInitAttr::default()).unwrap().into_rtr(&rtr).unwrap();
            let uc = uc.into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).unwrap();
            check_all(&uc, &wrs);
            let ud = pd.create_qp::<Ud>(&attr).unwrap();
            let init = UdToInitAttr { port: 1, pkey_index: 0, qkey: 7 };
            let ud = ud.into_init(&init).unwrap().into_rtr().unwrap();
            let ud = ud.into_rts(Psn::new(1).unwrap()).unwrap();
            check_all(&ud, &wrs);
            // An addressed SEND within the path MTU fits a UD QP; unaddressed, or above the
            // MTU, it does not.
            let (small, big) = (&sges[7], &sges[8]);
            assert!(SendWr::send(1, small).to(&dest).demand().fits(ud.slack), "{path:?}");
            assert!(!SendWr::send(1, small).demand().fits(ud.slack));
            assert!(!SendWr::send(1, big).to(&dest).demand().fits(ud.slack));
        }
    }
}
