//! SRD (feature `efa`) against the mock libefa: the gate's attributes and refusals, the
//! creation attributes, the UD-like transition masks, and SENDs between SRD QPs.

use rdma_verbs::efa::{self, EfaContext, EfaDeviceCaps, Srd};
use rdma_verbs::{
    AccessFlags, AddressHandle, AddressVector, BufferPool, Error, GlobalRoute, InvalidInputKind,
    ProtectionDomain, Psn, QpAttrMask, QpCapabilities, QpInitAttr, QueuePair, Rts, SendFlags,
    SendWr, UdDestination, UdToInitAttr, WcOpcode, WorkCompletion,
};
use rdma_verbs_mock::efa::{self as mock_efa, EfaConfig};
use rdma_verbs_mock::Call;
use rdma_verbs_sys as sys;

use super::Fixture;

const PORT: u8 = 1;
const SGID_INDEX: u8 = 3;
const QKEY: u32 = 0x0e0e;

/// A fresh fixture whose mock EFA device is `config`.
fn fixture(config: EfaConfig) -> Fixture {
    let fx = Fixture::new();
    mock_efa::configure(config);
    fx
}

fn gate(fx: &Fixture) -> Result<EfaContext<'_>, Error> {
    // SAFETY: the mock libefa keeps libefa's contracts over this mock's objects.
    unsafe { EfaContext::with_library(&fx.ctx, mock_efa::library()) }
}

fn srd_attr<'a>(cq: &'a rdma_verbs::CompletionQueue<'a>) -> QpInitAttr<'a, 'a> {
    let cap = QpCapabilities { max_send_wr: 8, max_recv_wr: 8, ..Default::default() };
    QpInitAttr { cap, ..QpInitAttr::new(cq) }
}

/// An SRD QP of `pd` taken to RTS.
fn srd_up<'a>(
    efa: &EfaContext<'_>,
    pd: &'a ProtectionDomain<'a>,
    cq: &'a rdma_verbs::CompletionQueue<'a>,
) -> QueuePair<'a, Rts, Srd> {
    efa.create_srd_qp(pd, &srd_attr(cq))
        .unwrap()
        .into_init(&UdToInitAttr { port: PORT, pkey_index: 0, qkey: QKEY })
        .unwrap()
        .into_rtr()
        .unwrap()
        .into_rts(Psn::new(0).unwrap())
        .unwrap()
}

fn ah<'a>(fx: &Fixture, pd: &'a ProtectionDomain<'a>) -> AddressHandle<'a> {
    let ctx = &fx.ctx;
    let (gid, lid) = (ctx.routable_gid(PORT).unwrap().gid, ctx.query_port(PORT).unwrap().lid());
    pd.create_ah(&AddressVector::new(PORT, lid).with_grh(GlobalRoute::new(gid, SGID_INDEX)))
        .unwrap()
}

/// The buffers (256 bytes each) and the address handle of the SRD tests' SENDs.
fn pool_and_ah<'a>(
    fx: &Fixture,
    pd: &'a ProtectionDomain<'a>,
) -> (BufferPool<'a>, AddressHandle<'a>) {
    let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap(), 256).unwrap();
    (pool, ah(fx, pd))
}

/// A SEND of `bytes` (and `imm`) from `a` to `b`, addressed through `ah`, from a buffer of
/// `pool`.
fn send<'a>(
    a: &QueuePair<'a, Rts, Srd>,
    b: &QueuePair<'a, Rts, Srd>,
    ah: &'a AddressHandle<'a>,
    pool: &'a BufferPool<'a>,
    bytes: &[u8],
    imm: Option<u32>,
) {
    let mut buf = pool.take().unwrap();
    buf.fill(bytes).unwrap();
    let to_b = UdDestination { ah, qpn: b.qp_num(), qkey: QKEY };
    a.post_send_buffer_to(buf, &to_b, imm).unwrap();
}

#[test]
fn the_gate_reports_the_efa_attributes_and_capabilities() {
    let mut config = EfaConfig::default();
    config.attr.max_sq_wr = 512;
    config.attr.max_rq_wr = 256;
    config.attr.max_sq_sge = 2;
    config.attr.max_rq_sge = 1;
    config.attr.inline_buf_size = 32;
    config.attr.max_rdma_size = 1 << 20;
    config.attr.device_caps = sys::EFADV_DEVICE_ATTR_CAPS_RDMA_READ
        | sys::EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE
        | sys::EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV
        | 1 << 9;
    let fx = fixture(config);
    let attr = gate(&fx).expect("an EFA device").attr();
    assert_eq!((attr.max_sq_wr, attr.max_rq_wr), (512, 256));
    assert_eq!((attr.max_sq_sge, attr.max_rq_sge, attr.inline_buf_size), (2, 1, 32));
    assert_eq!(attr.max_rdma_size, 1 << 20);
    let known = EfaDeviceCaps::RDMA_READ
        | EfaDeviceCaps::RDMA_WRITE
        | EfaDeviceCaps::UNSOLICITED_WRITE_RECV;
    assert_eq!(attr.device_caps, known | EfaDeviceCaps::from_bits_retain(1 << 9));
    assert!(!attr.device_caps.contains(EfaDeviceCaps::RNR_RETRY));
}

#[test]
fn a_device_that_is_not_efa_is_unsupported() {
    let fx = fixture(EfaConfig { efa: false, ..EfaConfig::default() });
    let err = gate(&fx).unwrap_err();
    let Error::Unsupported { what } = err else { panic!("{err:?}") };
    assert!(what.contains("EOPNOTSUPP") && what.contains("not an EFA device"), "{what}");
}

/// Through the real gate, a mock context is refused before any efadv function is called:
/// its provider (the test binary) is not libefa; without libefa installed, the load error
/// names it.
#[test]
fn the_gate_refuses_a_context_whose_provider_is_not_libefa() {
    let fx = fixture(EfaConfig::default());
    let err = efa::query_device(&fx.ctx).unwrap_err();
    match sys::efa::libefa() {
        Ok(_) => {
            let Error::Unsupported { what } = &err else { panic!("{err:?}") };
            assert!(what.contains("not libefa"), "{what}");
        }
        Err(load) => assert_eq!(err.to_string(), Error::from(load.clone()).to_string()),
    }
    assert!(fx.mock.take_calls().is_empty(), "no verb was called");
}

#[test]
fn without_libefa_the_error_names_it_and_how_to_install_it() {
    // SAFETY: nothing is loaded: the file does not exist.
    let err = Error::from(unsafe { sys::efa::load("/nonexistent/libefa.so.1") }.err().unwrap());
    let text = err.to_string();
    assert!(text.starts_with("cannot load libefa from /nonexistent/libefa.so.1"), "{text}");
    assert!(text.contains("ibverbs-providers") && text.contains("RDMA_VERBS_LIBEFA"), "{text}");
}

#[test]
fn srd_qps_are_driver_qps_and_transition_as_ud() {
    let fx = fixture(EfaConfig::default());
    let efa = gate(&fx).unwrap();
    let (pd, cq) = fx.pd_and_cq(32);
    let _qp = srd_up(&efa, &pd, &cq);
    let calls = fx.mock.take_calls();
    assert!(
        calls.iter().any(|c| matches!(c, Call::CreateQp { qp_type: sys::IBV_QPT_DRIVER, .. })),
        "{calls:?}"
    );
    let masks: Vec<_> = calls
        .iter()
        .filter_map(|c| if let Call::ModifyQp { mask, .. } = c { Some(*mask) } else { None })
        .map(|m| QpAttrMask::from_bits_retain(m as u32))
        .collect();
    let init = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    assert_eq!(masks, [init, QpAttrMask::STATE, QpAttrMask::STATE | QpAttrMask::SQ_PSN]);
}

#[test]
fn srd_creation_refuses_what_efa_cannot_do() {
    let fx = fixture(EfaConfig::default());
    let efa = gate(&fx).unwrap();
    let (pd, cq) = fx.pd_and_cq(64);
    let limit = efa.attr().max_rq_sge;
    let cap = QpCapabilities { max_recv_sge: u32::from(limit) + 1, ..srd_attr(&cq).cap };
    let err = efa.create_srd_qp(&pd, &QpInitAttr { cap, ..srd_attr(&cq) }).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::DeviceLimit));
    assert!(err.to_string().contains(&format!("max_rq_sge {limit}")), "{err}");
    // Only libefa's own verb makes SRD QPs: the generic creation refuses before any verb.
    fx.mock.take_calls();
    let err = pd.create_qp::<Srd>(&srd_attr(&cq)).unwrap_err();
    let Error::Unsupported { what } = err else { panic!("{err:?}") };
    assert!(what.contains("EfaContext::create_srd_qp"), "{what}");
    assert!(fx.mock.take_calls().is_empty());
    let srq = pd.create_srq(16, 1).unwrap();
    let err = efa.create_srd_qp(&pd, &QpInitAttr { srq: Some(&srq), ..srd_attr(&cq) }).unwrap_err();
    assert!(err.to_string().contains("without an SRQ"), "{err}");
}

/// SENDs between two SRD QPs, each addressed by AH, QPN and Q_Key, arrive at the start of the
/// receive buffer (no GRH area); a send without a destination is refused before the provider.
#[test]
fn srd_sends_are_addressed_and_arrive_without_a_grh() {
    let fx = fixture(EfaConfig::default());
    let efa = gate(&fx).unwrap();
    let (pd, cq) = fx.pd_and_cq(64);
    // The pool and the AH outlive the QPs that use them.
    let (pool, ah) = pool_and_ah(&fx, &pd);
    let (a, b) = (srd_up(&efa, &pd, &cq), srd_up(&efa, &pd, &cq));
    b.post_recv_buffer(pool.take().unwrap()).unwrap();
    send(&a, &b, &ah, &pool, b"srd datagram", Some(7));
    let mut wcs = [WorkCompletion::EMPTY; 4];
    let mut received = None;
    for wc in cq.poll(&mut wcs).unwrap() {
        assert!(wc.is_success(), "{wc:?}");
        let buf = pool.complete(wc).unwrap();
        if wc.opcode() == WcOpcode::RECV {
            assert_eq!(wc.imm_data(), Some(7));
            received = Some(buf.as_slice().to_vec());
        }
    }
    assert_eq!(received.as_deref(), Some(&b"srd datagram"[..]));

    let mr = pd.register(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sges = [mr.sge(0..8).unwrap()];
    let mut wr = SendWr::send(1, &sges).flags(SendFlags::SIGNALED);
    // SAFETY: refused before the provider sees it; the region outlives the call.
    let err = unsafe { a.post_send_wr(&mut wr) }.unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::UdNoDestination));
    assert!(err.to_string().contains("an SRD QP posts only SENDs addressed"), "{err}");
    assert!(fx.mock.take_violations().is_empty());
}

/// SRD is reliable: a SEND that finds no receive posted waits for one (the mock's stand-in for
/// the device's RNR retries) instead of being dropped as a UD datagram is.
#[test]
fn an_srd_send_waits_for_a_receive() {
    let fx = fixture(EfaConfig::default());
    let efa = gate(&fx).unwrap();
    let (pd, cq) = fx.pd_and_cq(64);
    let (pool, ah) = pool_and_ah(&fx, &pd);
    let (a, b) = (srd_up(&efa, &pd, &cq), srd_up(&efa, &pd, &cq));
    send(&a, &b, &ah, &pool, b"early", None);
    let mut wcs = [WorkCompletion::EMPTY; 4];
    assert!(cq.poll(&mut wcs).unwrap().is_empty(), "nothing completes before the receive");
    b.post_recv_buffer(pool.take().unwrap()).unwrap();
    let done = cq.poll(&mut wcs).unwrap();
    let mut opcodes: Vec<_> = done
        .iter_mut()
        .map(|wc| {
            assert!(wc.is_success(), "{wc:?}");
            let buf = pool.complete(wc).unwrap();
            if wc.opcode() == WcOpcode::RECV {
                assert_eq!(buf.as_slice(), b"early");
            }
            wc.opcode()
        })
        .collect();
    opcodes.sort_by_key(|op| *op == WcOpcode::RECV);
    assert_eq!(opcodes, [WcOpcode::SEND, WcOpcode::RECV]);
}

/// An SRD message carries at most the port's active MTU, refused before the provider.
#[test]
fn an_srd_message_above_the_mtu_is_refused() {
    let fx = fixture(EfaConfig::default());
    let efa = gate(&fx).unwrap();
    let (pd, cq) = fx.pd_and_cq(64);
    let mtu = fx.ctx.query_port(PORT).unwrap().active_mtu().bytes().unwrap() as usize;
    let pool =
        BufferPool::new(pd.register(2 * mtu + 64, AccessFlags::LOCAL_WRITE).unwrap(), mtu + 1)
            .unwrap();
    let ah = ah(&fx, &pd);
    let qp = srd_up(&efa, &pd, &cq);
    let mut buf = pool.take().unwrap();
    buf.set_len(mtu + 1).unwrap();
    let to_self = UdDestination { ah: &ah, qpn: qp.qp_num(), qkey: QKEY };
    let err = qp.try_post_send_buffer_to(buf, &to_self, None).unwrap_err();
    assert_eq!(err.error.invalid_input_kind(), Some(InvalidInputKind::UdTooLarge));
    let expected = format!("an SRD message carries at most the path MTU, {mtu} bytes");
    assert!(err.error.to_string().starts_with(&expected), "{}", err.error);
}
