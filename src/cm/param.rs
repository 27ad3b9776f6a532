//! Connection parameters (`struct rdma_conn_param`).

use rdma_verbs_sys as sys;

use crate::error::{Error, InvalidInputKind, Result};
use crate::qp::{RetryCount, RnrRetry};

/// What a connect or accept asks of the connection (`struct rdma_conn_param`, see
/// `rdma_connect(3)` and `rdma_accept(3)`).
///
/// Private data travels with the request, the reply or the reject. Its room depends on the
/// transport and the message: over InfiniBand/RoCE at most 56 bytes with a connect, 196 with
/// an accept and 148 with a reject (rdma_cm's own header takes the rest of the CM message);
/// iWARP (MPA) allows more. The receiver of IB/RoCE private data sees the message's whole
/// area — the sender's bytes followed by zeros — so carry your own length in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnParam<'a> {
    /// Bytes for the peer (up to 255 here; see the limits above).
    pub private_data: &'a [u8],
    /// RDMA reads and atomics this side accepts outstanding from the peer.
    pub responder_resources: u8,
    /// RDMA reads and atomics this side may have outstanding to the peer.
    pub initiator_depth: u8,
    /// Retries of a send that gets no acknowledgement (IB/RoCE only; 7 never ends on rxe).
    pub retry_count: RetryCount,
    /// Retries when the peer has no receive posted (IB/RoCE only); [`RnrRetry::INFINITE`]
    /// retries forever.
    pub rnr_retry_count: RnrRetry,
}

impl Default for ConnParam<'_> {
    /// No private data; 1 read outstanding each way; 6 retries and 6 RNR retries, as
    /// [`ToRtsAttr::new`](crate::ToRtsAttr::new): neither waits forever.
    fn default() -> Self {
        ConnParam {
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: RetryCount::from_code(6),
            rnr_retry_count: RnrRetry::from_code(6),
        }
    }
}

impl<'a> ConnParam<'a> {
    /// The defaults with `private_data`.
    #[must_use]
    pub fn with_private_data(private_data: &'a [u8]) -> Self {
        ConnParam { private_data, ..Default::default() }
    }

    /// The raw struct, pointing into `self.private_data`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when the private data is longer than 255 bytes.
    pub(crate) fn to_raw(self) -> Result<sys::rdma_conn_param> {
        let len = private_data_len(self.private_data)?;
        Ok(sys::rdma_conn_param {
            private_data: self.private_data.as_ptr().cast(),
            private_data_len: len,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count.get(),
            rnr_retry_count: self.rnr_retry_count.get(),
            srq: 0,
            qp_num: 0,
        })
    }
}

/// The length of `data` as rdma_cm's `u8`, refused when longer.
pub(crate) fn private_data_len(data: &[u8]) -> Result<u8> {
    u8::try_from(data.len()).map_err(|_| {
        Error::invalid(
            InvalidInputKind::Size,
            format!(
                "{} bytes of private data; rdma_cm carries at most 255 (56 with an IB/RoCE \
             connect, 196 with an accept, 148 with a reject)",
                data.len()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_longer_than_255_is_refused() {
        let long = [0u8; 256];
        let err = ConnParam::with_private_data(&long).to_raw().unwrap_err();
        assert!(err.to_string().contains("256 bytes of private data"), "{err}");
        let raw = ConnParam::with_private_data(&long[..255]).to_raw().unwrap();
        assert_eq!(raw.private_data_len, 255);
        assert_eq!((raw.retry_count, raw.rnr_retry_count), (6, 6), "the defaults end");
        let forever = ConnParam { rnr_retry_count: RnrRetry::INFINITE, ..Default::default() };
        assert_eq!(forever.to_raw().unwrap().rnr_retry_count, 7);
    }
}
