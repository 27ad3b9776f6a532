//! dc_pingpong's wait for one completion, keeping the others.
//!
//! The DCT's receives and the DCI's sends complete on one CQ, and DC orders one QP's
//! completions only against that QP's own: the peer's SEND (a receive completion) can be
//! polled while we wait for our own send, and the reverse. A wait that dropped the
//! completions it was not waiting for would lose them and then wait for one already taken.
//! So each wait first takes a completion that an earlier poll already brought, and keeps any
//! it polls that is not the one wanted. Its unit test runs on the mock provider
//! (`cargo test --example dc_pingpong --features mlx5`).

use std::time::{Duration, Instant};

use rdma_verbs::{CompletionQueue, WorkCompletion};

/// The successful completions polled but not yet waited for, by `wr_id`.
#[derive(Debug, Default)]
pub struct Completions {
    early: Vec<u64>,
}

impl Completions {
    /// Polls `cq` until the completion `wr_id` arrives, or takes it if an earlier wait
    /// polled it; every other successful completion polled meanwhile is kept for a later
    /// wait. An error completion, or none of `wr_id` within `timeout`, is an error.
    pub fn wait(
        &mut self,
        cq: &CompletionQueue<'_>,
        wr_id: u64,
        timeout: Duration,
    ) -> Result<(), Box<dyn std::error::Error>> {
        if let Some(at) = self.early.iter().position(|&id| id == wr_id) {
            self.early.remove(at);
            return Ok(());
        }
        let start = Instant::now();
        let mut wcs: [WorkCompletion; 4] = Default::default();
        loop {
            let mut found = false;
            for wc in cq.poll(&mut wcs)?.iter() {
                if !wc.is_success() {
                    let (id, status) = (wc.wr_id(), wc.status());
                    return Err(format!("work request {id} failed: {status}").into());
                }
                // The first of `wr_id` ends the wait; any later one in this batch is kept.
                if wc.wr_id() == wr_id && !found {
                    found = true;
                } else {
                    self.early.push(wc.wr_id());
                }
            }
            if found {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(format!("no completion of work request {wr_id} in {timeout:?}").into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rdma_verbs::Context;
    use rdma_verbs_mock::{self as mock, ContextConfig, Mock, Optional};
    use rdma_verbs_sys as sys;

    use super::*;

    #[test]
    fn the_peers_send_polled_while_waiting_for_our_own_is_kept() {
        // The wr_ids of main.rs: 1 for the receives, 2 for the sends. The DCT and the DCI
        // share the CQ, and the peer's SEND (our receive) completes before our own SEND does.
        let mock = Mock::new();
        // SAFETY: a fresh context of the mock library, owned by `ctx`, which is dropped before
        // the mock (declared after it).
        let ctx = unsafe {
            Context::from_raw(
                mock::library(Optional::ALL),
                mock.context(ContextConfig::default()),
                mock::DEVICE_NAME.into(),
            )
        };
        let cq = ctx.create_cq(8).unwrap();
        for (wr_id, opcode) in [(1, sys::IBV_WC_RECV), (2, sys::IBV_WC_SEND)] {
            mock.push_completion(cq.as_raw(), sys::ibv_wc { wr_id, opcode, ..Default::default() });
        }
        let mut done = Completions::default();
        done.wait(&cq, 2, Duration::from_secs(5)).unwrap();
        mock.take_calls();
        // The receive was polled by the first wait: the next one takes it without polling.
        done.wait(&cq, 1, Duration::from_secs(5)).unwrap();
        assert_eq!(mock.take_calls(), []);
        // Taken once: a third wait finds nothing and says which completion it missed.
        let err = done.wait(&cq, 1, Duration::from_millis(20)).unwrap_err();
        assert!(err.to_string().contains("no completion of work request 1"), "{err}");
        // An error completion is an error, whatever it is.
        let failed =
            sys::ibv_wc { wr_id: 9, status: sys::IBV_WC_RETRY_EXC_ERR, ..Default::default() };
        mock.push_completion(cq.as_raw(), failed);
        let err = done.wait(&cq, 2, Duration::from_secs(5)).unwrap_err();
        assert!(err.to_string().contains("work request 9 failed"), "{err}");
    }
}
