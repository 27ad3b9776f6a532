//! Thread domains and parent domains: allocation and deallocation in order, and the
//! refusals of providers and libraries without them.

use rdma_verbs::InvalidInputKind;
use rdma_verbs_mock::{Call, ContextConfig, Optional, Verb};

use super::{assert_unsupported, assert_verb_error, open, Fixture};

fn with_thread_domains() -> ContextConfig {
    ContextConfig { thread_domains: true, ..ContextConfig::default() }
}

#[test]
fn a_parent_domain_binds_a_pd_and_a_td_and_goes_before_them() {
    let f = Fixture::with(Optional::ALL, with_thread_domains());
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    let td = f.ctx.alloc_td().unwrap();
    let parent = pd.alloc_parent_domain(&td).unwrap();
    assert_eq!(
        f.mock.take_calls(),
        [Call::AllocTd, Call::AllocParentDomain { td: true, comp_mask: 0 }]
    );
    assert_eq!(parent.pd().as_raw(), pd.as_raw());
    assert_eq!(parent.td().as_raw(), td.as_raw());
    assert_ne!(parent.as_raw(), pd.as_raw());
    parent.destroy().unwrap();
    td.destroy().unwrap();
    assert_eq!(f.mock.take_calls(), [Call::DeallocPd, Call::DeallocTd]);
}

#[test]
fn thread_domains_are_unsupported_without_the_op_or_when_the_provider_stubs_it() {
    // No alloc_td op (rxe, siw), or a context that is not extended.
    for config in
        [ContextConfig::default(), ContextConfig { extended: false, ..with_thread_domains() }]
    {
        let f = Fixture::with(Optional::ALL, config);
        assert_unsupported(&f.ctx.alloc_td().unwrap_err(), "ibv_alloc_td");
    }
    // libibverbs' stubs answer EOPNOTSUPP.
    let f = Fixture::with(Optional::ALL, with_thread_domains());
    f.mock.fail(Verb::AllocTd, libc::EOPNOTSUPP);
    assert_unsupported(&f.ctx.alloc_td().unwrap_err(), "ibv_alloc_td");
    let pd = f.ctx.alloc_pd().unwrap();
    let td = f.ctx.alloc_td().unwrap();
    f.mock.fail(Verb::AllocParentDomain, libc::EOPNOTSUPP);
    assert_unsupported(&pd.alloc_parent_domain(&td).unwrap_err(), "ibv_alloc_parent_domain");
}

#[test]
fn refusals_are_reported_and_a_failed_deallocation_leaks() {
    let f = Fixture::with(Optional::ALL, with_thread_domains());
    f.mock.fail(Verb::AllocTd, libc::ENOMEM);
    assert_verb_error(&f.ctx.alloc_td().unwrap_err(), "ibv_alloc_td", libc::ENOMEM, &[]);
    let pd = f.ctx.alloc_pd().unwrap();
    let td = f.ctx.alloc_td().unwrap();
    f.mock.fail(Verb::AllocParentDomain, libc::EINVAL);
    let err = pd.alloc_parent_domain(&td).unwrap_err();
    assert_verb_error(&err, "ibv_alloc_parent_domain", libc::EINVAL, &[]);
    let parent = pd.alloc_parent_domain(&td).unwrap();
    f.mock.fail(Verb::DeallocPd, libc::EBUSY);
    assert_verb_error(&parent.destroy().unwrap_err(), "ibv_dealloc_pd", libc::EBUSY, &[]);
    // The leaked parent domain still holds the TD: the provider refuses to free it.
    let err = td.destroy().unwrap_err();
    assert_verb_error(&err, "ibv_dealloc_td", libc::EBUSY, &[]);
}

#[test]
fn a_thread_domain_of_another_context_is_refused_before_the_provider() {
    let f = Fixture::with(Optional::ALL, with_thread_domains());
    let pd = f.ctx.alloc_pd().unwrap();
    let other = open(&f.mock, Optional::ALL, with_thread_domains());
    let td = other.alloc_td().unwrap();
    f.mock.take_calls();
    let err = pd.alloc_parent_domain(&td).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherContext), "{err:?}");
    assert!(err.to_string().contains("allocate both from one context"), "{err}");
    assert!(f.mock.take_calls().is_empty());
    drop(td);
    drop(other);
}
