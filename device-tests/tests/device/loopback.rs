//! Two RC QPs of one device connected to each other in one process.

use rdma_verbs::*;

use super::pair::{connect, wait_for, Loopback};
use rdma_verbs_device_tests::{require_device, RXE};

#[test]
fn send_with_imm_delivers_payload_and_immediate() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let mut mr = lo.region(8192);
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    mr.as_mut_slice()[..4096].copy_from_slice(&payload);

    let (a, b) = (lo.rc_in_init(4, AccessFlags::empty()), lo.rc_in_init(4, AccessFlags::empty()));
    let recv_sge = [mr.sge(4096..).unwrap()];
    // SAFETY: the receive half of `mr` is not touched until its completion is polled.
    unsafe { b.post_recv_wr(&mut RecvWr::new(7, &recv_sge)).unwrap() };
    let (a, b) = connect(&ctx, a, b);

    let send_sge = [mr.sge(..4096).unwrap()];
    let mut wr = SendWr::send_with_imm(8, &send_sge, 0xfeed_beef).flags(SendFlags::SIGNALED);
    // SAFETY: the send half of `mr` is not written until the send completes.
    unsafe { a.post_send_wr(&mut wr).unwrap() };

    let wcs = wait_for(&lo.cq, 2);
    let recv = wcs.iter().find(|wc| wc.wr_id() == 7).expect("receive completion");
    let send = wcs.iter().find(|wc| wc.wr_id() == 8).expect("send completion");
    assert!(send.is_success() && recv.is_success(), "{wcs:?}");
    assert_eq!((send.opcode(), send.qp_num()), (WcOpcode::SEND, a.qp_num()));
    assert_eq!((recv.opcode(), recv.qp_num()), (WcOpcode::RECV, b.qp_num()));
    assert_eq!(recv.byte_len(), 4096);
    assert_eq!(recv.imm_data(), Some(0xfeed_beef));
    assert_eq!(&mr.as_slice()[4096..], &payload[..]);
}

#[test]
fn plain_send_carries_no_immediate_and_rdma_read_copies_remote_bytes() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let len = 1 << 16;
    let mut source = lo.pd.register(len, AccessFlags::REMOTE_READ).unwrap();
    let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    source.as_mut_slice().copy_from_slice(&pattern);
    let sink = lo.region(len + 16);

    let (a, b) =
        (lo.rc_in_init(4, AccessFlags::empty()), lo.rc_in_init(4, AccessFlags::REMOTE_READ));
    let recv_sge = [sink.sge(len..).unwrap()];
    // SAFETY: the tail of `sink` is not touched until its completion is polled.
    unsafe { b.post_recv_wr(&mut RecvWr::new(1, &recv_sge)).unwrap() };
    let (a, b) = connect(&ctx, a, b);

    let read_sge = [sink.sge(..len).unwrap()];
    let mut read =
        SendWr::rdma_read(2, &read_sge, source.remote(..).unwrap()).flags(SendFlags::SIGNALED);
    let small = [source.sge(..16).unwrap()];
    let mut send = SendWr::send(3, &small).flags(SendFlags::SIGNALED);
    // SAFETY: `sink` is not read until both completions are polled; `source` is not written.
    unsafe {
        a.post_send_wr(&mut read).unwrap();
    }
    let wcs = wait_for(&lo.cq, 1);
    assert_eq!(
        (wcs[0].wr_id(), wcs[0].status(), wcs[0].opcode()),
        (2, WcStatus::SUCCESS, WcOpcode::RDMA_READ)
    );
    // SAFETY: as above.
    unsafe { a.post_send_wr(&mut send).unwrap() };
    let wcs = wait_for(&lo.cq, 2);
    let recv = wcs.iter().find(|wc| wc.wr_id() == 1).expect("receive completion");
    assert!(recv.is_success(), "{wcs:?}");
    assert_eq!((recv.byte_len(), recv.imm_data(), recv.qp_num()), (16, None, b.qp_num()));
    assert_eq!(&sink.as_slice()[..len], &pattern[..]);
    assert_eq!(&sink.as_slice()[len..], &pattern[..16]);
}

#[test]
fn too_much_inline_data_is_refused_before_posting() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let mr = lo.region(1 << 16);
    let (a, b) = lo.rc_pair(4, AccessFlags::empty());
    let too_big = a.caps().max_inline_data as usize + 1;
    let sge = [mr.sge(..too_big).unwrap()];
    let mut wr = SendWr::send(1, &sge).flags(SendFlags::INLINE);
    // SAFETY: refused before reaching the NIC; `mr` is not written anyway.
    let err = unsafe { a.post_send_wr(&mut wr) }.unwrap_err();
    assert!(err.to_string().contains("cannot be sent inline"), "{err}");
    drop(b);
}

#[test]
fn a_burst_of_64_completions_drains_in_one_poll_call() {
    const BURST: usize = 64;
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 2 * BURST as u32);
    // rxe has the extended CQ: its default poll goes through the provider's poll_cq op,
    // which takes rxe's CQ lock once for the whole batch (rxe_poll_cq); the lock itself
    // cannot be counted in the guest (no uprobes), so the mock's call counts back this up
    // (mock::verbs_path::the_default_poll_drains_a_batch_with_one_provider_call).
    let cq = &lo.cq;
    assert_eq!(cq.verbs_path(), VerbsPath::Extended);
    let source = lo.region(4096);
    let target = lo.write_target(4096);
    let (a, _b) = lo.rc_pair(BURST as u32, AccessFlags::REMOTE_WRITE);
    let sge = [source.sge(..64).unwrap()];
    let remote = target.remote(..64).unwrap();
    let mut wrs: SendWrList<'_> = (0..BURST as u64)
        .map(|i| SendWr::rdma_write(i, &sge, remote).flags(SendFlags::SIGNALED))
        .collect();
    // SAFETY: neither region is touched by the program until the writes complete.
    unsafe { a.post_send_wrs(&mut wrs).unwrap() };
    // Loopback writes of 64 bytes complete within milliseconds even under TCG: wait, then
    // drain them all with one poll.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut storage = [WorkCompletion::EMPTY; BURST];
    let polled = cq.poll(&mut storage).unwrap();
    assert_eq!(polled.len(), BURST, "one poll call drains the whole burst");
    assert!(polled.iter().all(WorkCompletion::is_success), "{polled:?}");
    assert!(cq.poll(&mut storage).unwrap().is_empty());
}
