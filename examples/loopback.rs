//! Two RC queue pairs of one device, connected to each other: one SEND, checked on arrival.
//! Run: `loopback [DEVICE]` (default: the first device).
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
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 1, ..Default::default() };
    let new_qp = || -> Result<_> {
        Ok(pd
            .create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) })?
            .into_init(&ToInitAttr::default())?)
    };
    let (a, b) = (new_qp()?, new_qp()?);

    let (port, gid) = (ctx.query_port(1)?, ctx.routable_gid(1)?);
    let endpoint = |qpn| Endpoint { lid: port.lid(), qpn, psn: Psn::new(0), gid: gid.gid };
    let rtr = |peer| ToRtrAttr::to_endpoint(&endpoint(peer), 1, Some(gid.index), port.active_mtu());
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    let a = a.into_rtr(&rtr(b_qpn))?.into_rts(&ToRtsAttr::new(Psn::new(0)))?;
    let b = b.into_rtr(&rtr(a_qpn))?.into_rts(&ToRtsAttr::new(Psn::new(0)))?;

    let (send, recv) = ([mr.sge(..5)?], [mr.sge(32..)?]);
    // SAFETY: `mr` outlives both QPs, and its bytes are not touched until both completions
    // below have been polled.
    unsafe {
        b.post_recv(&mut RecvWr::new(1, &recv))?;
        a.post_send(&mut SendWr::send_with_imm(2, &send, 7).flags(SendFlags::SIGNALED))?;
    }
    let (mut wcs, mut done) = ([WorkCompletion::EMPTY; 2], 0);
    while done < 2 {
        for wc in cq.poll(&mut wcs)?.iter() {
            assert!(wc.is_success(), "wr {}: {}", wc.wr_id(), wc.status());
            done += 1;
        }
    }
    println!(
        "{} received {:?} with immediate 7",
        ctx.name(),
        String::from_utf8_lossy(&mr.as_slice()[32..37])
    );
    Ok(())
}
