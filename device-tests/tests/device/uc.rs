//! UC has no receiver-not-ready flow control: a SEND that arrives before its receive is
//! posted is dropped, silently — the sender's completion is a success, and the receive
//! posted afterwards takes the next SEND, not the lost one. (RC would RNR-NAK and resend.)

use std::time::Duration;

use rdma_verbs::*;

use super::pair::{assert_quiet, wait_for, Loopback};
use rdma_verbs_device_tests::{require_device, RXE};

/// How long a dropped SEND is given to show up anyway (rxe delivers in microseconds).
const QUIET: Duration = Duration::from_millis(500);

#[test]
fn uc_drops_a_send_that_arrives_before_its_receive_and_the_next_send_lands() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let (a, b) = lo.pair::<Uc>(&lo.attr(4), AccessFlags::empty());
    let mut source = lo.region(64);
    let target = lo.region(64);
    let send = |wr_id, text: &[u8], source: &mut MemoryRegion<'_>| {
        source.as_mut_slice()[..text.len()].copy_from_slice(text);
        let sge = [source.sge(..text.len()).unwrap()];
        // SAFETY: `source` outlives the SEND, which completes (polled below) before the
        // region is written again.
        unsafe {
            a.post_send_wr(&mut SendWr::send(wr_id, &sge).flags(SendFlags::SIGNALED)).unwrap()
        };
    };
    // Each completion as (wr_id, opcode, status, bytes received), in wr_id order (a send's
    // byte_len is not defined: 0 here).
    let completions = |n| {
        let mut wcs: Vec<_> = wait_for(&lo.cq, n)
            .iter()
            .map(|wc| {
                let received = if wc.opcode() == WcOpcode::RECV { wc.byte_len() } else { 0 };
                (wc.wr_id(), wc.opcode(), wc.status(), received)
            })
            .collect();
        wcs.sort_by_key(|wc| wc.0);
        wcs
    };
    // No receive posted at b: the SEND completes at a all the same, and is dropped at b.
    send(1, b"lost", &mut source);
    assert_eq!(completions(1), [(1, WcOpcode::SEND, WcStatus::SUCCESS, 0)]);
    assert_quiet(&lo.cq, QUIET, "nothing completes at b, which has no receive");
    let recv = [target.sge(..).unwrap()];
    // SAFETY: `target` is read only after the receive's completion.
    unsafe { b.post_recv_wr(&mut RecvWr::new(2, &recv)).unwrap() };
    assert_quiet(&lo.cq, QUIET, "the dropped SEND does not arrive later");
    send(3, b"lands", &mut source);
    let got = completions(2);
    assert_eq!(
        got,
        [(2, WcOpcode::RECV, WcStatus::SUCCESS, 5), (3, WcOpcode::SEND, WcStatus::SUCCESS, 0)]
    );
    assert_eq!(&target.as_slice()[..5], b"lands");
}
