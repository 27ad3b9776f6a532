//! Resources layer: the locked-memory limit, fork protection (`super::fork`), and a loopback
//! smoke test per device.

use std::time::{Duration, Instant};

use rdma_verbs_sys as sys;

use super::addressing::Route;
use super::link::Port;
use super::process::{self, Memlock};
use super::{bytes, named, Gate, Out, Targets};
use crate::access::AccessFlags;
use crate::buffer::BufferPool;
use crate::endpoint::{Endpoint, Psn};
use crate::error::Error;
use crate::gid::GidEntry;
use crate::qp::{QpCapabilities, QpInitAttr, ToInitAttr, ToRtrAttr, ToRtsAttr};
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::SendOp;

/// What the smoke test registers: a small real run's buffer, so that a locked-memory limit
/// too small for real work shows here rather than in the application.
const SMOKE_BYTES: usize = 1 << 20;

/// Below this, the memlock limit earns a WARN: services register buffer pools of this size
/// and far more (RDMA stacks usually run with no limit at all).
const TYPICAL_BYTES: u64 = 64 << 20;

/// How long the smoke test waits for its two completions (Soft-RoCE under emulation is slow).
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

/// What the smoke test sends.
const MESSAGE: &[u8] = b"rdma-verbs doctor smoke test";

/// Runs the layer's checks.
pub(super) fn check(
    out: &mut Out<'_>,
    verbs: &Gate<&'static sys::Ibverbs>,
    routes: &Targets<Route<'_>>,
) {
    let limit = process::memlock();
    let ipc_lock = process::has_ipc_lock() == Some(true);
    memlock(out, limit, ipc_lock);
    super::fork::check(out, verbs);
    // The routes are per port (`rxe0/1`); the test runs once per device, on its first
    // usable port.
    let mut devices: Vec<(&str, Vec<&Result<Route<'_>, String>>)> = Vec::new();
    for (label, gate) in routes {
        let device = label.split('/').next().unwrap_or_default();
        match devices.iter_mut().find(|(d, _)| *d == device) {
            Some((_, gates)) => gates.push(gate),
            None => devices.push((device, vec![gate])),
        }
    }
    for (device, gates) in devices {
        let check = named("smoke test", device);
        let Some(&gate) = gates.iter().find(|g| g.is_ok()).or_else(|| gates.first()) else {
            continue;
        };
        match gate {
            Err(reason) => out.skip(&check, reason.clone()),
            Ok(Route { gid: None, .. }) => out.skip(
                &check,
                "iWARP devices connect only through rdma_cm, and the doctor's smoke test \
                 connects by hand; the rdma_cm tests (device::cm) cover siw",
            ),
            &Ok(Route { port, gid: Some(gid) }) => match smoke(port, gid) {
                Ok(elapsed) => out.pass(
                    &check,
                    format!(
                        "PD, {} MR, CQ, two RC QPs to RTS on port {} with GID index {}, one SEND \
                         received intact in {} ms",
                        bytes(Some(SMOKE_BYTES as u64)),
                        port.num,
                        gid.index,
                        elapsed.as_millis()
                    ),
                ),
                Err(failure) => {
                    // A registration refused under a finite limit is the memlock problem.
                    let remedy = limit
                        .filter(|l| failure.step == REGISTER && l.soft.is_some() && !ipc_lock)
                        .map_or_else(
                            || {
                                format!(
                                    "the message says what failed; dmesg may say more, and \
                                     examples/loopback {device} repeats the test alone"
                                )
                            },
                            memlock_remedy,
                        );
                    out.fail(&check, format!("{}: {}", failure.step, failure.error), remedy);
                }
            },
        }
    }
}

fn memlock(out: &mut Out<'_>, limit: Option<Memlock>, ipc_lock: bool) {
    let check = "memlock";
    let Some(limit) = limit else {
        out.warn(
            check,
            "cannot read RLIMIT_MEMLOCK from /proc/self/limits",
            "check it with ulimit -l",
        );
        return;
    };
    let seen =
        format!("RLIMIT_MEMLOCK is {} (hard limit {})", bytes(limit.soft), bytes(limit.hard));
    match limit.soft {
        None => out.pass(check, format!("{seen}: registration is not limited")),
        Some(_) if ipc_lock => {
            out.pass(check, format!("{seen}, but this process has CAP_IPC_LOCK, which lifts it"))
        }
        Some(n) if n < SMOKE_BYTES as u64 => out.fail(
            check,
            format!(
                "{seen}, below even the smoke test's {}: memory registration (ibv_reg_mr) fails \
                 with ENOMEM",
                bytes(Some(SMOKE_BYTES as u64))
            ),
            memlock_remedy(limit),
        ),
        Some(n) if n < TYPICAL_BYTES => out.warn(
            check,
            format!(
                "{seen}: enough for small tests, but services register buffer pools of {} and more",
                bytes(Some(TYPICAL_BYTES))
            ),
            memlock_remedy(limit),
        ),
        Some(_) => out.pass(check, seen),
    }
}

/// How to raise `RLIMIT_MEMLOCK`, wherever the program runs.
fn memlock_remedy(limit: Memlock) -> String {
    let hard = match limit.hard {
        Some(hard) => {
            format!(" (the hard limit is {}: going past it needs root)", bytes(Some(hard)))
        }
        None => String::new(),
    };
    format!(
        "raise it: ulimit -l unlimited in the shell that starts the program{hard}; for a login \
         user, '<user> - memlock unlimited' in /etc/security/limits.conf; for a systemd service, \
         LimitMEMLOCK=infinity; for a container, docker/podman run --ulimit memlock=-1 (or \
         --cap-add=IPC_LOCK; Kubernetes: securityContext.capabilities.add: [\"IPC_LOCK\"], or \
         LimitMEMLOCK=infinity for the container runtime's service)"
    )
}

/// The step of the smoke test that registers memory.
const REGISTER: &str = "register the memory region";

/// A failed smoke-test step.
struct Failure {
    step: &'static str,
    error: String,
}

fn at(step: &'static str) -> impl Fn(Error) -> Failure {
    move |e| Failure { step, error: e.to_string() }
}

/// Two RC QPs of `port`'s device connected to each other, one SEND between them; the time it
/// all took.
fn smoke(port: Port<'_>, gid: GidEntry) -> Result<Duration, Failure> {
    let start = Instant::now();
    let ctx = port.ctx;
    let pd = ctx.alloc_pd().map_err(at("ibv_alloc_pd"))?;
    let cq = ctx.create_cq(4).map_err(at("ibv_create_cq"))?;
    let mr = pd.register(SMOKE_BYTES, AccessFlags::LOCAL_WRITE).map_err(at(REGISTER))?;
    let pool = BufferPool::new(mr, 4096).map_err(at("cut the region into buffers"))?;
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 1, ..Default::default() };
    let init = ToInitAttr { port: port.num, ..ToInitAttr::default() };
    let new_qp = || pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) })?.into_init(&init);
    let create = at("create the QPs and move them to INIT");
    let (a, b) = (new_qp().map_err(&create)?, new_qp().map_err(&create)?);
    let endpoint =
        |qpn| Endpoint { lid: port.attr.lid(), qpn, psn: Psn::from_low_bits(0), gid: gid.gid };
    let rtr = |peer| {
        ToRtrAttr::to_endpoint(&endpoint(peer), port.num, Some(gid.index), port.attr.active_mtu())
    };
    let rts = ToRtsAttr::new(Psn::from_low_bits(0));
    let connect = at("connect the QPs (INIT→RTR→RTS)");
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    let a = a.into_rtr(&rtr(b_qpn)).map_err(&connect)?;
    let a = a.into_rts(&rts).map_err(&connect)?;
    let b = b.into_rtr(&rtr(a_qpn)).map_err(&connect)?;
    let b = b.into_rts(&rts).map_err(&connect)?;

    let no_buffer = || Failure { step: "take a buffer", error: "the pool is empty".into() };
    let recv = pool.take().ok_or_else(no_buffer)?;
    b.post_recv_buffer(recv).map_err(at("post the receive"))?;
    let mut send = pool.take().ok_or_else(no_buffer)?;
    send.fill(MESSAGE).map_err(at("fill the send buffer"))?;
    a.post_send_buffer(send, SendOp::Send).map_err(at("post the SEND"))?;

    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut wcs: [WorkCompletion; 2] = Default::default();
    let (mut done, mut received) = (0, None);
    while done < 2 {
        if Instant::now() > deadline {
            return Err(Failure {
                step: "wait for the completions",
                error: format!("{done} of 2 arrived within {} s", COMPLETION_TIMEOUT.as_secs()),
            });
        }
        for wc in cq.poll(&mut wcs).map_err(at("ibv_poll_cq"))?.iter_mut() {
            if !wc.is_success() {
                return Err(Failure {
                    step: "complete",
                    error: format!("a work request failed: {wc}"),
                });
            }
            let is_recv = wc.opcode() == WcOpcode::RECV;
            if let Some(buffer) = pool.complete(wc) {
                if is_recv {
                    received = Some(buffer.as_slice().to_vec());
                }
            }
            done += 1;
        }
    }
    match received {
        Some(bytes) if bytes == MESSAGE => Ok(start.elapsed()),
        other => Err(Failure {
            step: "check the received bytes",
            error: format!("sent {MESSAGE:?}, received {other:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{Layer, Report, Status};

    fn memlock_finding(limit: Option<Memlock>, ipc_lock: bool) -> (Status, String, Option<String>) {
        let mut report = Report::default();
        memlock(&mut report.layer(Layer::Resources), limit, ipc_lock);
        let f = &report.findings()[0];
        (f.status, f.detail.clone(), f.remedy.clone())
    }

    #[test]
    fn memlock_fails_below_the_smoke_test_and_warns_below_typical() {
        let small = Memlock { soft: Some(64 << 10), hard: Some(64 << 10) };
        let (status, detail, remedy) = memlock_finding(Some(small), false);
        assert_eq!(status, Status::Fail);
        assert!(detail.starts_with("RLIMIT_MEMLOCK is 64 KiB (hard limit 64 KiB)"), "{detail}");
        let remedy = remedy.unwrap();
        assert!(
            remedy.contains("ulimit -l unlimited") && remedy.contains("needs root"),
            "{remedy}"
        );

        let default = Memlock { soft: Some(8 << 20), hard: None };
        assert_eq!(memlock_finding(Some(default), false).0, Status::Warn);
        assert_eq!(memlock_finding(Some(default), true).0, Status::Pass, "CAP_IPC_LOCK lifts it");
        let none = Memlock { soft: None, hard: None };
        assert_eq!(memlock_finding(Some(none), false).0, Status::Pass);
        assert_eq!(memlock_finding(None, false).0, Status::Warn);
    }
}
