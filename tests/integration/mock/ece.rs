//! Enhanced Connection Establishment options on a QP: set, queried back, and refused by an
//! older library or a provider without them.

use rdma_verbs::{Ece, QpInitAttr};
use rdma_verbs_mock::{Call, ContextConfig, Optional, Verb};

use super::{assert_unsupported, assert_verb_error, Fixture};

const OFFER: Ece = Ece { vendor_id: 0x02c9, options: 0x1000_0005, comp_mask: 0 };

#[test]
fn ece_options_set_on_a_qp_are_queried_back() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    assert_eq!(qp.query_ece().unwrap(), Ece::default(), "none set yet");
    f.mock.take_calls();
    assert_eq!(qp.set_ece(&OFFER).unwrap(), OFFER, "the mock accepts every option");
    let set = Call::SetEce { vendor_id: 0x02c9, options: 0x1000_0005, comp_mask: 0 };
    assert_eq!(f.mock.take_calls(), [set]);
    assert_eq!(qp.query_ece().unwrap(), OFFER);
    assert_eq!(f.mock.take_calls(), [Call::QueryEce]);
}

#[test]
fn ece_is_unsupported_before_rdma_core_v31_naming_the_release() {
    let f = Fixture::with(Optional { ece: false, ..Optional::ALL }, ContextConfig::default());
    let (pd, cq) = f.pd_and_cq(32);
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    f.mock.take_calls();
    assert_unsupported(&qp.query_ece().unwrap_err(), "ibv_query_ece (rdma-core v31+)");
    assert_unsupported(&qp.set_ece(&OFFER).unwrap_err(), "ibv_set_ece (rdma-core v31+)");
    assert_eq!(f.mock.take_calls(), [], "nothing called");
}

#[test]
fn ece_is_unsupported_where_the_provider_has_none_and_refused_options_are_errors() {
    // rxe and siw have the verbs' library but no ECE: EOPNOTSUPP.
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    f.mock.fail(Verb::QueryEce, libc::EOPNOTSUPP);
    assert_unsupported(&qp.query_ece().unwrap_err(), "ibv_query_ece");
    f.mock.fail(Verb::SetEce, libc::EOPNOTSUPP);
    assert_unsupported(&qp.set_ece(&OFFER).unwrap_err(), "ibv_set_ece");
    // Options the provider refuses.
    f.mock.fail(Verb::SetEce, libc::EINVAL);
    assert_verb_error(&qp.set_ece(&OFFER).unwrap_err(), "ibv_set_ece", libc::EINVAL, &[]);
    assert_eq!(qp.query_ece().unwrap(), Ece::default(), "a refused set changes nothing");
}
