//! A server session's RDMA side, on a thread of its own that owns the session's CQ, queue
//! pair and staging region (so they are torn down in that order, by the thread that used
//! them): it is set up at PREPARE, waits for READY until the prepare deadline, then runs the
//! data phase within the exec deadline and answers with its outcome.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rdma_verbs::*;
use tokio::sync::oneshot;

use super::device::{nonzero_psn, wait_one, Device};

/// The operation a session stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// GetObject: the server RDMA WRITEs the staged range into the client's region.
    Get,
    /// PutObject: the client RDMA WRITEs the object into the server's staging region.
    Put,
}

impl Op {
    /// What the client's queue pair may do to the session's: RDMA WRITE into the staging
    /// region for a PUT, nothing for a GET (the server writes out).
    fn peer_access(self) -> AccessFlags {
        match self {
            Op::Get => AccessFlags::empty(),
            Op::Put => AccessFlags::REMOTE_WRITE,
        }
    }
}

/// What PREPARE asked for.
pub struct Spec {
    /// GET or PUT.
    pub op: Op,
    /// The bytes moved.
    pub size: usize,
    /// The immediate value of the data's RDMA WRITE.
    pub cookie: u32,
    /// Where the client's QP is.
    pub client_gid: Gid,
    /// The client's first send PSN.
    pub client_psn: Psn,
    /// GET: the object's range, `size` bytes.
    pub staged: Option<Vec<u8>>,
}

/// The server's side of a prepared session, for the PREPARE reply.
#[derive(Debug, Clone, Copy)]
pub struct Prepared {
    /// The session's QP.
    pub qpn: Qpn,
    /// Its first send PSN (not 0).
    pub psn: Psn,
    /// The staging region (`x-amz-rdma-mr-addr`, `-rkey`).
    pub staging: RemoteAddr,
}

/// READY: run the data phase.
pub struct Ready {
    /// The client's QP.
    pub client_qpn: Qpn,
    /// GET: where to write.
    pub client_region: Option<RemoteAddr>,
    /// When the data phase is given up.
    pub deadline: Instant,
    /// Where the outcome goes.
    pub done: oneshot::Sender<Result<Outcome, Failure>>,
}

/// A data phase that completed.
#[derive(Debug)]
pub enum Outcome {
    /// GET: the bytes are in the client's region.
    Sent,
    /// PUT: the bytes that arrived, to commit.
    Received(Vec<u8>),
}

/// A data phase that did not complete.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The client's QP did not answer or had no receive posted: the session is back in
    /// Prepared and READY may be sent again.
    #[error("retryable: {0}")]
    Busy(String),
    /// The session is over.
    #[error("{0}")]
    Failed(String),
}

/// A session's thread: READYs go to it; dropping the sender cancels the session.
pub type Handle = mpsc::SyncSender<Ready>;

/// Sets up a session on a new thread; returns its side of the connection and its handle.
/// Blocks while the verbs run: call it off the async runtime.
pub fn start(
    device: &'static Device,
    spec: Spec,
    prepare_timeout: Duration,
) -> std::result::Result<(Prepared, Handle), String> {
    let (prepared_tx, prepared_rx) = mpsc::sync_channel(1);
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("hipobj-session".into())
        .spawn(move || {
            if let Err(e) = run(device, spec, prepare_timeout, &prepared_tx, ready_rx) {
                // Setup failed (the reply is waiting), or a verb after READY failed (told there).
                let _ = prepared_tx.send(Err(e.to_string()));
            }
        })
        .map_err(|e| format!("cannot start a session thread: {e}"))?;
    let prepared = prepared_rx.recv().map_err(|_| "the session thread ended".to_string())??;
    Ok((prepared, ready_tx))
}

fn run(
    device: &'static Device,
    spec: Spec,
    prepare_timeout: Duration,
    prepared_tx: &mpsc::SyncSender<std::result::Result<Prepared, String>>,
    ready_rx: Receiver<Ready>,
) -> Result<()> {
    // Declared in the order of creation: dropped QP first, then the CQ, then the region,
    // then the session's own PD.
    let pd = device.alloc_pd()?;
    let mut staging = pd.register_remote_writable(
        spec.size,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    if let Some(bytes) = &spec.staged {
        staging.write(0, bytes)?;
    }
    let cq = device.create_cq()?;
    let mut qp = device.create_qp(&pd, &cq, spec.op.peer_access())?;
    let psn = nonzero_psn();
    let prepared = Prepared { qpn: qp.qp_num(), psn, staging: staging.remote(..)? };
    let _ = prepared_tx.send(Ok(prepared));
    loop {
        let ready = match ready_rx.recv_timeout(prepare_timeout) {
            Ok(ready) => ready,
            // The prepare deadline passed, or the session was cancelled or reaped.
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return Ok(()),
        };
        let (outcome, back) = transfer(device, &spec, &cq, qp, psn, &staging, &ready);
        let retry = matches!(outcome, Err(Failure::Busy(_)));
        let _ = ready.done.send(outcome);
        match back {
            Some(init) if retry => qp = init,
            _ => return Ok(()),
        }
    }
}

/// The data phase on `qp`; hands back the QP in INIT when the client may retry.
fn transfer<'a>(
    device: &Device,
    spec: &Spec,
    cq: &CompletionQueue<'_>,
    qp: QueuePair<'a, Init>,
    psn: Psn,
    staging: &RemoteWritableRegion<'_>,
    ready: &Ready,
) -> (std::result::Result<Outcome, Failure>, Option<QueuePair<'a, Init>>) {
    let failed = |what: &str, e: &dyn std::fmt::Display| Failure::Failed(format!("{what}: {e}"));
    let sge = match staging.sge(..) {
        Ok(sge) => sge,
        Err(e) => return (Err(failed("staging", &e)), None),
    };
    let sges = [sge];
    if spec.op == Op::Put {
        // Posted before the QP reaches RTR, so that the client's WRITE, sent right after
        // READY, finds it. The data lands in the staging region, not in this receive.
        // SAFETY: the receive names no memory.
        if let Err(e) = unsafe { qp.post_recv_wr(&mut RecvWr::new(0, &[])) } {
            return (Err(failed("posting the receive", &e)), None);
        }
    }
    let qp = match device.connect(qp, ready.client_qpn, spec.client_gid, spec.client_psn, psn) {
        Ok(qp) => qp,
        Err(e) => return (Err(failed("connecting the queue pair", &e)), None),
    };
    if spec.op == Op::Get {
        let Some(remote) = ready.client_region else {
            return (Err(failed("READY", &"no client region for a GET")), None);
        };
        let mut wr =
            SendWr::rdma_write_with_imm(1, &sges, remote, spec.cookie).flags(SendFlags::SIGNALED);
        // SAFETY: `staging` outlives `qp` (the caller drops the QP first) and nothing writes
        // it locally while the WRITE may read it.
        if let Err(e) = unsafe { qp.post_send_wr(&mut wr) } {
            return (Err(failed("posting the RDMA WRITE", &e)), None);
        }
    }
    let wc = match wait_one(cq, ready.deadline) {
        Ok(Some(wc)) => wc,
        Ok(None) => {
            return (Err(Failure::Failed("the data phase passed its deadline".into())), None)
        }
        Err(e) => return (Err(failed("polling the CQ", &e)), None),
    };
    match spec.op {
        Op::Get if wc.is_success() && wc.opcode() == WcOpcode::RDMA_WRITE => {
            (Ok(Outcome::Sent), None)
        }
        Op::Get
            if matches!(wc.status(), WcStatus::RNR_RETRY_EXC_ERR | WcStatus::RETRY_EXC_ERR) =>
        {
            // There is no RTS → INIT: through RESET, for another READY.
            let back =
                qp.reset().and_then(|qp| qp.into_init(&device.to_init(spec.op.peer_access())));
            (Err(Failure::Busy(format!("the client did not take the write: {wc}"))), back.ok())
        }
        Op::Put
            if wc.is_success()
                && wc.opcode() == WcOpcode::RECV_RDMA_WITH_IMM
                && wc.imm_data() == Some(spec.cookie)
                && wc.byte_len() as usize == spec.size =>
        {
            let mut bytes = vec![0; spec.size];
            match staging.read(0, &mut bytes) {
                Ok(()) => (Ok(Outcome::Received(bytes)), None),
                Err(e) => (Err(failed("reading the staging region", &e)), None),
            }
        }
        _ => (
            Err(Failure::Failed(format!(
                "the data phase's completion is not the one expected: {wc} (immediate {:?}, {} bytes)",
                wc.imm_data(),
                wc.byte_len()
            ))),
            None,
        ),
    }
}
