//! Two RC queue pairs of one device, connected to each other: an RDMA WRITE into the other's
//! region, then a SEND with immediate data, both checked on arrival.
//! Run: `loopback [DEVICE]` (default: the first device).
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

fn run() -> Result<()> {
    let ctx = match std::env::args().nth(1) {
        Some(name) => Context::open(&name)?,
        None => Context::open_first()?,
    };
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(8)?);
    let mut mr = pd.register(64, AccessFlags::LOCAL_WRITE)?;
    mr.as_mut_slice()[..5].copy_from_slice(b"hello");
    // Memory a peer may write is its own type, read by copying out.
    let target =
        pd.register_remote_writable(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let cap = QpCapabilities { max_send_wr: 2, max_recv_wr: 1, ..Default::default() };
    // The QP that is written to must allow it: REMOTE_WRITE in its INIT attributes.
    let new_qp = |access| -> Result<_> {
        pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) })?
            .into_init(&ToInitAttr { access, ..ToInitAttr::default() })
    };
    let (a, b) = (new_qp(AccessFlags::empty())?, new_qp(AccessFlags::REMOTE_WRITE)?);

    let (port, gid) = (ctx.query_port(1)?, ctx.routable_gid(1)?);
    let psn = Psn::new(0)?;
    let endpoint = |qpn| Endpoint { lid: port.lid(), qpn, psn, gid: gid.gid };
    let rtr = |peer| ToRtrAttr::to_endpoint(&endpoint(peer), 1, Some(gid.index), port.active_mtu());
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    let a = a.into_rtr(&rtr(b_qpn))?.into_rts(&ToRtsAttr::new(psn))?;
    let b = b.into_rtr(&rtr(a_qpn))?.into_rts(&ToRtsAttr::new(psn))?;

    let (hello, recv) = ([mr.sge(..5)?], [mr.sge(32..)?]);
    // SAFETY: `mr` and `target` outlive both QPs, and their bytes are not touched until the
    // three completions below have been polled.
    unsafe {
        b.post_recv_wr(&mut RecvWr::new(1, &recv))?;
        let write = SendWr::rdma_write(2, &hello, target.remote(..5)?);
        a.post_send_wr(&mut write.flags(SendFlags::SIGNALED))?;
        a.post_send_wr(&mut SendWr::send_with_imm(3, &hello, 7).flags(SendFlags::SIGNALED))?;
    }
    let mut wcs = [WorkCompletion::EMPTY; 3];
    for wc in cq.wait_for(3, Duration::from_secs(5), &mut wcs)?.iter() {
        assert!(wc.is_success(), "{wc}");
    }
    let mut written = [0; 5];
    target.read(0, &mut written)?;
    println!(
        "{} wrote {:?} and received {:?} with immediate 7",
        ctx.name(),
        String::from_utf8_lossy(&written),
        String::from_utf8_lossy(&mr.as_slice()[32..37])
    );
    Ok(())
}
