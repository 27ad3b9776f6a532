//! A server session's RDMA side, on a thread of its own that owns the session's CQ, queue
//! pair and registered region (so they are torn down in that order, by the thread that used
//! them): it is set up at PREPARE, waits for READY until the prepare deadline, then runs the
//! data phase within the exec deadline and answers with its outcome.
//!
//! A GET's region is a ring of a few blocks: at READY the range is read a block at a time on
//! a thread of its own, each block verified against its stored CRC64NVME, while the session's
//! thread copies the verified blocks into free slots and RDMA WRITEs each to the client's
//! region at its offset, the earlier writes in flight. A
//! PUT's region is the staging region of `size` bytes the client writes the object into; it
//! is handed to the commit a block at a time.

use std::ops::Range;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdma_verbs::*;
use tokio::sync::{mpsc as channel, oneshot};

use super::device::{nonzero_psn, wait_one, Device};
use crate::meta::BLOCK_SIZE;
use crate::read::OpenObject;

/// The blocks of a GET in flight at once: its ring has this many slots.
const RING_SLOTS: usize = 4;
/// The blocks of a PUT read out of its staging region ahead of the commit.
const COMMIT_AHEAD: usize = 2;

/// The operation a session stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// GetObject: the server RDMA WRITEs the range into the client's region.
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
    /// GET: what to send.
    pub source: Option<Source>,
}

/// What a GET sends: a range of an object opened at PREPARE, read at READY.
pub struct Source {
    /// The object.
    pub object: OpenObject,
    /// The bytes to send, `size` of them.
    pub range: Range<u64>,
    /// `bucket/key`, for errors.
    pub name: String,
}

impl Source {
    /// A slot of the ring: a block, or the whole range when it is shorter.
    fn slot_len(&self) -> usize {
        self.object.meta.block_size.min(self.range.end - self.range.start) as usize
    }

    /// The ring's slots: [`RING_SLOTS`], or fewer when the range spans fewer blocks.
    fn slots(&self) -> usize {
        let block = self.object.meta.block_size;
        let blocks = (self.range.end - 1) / block - self.range.start / block + 1;
        blocks.min(RING_SLOTS as u64) as usize
    }
}

impl Spec {
    /// The bytes the session registers and holds until it ends: a PUT's staging region of
    /// `size` bytes (the client writes the object in one RDMA WRITE), a GET's ring.
    pub fn held(&self) -> usize {
        match &self.source {
            Some(source) => source.slot_len() * source.slots(),
            None => self.size,
        }
    }
}

/// The server's side of a prepared session, for the PREPARE reply.
#[derive(Debug, Clone, Copy)]
pub struct Prepared {
    /// The session's QP.
    pub qpn: Qpn,
    /// Its first send PSN (not 0).
    pub psn: Psn,
    /// The session's region (`x-amz-rdma-mr-addr`, `-rkey`): a PUT's staging region, a
    /// GET's ring (which its client's queue pair may not write).
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
    /// PUT: the bytes that arrived, to commit, a block at a time (an error: the staging
    /// region could not be read). The session's thread holds the region until the last
    /// block is taken or the receiver dropped.
    Received(channel::Receiver<std::io::Result<Bytes>>),
}

/// How a data phase ended on the session's side.
enum Moved {
    Sent,
    Arrived,
}

/// Why a data phase stopped.
enum Stop {
    /// A completion other than the one expected.
    Completion(WorkCompletion),
    /// Anything else.
    Failed(String),
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
    let mut region = pd.register_remote_writable(
        spec.held(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    let cq = device.create_cq()?;
    let mut qp = device.create_qp(&pd, &cq, spec.op.peer_access())?;
    let psn = nonzero_psn();
    let prepared = Prepared { qpn: qp.qp_num(), psn, staging: region.remote(..)? };
    let _ = prepared_tx.send(Ok(prepared));
    loop {
        let ready = match ready_rx.recv_timeout(prepare_timeout) {
            Ok(ready) => ready,
            // The prepare deadline passed, or the session was cancelled or reaped.
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return Ok(()),
        };
        // The queue pair is gone once `transfer` returns, unless handed back for a retry:
        // nothing reaches the region any more while a PUT's bytes are committed.
        let (outcome, back) = transfer(device, &spec, &cq, qp, psn, &mut region, &ready);
        let retry = matches!(outcome, Err(Failure::Busy(_)));
        match outcome {
            Ok(Moved::Sent) => {
                let _ = ready.done.send(Ok(Outcome::Sent));
            }
            Ok(Moved::Arrived) => {
                let (blocks, received) = channel::channel(COMMIT_AHEAD);
                if ready.done.send(Ok(Outcome::Received(received))).is_ok() {
                    feed(&region, &blocks);
                }
            }
            Err(failure) => {
                let _ = ready.done.send(Err(failure));
            }
        }
        match back {
            Some(init) if retry => qp = init,
            _ => return Ok(()),
        }
    }
}

/// Hands a PUT's staging region to the commit a block at a time, each copied out as the
/// commit takes the previous ones, so that no copy of the whole object is made.
fn feed(staging: &RemoteWritableRegion<'_>, blocks: &channel::Sender<std::io::Result<Bytes>>) {
    let block = BLOCK_SIZE as usize;
    for at in (0..staging.len()).step_by(block) {
        let mut bytes = vec![0; block.min(staging.len() - at)];
        let read = staging.read(at, &mut bytes).map(|()| Bytes::from(bytes));
        let failed = read.is_err();
        // An error ends the body, and the commit with it; a dropped receiver: it gave up.
        if blocks.blocking_send(read.map_err(std::io::Error::other)).is_err() || failed {
            return;
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
    region: &mut RemoteWritableRegion<'_>,
    ready: &Ready,
) -> (std::result::Result<Moved, Failure>, Option<QueuePair<'a, Init>>) {
    let failed = |what: &str, e: &dyn std::fmt::Display| Failure::Failed(format!("{what}: {e}"));
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
    let moved = match (&spec.source, ready.client_region) {
        (Some(source), Some(remote)) => {
            send(&qp, cq, region, source, (remote, spec.cookie), ready.deadline)
                .map(|()| Moved::Sent)
        }
        (Some(_), None) => Err(Stop::Failed("READY gave no client region for a GET".into())),
        (None, _) => receive(cq, spec, ready.deadline).map(|()| Moved::Arrived),
    };
    match moved {
        Ok(moved) => (Ok(moved), None),
        Err(Stop::Completion(wc))
            if spec.op == Op::Get
                && matches!(wc.status(), WcStatus::RNR_RETRY_EXC_ERR | WcStatus::RETRY_EXC_ERR) =>
        {
            // There is no RTS → INIT: through RESET, for another READY.
            let back =
                qp.reset().and_then(|qp| qp.into_init(&device.to_init(spec.op.peer_access())));
            (Err(Failure::Busy(format!("the client did not take the write: {wc}"))), back.ok())
        }
        Err(Stop::Completion(wc)) => (
            Err(Failure::Failed(format!(
                "the data phase's completion is not the one expected: {wc} (immediate {:?}, {} bytes)",
                wc.imm_data(),
                wc.byte_len()
            ))),
            None,
        ),
        Err(Stop::Failed(e)) => (Err(Failure::Failed(e)), None),
    }
}

/// The next completion of `cq` before `deadline`.
fn next(cq: &CompletionQueue<'_>, deadline: Instant) -> std::result::Result<WorkCompletion, Stop> {
    match wait_one(cq, deadline) {
        Ok(Some(wc)) => Ok(wc),
        Ok(None) => Err(Stop::Failed("the data phase passed its deadline".into())),
        Err(e) => Err(Stop::Failed(format!("polling the CQ: {e}"))),
    }
}

/// A PUT's data phase: the client's one RDMA WRITE WITH IMMEDIATE of `size` bytes.
fn receive(
    cq: &CompletionQueue<'_>,
    spec: &Spec,
    deadline: Instant,
) -> std::result::Result<(), Stop> {
    let wc = next(cq, deadline)?;
    let arrived = wc.is_success()
        && wc.opcode() == WcOpcode::RECV_RDMA_WITH_IMM
        && wc.imm_data() == Some(spec.cookie)
        && wc.byte_len() as usize == spec.size;
    if arrived {
        Ok(())
    } else {
        Err(Stop::Completion(wc))
    }
}

/// One completion of a GET's RDMA WRITEs, which must be a success.
fn written(cq: &CompletionQueue<'_>, deadline: Instant) -> std::result::Result<(), Stop> {
    let wc = next(cq, deadline)?;
    if wc.is_success() && wc.opcode() == WcOpcode::RDMA_WRITE {
        Ok(())
    } else {
        Err(Stop::Completion(wc))
    }
}

/// A GET's data phase: the range read a block at a time into the ring's slots, each chunk
/// RDMA WRITTEN to the client's region (`to`, with the cookie) at its offset once verified,
/// while the earlier ones are in flight. The last goes WITH IMMEDIATE: RC places a queue
/// pair's WRITEs in order, so the client's one receive completes after every byte is there.
/// A block that fails its checksum ends the transfer before any of its bytes is sent, and
/// the client's receive never completes.
fn send(
    qp: &QueuePair<'_, Rts>,
    cq: &CompletionQueue<'_>,
    ring: &mut RemoteWritableRegion<'_>,
    source: &Source,
    (to, cookie): (RemoteAddr, u32),
    deadline: Instant,
) -> std::result::Result<(), Stop> {
    let (slot_len, slots) = (source.slot_len(), source.slots());
    let total = source.range.end - source.range.start;
    let failed = |what: &str, e: &dyn std::fmt::Display| Stop::Failed(format!("{what}: {e}"));
    let (mut sent, mut in_flight, mut slot) = (0u64, 0usize, 0usize);
    // The blocks are read and verified on a thread of their own, a ring's worth ahead, so
    // that file I/O and checksums overlap the posts even where a post does the transfer's
    // work in the caller's thread (rxe sends in the poster's context).
    let (ahead, read) = mpsc::sync_channel(slots);
    let reader = move || {
        for chunk in source.object.chunks(source.range.clone(), &source.name) {
            let last = chunk.is_err();
            // A closed channel: the sender stopped.
            if ahead.send(chunk).is_err() || last {
                return;
            }
        }
    };
    std::thread::scope(|scope| {
        scope.spawn(reader);
        let mut result = (|| {
            for chunk in read {
                let chunk = chunk.map_err(|e| match e {
                    crate::read::ReadError::Corrupt(why) => {
                        eprintln!("s3rdma: a hipobj-rc-v2 GET stopped: {why}");
                        Stop::Failed(format!(
                            "the stored bytes of {} fail their checksum; the object is not served",
                            source.name
                        ))
                    }
                    e => failed(&format!("reading {}", source.name), &e),
                })?;
                // Sends complete in order: once one has, the oldest slot is free.
                if in_flight == slots {
                    in_flight -= 1;
                    written(cq, deadline)?;
                }
                let at = slot * slot_len;
                ring.write(at, &chunk).map_err(|e| failed("filling the ring", &e))?;
                let sges = [ring.sge(at..at + chunk.len()).map_err(|e| failed("the ring", &e))?];
                let remote = RemoteAddr { addr: to.addr + sent, rkey: to.rkey };
                sent += chunk.len() as u64;
                let wr = if sent == total {
                    SendWr::rdma_write_with_imm(sent, &sges, remote, cookie)
                } else {
                    SendWr::rdma_write(sent, &sges, remote)
                };
                // SAFETY: the ring outlives `qp` (the session's thread drops the QP first), and
                // this slot is not written again before this WRITE's completion is polled.
                unsafe { qp.post_send_wr(&mut wr.flags(SendFlags::SIGNALED)) }
                    .map_err(|e| failed("posting an RDMA WRITE", &e))?;
                in_flight += 1;
                slot = (slot + 1) % slots;
            }
            if sent != total {
                return Err(Stop::Failed(format!("{} ended before the range did", source.name)));
            }
            Ok(())
        })();
        // Every write posted completes (flushed, when the QP is in error) before the ring is
        // filled again or the QP reset for a retry.
        while in_flight > 0 {
            in_flight -= 1;
            match written(cq, deadline) {
                Ok(()) => {}
                Err(Stop::Failed(e)) => return Err(result.err().unwrap_or(Stop::Failed(e))),
                Err(stop) => result = result.and(Err(stop)),
            }
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::tests::stored;

    #[test]
    fn a_get_holds_a_ring_of_at_most_four_blocks_and_a_put_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![7; (13 << 19) + 3];
        let (data_path, meta_path, locks) = stored(dir.path(), &data);
        let object = OpenObject::open(&locks, &data_path, &meta_path).unwrap();
        let spec = |source, size| Spec {
            op: Op::Get,
            size,
            cookie: 1,
            client_gid: Gid::new([0; 16]),
            client_psn: Psn::new(1).unwrap(),
            source,
        };
        let mib = 1 << 20;
        for (range, held) in [
            (0..data.len() as u64, 4 * mib),
            (10..110, 100),
            (mib as u64 - 50..mib as u64 + 50, 2 * 100),
            (mib as u64 - 1..3 * mib as u64, 3 * mib),
        ] {
            let size = (range.end - range.start) as usize;
            let source = Source { object: object.clone(), range: range.clone(), name: "o".into() };
            assert_eq!(spec(Some(source), size).held(), held, "{range:?}");
        }
        assert_eq!(spec(None, 5 * mib).held(), 5 * mib, "a PUT");
    }
}
