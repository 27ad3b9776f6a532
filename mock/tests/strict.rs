//! The strict mock's own contract: each forbidden work request is refused and recorded, on
//! each verbs path it can be posted on; loopback work requests execute, moving bytes and
//! producing completions; ERROR flushes.

use std::ffi::c_int;
use std::ptr;

use rdma_verbs_mock::{library, ContextConfig, Mock, Optional, Rule, Violation, GRH_LEN};
use rdma_verbs_sys::bindings::*;
use rdma_verbs_sys::{inline, IbverbsFns};

/// How work requests are posted.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// `ibv_post_send` on a QP of `ibv_create_qp`.
    Legacy,
    /// The `wr_*` members of a QP of `create_qp_ex`.
    Extended,
}

fn fns() -> &'static IbverbsFns {
    &library(Optional::ALL).fns
}

/// A send work request, as either path posts it.
#[derive(Clone, Debug)]
struct Wr {
    wr_id: u64,
    opcode: ibv_wr_opcode,
    flags: u32,
    sges: Vec<ibv_sge>,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    ah: *mut ibv_ah,
    remote_qpn: u32,
}

impl Wr {
    fn new(wr_id: u64, opcode: ibv_wr_opcode, sges: Vec<ibv_sge>) -> Wr {
        Wr {
            wr_id,
            opcode,
            flags: IBV_SEND_SIGNALED,
            sges,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ah: ptr::null_mut(),
            remote_qpn: 0,
        }
    }

    fn remote(self, mr: &Mr, offset: u64) -> Wr {
        Wr { remote_addr: mr.iova + offset, rkey: mr.rkey(), ..self }
    }
}

/// A registered buffer.
struct Mr {
    buf: Vec<u8>,
    mr: *mut ibv_mr,
    iova: u64,
}

impl Mr {
    fn sge(&self, offset: u64, length: u32) -> ibv_sge {
        // SAFETY: a live mock MR.
        ibv_sge { addr: self.iova + offset, length, lkey: unsafe { (*self.mr).lkey } }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: a live mock MR.
        unsafe { (*self.mr).rkey }
    }
}

/// Two QPs of one PD connected to each other (loopback), one CQ for everything.
struct Rig {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    a: *mut ibv_qp,
    b: *mut ibv_qp,
    path: Path,
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: u32) {
    // SAFETY: a live mock QP and a valid struct.
    assert_eq!(unsafe { (fns().ibv_modify_qp)(qp, attr, mask as c_int) }, 0, "mask {mask:#x}");
}

impl Rig {
    fn new(mock: &Mock, path: Path, qp_type: ibv_qp_type) -> Rig {
        let config = match path {
            Path::Legacy => ContextConfig::default(),
            Path::Extended => ContextConfig::extended_verbs(),
        };
        let ctx = mock.context(config).as_ptr();
        // SAFETY: a live mock context.
        let pd = unsafe { (fns().ibv_alloc_pd)(ctx) };
        let null = ptr::null_mut();
        // SAFETY: as above.
        let cq = unsafe { (fns().ibv_create_cq)(ctx, 64, null, null.cast(), 0) };
        let mut rig = Rig { ctx, pd, cq, a: null.cast(), b: null.cast(), path };
        rig.a = rig.qp(qp_type, ptr::null_mut());
        rig.b = rig.qp(qp_type, ptr::null_mut());
        rig.connect(rig.a, rig.b);
        rig.connect(rig.b, rig.a);
        rig
    }

    fn qp(&self, qp_type: ibv_qp_type, srq: *mut ibv_srq) -> *mut ibv_qp {
        let cap = ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            ..Default::default()
        };
        let mut attr = ibv_qp_init_attr_ex {
            send_cq: self.cq,
            recv_cq: self.cq,
            srq,
            cap,
            qp_type,
            // With send ops: a PD alone is the shortcut to the legacy ibv_create_qp.
            comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            send_ops_flags: u64::from(
                IBV_QP_EX_WITH_SEND
                    | IBV_QP_EX_WITH_RDMA_WRITE
                    | IBV_QP_EX_WITH_RDMA_READ
                    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
            ),
            pd: self.pd,
            ..Default::default()
        };
        let qp = match self.path {
            // SAFETY: a live PD and CQ; the legacy struct is the extended one's prefix.
            Path::Legacy => unsafe { (fns().ibv_create_qp)(self.pd, (&raw mut attr).cast()) },
            // SAFETY: a live context, PD and CQ.
            Path::Extended => unsafe { inline::ibv_create_qp_ex(fns(), self.ctx, &mut attr) },
        };
        assert!(!qp.is_null());
        qp
    }

    /// RESET → INIT → RTR (towards `peer`) → RTS, with the masks `ibv_modify_qp(3)` wants.
    fn connect(&self, qp: *mut ibv_qp, peer: *mut ibv_qp) {
        // SAFETY: live mock QPs.
        let (qp_type, dest) = unsafe { ((*qp).qp_type, (*peer).qp_num) };
        let mut attr = ibv_qp_attr { qp_state: IBV_QPS_INIT, port_num: 1, ..Default::default() };
        attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        let base = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        let ud = qp_type == IBV_QPT_UD;
        modify(qp, &mut attr, base | if ud { IBV_QP_QKEY } else { IBV_QP_ACCESS_FLAGS });
        attr.qp_state = IBV_QPS_RTR;
        attr.dest_qp_num = dest;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = 1;
        attr.ah_attr.grh.sgid_index = 1;
        let uc_rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        let rc_rtr = uc_rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        modify(qp, &mut attr, [rc_rtr, uc_rtr, IBV_QP_STATE][qp_type as usize - 2]);
        attr.qp_state = IBV_QPS_RTS;
        let rc_rts = IBV_QP_STATE
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_TIMEOUT;
        let rts = if qp_type == IBV_QPT_RC { rc_rts } else { IBV_QP_STATE | IBV_QP_SQ_PSN };
        modify(qp, &mut attr, rts);
    }

    fn register_on(&self, pd: *mut ibv_pd, len: usize, access: u32, iova: Option<u64>) -> Mr {
        let mut buf = vec![0u8; len];
        let addr = buf.as_mut_ptr().cast();
        let mr = match iova {
            // SAFETY: a live PD and a buffer of `len` bytes that outlives the MR.
            None => unsafe { (fns().ibv_reg_mr)(pd, addr, len, access as c_int) },
            // SAFETY: as above.
            Some(iova) => unsafe { (fns().ibv_reg_mr_iova2.unwrap())(pd, addr, len, iova, access) },
        };
        assert!(!mr.is_null());
        Mr { iova: iova.unwrap_or(addr as u64), buf, mr }
    }

    fn register(&self, len: usize, access: u32) -> Mr {
        self.register_on(self.pd, len, access, None)
    }

    /// Posts `wrs` as one list (legacy) or one batch (extended): the return code.
    fn post(&self, qp: *mut ibv_qp, wrs: &[Wr]) -> c_int {
        match self.path {
            Path::Legacy => post_legacy(qp, wrs),
            Path::Extended => post_extended(qp, wrs),
        }
    }

    fn post_recv(&self, qp: *mut ibv_qp, wr_id: u64, sges: &[ibv_sge]) -> c_int {
        let mut sges = sges.to_vec();
        let mut wr = ibv_recv_wr {
            wr_id,
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as c_int,
            ..Default::default()
        };
        let mut bad = ptr::null_mut();
        // SAFETY: a live mock QP and a valid one-WR list.
        unsafe { inline::ibv_post_recv(qp, &mut wr, &mut bad) }
    }

    fn poll(&self) -> Vec<ibv_wc> {
        let mut wc = [ibv_wc::default(); 16];
        // SAFETY: a live CQ and 16 writable entries.
        let n = unsafe { inline::ibv_poll_cq(self.cq, 16, wc.as_mut_ptr()) };
        wc[..n as usize].to_vec()
    }
}

fn post_legacy(qp: *mut ibv_qp, wrs: &[Wr]) -> c_int {
    let mut sges: Vec<Vec<ibv_sge>> = wrs.iter().map(|w| w.sges.clone()).collect();
    let mut raw: Vec<ibv_send_wr> = wrs
        .iter()
        .zip(&mut sges)
        .map(|(w, sges)| {
            let mut r = ibv_send_wr {
                wr_id: w.wr_id,
                sg_list: sges.as_mut_ptr(),
                num_sge: sges.len() as c_int,
                opcode: w.opcode,
                send_flags: w.flags,
                ..Default::default()
            };
            if w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD {
                r.wr.atomic = ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr: w.remote_addr,
                    compare_add: w.compare_add,
                    swap: w.swap,
                    rkey: w.rkey,
                };
            } else if !w.ah.is_null() || w.remote_qpn != 0 {
                r.wr.ud = ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
                    ah: w.ah,
                    remote_qpn: w.remote_qpn,
                    remote_qkey: 0,
                };
            } else {
                r.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                    remote_addr: w.remote_addr,
                    rkey: w.rkey,
                };
            }
            r
        })
        .collect();
    for i in 1..raw.len() {
        raw[i - 1].next = &mut raw[i];
    }
    let mut bad = ptr::null_mut();
    // SAFETY: a live mock QP and a valid list.
    let ret = unsafe { inline::ibv_post_send(qp, raw.as_mut_ptr(), &mut bad) };
    if ret != 0 {
        assert!(!bad.is_null(), "bad_wr is set on failure");
    }
    ret
}

fn post_extended(qp: *mut ibv_qp, wrs: &[Wr]) -> c_int {
    // SAFETY: a QP of create_qp_ex.
    let qpx = unsafe { inline::ibv_qp_to_qp_ex(fns(), qp) };
    // SAFETY: a live extended QP: every member is set by the mock; the SGEs and inline data
    // outlive the calls.
    unsafe {
        let x = &mut *qpx;
        (x.wr_start.unwrap())(qpx);
        for w in wrs {
            x.wr_id = w.wr_id;
            x.wr_flags = w.flags;
            match w.opcode {
                IBV_WR_SEND => (x.wr_send.unwrap())(qpx),
                IBV_WR_RDMA_WRITE => (x.wr_rdma_write.unwrap())(qpx, w.rkey, w.remote_addr),
                IBV_WR_RDMA_READ => (x.wr_rdma_read.unwrap())(qpx, w.rkey, w.remote_addr),
                IBV_WR_ATOMIC_FETCH_AND_ADD => {
                    (x.wr_atomic_fetch_add.unwrap())(qpx, w.rkey, w.remote_addr, w.compare_add)
                }
                IBV_WR_ATOMIC_CMP_AND_SWP => (x.wr_atomic_cmp_swp.unwrap())(
                    qpx,
                    w.rkey,
                    w.remote_addr,
                    w.compare_add,
                    w.swap,
                ),
                other => panic!("opcode {other} not in this test's extended poster"),
            }
            if !w.ah.is_null() || w.remote_qpn != 0 || (*qp).qp_type == IBV_QPT_UD {
                (x.wr_set_ud_addr.unwrap())(qpx, w.ah, w.remote_qpn, 0);
            }
            if w.flags & IBV_SEND_INLINE != 0 {
                let bufs: Vec<ibv_data_buf> = w
                    .sges
                    .iter()
                    .map(|s| ibv_data_buf { addr: s.addr as *mut _, length: s.length as usize })
                    .collect();
                (x.wr_set_inline_data_list.unwrap())(qpx, bufs.len(), bufs.as_ptr());
            } else {
                (x.wr_set_sge_list.unwrap())(qpx, w.sges.len(), w.sges.as_ptr());
            }
        }
        (x.wr_complete.unwrap())(qpx)
    }
}

const LOCAL: u32 = IBV_ACCESS_LOCAL_WRITE;
const REMOTE: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// Asserts the only violation recorded since the last call broke `rule`.
#[track_caller]
fn assert_violation(mock: &Mock, rule: Rule, case: &str) {
    let got: Vec<Violation> = mock.take_violations();
    assert!(
        matches!(&got[..], [v] if v.rule == rule),
        "{case}: expected one {rule:?}, got {}",
        got.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    );
}

/// A forbidden send: the QP type it is posted on and how the work request is made.
type Case = (&'static str, ibv_qp_type, Rule, fn(&Rig) -> (Vec<Wr>, Vec<Mr>));

fn forbidden_sends() -> Vec<Case> {
    vec![
        ("SGE outside any MR", IBV_QPT_RC, Rule::SgeOutsideMr, |r| {
            let mr = r.register(64, LOCAL);
            let mut sge = mr.sge(32, 64);
            sge.length = 64;
            (vec![Wr::new(1, IBV_WR_SEND, vec![sge])], vec![mr])
        }),
        ("lkey of another PD's MR", IBV_QPT_RC, Rule::LkeyOfOtherPd, |r| {
            // SAFETY: a live mock context.
            let other = unsafe { (fns().ibv_alloc_pd)(r.ctx) };
            let mr = r.register_on(other, 64, LOCAL, None);
            (vec![Wr::new(2, IBV_WR_SEND, vec![mr.sge(0, 64)])], vec![mr])
        }),
        ("READ into a region without LOCAL_WRITE", IBV_QPT_RC, Rule::MissingLocalWrite, |r| {
            let (local, remote) = (r.register(64, 0), r.register(64, REMOTE));
            let wr = Wr::new(3, IBV_WR_RDMA_READ, vec![local.sge(0, 64)]).remote(&remote, 0);
            (vec![wr], vec![local, remote])
        }),
        ("inline at an IOVA that is not CPU memory", IBV_QPT_RC, Rule::InlineNotCpuMemory, |r| {
            let mr = r.register_on(r.pd, 64, LOCAL, Some(0x10_0000));
            let wr = Wr { flags: IBV_SEND_INLINE, ..Wr::new(4, IBV_WR_SEND, vec![mr.sge(0, 16)]) };
            (vec![wr], vec![mr])
        }),
        ("inline RDMA READ", IBV_QPT_RC, Rule::InlineReadOrAtomic, |r| {
            let (local, remote) = (r.register(64, LOCAL), r.register(64, REMOTE));
            let read = Wr::new(10, IBV_WR_RDMA_READ, vec![local.sge(0, 16)]).remote(&remote, 0);
            (vec![Wr { flags: IBV_SEND_INLINE, ..read }], vec![local, remote])
        }),
        ("UD work request with a NULL AH", IBV_QPT_UD, Rule::MissingAh, |r| {
            let mr = r.register(64, LOCAL);
            let wr = Wr { remote_qpn: 0x77, ..Wr::new(5, IBV_WR_SEND, vec![mr.sge(0, 8)]) };
            (vec![wr], vec![mr])
        }),
        ("atomic on UC", IBV_QPT_UC, Rule::AtomicNotRc, |r| {
            let mr = r.register(64, REMOTE);
            let wr = Wr::new(6, IBV_WR_ATOMIC_FETCH_AND_ADD, vec![mr.sge(0, 8)]).remote(&mr, 8);
            (vec![wr], vec![mr])
        }),
        ("misaligned atomic", IBV_QPT_RC, Rule::AtomicMisaligned, |r| {
            let mr = r.register(64, REMOTE);
            let wr = Wr::new(7, IBV_WR_ATOMIC_CMP_AND_SWP, vec![mr.sge(0, 8)]).remote(&mr, 4);
            (vec![wr], vec![mr])
        }),
        ("buffer-tier wr_id twice", IBV_QPT_RC, Rule::WrIdInFlight, |r| {
            let mr = r.register(64, LOCAL);
            let id = 1 << 63 | 9;
            let wr = Wr::new(id, IBV_WR_SEND, vec![mr.sge(0, 8)]);
            (vec![wr.clone(), wr], vec![mr])
        }),
        ("buffer-tier SGEs over the same bytes", IBV_QPT_RC, Rule::BufferInFlight, |r| {
            let mr = r.register(64, LOCAL);
            let first = Wr::new(1 << 63 | 10, IBV_WR_SEND, vec![mr.sge(0, 16)]);
            (vec![first, Wr::new(1 << 63 | 11, IBV_WR_SEND, vec![mr.sge(8, 16)])], vec![mr])
        }),
    ]
}

#[test]
fn every_forbidden_send_is_refused_and_recorded_on_both_paths() {
    for path in [Path::Legacy, Path::Extended] {
        for (case, qp_type, rule, make) in forbidden_sends() {
            let mock = Mock::new();
            let rig = Rig::new(&mock, path, qp_type);
            let (wrs, _mrs) = make(&rig);
            let ret = rig.post(rig.a, &wrs);
            assert_eq!(ret, libc::EINVAL, "{case} on {path:?}");
            assert_violation(&mock, rule, &format!("{case} on {path:?}"));
        }
    }
}

#[test]
fn a_chain_longer_than_declared_is_refused_and_nothing_is_posted() {
    for path in [Path::Legacy, Path::Extended] {
        let mock = Mock::new();
        let rig = Rig::new(&mock, path, IBV_QPT_RC);
        let mr = rig.register(64, LOCAL);
        mock.expect_chain_len(1);
        let wr = Wr::new(1, IBV_WR_SEND, vec![mr.sge(0, 8)]);
        assert_eq!(rig.post(rig.a, &[wr.clone(), wr]), libc::EINVAL, "{path:?}");
        assert_violation(&mock, Rule::ChainLength, &format!("{path:?}"));
        assert_eq!(mock.outstanding(rig.a), 0, "{path:?}");
    }
}

#[test]
fn an_allowed_rule_is_recorded_but_the_post_succeeds_and_completes_with_an_error() {
    let mock = Mock::new();
    mock.allow(Rule::SgeOutsideMr);
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    let sge = ibv_sge { addr: 0xdead_0000, length: 8, lkey: 0x4242 };
    assert_eq!(rig.post(rig.a, &[Wr::new(1, IBV_WR_SEND, vec![sge])]), 0);
    assert_violation(&mock, Rule::SgeOutsideMr, "allowed");
    let wc = rig.poll();
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, IBV_WC_LOC_PROT_ERR)]
    );
}

#[test]
fn a_receive_into_a_deregistered_mr_is_a_violation_when_the_send_executes() {
    let mock = Mock::new();
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    let (src, dst) = (rig.register(64, LOCAL), rig.register(64, LOCAL));
    assert_eq!(rig.post_recv(rig.b, 10, &[dst.sge(0, 64)]), 0);
    // SAFETY: a live MR, deregistered once (the buffer itself stays allocated).
    assert_eq!(unsafe { (fns().ibv_dereg_mr)(dst.mr) }, 0);
    assert_eq!(rig.post(rig.a, &[Wr::new(11, IBV_WR_SEND, vec![src.sge(0, 8)])]), 0);
    assert_violation(&mock, Rule::MrGoneBeforeExecution, "receive into a deregistered MR");
    assert_eq!(dst.buf, [0; 64], "nothing was written");
}

/// Fills `mr`'s buffer with `byte`.
fn fill(mr: &mut Mr, byte: u8) {
    mr.buf.fill(byte);
}

#[test]
fn loopback_rc_send_write_read_and_atomics_move_the_bytes_on_both_paths() {
    for path in [Path::Legacy, Path::Extended] {
        let mock = Mock::new();
        let rig = Rig::new(&mock, path, IBV_QPT_RC);
        let (mut src, dst) = (rig.register(64, REMOTE), rig.register(64, REMOTE));
        fill(&mut src, 0xab);
        src.buf[48..].fill(0);
        assert_eq!(rig.post_recv(rig.b, 20, &[dst.sge(0, 32)]), 0);
        let send = Wr::new(21, IBV_WR_SEND, vec![src.sge(0, 16)]);
        let write = Wr::new(22, IBV_WR_RDMA_WRITE, vec![src.sge(0, 8)]).remote(&dst, 40);
        let read = Wr::new(23, IBV_WR_RDMA_READ, vec![src.sge(48, 8)]).remote(&dst, 0);
        let faa =
            Wr { compare_add: 5, ..Wr::new(24, IBV_WR_ATOMIC_FETCH_AND_ADD, vec![src.sge(56, 8)]) }
                .remote(&dst, 40);
        assert_eq!(rig.post(rig.a, &[send, write, read, faa]), 0, "{path:?}");
        let got: Vec<_> =
            rig.poll().iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect();
        assert_eq!(
            got,
            [
                (20, IBV_WC_SUCCESS, IBV_WC_RECV, 16),
                (21, IBV_WC_SUCCESS, IBV_WC_SEND, 16),
                (22, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 8),
                (23, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 8),
                (24, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, 8),
            ],
            "{path:?}"
        );
        assert_eq!(&dst.buf[..16], &[0xab; 16], "SEND");
        assert_eq!(&dst.buf[16..40], &[0; 24], "SEND and WRITE wrote only their bytes");
        let old = u64::from_ne_bytes([0xab; 8]);
        assert_eq!(dst.buf[40..48], old.wrapping_add(5).to_ne_bytes(), "WRITE then FETCH_ADD");
        assert_eq!(&src.buf[48..56], &[0xab; 8], "READ brought back the SEND's bytes");
        assert_eq!(src.buf[56..64], old.to_ne_bytes(), "FETCH_ADD returned the old value");
        assert_eq!(mock.outstanding(rig.a) + mock.outstanding(rig.b), 0, "all polled");
    }
}

#[test]
fn a_loopback_ud_send_lands_after_the_grh_area_naming_its_source() {
    for path in [Path::Legacy, Path::Extended] {
        let mock = Mock::new();
        let rig = Rig::new(&mock, path, IBV_QPT_UD);
        let mut attr = ibv_ah_attr { is_global: 1, port_num: 1, ..Default::default() };
        attr.grh.sgid_index = 1;
        // SAFETY: a live PD and a valid struct.
        let ah = unsafe { (fns().ibv_create_ah)(rig.pd, &mut attr) };
        assert!(!ah.is_null());
        let (mut src, dst) = (rig.register(64, LOCAL), rig.register(64, LOCAL));
        fill(&mut src, 0x5a);
        assert_eq!(rig.post_recv(rig.b, 30, &[dst.sge(0, 64)]), 0);
        // SAFETY: a live mock QP.
        let remote_qpn = unsafe { (*rig.b).qp_num };
        let send = Wr { ah, remote_qpn, ..Wr::new(31, IBV_WR_SEND, vec![src.sge(0, 8)]) };
        assert_eq!(rig.post(rig.a, &[send]), 0, "{path:?}");
        let wc = rig.poll();
        // SAFETY: a live mock QP.
        let src_qp = unsafe { (*rig.a).qp_num };
        let recv = wc.iter().find(|w| w.wr_id == 30).expect("a receive completion");
        let len = (GRH_LEN + 8) as u32;
        assert_eq!((recv.status, recv.byte_len, recv.src_qp), (IBV_WC_SUCCESS, len, src_qp));
        assert_eq!(recv.wc_flags & IBV_WC_GRH, IBV_WC_GRH);
        assert_eq!(&dst.buf[GRH_LEN..GRH_LEN + 8], &[0x5a; 8]);
    }
}

#[test]
fn an_rc_send_waits_for_a_receive_and_error_flushes_everything_outstanding() {
    let mock = Mock::new();
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    let mr = rig.register(64, LOCAL);
    let unsignaled = Wr { flags: 0, ..Wr::new(41, IBV_WR_SEND, vec![mr.sge(0, 8)]) };
    assert_eq!(rig.post(rig.a, &[Wr::new(40, IBV_WR_SEND, vec![mr.sge(0, 8)]), unsignaled]), 0);
    assert_eq!(rig.poll().len(), 0, "no receive posted: the SENDs wait");
    assert_eq!(rig.post_recv(rig.a, 42, &[mr.sge(8, 8)]), 0);
    assert_eq!(mock.outstanding(rig.a), 3);
    let mut attr = ibv_qp_attr { qp_state: IBV_QPS_ERR, ..Default::default() };
    modify(rig.a, &mut attr, IBV_QP_STATE);
    let got: Vec<_> = rig.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    let flushed = IBV_WC_WR_FLUSH_ERR;
    assert_eq!(got, [(40, flushed), (41, flushed), (42, flushed)]);
    assert_eq!(mock.outstanding(rig.a), 0);
}

#[test]
fn an_injected_wr_failure_completes_with_its_status_and_flushes_the_rest() {
    let mock = Mock::new();
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    let mr = rig.register(64, LOCAL);
    mock.fail_next_wr(rig.a, IBV_WC_RETRY_EXC_ERR);
    let wrs = [40, 41].map(|id| Wr::new(id, IBV_WR_SEND, vec![mr.sge(0, 8)]));
    assert_eq!(rig.post(rig.a, &wrs), 0);
    let got: Vec<_> = rig.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(40, IBV_WC_RETRY_EXC_ERR), (41, IBV_WC_WR_FLUSH_ERR)]);
    // SAFETY: a live mock QP.
    assert_eq!(unsafe { (*rig.a).state }, IBV_QPS_ERR);
}

#[test]
fn an_rdma_write_without_remote_write_is_a_remote_access_error_on_both_qps() {
    let mock = Mock::new();
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    let (src, dst) = (rig.register(64, LOCAL), rig.register(64, LOCAL));
    let write = Wr::new(50, IBV_WR_RDMA_WRITE, vec![src.sge(0, 8)]).remote(&dst, 0);
    assert_eq!(rig.post(rig.a, &[write]), 0);
    let got: Vec<_> = rig.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(50, IBV_WC_REM_ACCESS_ERR)]);
    // SAFETY: live mock QPs.
    assert_eq!(unsafe { ((*rig.a).state, (*rig.b).state) }, (IBV_QPS_ERR, IBV_QPS_ERR));
}

/// An SRQ of `pd` taking 4 receives of one SGE.
fn srq_on(pd: *mut ibv_pd) -> *mut ibv_srq {
    let mut init = ibv_srq_init_attr::default();
    init.attr.max_wr = 4;
    init.attr.max_sge = 1;
    // SAFETY: a live PD and a valid struct.
    let srq = unsafe { (fns().ibv_create_srq)(pd, &mut init) };
    assert!(!srq.is_null());
    srq
}

/// Posts a receive of `sge` with `wr_id` on `srq`: the return code.
fn post_srq_recv(srq: *mut ibv_srq, wr_id: u64, mut sge: ibv_sge) -> c_int {
    let mut wr = ibv_recv_wr { wr_id, sg_list: &mut sge, num_sge: 1, ..Default::default() };
    let mut bad = ptr::null_mut();
    // SAFETY: a live mock SRQ and a valid one-WR list.
    unsafe { inline::ibv_post_srq_recv(srq, &mut wr, &mut bad) }
}

/// QP `c` of `rig`'s PD on `srq`, and `rig.a` sending to it; their QP numbers.
fn to_srq_qp(rig: &Rig, srq: *mut ibv_srq) -> (*mut ibv_qp, u32, u32) {
    let c = rig.qp(IBV_QPT_RC, srq);
    rig.connect(c, rig.a);
    let mut attr = ibv_qp_attr { qp_state: IBV_QPS_RESET, ..Default::default() };
    modify(rig.a, &mut attr, IBV_QP_STATE);
    rig.connect(rig.a, c);
    // SAFETY: live mock QPs.
    let (qa, qc) = unsafe { ((*rig.a).qp_num, (*c).qp_num) };
    (c, qa, qc)
}

#[test]
fn a_qp_of_an_srq_takes_its_receives_from_it() {
    let mock = Mock::new();
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    let srq = srq_on(rig.pd);
    let (_, qa, qc) = to_srq_qp(&rig, srq);
    let (mut src, dst) = (rig.register(64, LOCAL), rig.register(64, LOCAL));
    fill(&mut src, 7);
    assert_eq!(post_srq_recv(srq, 60, dst.sge(0, 64)), 0);
    assert_eq!(rig.post(rig.a, &[Wr::new(61, IBV_WR_SEND, vec![src.sge(0, 4)])]), 0);
    let got: Vec<_> = rig.poll().iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
    assert_eq!(got, [(60, IBV_WC_SUCCESS, qc), (61, IBV_WC_SUCCESS, qa)]);
    assert_eq!(&dst.buf[..4], &[7; 4]);
}

#[test]
fn a_receive_of_an_srq_of_another_pd_fails_at_the_qp_and_both_qps_go_to_error() {
    let mock = Mock::new();
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    // SAFETY: a live mock context.
    let other = unsafe { (fns().ibv_alloc_pd)(rig.ctx) };
    let srq = srq_on(other);
    let (c, qa, qc) = to_srq_qp(&rig, srq);
    // The receive is right for the SRQ (an MR of its PD), so the post takes it...
    let (src, dst) = (rig.register(64, LOCAL), rig.register_on(other, 64, LOCAL, None));
    assert_eq!(post_srq_recv(srq, 70, dst.sge(0, 64)), 0);
    assert_eq!(rig.post(rig.a, &[Wr::new(71, IBV_WR_SEND, vec![src.sge(0, 4)])]), 0);
    // ...but the message arrives at a QP of another PD, which its SGE is checked against.
    let got: Vec<_> = rig.poll().iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
    assert_eq!(got, [(70, IBV_WC_LOC_QP_OP_ERR, qc), (71, IBV_WC_REM_OP_ERR, qa)]);
    // SAFETY: live mock QPs.
    assert_eq!(unsafe { ((*rig.a).state, (*c).state) }, (IBV_QPS_ERR, IBV_QPS_ERR));
    assert_eq!(&dst.buf[..4], &[0; 4], "nothing written");
    assert_eq!(mock.take_violations(), []);
}

/// A type-1 bind (the `bind_mw` op) of `len` bytes at IOVA `addr` of `mr` with `rights`.
fn bind_type1(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mr: &Mr,
    addr: u64,
    len: u64,
    rights: u32,
) -> c_int {
    let mut bind = ibv_mw_bind {
        wr_id: 77,
        send_flags: IBV_SEND_SIGNALED,
        bind_info: ibv_mw_bind_info { mr: mr.mr, addr, length: len, mw_access_flags: rights },
    };
    // SAFETY: a live mock QP and window and a valid bind struct.
    unsafe { inline::ibv_bind_mw(qp, mw, &mut bind) }
}

#[test]
fn a_window_bound_outside_its_mr_is_a_violation_and_a_bound_one_carries_peers_to_it() {
    let mock = Mock::new();
    let rig = Rig::new(&mock, Path::Legacy, IBV_QPT_RC);
    let target = rig.register(256, REMOTE | IBV_ACCESS_MW_BIND);
    let local = rig.register(64, LOCAL);
    // SAFETY: a live mock PD.
    let mw = unsafe { inline::ibv_alloc_mw(rig.pd, IBV_MW_TYPE_1) };
    assert!(!mw.is_null());

    let past_end = bind_type1(rig.b, mw, &target, target.iova + 200, 100, IBV_ACCESS_REMOTE_WRITE);
    assert_eq!(past_end, libc::EINVAL);
    assert_violation(&mock, Rule::BindOutsideMr, "a window past its MR's end");

    assert_eq!(bind_type1(rig.b, mw, &target, target.iova + 64, 64, IBV_ACCESS_REMOTE_WRITE), 0);
    assert_eq!(rig.poll().iter().map(|wc| (wc.wr_id, wc.status)).collect::<Vec<_>>(), [(77, 0)]);
    // SAFETY: a live mock window: the bind gave it its next rkey.
    let rkey = unsafe { (*mw).rkey };
    let mut src = local;
    src.buf[..8].copy_from_slice(b"windowed");
    let write = Wr {
        remote_addr: target.iova + 64,
        rkey,
        ..Wr::new(5, IBV_WR_RDMA_WRITE, vec![src.sge(0, 8)])
    };
    assert_eq!(rig.post(rig.a, &[write]), 0);
    assert_eq!(rig.poll().iter().map(|wc| (wc.wr_id, wc.status)).collect::<Vec<_>>(), [(5, 0)]);
    assert_eq!(&target.buf[64..72], b"windowed");
    // Outside the window (inside the MR): a remote access error, nothing written.
    let outside =
        Wr { remote_addr: target.iova, rkey, ..Wr::new(6, IBV_WR_RDMA_WRITE, vec![src.sge(0, 8)]) };
    assert_eq!(rig.post(rig.a, &[outside]), 0);
    let statuses: Vec<_> = rig.poll().iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(statuses, [(6, IBV_WC_REM_ACCESS_ERR)]);
    assert_eq!(target.buf[..8], [0; 8]);
    // As rxe: the MR cannot go while the window is bound to it.
    // SAFETY: a live mock MR.
    assert_eq!(unsafe { (fns().ibv_dereg_mr)(target.mr) }, libc::EINVAL);
    // SAFETY: a live mock window, freed once.
    assert_eq!(unsafe { inline::ibv_dealloc_mw(mw) }, 0);
    assert!(mock.take_violations().is_empty());
}
