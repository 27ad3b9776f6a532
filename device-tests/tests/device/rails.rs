//! Rails over two Soft-RoCE devices (`scripts/rdma-vm --two-rxe`: rxe0 on rdma0, rxe1 on
//! rdma1), one loopback QP pair on each: a 192 MiB RDMA WRITE during which rdma1's link goes
//! down. rxe fails the rail's next WR then (`LOC_QP_OP_ERR`: it does not send on a netdev
//! that is down), unless rxe1's `PORT_ERR` async event, which throws rail 1's switch (what a
//! program watching its ports does), comes first; either way the transfer completes byte for
//! byte, rail 0 carrying what rail 1 left, and reports rail 1 down.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdma_verbs::rails::{self, RailDown, RailMemory, RailState, Rails, Transfer};
use rdma_verbs::*;

use rdma_verbs_device_tests::{require_device, sent_packets, RXE, RXE1};
use rdma_verbs_test_support::process::text;

const NETDEV1: &str = "rdma1";
const MIB: usize = 1 << 20;
const LEN: usize = 192 * MIB;
const DEPTH: u32 = 16;
/// rxe1's sent packets (about one per KiB of a WRITE at the guest's MTU, and its ACKs) after
/// which its link goes down: a few MiB into rail 1's 96.
const DOWN_AFTER_PACKETS: u64 = 8_000;

/// Slice `i` of the pattern: one 1 MiB block of noise, its first and last 8 bytes the slice's
/// index, so a slice landing at another's place shows.
fn block(noise: &[u8], i: usize) -> Vec<u8> {
    let mut b = noise.to_vec();
    b[..8].copy_from_slice(&(i as u64).to_le_bytes());
    b[MIB - 8..].copy_from_slice(&(i as u64).to_le_bytes());
    b
}

fn set_link(netdev: &str, state: &str) {
    let out = Command::new("ip").args(["link", "set", netdev, state]).output().unwrap();
    assert!(out.status.success(), "ip link set {netdev} {state}: {}", text(&out));
}

/// Brings the link back up however the test ends.
struct LinkUp(&'static str);

impl Drop for LinkUp {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "set", self.0, "up"]).status();
    }
}

#[test]
fn a_write_over_two_devices_finishes_on_one_when_the_other_s_link_goes_down() {
    let Some(ctx0) = require_device(RXE) else { return };
    let Some(ctx1) = require_device(RXE1) else { return };
    let _restore = LinkUp(NETDEV1);
    let (pd0, pd1) = (ctx0.alloc_pd().unwrap(), ctx1.alloc_pd().unwrap());
    let (cq0, cq1) = (ctx0.create_cq(64).unwrap(), ctx1.create_cq(64).unwrap());
    let pds = [&pd0, &pd1];
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let memory = |name| SharedMemory::new(name, LEN).unwrap();
    let mut local = RailMemory::register(memory(c"rails-source"), &pds, access).unwrap();
    let target = RailMemory::register(memory(c"rails-target"), &pds, access).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..MIB)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    for i in 0..LEN / MIB {
        local.write(i * MIB, &block(&noise, i)).unwrap();
    }

    let (qp0, peer0) = rails::loopback_pair(&pd0, &cq0, DEPTH).unwrap();
    let (qp1, peer1) = rails::loopback_pair(&pd1, &cq1, DEPTH).unwrap();
    let mut rails = Rails::new(local, DEPTH).unwrap();
    rails.add(qp0, &cq0).unwrap();
    rails.add(qp1, &cq1).unwrap();
    let remote: Vec<RemoteAddr> = target.regions().iter().map(|r| r.remote(..).unwrap()).collect();
    let write = Transfer { slice_size: MIB as u32, ..Transfer::write(0..LEN, &remote) };
    let switch = rails.switch(1).unwrap();
    let events = ctx1.async_events().unwrap();
    let done = AtomicBool::new(false);
    let before = sent_packets(RXE1);

    let started = Instant::now();
    let (report, downed_at) = std::thread::scope(|s| {
        // The link goes down once rail 1 is under way ...
        let link = s.spawn(|| {
            while sent_packets(RXE1) - before < DOWN_AFTER_PACKETS {
                assert!(
                    !done.load(Ordering::Acquire),
                    "the transfer ended before rail 1 sent much"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            set_link(NETDEV1, "down");
            started.elapsed()
        });
        // ... and its port's PORT_ERR takes the rail down.
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                if let Some(AsyncEvent::PortError(1)) =
                    events.next(Some(Duration::from_millis(50))).unwrap()
                {
                    switch.take_down();
                }
            }
        });
        let report = rails.transfer(&write);
        done.store(true, Ordering::Release);
        (report, link.join())
    });
    let report = report.unwrap();
    let downed_at = downed_at.expect("the link thread");
    eprintln!("rails: {report:?}; rdma1 down after {downed_at:?}");

    let slices = LEN / MIB;
    assert_eq!((report.bytes, report.slices), (LEN as u64, slices));
    let down = report.rails[1].down.clone().expect("rail 1 went down");
    assert!(
        matches!(down, RailDown::TakenDown | RailDown::Completion(_) | RailDown::Stalled),
        "{down:?}"
    );
    assert!(report.reissued > 0, "rail 1 went down with slices left: {report:?}");
    // Both rails carried slices: rail 1 some before its link went, rail 0 the rest.
    assert!((1..slices / 2).contains(&report.rails[1].slices), "{report:?}");
    assert_eq!(report.rails[0].slices + report.rails[1].slices, slices);
    assert_eq!(report.rails[0].down, None);
    assert!(matches!(rails.rail_state(1), Some(RailState::Down(_) | RailState::Stuck(..))));
    assert_eq!(rails.rail_state(0), Some(RailState::Up));
    let mut landed = vec![0; MIB];
    for i in 0..slices {
        target.read(i * MIB, &mut landed).unwrap();
        assert!(landed == block(&noise, i), "slice {i} differs");
    }
    drop((rails, peer0, peer1));
}
