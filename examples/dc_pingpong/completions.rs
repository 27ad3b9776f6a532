//! dc_pingpong's wait for one completion, keeping the others.
//!
//! The DCT's receives and the DCI's sends complete on one CQ, and DC orders one QP's
//! completions only against that QP's own: the peer's SEND (a receive completion) can be
//! polled while we wait for our own send, and the reverse. A wait that dropped the
//! completions it was not waiting for would lose them and then wait for one already taken.
//! So each wait first takes a completion that an earlier poll already brought, and keeps any
//! it polls that is not the one wanted. Shared with `tests/integration/mock/dc.rs`.

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
