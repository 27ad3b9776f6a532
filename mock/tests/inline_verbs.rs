//! The inline verbs' routing, run against the mock; then the mock's own contract.

use std::ffi::c_int;
use std::io;
use std::mem::{offset_of, size_of};
use std::ptr;

use rdma_verbs_mock::*;
use rdma_verbs_sys::bindings::*;
use rdma_verbs_sys::{inline, IbverbsFns};

fn errno() -> Option<i32> {
    io::Error::last_os_error().raw_os_error()
}

/// A port attribute struct with every byte 0xff, to see what a query leaves untouched.
fn poisoned_port_attr() -> ibv_port_attr {
    let mut attr = ibv_port_attr::default();
    // SAFETY: every field is an integer, so any bytes are a valid value.
    unsafe { ptr::write_bytes(&mut attr, 0xff, 1) };
    attr
}

/// A PD, a CQ (16 entries) and an RC QP of a new context of `mock` shaped by `config`, made
/// through the mock's verbs.
fn rc_qp(
    fns: &IbverbsFns,
    mock: &Mock,
    config: ContextConfig,
) -> (*mut ibv_pd, *mut ibv_cq, *mut ibv_qp) {
    let ctx = mock.context(config);
    // SAFETY: a live mock context.
    let pd = unsafe { (fns.ibv_alloc_pd)(ctx.as_ptr()) };
    let null = ptr::null_mut();
    // SAFETY: as above; no channel, no user context.
    let cq = unsafe { (fns.ibv_create_cq)(ctx.as_ptr(), 16, null, null.cast(), 0) };
    let mut init = ibv_qp_init_attr {
        send_cq: cq,
        recv_cq: cq,
        cap: ibv_qp_cap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..Default::default()
        },
        qp_type: IBV_QPT_RC,
        ..Default::default()
    };
    // SAFETY: a live PD and CQ; `init` is valid and exclusive.
    let qp = unsafe { (fns.ibv_create_qp)(pd, &mut init) };
    assert!(!pd.is_null() && !cq.is_null() && !qp.is_null());
    (pd, cq, qp)
}

#[test]
fn query_port_takes_the_extended_op_with_this_builds_struct_size() {
    let mock = Mock::new();
    let ctx = mock.context(ContextConfig::default());
    let mut attr = poisoned_port_attr();
    // SAFETY: a live mock context of the table's library; `attr` is writable.
    let ret = unsafe { inline::ibv_query_port(&fns(Optional::ALL), ctx.as_ptr(), 1, &mut attr) };
    assert_eq!(ret, 0);
    let calls = mock.take_calls();
    assert_eq!(calls, [Call::QueryPortOp { port: 1, attr_len: size_of::<ibv_port_attr>() }]);
    assert_eq!(format!("{attr:?}"), format!("{:?}", port_attr()));
}

#[test]
fn query_port_falls_back_to_the_compat_symbol_into_a_zeroed_struct() {
    // The op is set in every case: only the guard keeps the inline from calling it.
    let distance = size_of::<verbs_context>() - offset_of!(verbs_context, query_port);
    let full = ContextConfig::default();
    let cases = [
        ("sz exactly covers the op", ContextConfig { sz: distance, ..full }, true),
        ("sz one byte short of the op", ContextConfig { sz: distance - 1, ..full }, false),
        (
            "sz of a verbs_context without ops",
            ContextConfig { sz: size_of::<ibv_context>() + 8, ..full },
            false,
        ),
        ("abi_compat not extended", ContextConfig { extended: false, ..full }, false),
        ("NULL query_port op", ContextConfig { query_port: false, ..full }, false),
    ];
    let mock = Mock::new();
    let fns = fns(Optional::ALL);
    for (case, config, extended) in cases {
        let ctx = mock.context(config);
        let mut attr = poisoned_port_attr();
        // SAFETY: a live mock context of the table's library; `attr` is writable.
        let ret = unsafe { inline::ibv_query_port(&fns, ctx.as_ptr(), 1, &mut attr) };
        assert_eq!(ret, 0, "{case}");
        let mut expected = port_attr();
        if extended {
            let attr_len = size_of::<ibv_port_attr>();
            assert_eq!(mock.take_calls(), [Call::QueryPortOp { port: 1, attr_len }], "{case}");
        } else {
            assert_eq!(mock.take_calls(), [Call::QueryPortCompat { port: 1 }], "{case}");
            // The compat symbol fills 48 bytes; the rest must have been zeroed, not left.
            expected.port_cap_flags2 = 0;
        }
        assert_eq!(format!("{attr:?}"), format!("{expected:?}"), "{case}");
    }
}

#[test]
fn query_port_reports_the_errno_of_either_path() {
    let mock = Mock::new();
    let fns = fns(Optional::ALL);
    for (config, verb) in [
        (ContextConfig::default(), Verb::QueryPortOp),
        (ContextConfig { extended: false, ..Default::default() }, Verb::QueryPortCompat),
    ] {
        let ctx = mock.context(config);
        mock.fail(verb, libc::ENOMEM);
        let mut attr = ibv_port_attr::default();
        // SAFETY: a live mock context of the table's library; `attr` is writable.
        let ret = unsafe { inline::ibv_query_port(&fns, ctx.as_ptr(), 1, &mut attr) };
        assert_eq!(ret, libc::ENOMEM, "{verb:?}");
        // SAFETY: as above; the mock device has no port 2.
        let ret = unsafe { inline::ibv_query_port(&fns, ctx.as_ptr(), 2, &mut attr) };
        assert_eq!(ret, libc::EINVAL, "{verb:?}");
    }
}

#[test]
fn reg_mr_prefers_iova2_at_the_buffer_address_else_strips_optional_access_bits() {
    let mock = Mock::new();
    let ctx = mock.context(ContextConfig::default());
    let mut buf = [0u8; 64];
    let addr = buf.as_mut_ptr();
    // Two optional bits (the first and last of the range) and two ordinary ones.
    let ordinary = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    let access = ordinary | IBV_ACCESS_RELAXED_ORDERING | IB_UVERBS_ACCESS_OPTIONAL_LAST;
    for optional in [Optional::ALL, Optional::NONE] {
        let fns = fns(optional);
        // SAFETY: a live mock context.
        let pd = unsafe { (fns.ibv_alloc_pd)(ctx.as_ptr()) };
        mock.take_calls();
        // SAFETY: a live PD; `buf` outlives the MR (the mock never touches it anyway).
        let mr = unsafe { inline::ibv_reg_mr(&fns, pd, addr.cast(), buf.len(), access) };
        assert!(!mr.is_null());
        let expected = if optional.reg_mr_iova2 {
            Call::RegMrIova2 { addr: addr as usize, length: 64, iova: addr as u64, access }
        } else {
            Call::RegMr { addr: addr as usize, length: 64, access: ordinary as c_int }
        };
        assert_eq!(mock.take_calls(), [expected]);
    }
}

#[test]
fn a_null_post_op_gives_eopnotsupp_and_points_bad_wr_at_the_list() {
    let mock = Mock::new();
    let config = ContextConfig { post_send: false, post_recv: false, ..Default::default() };
    let (_, _, qp) = rc_qp(&fns(Optional::ALL), &mock, config);
    mock.take_calls();

    let mut send = ibv_send_wr { wr_id: 1, ..Default::default() };
    let mut bad_send = ptr::null_mut();
    // SAFETY: a live QP, a one-WR list, a writable `bad_wr`.
    let ret = unsafe { inline::ibv_post_send(qp, &mut send, &mut bad_send) };
    assert_eq!((ret, bad_send), (libc::EOPNOTSUPP, ptr::from_mut(&mut send)));

    // SAFETY: a live QP.
    assert_eq!(unsafe { post_lone_recv(qp, 2) }, (libc::EOPNOTSUPP, true));
    assert_eq!(mock.take_calls(), []);
}

/// Posts the receive `wr_id` alone on `qp` with the inline `ibv_post_recv`: what it returns,
/// and whether `bad_wr` names that receive.
///
/// # Safety
///
/// `qp` is a live QP of the mock.
unsafe fn post_lone_recv(qp: *mut ibv_qp, wr_id: u64) -> (c_int, bool) {
    let mut recv = ibv_recv_wr { wr_id, ..Default::default() };
    let mut bad = ptr::null_mut();
    // SAFETY: the caller's live QP, a one-WR list, a writable `bad_wr`.
    let ret = unsafe { inline::ibv_post_recv(qp, &mut recv, &mut bad) };
    (ret, bad == ptr::from_mut(&mut recv))
}

#[test]
fn post_ops_receive_the_whole_list_and_their_errors_come_back() {
    let mock = Mock::new();
    let (_, _, qp) = rc_qp(&fns(Optional::ALL), &mock, ContextConfig::default());
    mock.take_calls();

    let mut second = ibv_send_wr { wr_id: 8, ..Default::default() };
    let mut first = ibv_send_wr { wr_id: 7, next: &mut second, ..Default::default() };
    let mut bad = ptr::null_mut();
    // SAFETY: a live QP, a valid two-WR list, a writable `bad_wr`.
    let ret = unsafe { inline::ibv_post_send(qp, &mut first, &mut bad) };
    assert_eq!((ret, bad), (0, ptr::null_mut()));
    assert_eq!(mock.take_calls(), [Call::PostSend { wr_ids: vec![7, 8] }]);

    mock.fail(Verb::PostRecv, libc::ENOMEM);
    // SAFETY: a live QP.
    assert_eq!(unsafe { post_lone_recv(qp, 9) }, (libc::ENOMEM, true));
    assert_eq!(mock.take_calls(), [Call::PostRecv { wr_ids: vec![9] }]);
}

#[test]
fn a_null_poll_cq_gives_minus_eopnotsupp() {
    let mock = Mock::new();
    let (_, cq, _) =
        rc_qp(&fns(Optional::ALL), &mock, ContextConfig { poll_cq: false, ..Default::default() });
    mock.push_completion(cq, ibv_wc { wr_id: 1, ..Default::default() });
    mock.take_calls();
    let mut wc = [ibv_wc::default(); 2];
    // SAFETY: a live CQ; `wc` holds 2 entries.
    let ret = unsafe { inline::ibv_poll_cq(cq, 2, wc.as_mut_ptr()) };
    assert_eq!(ret, -libc::EOPNOTSUPP);
    assert_eq!(mock.take_calls(), []);
}

#[test]
fn poll_cq_returns_what_is_queued_at_most_num_entries_at_a_time() {
    let mock = Mock::new();
    let (_, cq, _) = rc_qp(&fns(Optional::ALL), &mock, ContextConfig::default());
    for wr_id in [1, 2, 3] {
        mock.push_completion(cq, ibv_wc { wr_id, ..Default::default() });
    }
    mock.take_calls();
    let mut wc = [ibv_wc::default(); 2];
    let mut poll = || {
        // SAFETY: a live CQ; `wc` holds 2 entries.
        let n = unsafe { inline::ibv_poll_cq(cq, 2, wc.as_mut_ptr()) };
        wc[..n.max(0) as usize].iter().map(|w| w.wr_id).collect::<Vec<_>>()
    };
    assert_eq!(poll(), [1, 2]);
    assert_eq!(poll(), [3]);
    assert_eq!(poll(), []);
    assert_eq!(mock.take_calls(), vec![Call::PollCq { num_entries: 2 }; 3]);
    mock.fail(Verb::PollCq, libc::EIO);
    // SAFETY: as above.
    assert_eq!(unsafe { inline::ibv_poll_cq(cq, 2, wc.as_mut_ptr()) }, -libc::EIO);
}

#[test]
fn req_notify_cq_calls_the_op_or_gives_eopnotsupp_when_null() {
    let mock = Mock::new();
    let fns = fns(Optional::ALL);
    for (present, expected) in [(true, 0), (false, libc::EOPNOTSUPP)] {
        let (_, cq, _) =
            rc_qp(&fns, &mock, ContextConfig { req_notify_cq: present, ..Default::default() });
        mock.take_calls();
        // SAFETY: a live CQ.
        assert_eq!(unsafe { inline::ibv_req_notify_cq(cq, 1) }, expected);
        let calls = if present { vec![Call::ReqNotifyCq { solicited_only: 1 }] } else { vec![] };
        assert_eq!(mock.take_calls(), calls);
    }
}

#[test]
fn query_gid_ex_needs_the_optional_symbol_and_passes_this_builds_entry_size() {
    let mock = Mock::new();
    let ctx = mock.context(ContextConfig::default());
    let mut entry = ibv_gid_entry::default();
    // SAFETY: a live mock context of the table's library; `entry` is writable.
    let query = |fns: &IbverbsFns, index, entry: &mut ibv_gid_entry| unsafe {
        inline::ibv_query_gid_ex(fns, ctx.as_ptr(), 1, index, entry, 0)
    };
    assert_eq!(query(&fns(Optional::NONE), 3, &mut entry), libc::EOPNOTSUPP);
    assert_eq!(mock.take_calls(), []);

    let fns = fns(Optional::ALL);
    assert_eq!(query(&fns, 3, &mut entry), 0);
    let expected = gid_table()[3];
    // SAFETY: both GIDs are plain bytes.
    let (got, want) = unsafe { (entry.gid.raw, expected.gid.raw) };
    assert_eq!(got, want);
    assert_eq!((entry.gid_type, entry.gid_index), (IBV_GID_TYPE_ROCE_V2, 3));
    let entry_size = size_of::<ibv_gid_entry>();
    assert_eq!(mock.take_calls(), [Call::QueryGidEx { port: 1, index: 3, flags: 0, entry_size }]);
    assert_eq!(query(&fns, 4, &mut entry), libc::ENODATA, "an empty entry");
    assert_eq!(query(&fns, 6, &mut entry), libc::EINVAL, "past the table");
}

#[test]
fn the_device_list_opens_and_closes_the_mock_device() {
    let mock = Mock::new();
    let fns = fns(Optional::ALL);
    let mut n = 0;
    // SAFETY: `n` is writable.
    let list = unsafe { (fns.ibv_get_device_list)(&mut n) };
    assert_eq!(n, 1);
    // SAFETY: a one-device list from the mock: entry 0 is the device, entry 1 the NULL end.
    let (device, end) = unsafe { (*list, *list.add(1)) };
    assert!(end.is_null());
    // SAFETY: the mock's device, alive while the Mock is.
    let name = unsafe { std::ffi::CStr::from_ptr((fns.ibv_get_device_name)(device)) };
    assert_eq!(name.to_str(), Ok(DEVICE_NAME));
    // SAFETY: as above.
    assert_eq!(u64::from_be(unsafe { (fns.ibv_get_device_guid)(device) }), NODE_GUID);
    // SAFETY: as above.
    let ctx = unsafe { (fns.ibv_open_device)(device) };
    // SAFETY: the list came from ibv_get_device_list; the context does not need it.
    unsafe { (fns.ibv_free_device_list)(list) };
    assert!(mock.is_live(ctx) && !mock.is_live(list));
    // SAFETY: a live context, closed once.
    assert_eq!(unsafe { (fns.ibv_close_device)(ctx) }, 0);
    assert!(!mock.is_live(ctx));
    let calls = [
        Call::GetDeviceList,
        Call::GetDeviceName,
        Call::GetDeviceGuid,
        Call::OpenDevice,
        Call::FreeDeviceList,
        Call::CloseDevice,
    ];
    assert_eq!(mock.take_calls(), calls);
}

#[test]
fn an_injected_failure_hits_the_next_call_only_the_way_the_verb_reports_errors() {
    let mock = Mock::new();
    let ctx = mock.context(ContextConfig::default());
    let fns = fns(Optional::ALL);
    mock.fail(Verb::AllocPd, libc::ENOMEM);
    // SAFETY: a live mock context.
    let pd = unsafe { (fns.ibv_alloc_pd)(ctx.as_ptr()) };
    assert_eq!((pd, errno()), (ptr::null_mut(), Some(libc::ENOMEM)));
    // SAFETY: as above.
    let pd = unsafe { (fns.ibv_alloc_pd)(ctx.as_ptr()) };
    assert!(mock.is_live(pd));
    mock.fail(Verb::DeallocPd, libc::EBUSY);
    // SAFETY: a live PD; the failed call leaves it alive.
    assert_eq!(unsafe { (fns.ibv_dealloc_pd)(pd) }, libc::EBUSY);
    assert!(mock.is_live(pd));
    mock.fail(Verb::QueryGid, libc::ENOMEM);
    let mut gid = ibv_gid::default();
    // SAFETY: a live context; `gid` is writable. ibv_query_gid(3) returns -1 and sets errno.
    let ret = unsafe { (fns.ibv_query_gid)(ctx.as_ptr(), 1, 0, &mut gid) };
    assert_eq!((ret, errno()), (-1, Some(libc::ENOMEM)));
    assert_eq!(
        mock.take_calls(),
        [Call::AllocPd, Call::AllocPd, Call::DeallocPd, Call::QueryGid { port: 1, index: 0 }]
    );
}

#[test]
fn parents_in_use_are_busy_and_unknown_objects_are_refused() {
    let mock = Mock::new();
    let fns = fns(Optional::ALL);
    let (pd, cq, qp) = rc_qp(&fns, &mock, ContextConfig::default());
    // SAFETY: live mock objects, or pointers the mock rejects without reading them.
    unsafe {
        assert_eq!((fns.ibv_dealloc_pd)(pd), libc::EBUSY);
        assert_eq!((fns.ibv_destroy_cq)(cq), libc::EBUSY);
        assert_eq!((fns.ibv_destroy_qp)(qp), 0);
        assert_eq!((fns.ibv_destroy_qp)(qp), libc::EINVAL, "destroyed twice");
        assert_eq!((fns.ibv_dealloc_pd)(cq.cast()), libc::EINVAL, "a CQ is not a PD");
        assert_eq!((fns.ibv_destroy_cq)(cq), 0);
        assert_eq!((fns.ibv_dealloc_pd)(pd), 0);
    }
    assert!(!mock.is_live(pd) && !mock.is_live(cq) && !mock.is_live(qp));
}

#[test]
fn a_dma_handle_in_use_is_busy_and_a_deallocated_or_foreign_one_is_refused() {
    let mock = Mock::new();
    let (ctx, other) = (mock.context(ContextConfig::default()), mock.context(Default::default()));
    let fns = fns(Optional::ALL);
    let mut hint =
        ibv_dmah_init_attr { comp_mask: IBV_DMAH_INIT_ATTR_MASK_PH, ..Default::default() };
    let mut bytes = [0u8; 64];
    // SAFETY: live mock objects, or pointers the mock rejects without reading them; `bytes`
    // outlives its registration.
    unsafe {
        let pd = (fns.ibv_alloc_pd)(ctx.as_ptr());
        let alloc = fns.ibv_alloc_dmah.unwrap();
        let (dmah, foreign) = (alloc(ctx.as_ptr(), &mut hint), alloc(other.as_ptr(), &mut hint));
        assert!(!dmah.is_null() && !foreign.is_null());
        let (reg, dealloc) = (fns.ibv_reg_mr_ex.unwrap(), fns.ibv_dealloc_dmah.unwrap());
        let mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_DMAH;
        let mut attr = |dmah| ibv_mr_init_attr {
            length: bytes.len(),
            comp_mask: u64::from(mask),
            addr: bytes.as_mut_ptr().cast(),
            dmah,
            ..Default::default()
        };
        assert!(reg(pd, &mut attr(foreign)).is_null(), "a handle of another context");
        assert_eq!(errno(), Some(libc::EINVAL));
        let mr = reg(pd, &mut attr(dmah));
        assert!(!mr.is_null());
        assert_eq!(dealloc(dmah), libc::EBUSY, "a registered MR uses it");
        assert_eq!((fns.ibv_dereg_mr)(mr), 0);
        assert_eq!(dealloc(dmah), 0);
        assert_eq!(dealloc(dmah), libc::EINVAL, "deallocated twice");
        assert!(reg(pd, &mut attr(dmah)).is_null(), "a deallocated handle");
        assert_eq!(errno(), Some(libc::EINVAL));
        assert_eq!(dealloc(foreign), 0);
        assert_eq!((fns.ibv_dealloc_pd)(pd), 0);
    }
}

fn modify(fns: &IbverbsFns, qp: *mut ibv_qp, mut attr: ibv_qp_attr, mask: u32) -> c_int {
    // SAFETY: a live QP and a valid attribute struct.
    unsafe { (fns.ibv_modify_qp)(qp, &mut attr, mask as c_int) }
}

#[test]
fn modify_qp_enforces_the_rc_state_machine_and_roce_routes() {
    let mock = Mock::new();
    let fns = fns(Optional::ALL);
    let (_, _, qp) = rc_qp(&fns, &mock, ContextConfig::default());
    let init = ibv_qp_attr { qp_state: IBV_QPS_INIT, port_num: 1, ..Default::default() };
    let init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    let mut rtr = ibv_qp_attr { qp_state: IBV_QPS_RTR, ..Default::default() };
    rtr.ah_attr.port_num = 1;
    let rtr_mask = IBV_QP_STATE
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_DEST_QPN
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER;

    assert_eq!(modify(&fns, qp, rtr, rtr_mask), libc::EINVAL, "RESET→RTR skips INIT");
    assert_eq!(modify(&fns, qp, init, init_mask & !IBV_QP_PORT), libc::EINVAL, "no port");
    assert_eq!(modify(&fns, qp, ibv_qp_attr { port_num: 2, ..init }, init_mask), libc::EINVAL);
    assert_eq!(modify(&fns, qp, init, init_mask), 0);
    assert_eq!(modify(&fns, qp, rtr, rtr_mask), libc::EINVAL, "no GRH on an Ethernet port");
    rtr.ah_attr.is_global = 1;
    rtr.ah_attr.grh.sgid_index = 4;
    assert_eq!(modify(&fns, qp, rtr, rtr_mask), libc::EINVAL, "an empty source GID");
    rtr.ah_attr.grh.sgid_index = 3;
    assert_eq!(modify(&fns, qp, rtr, rtr_mask), 0);

    let mut attr = ibv_qp_attr::default();
    let mut init_attr = ibv_qp_init_attr::default();
    // SAFETY: a live QP; both structs writable.
    let ret = unsafe { (fns.ibv_query_qp)(qp, &mut attr, IBV_QP_STATE as c_int, &mut init_attr) };
    assert_eq!((ret, attr.qp_state, init_attr.qp_type), (0, IBV_QPS_RTR, IBV_QPT_RC));
}

#[test]
fn without_a_mock_on_the_thread_verbs_fail_with_enodev() {
    let fns = fns(Optional::ALL);
    // SAFETY: the mock reads nothing when this thread has no state.
    let pd = unsafe { (fns.ibv_alloc_pd)(ptr::null_mut()) };
    assert_eq!((pd, errno()), (ptr::null_mut(), Some(libc::ENODEV)));
}

#[test]
#[should_panic(expected = "this thread already has a mock provider")]
fn one_mock_per_thread() {
    let _first = Mock::new();
    let _second = Mock::new();
}
