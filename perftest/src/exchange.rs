//! The TCP side channel: parameters both sides must agree on, endpoints, and step barriers.

use std::fmt::Display;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::str::FromStr;
use std::time::Duration;

use rdma_verbs::endpoint::PINGPONG_MESSAGE_LEN;
use rdma_verbs::{Endpoint, RKey, RemoteAddr};

use super::Error;

/// How long to wait for the peer on TCP.
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// A line-oriented TCP connection to the peer.
pub struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Control {
    /// As the client: connects to `host:port`.
    pub fn connect(host: &str, port: u16) -> Result<Control, Error> {
        let stream = TcpStream::connect((host, port))
            .map_err(|e| format!("couldn't connect to {host}:{port}: {e}"))?;
        Control::new(stream)
    }

    /// As the server: waits for one client on `port` (IPv6 and IPv4 where possible).
    pub fn accept(port: u16) -> Result<Control, Error> {
        Control::new(Control::listen(port)?.accept()?.0)
    }

    /// The server's socket on `port`, clients queued from now on.
    pub fn listen(port: u16) -> Result<TcpListener, Error> {
        Ok(TcpListener::bind(("::", port))
            .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
            .map_err(|e| format!("couldn't listen on port {port}: {e}"))?)
    }

    /// As the server: waits for one client on `listener`, a non-blocking one, until `stop`
    /// (asked every 20 ms) says to give up; then `None`.
    pub fn accept_unless(
        listener: &TcpListener,
        stop: impl Fn() -> bool,
    ) -> Result<Option<Control>, Error> {
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    return Control::new(stream).map(Some);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if stop() {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn new(stream: TcpStream) -> Result<Control, Error> {
        stream.set_read_timeout(Some(PEER_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Control { writer: stream.try_clone()?, reader: BufReader::new(stream) })
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) -> Result<(), Error> {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| format!("the peer is gone: {e}").into())
    }

    /// Receives one line.
    pub fn recv(&mut self) -> Result<String, Error> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err("the peer closed the connection".into()),
            Ok(_) => Ok(line.trim_end().to_owned()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(format!("no word from the peer within {} s", PEER_TIMEOUT.as_secs()).into())
            }
            Err(e) => Err(format!("reading from the peer: {e}").into()),
        }
    }

    /// Receives one line however long the peer takes (a run of any -D): a peer that dies
    /// closes the connection, which ends the wait.
    pub fn recv_unbounded(&mut self) -> Result<String, Error> {
        self.reader.get_ref().set_read_timeout(None)?;
        let line = self.recv();
        self.reader.get_ref().set_read_timeout(Some(PEER_TIMEOUT))?;
        line
    }

    /// Receives one line if a whole one has arrived, without waiting.
    pub fn try_recv(&mut self) -> Result<Option<String>, Error> {
        if !self.reader.buffer().contains(&b'\n') {
            self.reader.get_ref().set_nonblocking(true)?;
            let mut byte = [0u8; 1];
            let peeked = self.reader.get_ref().peek(&mut byte);
            self.reader.get_ref().set_nonblocking(false)?;
            match peeked {
                Ok(0) => return Err("the peer closed the connection".into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(format!("reading from the peer: {e}").into()),
            }
        }
        self.recv().map(Some)
    }

    /// Sends `line`, then expects the peer's line to be the same step.
    pub fn barrier(&mut self, step: &str) -> Result<(), Error> {
        self.send(step)?;
        let got = self.recv()?;
        if got != step {
            return Err(format!("the peer is out of step: expected {step:?}, got {got:?}").into());
        }
        Ok(())
    }

    /// Sends ours, receives theirs, and refuses any difference, naming both values.
    pub fn agree(&mut self, ours: &[(&str, String)]) -> Result<(), Error> {
        let line: Vec<String> = ours.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.send(&format!("rdma-verbs-bw {}", line.join(" ")))?;
        let theirs = self.recv()?;
        let theirs: Vec<(&str, &str)> = theirs
            .strip_prefix("rdma-verbs-bw ")
            .ok_or_else(|| {
                format!("the peer is not one of rdma-verbs' perftest tools (it sent {theirs:?})")
            })?
            .split(' ')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let differences: Vec<String> = ours
            .iter()
            .filter_map(|(key, value)| {
                let peer = theirs.iter().find(|(k, _)| k == key).map_or("(missing)", |(_, v)| v);
                (peer != value).then(|| format!("{key} is {value} here but {peer} at the peer"))
            })
            .collect();
        if !differences.is_empty() {
            return Err(format!(
                "client and server disagree: {}; start both sides with the same options",
                differences.join(", ")
            )
            .into());
        }
        Ok(())
    }

    /// Sends our `what` figure, receives the peer's, and returns the smaller.
    pub fn smaller_of<T: FromStr + Display + Ord>(
        &mut self,
        what: &str,
        ours: T,
    ) -> Result<T, Error> {
        self.send(&format!("{what} {ours}"))?;
        let line = self.recv()?;
        let theirs = line.strip_prefix(what).and_then(|n| n.strip_prefix(' ')?.parse::<T>().ok());
        let theirs = theirs
            .ok_or_else(|| format!("the peer is out of step: it sent {line:?}, not its {what}"))?;
        Ok(ours.min(theirs))
    }

    /// Exchanges a QP endpoint and the memory the peer may reach.
    pub fn swap_endpoint(
        &mut self,
        me: &Endpoint,
        mine: RemoteAddr,
    ) -> Result<(Endpoint, RemoteAddr), Error> {
        let msg = me.to_pingpong_message();
        let text = std::str::from_utf8(&msg[..PINGPONG_MESSAGE_LEN - 1]).expect("hex and colons");
        self.send(&format!("{text} {:08x} {:016x}", mine.rkey.get(), mine.addr))?;
        let line = self.recv()?;
        let bad = || format!("bad endpoint line from the peer: {line:?}");
        let mut parts = line.split(' ');
        let (Some(ep), Some(rkey), Some(addr), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad().into());
        };
        let mut msg = [0u8; PINGPONG_MESSAGE_LEN];
        msg.get_mut(..ep.len()).ok_or_else(bad)?.copy_from_slice(ep.as_bytes());
        let peer = Endpoint::from_pingpong_message(&msg).map_err(|e| format!("{}: {e}", bad()))?;
        let rkey = u32::from_str_radix(rkey, 16).map_err(|_| bad())?;
        let addr = u64::from_str_radix(addr, 16).map_err(|_| bad())?;
        Ok((peer, RemoteAddr { addr, rkey: RKey::new(rkey) }))
    }
}
