//! The server's side of the DC data path: a bounded pool of DC initiators, each on a thread
//! of its own with its CQ and a registered staging ring of a few chunks, that RDMA WRITE a
//! GET's bytes into a client's window or RDMA READ a PUT's out of it.
//!
//! A transfer holds one initiator from its first chunk to its last, with up to
//! [`IN_FLIGHT`] chunks on the wire at once (a slot of the ring is used again once its
//! operation has completed), while the request's file I/O and checksums run beside it.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdma_verbs::mlx5::{
    DcEndpoint, DcKey, DcPeer, DcRoute, DcWr, Dci, DciInitAttr, DciToRtrAttr, Mlx5Context,
};
use rdma_verbs::{
    AccessFlags, AckTimeout, CompletionQueue, Context, Gid, Lid, MemoryRegion, Mtu,
    ProtectionDomain, Psn, QpCapabilities, Qpn, RKey, RemoteAddr, RetryCount, RnrRetry, Rts,
    SendFlags, ToRtsAttr, WorkCompletion,
};
use tokio::sync::{mpsc as chunks, oneshot};

use super::port::Port;
use super::token::Descriptor;

/// Empty polls of a CQ before its waiter sleeps between polls.
const SPIN_POLLS: u32 = 1000;
/// The chunks of one transfer on the wire at once: each initiator's staging ring has as many
/// slots.
pub const IN_FLIGHT: usize = 4;

/// How the initiators are set up.
#[derive(Debug, Clone, Copy)]
pub struct DcConfig {
    /// The DC access key the clients' DCTs were created with (cuObject's default
    /// `0xffeeddcc`, [`DEFAULT_DC_KEY`](super::DEFAULT_DC_KEY)).
    pub key: u64,
    /// Initiators (and so transfers at once); a transfer beyond waits for a free one.
    pub initiators: usize,
    /// The bytes of one RDMA operation, and of each slot of an initiator's staging ring
    /// ([`IN_FLIGHT`] slots).
    pub chunk: usize,
    /// The largest transfer; a larger request is declined (`x-amz-rdma-reply: 501`).
    pub max_transfer: u64,
    /// The time a whole transfer may take.
    pub timeout: Duration,
}

impl Default for DcConfig {
    /// Key `0xffeeddcc`, 8 initiators of 1 MiB, transfers up to 1 GiB (vgwrdma's and
    /// cuObject's largest call) within 60 s.
    fn default() -> Self {
        DcConfig {
            key: super::DEFAULT_DC_KEY,
            initiators: 8,
            chunk: 1 << 20,
            max_transfer: 1 << 30,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Why a transfer failed (the message says at which step).
#[derive(Debug, Clone, thiserror::Error)]
#[error("RDMA transfer: {0}")]
pub struct TransferError(pub String);

/// The pool of initiators.
pub struct Initiators {
    jobs: SyncSender<Job>,
    config: DcConfig,
    device: String,
}

impl std::fmt::Debug for Initiators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} DC initiators on {} (key {:#x})",
            self.config.initiators, self.device, self.config.key
        )
    }
}

/// One transfer for an initiator.
enum Job {
    /// GET: write each chunk that arrives at the next offset of the window.
    Write {
        peer: Descriptor,
        data: chunks::Receiver<Bytes>,
        done: oneshot::Sender<Result<u64, TransferError>>,
    },
    /// PUT: read `len` bytes of the window, in chunks, into `data`.
    Read { peer: Descriptor, len: u64, data: chunks::Sender<Result<Bytes, TransferError>> },
}

/// The device the initiators run on, shared by their threads for the process's life.
struct Shared {
    mlx5: Mlx5Context<'static>,
    pd: ProtectionDomain<'static>,
    route: DcRoute,
    config: DcConfig,
}

/// The route attributes of cuObjServer's defaults (as vgwrdma mirrors them): hop limit 4,
/// traffic class 96, SL 0.
fn route(port: u8, sgid_index: u8, mtu: Mtu) -> DcRoute {
    DcRoute { hop_limit: 4, traffic_class: 96, ..DcRoute::new(port, Some(sgid_index), mtu) }
}

impl Initiators {
    /// Opens `name` (default: the first device) port 1, sending from GID `gid_index`
    /// (default: the port's routable RoCE v2 GID), and starts the initiators.
    ///
    /// # Errors
    ///
    /// [`rdma_verbs::Error::Unsupported`] when the device has no DC (not mlx5: Soft-RoCE,
    /// siw, other vendors); the errors of opening the device and making the objects.
    pub fn open(
        name: Option<&str>,
        gid_index: Option<u8>,
        config: DcConfig,
    ) -> rdma_verbs::Result<Initiators> {
        let ctx = match name {
            Some(name) => Context::open(name)?,
            None => Context::open_first()?,
        };
        let ctx: &'static Context = Box::leak(Box::new(ctx));
        let mlx5 = Mlx5Context::open(ctx)?;
        Self::start(mlx5, gid_index, config)
    }

    /// Starts the initiators on the device of `mlx5` (which may be a mock's).
    ///
    /// Every initiator is made on its own thread (at least one, with a chunk of at least
    /// 4 KiB) before this returns.
    ///
    /// # Errors
    ///
    /// As [`Initiators::open`].
    pub fn start(
        mlx5: Mlx5Context<'static>,
        gid_index: Option<u8>,
        config: DcConfig,
    ) -> rdma_verbs::Result<Initiators> {
        let (pool, worker) = Self::prepare(mlx5, gid_index, config)?;
        let (ready_tx, ready_rx) = mpsc::channel();
        for i in 0..pool.config.initiators {
            let (worker, ready) = (worker.clone(), ready_tx.clone());
            // A thread that cannot start counts as an initiator that did not come up.
            let _ = std::thread::Builder::new()
                .name(format!("cuobj-dci-{i}"))
                .spawn(move || worker.serve(&ready));
        }
        drop(ready_tx);
        for _ in 0..pool.config.initiators {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(rdma_verbs::Error::Unsupported { what: "DC initiator threads" })
                }
            }
        }
        Ok(pool)
    }

    /// A pool of one initiator that runs where the caller runs [`Worker::run`]: for a
    /// provider whose objects belong to one thread (the mock provider of the tests).
    ///
    /// # Errors
    ///
    /// As [`Initiators::open`].
    pub fn on_this_thread(
        mlx5: Mlx5Context<'static>,
        gid_index: Option<u8>,
        config: DcConfig,
    ) -> rdma_verbs::Result<(Initiators, Worker)> {
        Self::prepare(mlx5, gid_index, DcConfig { initiators: 1, ..config })
    }

    /// The pool's handle and the work its initiators share.
    fn prepare(
        mlx5: Mlx5Context<'static>,
        gid_index: Option<u8>,
        config: DcConfig,
    ) -> rdma_verbs::Result<(Initiators, Worker)> {
        let config = DcConfig {
            initiators: config.initiators.max(1),
            chunk: config.chunk.max(4096),
            ..config
        };
        let ctx = mlx5.context();
        let port = Port::query(ctx, gid_index)?;
        let pd = ctx.alloc_pd()?;
        let device = ctx.name().to_owned();
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            mlx5,
            pd,
            route: route(port.number, port.gid.index, port.mtu),
            config,
        }));
        let (jobs, queue) = mpsc::sync_channel(0);
        let worker = Worker { shared, queue: Arc::new(Mutex::new(queue)) };
        Ok((Initiators { jobs, config, device }, worker))
    }

    /// The configuration.
    pub fn config(&self) -> &DcConfig {
        &self.config
    }

    /// Writes what arrives on `data` into `peer`'s window from its base, in order; the bytes
    /// written once `data` has ended and every write completed. Waiting for an initiator
    /// and the whole transfer take at most the configured timeout.
    pub async fn write(
        &self,
        peer: Descriptor,
        data: chunks::Receiver<Bytes>,
    ) -> Result<u64, TransferError> {
        let (done, result) = oneshot::channel();
        let transfer = async {
            self.submit(Job::Write { peer, data, done }).await?;
            result.await.map_err(|_| TransferError("the initiator ended".into()))?
        };
        // On the deadline `data` is dropped with this future: the initiator's loop ends.
        tokio::time::timeout(self.config.timeout, transfer)
            .await
            .unwrap_or_else(|_| Err(TransferError("the transfer passed its deadline".into())))
    }

    /// Reads `len` bytes of `peer`'s window from its base: chunks, in order, on the receiver
    /// (an `Err` item ends it early, as the transfer's deadline does). Waiting for an
    /// initiator takes at most the configured timeout.
    pub async fn read(
        &self,
        peer: Descriptor,
        len: u64,
    ) -> Result<chunks::Receiver<Result<Bytes, TransferError>>, TransferError> {
        let (data, rx) = chunks::channel(2);
        let submitted = self.submit(Job::Read { peer, len, data });
        match tokio::time::timeout(self.config.timeout, submitted).await {
            Ok(submitted) => submitted.map(|()| rx),
            Err(_) => Err(TransferError("no DC initiator came free in time".into())),
        }
    }

    /// Hands `job` to the next free initiator, waiting for one off the async runtime (a job
    /// whose caller gave up is handed over all the same, and ends at once: its channels are
    /// closed).
    async fn submit(&self, job: Job) -> Result<(), TransferError> {
        let jobs = self.jobs.clone();
        tokio::task::spawn_blocking(move || jobs.send(job))
            .await
            .map_err(|e| TransferError(e.to_string()))?
            .map_err(|_| TransferError("no DC initiator is running".into()))
    }
}

/// What an initiator serves: the device and the pool's queue of transfers.
#[derive(Clone)]
pub struct Worker {
    shared: &'static Shared,
    queue: Arc<Mutex<Receiver<Job>>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cuobj::Worker")
    }
}

impl Worker {
    /// Makes an initiator on this thread and serves transfers until the pool is dropped.
    ///
    /// # Errors
    ///
    /// The error of making the initiator's CQ, staging area or DCI.
    pub fn run(self) -> rdma_verbs::Result<()> {
        let (ready, result) = mpsc::channel();
        self.serve(&ready);
        result.try_recv().unwrap_or(Ok(()))
    }

    /// An initiator's life (see [`worker`]).
    fn serve(&self, ready: &mpsc::Sender<rdma_verbs::Result<()>>) {
        worker(self.shared, &self.queue, ready);
    }
}

/// An initiator: its CQ, staging area and DCI (whether they were made goes to `ready`),
/// serving jobs until the pool is gone.
fn worker(
    shared: &'static Shared,
    queue: &Mutex<Receiver<Job>>,
    ready: &mpsc::Sender<rdma_verbs::Result<()>>,
) {
    let ctx = shared.mlx5.context();
    let made = ctx.create_cq(64).and_then(|cq| {
        let ring = shared.config.chunk * IN_FLIGHT;
        let staging = shared.pd.register(ring, AccessFlags::LOCAL_WRITE)?;
        Ok((cq, staging))
    });
    let (cq, mut staging) = match made {
        Ok(made) => made,
        Err(e) => return drop(ready.send(Err(e))),
    };
    let attr = DciInitAttr {
        cap: QpCapabilities { max_send_wr: 16, max_send_sge: 1, ..QpCapabilities::default() },
        ..DciInitAttr::new(&cq)
    };
    let mut dci = match to_rts(shared, &attr, None) {
        Ok(dci) => Some(dci),
        Err(e) => return drop(ready.send(Err(e))),
    };
    let _ = ready.send(Ok(()));
    loop {
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let Some(rts) = dci.take() else { return };
        let mut run = Run {
            shared,
            dci: &rts,
            cq: &cq,
            staging: &mut staging,
            deadline: Instant::now() + shared.config.timeout,
        };
        let (ok, target) = run.job(job);
        dci = if ok {
            Some(rts)
        } else {
            // The DCI may be in ERROR, or hold a WR that did not complete in time and might
            // still touch the staging area: reset (or recreate) it before the next job.
            match to_rts(shared, &attr, Some(rts)) {
                Ok(dci) => {
                    discard_completions(&cq);
                    Some(dci)
                }
                Err(e) => {
                    eprintln!("s3rdma: a DC initiator could not be renewed ({e}); it stops");
                    None
                }
            }
        };
        // Only now: a WR that never completed may name the target's AH until the reset.
        drop(target);
    }
}

/// Polls away what `cq` holds of a failed job: the operations that were in flight when it
/// stopped completed (flushed) or were discarded by the reset, so none is left to be taken
/// for the next job's.
fn discard_completions(cq: &CompletionQueue<'_>) {
    let mut wcs = [WorkCompletion::EMPTY; IN_FLIGHT];
    while matches!(cq.poll(&mut wcs), Ok(done) if !done.is_empty()) {}
}

/// A DCI at RTS: new, or `old` reset. ACK timeout exponent 16 and retry count 7 are
/// cuObjServer's defaults.
fn to_rts<'a>(
    shared: &'a Shared,
    attr: &DciInitAttr<'a>,
    old: Option<Dci<'a, Rts>>,
) -> rdma_verbs::Result<Dci<'a, Rts>> {
    let dci = match old {
        Some(old) => shared.mlx5.renew_dci(old, attr)?,
        None => shared.mlx5.create_dci(&shared.pd, attr)?,
    };
    let rts = ToRtsAttr {
        timeout: AckTimeout::new(16)?,
        retry_cnt: RetryCount::new(7)?,
        rnr_retry: RnrRetry::INFINITE,
        sq_psn: Psn::new(0)?,
        max_rd_atomic: shared.mlx5.dci_max_rd_atomic(None),
    };
    dci.into_init(shared.route.port, 0)?
        .into_rtr(&DciToRtrAttr { path_mtu: shared.route.path_mtu })?
        .into_rts(&rts)
}

/// One job on one initiator.
struct Run<'a, 'r> {
    shared: &'a Shared,
    dci: &'r Dci<'a, Rts>,
    cq: &'r CompletionQueue<'a>,
    staging: &'r mut MemoryRegion<'a>,
    deadline: Instant,
}

impl<'a> Run<'a, '_> {
    /// Carries out `job`; whether the DCI is fit for the next one, and the destination it
    /// was sent to, to be dropped only once the DCI is fit again.
    fn job(&mut self, job: Job) -> (bool, Option<DcPeer<'a>>) {
        let (peer, target) = match &job {
            Job::Write { peer, .. } | Job::Read { peer, .. } => (*peer, self.peer(peer)),
        };
        let (target, job) = match (target, job) {
            (Ok(target), job) => (target, job),
            // Nothing was posted: the DCI is fit.
            (Err(e), Job::Write { done, .. }) => {
                let _ = done.send(Err(e));
                return (true, None);
            }
            (Err(e), Job::Read { data, .. }) => {
                let _ = data.blocking_send(Err(e));
                return (true, None);
            }
        };
        let ok = match job {
            Job::Write { mut data, done, .. } => {
                let result = self.writes(&peer, &target, &mut data);
                let ok = result.is_ok();
                let _ = done.send(result);
                ok
            }
            Job::Read { len, data, .. } => match self.reads(&peer, &target, len, &data) {
                Ok(()) => true,
                Err(e) => {
                    let _ = data.blocking_send(Err(e));
                    false
                }
            },
        };
        (ok, Some(target))
    }

    fn writes(
        &mut self,
        peer: &Descriptor,
        target: &DcPeer<'_>,
        data: &mut chunks::Receiver<Bytes>,
    ) -> Result<u64, TransferError> {
        let (mut offset, mut posted, mut done) = (0u64, 0usize, 0usize);
        while let Some(bytes) = data.blocking_recv() {
            for piece in bytes.chunks(self.shared.config.chunk) {
                // Operations complete in order: once the oldest has, its slot is free.
                if posted - done == IN_FLIGHT {
                    self.completion()?;
                    done += 1;
                }
                let slot = self.slot(posted, piece.len());
                self.staging.as_mut_slice()[slot.clone()].copy_from_slice(piece);
                let remote = self.remote(peer, offset, piece.len())?;
                self.post(target, |sges, dest| DcWr::rdma_write(1, sges, remote, dest), slot)?;
                posted += 1;
                offset += piece.len() as u64;
            }
        }
        for _ in done..posted {
            self.completion()?;
        }
        Ok(offset)
    }

    fn reads(
        &mut self,
        peer: &Descriptor,
        target: &DcPeer<'_>,
        len: u64,
        data: &chunks::Sender<Result<Bytes, TransferError>>,
    ) -> Result<(), TransferError> {
        let chunk = self.shared.config.chunk as u64;
        let (mut asked, mut posted, mut done) = (0u64, 0usize, 0usize);
        while done * (chunk as usize) < len as usize {
            // Up to IN_FLIGHT reads ahead, then the oldest handed on once it completed.
            while posted - done < IN_FLIGHT && asked < len {
                let n = (len - asked).min(chunk) as usize;
                let remote = self.remote(peer, asked, n)?;
                let slot = self.slot(posted, n);
                self.post(target, |sges, dest| DcWr::rdma_read(2, sges, remote, dest), slot)?;
                posted += 1;
                asked += n as u64;
            }
            self.completion()?;
            let n = (len - done as u64 * chunk).min(chunk) as usize;
            let bytes = Bytes::copy_from_slice(&self.staging.as_slice()[self.slot(done, n)]);
            done += 1;
            if data.blocking_send(Ok(bytes)).is_err() {
                // The request is gone: the reads still in flight are waited for, so that
                // the DCI is idle and fit for the next job.
                for _ in done..posted {
                    self.completion()?;
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// The bytes of the ring's slot for the `n`th operation of a transfer, `len` of them.
    fn slot(&self, n: usize, len: usize) -> std::ops::Range<usize> {
        let at = (n % IN_FLIGHT) * self.shared.config.chunk;
        at..at + len
    }

    /// The address handle and destination of `peer`: from its GID when it has one (RoCE),
    /// else from its LID (InfiniBand).
    fn peer(&self, peer: &Descriptor) -> Result<DcPeer<'a>, TransferError> {
        let failed = |e: rdma_verbs::Error| TransferError(format!("the client's DCT: {e}"));
        let dctn = Qpn::new(peer.dctn).map_err(failed)?;
        let gid = peer.gid.map_or(Gid::ZERO, Gid::new);
        let key = DcKey::new(self.shared.config.key);
        let version = self.shared.mlx5.caps().dc_version;
        let endpoint = DcEndpoint::new(gid, Lid::new(peer.lid), dctn, key, version);
        DcPeer::new(&self.shared.mlx5, &self.shared.pd, &endpoint, &self.shared.route)
            .map_err(failed)
    }

    fn remote(
        &self,
        peer: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<RemoteAddr, TransferError> {
        let addr = peer.at(offset, len as u64).ok_or_else(|| {
            TransferError(format!(
                "{len} bytes at {offset} pass the client's window of {}",
                peer.size
            ))
        })?;
        Ok(RemoteAddr { addr, rkey: RKey::new(peer.rkey) })
    }

    /// Posts the signaled WR `make` builds over the bytes `slot` of the staging ring.
    fn post(
        &mut self,
        target: &DcPeer<'_>,
        make: impl for<'w> FnOnce(
            &'w [rdma_verbs::Sge],
            rdma_verbs::mlx5::DcDestination<'w>,
        ) -> DcWr<'w>,
        slot: std::ops::Range<usize>,
    ) -> Result<(), TransferError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| TransferError(format!("{what}: {e}"));
        let sges = [self.staging.sge(slot).map_err(|e| failed("the staging ring", &e))?];
        let wr = make(&sges, target.destination()).flags(SendFlags::SIGNALED);
        // SAFETY: the staging ring outlives the DCI's use of it: a slot is neither written
        // nor read until its WR's completion is polled ([`Run::completion`], in posting
        // order), and when one is not (an error or the deadline) the DCI is reset before the
        // next job; `target`'s AH is dropped only after that (`worker`). wr_ids are small.
        unsafe { self.dci.post_send_wrs(std::slice::from_ref(&wr)) }
            .map_err(|e| failed("posting", &e))
    }

    /// Waits until the deadline for the next completion (the oldest operation in flight),
    /// which must be a success.
    fn completion(&mut self) -> Result<(), TransferError> {
        let mut wcs = [WorkCompletion::EMPTY];
        for empty in 0u32.. {
            match self.cq.poll(&mut wcs) {
                Ok(done) if done.len() == 1 => break,
                Ok(_) => {}
                Err(e) => return Err(TransferError(format!("polling the CQ: {e}"))),
            }
            if Instant::now() >= self.deadline {
                return Err(TransferError("the transfer passed its deadline".into()));
            }
            // Spin while a chunk is on the wire (microseconds), then stop burning the core.
            match empty {
                0..SPIN_POLLS => std::thread::yield_now(),
                _ => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        let [wc] = wcs;
        if !wc.is_success() {
            return Err(TransferError(format!("the client's window refused the operation: {wc}")));
        }
        Ok(())
    }
}
