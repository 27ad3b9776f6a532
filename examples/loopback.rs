//! Two RC queue pairs of one device, connected to each other: an RDMA WRITE into the other's
//! region, then a SEND with immediate data, both checked on arrival. No `unsafe`: buffers of
//! a registered pool move into the queue pair when posted and come back with their completion.
//! Run: `loopback [DEVICE]` (default: the first device).
use std::error::Error;
use std::time::Duration;

use rdma_verbs::*;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loopback: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let ctx = Context::open_or_first(std::env::args().nth(1).as_deref())?;
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(8)?);
    // One registered region cut into four 1 KiB buffers; the NIC writes received bytes into
    // them: LOCAL_WRITE. The pool comes before the queue pairs it lends buffers to.
    let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE)?, 1024)?;
    // Memory a peer may write is its own type, read by copying out.
    let target =
        pd.register_remote_writable(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    // Both QPs complete on `cq`, which must hold every work request they can have outstanding.
    let cap = QpCapabilities { max_send_wr: 2, max_recv_wr: 1, ..Default::default() };
    // The QP that is written to must allow it: REMOTE_WRITE in its INIT attributes.
    let new_qp = |access| -> Result<_> {
        pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) })?
            .into_init(&ToInitAttr { access, ..ToInitAttr::default() })
    };
    let (a, b) = (new_qp(AccessFlags::empty())?, new_qp(AccessFlags::REMOTE_WRITE)?);

    // RESET → INIT → RTR → RTS, each towards the other. Between two hosts, each side sends
    // its `Endpoint` to the other (over TCP, or with rdma_cm).
    let (port, gid) = (ctx.query_port(1)?, ctx.routable_gid(1)?);
    let psn = Psn::random();
    let endpoint = |qpn| Endpoint { lid: port.lid(), qpn, psn, gid: gid.gid };
    let rtr = |peer| ToRtrAttr::to_endpoint(&endpoint(peer), 1, Some(gid.index), port.active_mtu());
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    let a = a.into_rtr(&rtr(b_qpn))?.into_rts(&ToRtsAttr::new(psn))?;
    let b = b.into_rtr(&rtr(a_qpn))?.into_rts(&ToRtsAttr::new(psn))?;

    // Posting moves a buffer into the QP: it cannot be read or reused while the NIC has it.
    b.post_recv_buffer(pool.take().ok_or("no free buffer")?)?;
    for op in [SendOp::RdmaWrite(target.remote(..5)?), SendOp::SendWithImm(7)] {
        let mut hello = pool.take().ok_or("no free buffer")?;
        hello.fill(b"hello")?;
        a.post_send_buffer(hello, op)?;
    }

    // Each completion hands its buffer back: the receive's with the bytes that arrived.
    let (mut received, mut imm) = (String::new(), None);
    let mut wcs = [WorkCompletion::EMPTY; 3];
    for wc in cq.wait_for(3, Duration::from_secs(5), &mut wcs)? {
        if !wc.is_success() {
            return Err(format!("{wc}").into());
        }
        let buffer = pool.complete(wc).ok_or("a completion of no buffer of the pool")?;
        if wc.opcode() == WcOpcode::RECV {
            received = String::from_utf8_lossy(buffer.as_slice()).into_owned();
            imm = wc.imm_data();
        }
    }
    let mut written = [0; 5];
    target.read(0, &mut written)?;
    println!(
        "{} wrote {:?} and received {received:?} with immediate {}",
        ctx.name(),
        String::from_utf8_lossy(&written),
        imm.map_or("none".into(), |imm| imm.to_string())
    );
    Ok(())
}
