//! `-R`: the QPs connected through rdma_cm, one connection per QP on port `-p` + 1, with
//! each side's buffer (address and rkey) in the connection's private data.

use super::args::Args;
use super::{Error, Mode};

/// Runs the test with its QPs connected by rdma_cm.
#[cfg(feature = "rdmacm")]
pub fn run(mode: Mode, args: &Args) -> Result<(), Error> {
    use std::net::{SocketAddr, ToSocketAddrs};
    use std::time::Duration;

    use rdma_verbs::cm::{CmId, EventChannel, PortSpace};

    let cm_port =
        args.port.checked_add(1).ok_or("-p must leave room for rdma_cm's port, -p + 1")?;
    let channel = EventChannel::new()?;
    match &args.server {
        Some(host) => {
            let mut control = super::open_control(mode, args, None)?;
            let dst = (host.as_str(), cm_port)
                .to_socket_addrs()
                .map_err(|e| format!("couldn't resolve {host}: {e}"))?
                .find(SocketAddr::is_ipv4)
                .ok_or_else(|| format!("{host} has no IPv4 address"))?;
            let ids = (0..args.qps)
                .map(|_| {
                    let id = CmId::new(&channel, PortSpace::TCP)?;
                    id.resolve_addr(None, dst, Duration::from_secs(5))?;
                    id.resolve_route(Duration::from_secs(5))?;
                    Ok(id)
                })
                .collect::<rdma_verbs::Result<Vec<_>>>()?;
            let ctx = ids[0].context()?;
            check_device(args.ib_dev.as_deref(), ctx)?;
            super::check_limits(ctx, mode, args)?;
            let param = by_cm::param(super::read_depth(ctx, mode, args)?, args)?;
            let mut client = by_cm::Client { ids: &ids, param };
            super::run_on(super::Side {
                mode,
                args,
                ctx,
                control: &mut control,
                connector: &mut client,
                share: None,
            })
        }
        None => {
            let listener = CmId::new(&channel, PortSpace::TCP)?;
            let any = SocketAddr::from(([0, 0, 0, 0], cm_port));
            listener.bind_addr(any).map_err(|e| format!("couldn't listen on {any}: {e}"))?;
            listener.listen(args.qps as i32)?;
            // Listening before the TCP channel opens: the client connects right after it.
            let mut control = super::open_control(mode, args, None)?;
            // The device is the one the first request came in on.
            let first = listener.get_request(by_cm::TIMEOUT)?;
            let ctx = first.id.context()?;
            check_device(args.ib_dev.as_deref(), ctx)?;
            super::check_limits(ctx, mode, args)?;
            let param = by_cm::param(super::read_depth(ctx, mode, args)?, args)?;
            let mut server = by_cm::Server {
                listener: &listener,
                first: Some(&first),
                others: Vec::new(),
                param,
            };
            super::run_on(super::Side {
                mode,
                args,
                ctx,
                control: &mut control,
                connector: &mut server,
                share: None,
            })
        }
    }
}

/// `-d`, when given, must name the device rdma_cm picked by address.
#[cfg(feature = "rdmacm")]
fn check_device(ib_dev: Option<&str>, ctx: &rdma_verbs::Context) -> Result<(), String> {
    match ib_dev {
        Some(dev) if dev != ctx.name() => Err(format!(
            "rdma_cm picked {} by address, not -d {dev}: use an address of {dev}'s netdev",
            ctx.name()
        )),
        _ => Ok(()),
    }
}

#[cfg(not(feature = "rdmacm"))]
pub fn run(_: Mode, _: &Args) -> Result<(), Error> {
    Err("-R (rdma_cm) needs rdma_cm: build with --features rdmacm".into())
}

#[cfg(feature = "rdmacm")]
mod by_cm {
    use std::time::Duration;

    use rdma_verbs::cm::{CmId, ConnParam, ConnectRequest};
    use rdma_verbs::{Init, QueuePair, RKey, RemoteAddr, RetryCount, Rts};

    use super::super::args::Args;
    use super::super::exchange::Control;
    use super::super::{Connect, Error};

    /// How long to wait for the peer's connection steps.
    pub const TIMEOUT: Duration = Duration::from_secs(120);

    /// What each connection asks for (private data aside): `reads` RDMA READs outstanding each
    /// way ([`super::super::read_depth`]) and `--retry_count`, as perftest's `-R`.
    pub fn param(reads: u8, args: &Args) -> Result<ConnParam<'static>, Error> {
        let mut param = ConnParam {
            responder_resources: reads,
            initiator_depth: reads,
            ..ConnParam::default()
        };
        if let Some(n) = args.retry_count {
            param.retry_count = RetryCount::new(n)?;
        }
        Ok(param)
    }

    /// `addr` then `rkey`, little-endian: the 12 bytes of private data.
    fn encode(mine: RemoteAddr) -> [u8; 12] {
        let mut data = [0u8; 12];
        data[..8].copy_from_slice(&mine.addr.to_le_bytes());
        data[8..].copy_from_slice(&mine.rkey.get().to_le_bytes());
        data
    }

    fn decode(data: &[u8]) -> Result<RemoteAddr, Error> {
        let (Some(addr), Some(rkey)) = (data.get(..8), data.get(8..12)) else {
            return Err(
                format!("the peer's private data holds {} bytes, not 12", data.len()).into()
            );
        };
        Ok(RemoteAddr {
            addr: u64::from_le_bytes(addr.try_into().expect("8 bytes")),
            rkey: RKey::new(u32::from_le_bytes(rkey.try_into().expect("4 bytes"))),
        })
    }

    /// The client: one resolved id per QP.
    pub struct Client<'a, 'ch> {
        pub ids: &'a [CmId<'ch>],
        /// What each connect asks for ([`param`]); the server's reply may lower the reads.
        pub param: ConnParam<'static>,
    }

    impl Connect for Client<'_, '_> {
        fn connect<'q>(
            &mut self,
            i: usize,
            qp: QueuePair<'q, Init>,
            mine: RemoteAddr,
            _: &mut Control,
        ) -> Result<(QueuePair<'q, Rts>, RemoteAddr), Error> {
            let data = encode(mine);
            let param = ConnParam { private_data: &data, ..self.param };
            let up = self.ids[i].connect(qp, &param, TIMEOUT)?;
            let remote = decode(&up.private_data)?;
            Ok((up.qp, remote))
        }
    }

    /// The server: the first request (whose device the test runs on), then one per QP.
    pub struct Server<'a, 'ch> {
        pub listener: &'a CmId<'ch>,
        pub first: Option<&'a ConnectRequest<'ch>>,
        /// The later requests, kept until the end: dropping one disconnects its QP.
        pub others: Vec<ConnectRequest<'ch>>,
        /// What each accept gives at most ([`param`]).
        pub param: ConnParam<'static>,
    }

    impl Connect for Server<'_, '_> {
        fn connect<'q>(
            &mut self,
            _: usize,
            qp: QueuePair<'q, Init>,
            mine: RemoteAddr,
            _: &mut Control,
        ) -> Result<(QueuePair<'q, Rts>, RemoteAddr), Error> {
            let request = match self.first.take() {
                Some(first) => first,
                None => {
                    self.others.push(self.listener.get_request(TIMEOUT)?);
                    self.others.last().expect("just pushed")
                }
            };
            let remote = decode(&request.private_data)?;
            let data = encode(mine);
            // No more than the client asked for either way (rdma_accept(3)).
            let param = ConnParam {
                private_data: &data,
                responder_resources: self.param.responder_resources.min(request.initiator_depth),
                initiator_depth: self.param.initiator_depth.min(request.responder_resources),
                ..self.param
            };
            let up = request.id.accept(qp, &param, TIMEOUT)?;
            Ok((up.qp, remote))
        }
    }
}
