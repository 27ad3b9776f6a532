//! Rails (feature `rails`) on two mock devices: slices dealt round-robin and completed byte
//! for byte, both ways; a rail failed by an error completion or thrown down by its switch,
//! its slices carried by the other, reported down until a new QP replaces it; and the
//! refusals.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rdma_verbs::rails::{self, RailDown, RailMemory, RailState, Rails, Transfer};
use rdma_verbs::{
    AccessFlags, CompletionQueue, Error, InvalidInputKind, ProtectionDomain, QueuePair, RemoteAddr,
    Rts, WcStatus,
};
use rdma_verbs_mock::{ContextConfig, Optional, Verb};

use super::pinned::Mapped;
use super::{open, Fixture};

const ACCESS: AccessFlags =
    AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE).union(AccessFlags::REMOTE_READ);
const LEN: usize = 256 * 1024;
const SLICE: u32 = 4096;
const DEPTH: u32 = 4;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

/// Source memory holding `pattern`, target memory zeroed, both registered on both PDs.
fn memories<'a>(pds: &[&'a ProtectionDomain<'a>]) -> (RailMemory<'a>, RailMemory<'a>) {
    let mut local = RailMemory::register(Mapped::new(LEN).0, pds, ACCESS).unwrap();
    local.write(0, &pattern(LEN)).unwrap();
    (local, RailMemory::register(Mapped::new(LEN).0, pds, ACCESS).unwrap())
}

fn remotes(target: &RailMemory<'_>) -> Vec<RemoteAddr> {
    target.regions().iter().map(|r| r.remote(..).unwrap()).collect()
}

fn contents(memory: &RailMemory<'_>) -> Vec<u8> {
    let mut bytes = vec![0; memory.len()];
    memory.read(0, &mut bytes).unwrap();
    bytes
}

/// Runs `body` with two mock devices, each with a PD and CQ.
fn with_devices(
    body: impl FnOnce(&[&ProtectionDomain<'_>; 2], &[&CompletionQueue<'_>; 2], &Fixture),
) {
    let f = Fixture::new();
    let second = open(&f.mock, Optional::ALL, ContextConfig::default());
    let ctxs = [&f.ctx, &second];
    let pds = ctxs.map(|c| c.alloc_pd().unwrap());
    let cqs = ctxs.map(|c| c.create_cq(64).unwrap());
    body(&[&pds[0], &pds[1]], &[&cqs[0], &cqs[1]], &f);
    drop((cqs, pds));
    assert!(f.mock.take_violations().is_empty());
    assert!(f.mock.dangling_work().is_empty());
}

/// Rails over `local` with one loopback rail per device, and the rails' peers (the targets
/// of their WRITEs and READs), to keep alive while the rails are used.
fn rails_over<'a>(
    local: RailMemory<'a>,
    pds: &[&'a ProtectionDomain<'a>; 2],
    cqs: &[&'a CompletionQueue<'a>; 2],
) -> (Rails<'a>, Vec<QueuePair<'a, Rts>>) {
    let mut rails = Rails::new(local, DEPTH).unwrap();
    let mut peers = Vec::new();
    for device in 0..2 {
        let (qp, peer) = rails::loopback_pair(pds[device], cqs[device], DEPTH).unwrap();
        assert_eq!(rails.add(qp, cqs[device]).unwrap(), device);
        peers.push(peer);
    }
    (rails, peers)
}

/// Rails writing from the pattern into a zeroed target: the rails, their peers, the target
/// and its address on each rail.
fn writing<'a>(
    pds: &[&'a ProtectionDomain<'a>; 2],
    cqs: &[&'a CompletionQueue<'a>; 2],
) -> (Rails<'a>, Vec<QueuePair<'a, Rts>>, RailMemory<'a>, Vec<RemoteAddr>) {
    let (local, target) = memories(pds);
    let (rails, peers) = rails_over(local, pds, cqs);
    let remote = remotes(&target);
    (rails, peers, target, remote)
}

#[test]
fn a_write_is_dealt_round_robin_over_two_devices_and_lands_byte_for_byte() {
    with_devices(|pds, cqs, _| {
        let (mut rails, peers, target, remote) = writing(pds, cqs);
        let report =
            rails.transfer(&Transfer { slice_size: SLICE, ..Transfer::write(0..LEN, &remote) });
        let report = report.unwrap();
        assert_eq!(contents(&target), pattern(LEN));
        assert_eq!((report.bytes, report.slices, report.reissued), (LEN as u64, LEN / 4096, 0));
        for rail in &report.rails {
            assert_eq!((rail.slices, rail.bytes, &rail.down), (LEN / 8192, LEN as u64 / 2, &None));
        }
        assert_eq!(rails.rail_state(1), Some(RailState::Up));
        drop((rails, peers));
    });
}

#[test]
fn a_read_of_an_uneven_range_fills_exactly_that_range() {
    with_devices(|pds, cqs, _| {
        let (source, sink) = memories(pds);
        let (mut rails, peers) = rails_over(sink, pds, cqs);
        // The source's bytes from 1000 on, into the sink at 100: a last, shorter slice.
        let remote: Vec<_> = source.regions().iter().map(|r| r.remote(1000..).unwrap()).collect();
        let range = 100..100 + 10 * 4096 + 123;
        let read = Transfer { slice_size: SLICE, ..Transfer::read(range.clone(), &remote) };
        let report = rails.transfer(&read).unwrap();
        assert_eq!((report.slices, report.bytes), (11, range.len() as u64));
        assert_eq!(report.rails[0].slices + report.rails[1].slices, 11);
        let mut expected = vec![0; LEN];
        expected[range.clone()].copy_from_slice(&pattern(LEN)[1000..1000 + range.len()]);
        assert_eq!(contents(rails.memory()), expected);
        drop((rails, peers));
    });
}

#[test]
fn a_failed_rail_s_slices_finish_on_the_other_and_it_stays_down_until_replaced() {
    with_devices(|pds, cqs, f| {
        let (mut rails, peers, target, remote) = writing(pds, cqs);
        let write = Transfer { slice_size: SLICE, ..Transfer::write(0..LEN, &remote) };
        // Rail 1's QP: its first slice completes with an error, the rest are flushed.
        let (qp, peer) = rails::loopback_pair(pds[1], cqs[1], DEPTH).unwrap();
        f.mock.fail_next_wr(qp.as_raw(), WcStatus::RETRY_EXC_ERR.0);
        drop(rails.replace(1, qp, cqs[1]).unwrap());
        let report = rails.transfer(&write).unwrap();
        assert_eq!(contents(&target), pattern(LEN));
        let failed = Some(RailDown::Completion(WcStatus::RETRY_EXC_ERR));
        assert_eq!((report.rails[1].slices, &report.rails[1].down), (0, &failed));
        assert_eq!(report.rails[0].slices, LEN / 4096);
        // The failed slice and those flushed behind it or queued were moved.
        assert_eq!(report.reissued, LEN / 8192);
        assert_eq!(rails.rail_state(1), Some(RailState::Down(failed.clone().unwrap())));

        // Still down on the next transfer: everything goes to rail 0.
        let report = rails.transfer(&write).unwrap();
        assert_eq!((report.rails[0].slices, report.rails[1].slices), (LEN / 4096, 0));

        // A reconnected QP brings it back.
        let (qp, peer2) = rails::loopback_pair(pds[1], cqs[1], DEPTH).unwrap();
        drop(rails.replace(1, qp, cqs[1]).unwrap());
        assert_eq!(rails.rail_state(1), Some(RailState::Up));
        let report = rails.transfer(&write).unwrap();
        assert_eq!((report.rails[0].slices, report.rails[1].slices), (LEN / 8192, LEN / 8192));
        drop((rails, peers, peer, peer2));
    });
}

#[test]
fn a_rail_thrown_down_by_its_switch_carries_nothing_and_says_so() {
    with_devices(|pds, cqs, _| {
        let (mut rails, peers, target, remote) = writing(pds, cqs);
        let switch = rails.switch(0).unwrap();
        std::thread::spawn(move || switch.take_down()).join().unwrap();
        let report =
            rails.transfer(&Transfer { slice_size: SLICE, ..Transfer::write(0..LEN, &remote) });
        let report = report.unwrap();
        assert_eq!(contents(&target), pattern(LEN));
        assert_eq!(
            (report.rails[0].slices, &report.rails[0].down),
            (0, &Some(RailDown::TakenDown))
        );
        assert_eq!(report.rails[1].slices, LEN / 4096);
        assert_eq!(rails.rail_state(0), Some(RailState::Down(RailDown::TakenDown)));
        drop((rails, peers));
    });
}

#[test]
fn every_rail_down_fails_the_transfer_and_bad_input_is_refused() {
    with_devices(|pds, cqs, _| {
        let (mut rails, peers, _target, remote) = writing(pds, cqs);
        let bad = [
            Transfer { slice_size: 0, ..Transfer::write(0..LEN, &remote) },
            Transfer::write(0..LEN, &remote[..1]),
            Transfer::write(0..LEN + 1, &remote),
            Transfer::write(5..5, &remote),
        ];
        for transfer in bad {
            let err = rails.transfer(&transfer).unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{transfer:?}: {err}");
        }
        (0..2).for_each(|rail| rails.switch(rail).unwrap().take_down());
        let err = rails.transfer(&Transfer::write(0..LEN, &remote)).unwrap_err();
        assert!(err.to_string().contains("every rail is down"), "{err}");
        assert!(matches!(
            rails.transfer(&Transfer::write(0..LEN, &remote)),
            Err(Error::WrongState { .. })
        ));
        assert!(rails.switch(2).is_none() && rails.rail_state(2).is_none());
        drop((rails, peers));
    });
}

#[test]
fn rail_memory_is_one_allocation_per_pd_set_and_returned_after_its_last_registration() {
    with_devices(|pds, cqs, _| {
        let err = RailMemory::register(Mapped::new(4096).0, &[pds[0], pds[0]], ACCESS).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { kind: InvalidInputKind::OtherPd, .. }),
            "{err}"
        );
        let err = RailMemory::register(Mapped::new(4096).0, &[], ACCESS).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { kind: InvalidInputKind::OtherPd, .. }),
            "{err}"
        );

        let (memory, dropped) = Mapped::new(4096);
        let mut memory = RailMemory::register(memory, pds, ACCESS).unwrap();
        let [a, b] = [&memory.regions()[0], &memory.regions()[1]];
        assert_eq!(a.addr(), b.addr(), "one allocation");
        assert_eq!(memory.region(pds[1]).unwrap().lkey(), b.lkey());
        memory.write(10, b"rails").unwrap();
        let mut back = [0; 5];
        memory.read(10, &mut back).unwrap();
        assert_eq!(&back, b"rails");
        assert!(memory.write(4094, b"rails").is_err());

        // A rail whose PD has no registration of the memory, or whose CQ is not its own.
        let other_pd = pds[0].context().alloc_pd().unwrap();
        let other_cq = pds[0].context().create_cq(64).unwrap();
        let mut rails = Rails::new(memory, 8).unwrap();
        let (qp, peer) = rails::loopback_pair(&other_pd, &other_cq, 8).unwrap();
        let err = rails.add(qp, &other_cq).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { kind: InvalidInputKind::OtherPd, .. }),
            "{err}"
        );
        let (qp, peer2) = rails::loopback_pair(pds[0], cqs[0], 8).unwrap();
        let err = rails.add(qp, cqs[1]).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { kind: InvalidInputKind::OtherCq, .. }),
            "{err}"
        );
        let (qp, peer3) = rails::loopback_pair(pds[0], cqs[0], 2).unwrap();
        let err = rails.add(qp, cqs[0]).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { kind: InvalidInputKind::CqTooSmall, .. }),
            "{err}"
        );
        assert!(
            Rails::new(RailMemory::register(Mapped::new(1).0, pds, ACCESS).unwrap(), 0).is_err()
        );
        drop((peer, peer2, peer3));
        assert!(!dropped.load(Ordering::SeqCst));
        drop(rails);
        assert!(dropped.load(Ordering::SeqCst), "handed back after both deregistrations");
    });
}

#[test]
fn a_rail_whose_peer_is_gone_stalls_goes_down_and_its_flushed_slices_move() {
    with_devices(|pds, cqs, _| {
        let (mut rails, mut peers, target, remote) = writing(pds, cqs);
        // Rail 1's peer QP goes: its WRITEs wait unexecuted, as behind a silent link.
        drop(peers.pop());
        let timeout = Duration::from_millis(50);
        let write = Transfer { slice_size: SLICE, timeout, ..Transfer::write(0..LEN, &remote) };
        let report = rails.transfer(&write).unwrap();
        assert_eq!(contents(&target), pattern(LEN));
        assert_eq!((report.rails[1].slices, &report.rails[1].down), (0, &Some(RailDown::Stalled)));
        assert_eq!((report.rails[0].slices, report.reissued), (LEN / 4096, LEN / 8192));
        // Its QP was moved to ERROR and every WR flushed: nothing is left stuck.
        assert_eq!(rails.rail_state(1), Some(RailState::Down(RailDown::Stalled)));
        drop((rails, peers));
    });
}

#[test]
fn a_rail_whose_work_is_never_flushed_is_stuck_and_keeps_its_qp() {
    with_devices(|pds, cqs, f| {
        let (mut rails, mut peers, target, remote) = writing(pds, cqs);
        drop(peers.pop());
        // The move to ERROR is refused: the NIC never flushes rail 1's WRs.
        f.mock.fail(Verb::ModifyQp, libc::EIO);
        let timeout = Duration::from_millis(50);
        let write = Transfer { slice_size: SLICE, timeout, ..Transfer::write(0..LEN, &remote) };
        let report = rails.transfer(&write).unwrap();
        assert_eq!(contents(&target), pattern(LEN));
        assert_eq!(report.rails[0].slices, LEN / 4096);
        let stuck = RailState::Stuck(RailDown::Stalled, DEPTH as usize);
        assert_eq!(rails.rail_state(1), Some(stuck));
        let (qp, peer) = rails::loopback_pair(pds[1], cqs[1], DEPTH).unwrap();
        let err = rails.replace(1, qp, cqs[1]).unwrap_err();
        assert!(matches!(err, Error::WrongState { .. }), "{err}");
        assert!(err.to_string().contains("neither completed nor flushed"), "{err}");
        // The rails' drop destroys the stuck QP before deregistering the memory its WRs name.
        drop((rails, peers, peer));
        assert!(f.mock.dangling_work().is_empty());
    });
}
/// A remote range that passes the end of the address space is refused before any post.
#[test]
fn a_remote_range_past_the_end_of_the_address_space_is_refused() {
    with_devices(|pds, cqs, _| {
        let (mut rails, peers, _target, remote) = writing(pds, cqs);
        let remote: Vec<_> =
            remote.into_iter().map(|r| RemoteAddr { addr: u64::MAX - 10, ..r }).collect();
        let write = Transfer {
            slice_size: SLICE,
            timeout: Duration::from_millis(50),
            ..Transfer::write(0..4 * SLICE as usize, &remote)
        };
        let err = rails.transfer(&write).unwrap_err();
        assert!(err.to_string().contains("passes the end of the address space"), "{err}");
        drop((rails, peers));
    });
}

/// `loopback_pair` puts the peer QP on the rail's CQ: a completion of that peer's own work,
/// polled by a transfer, is kept for the caller.
#[test]
fn a_completion_of_another_qp_on_a_rail_s_cq_is_kept_by_a_transfer() {
    with_devices(|pds, cqs, _| {
        let (mut rails, peers, _target, remote) = writing(pds, cqs);
        let src = pds[0].register(64, AccessFlags::LOCAL_WRITE).unwrap();
        let dst = pds[0]
            .register_remote_writable(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
        let sges = [src.sge(..).unwrap()];
        let wr = rdma_verbs::SendWr::rdma_write(77, &sges, dst.remote(..).unwrap());
        // SAFETY: `src` and `dst` outlive the QP's work: the completion is awaited below
        // (or the QP dropped first).
        unsafe { peers[0].post_send_wr(&mut wr.flags(rdma_verbs::SendFlags::SIGNALED)).unwrap() };
        let write = Transfer { slice_size: SLICE, ..Transfer::write(0..LEN, &remote) };
        rails.transfer(&write).unwrap();
        let others = rails.take_other_completions();
        drop((rails, peers));
        assert!(
            others.iter().any(|wc| wc.wr_id() == 77 && wc.is_success()),
            "the peer QP's completion (wr_id 77) is not among {others:?}"
        );
    });
}

/// A rail whose QP is already in ERROR when it is added (an earlier WR of the caller's
/// failed; the QP is still typed `Rts`): its first flush takes it down, and the other rail
/// finishes the transfer (a watchdog would end a transfer that spun, after 2 s).
#[test]
fn a_rail_whose_qp_is_in_error_is_taken_down_by_its_first_flush() {
    with_devices(|pds, cqs, _| {
        let (local, target) = memories(pds);
        let mut rails = Rails::new(local, DEPTH).unwrap();
        let mut peers = Vec::new();
        let scratch = pds[0].register(64, AccessFlags::LOCAL_WRITE).unwrap();
        for device in 0..2 {
            let (qp, peer) = rails::loopback_pair(pds[device], cqs[device], DEPTH).unwrap();
            if device == 0 {
                // An RDMA WRITE the peer does not grant: REM_ACCESS_ERR, the QP to ERROR.
                let sges = [scratch.sge(..).unwrap()];
                let bad = RemoteAddr { addr: 0x10, rkey: scratch.rkey() };
                let wr = rdma_verbs::SendWr::rdma_write(5, &sges, bad);
                // SAFETY: `scratch` outlives the QP's work: its completion is polled below.
                unsafe { qp.post_send_wr(&mut wr.flags(rdma_verbs::SendFlags::SIGNALED)).unwrap() };
                let mut wcs = [rdma_verbs::WorkCompletion::EMPTY; 4];
                let wcs = cqs[0].poll(&mut wcs).unwrap();
                assert!(wcs.iter().any(|wc| wc.wr_id() == 5 && !wc.is_success()));
            }
            rails.add(qp, cqs[device]).unwrap();
            peers.push(peer);
        }
        let remote = remotes(&target);
        let switch = rails.switch(0).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watchdog = {
            let done = done.clone();
            std::thread::spawn(move || {
                let began = std::time::Instant::now();
                while !done.load(Ordering::Acquire) && began.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                switch.take_down();
            })
        };
        let began = std::time::Instant::now();
        let write = Transfer { slice_size: SLICE, ..Transfer::write(0..LEN, &remote) };
        let report = rails.transfer(&write);
        let elapsed = began.elapsed();
        done.store(true, Ordering::Release);
        watchdog.join().unwrap();
        drop((rails, peers, scratch));
        assert!(
            elapsed < Duration::from_secs(1),
            "the transfer spun for {elapsed:?}, ended only by the watchdog: {report:?}"
        );
    });
}
