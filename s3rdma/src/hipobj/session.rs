//! The sessions of `hipobj-rc-v2`: each bound to the principal (access key) that prepared it,
//! named by 128 random bits, and reaped at its deadline.
//!
//! States: `Publishing` (PREPARE is setting it up; counts against the limits) → `Prepared`
//! (READY may come) → `Transferring` (one READY runs the data phase) → removed. A retryable
//! failure puts it back to `Prepared` with a new prepare deadline; any other end, CANCEL or
//! a passed deadline removes it, which ends its thread.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::data_path::{Handle, Op};
use super::error::RcError;

/// Bounds on sessions.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Sessions at once, of all principals.
    pub max_sessions: usize,
    /// Sessions at once of one principal.
    pub max_per_principal: usize,
    /// Bytes all open sessions may hold registered at once: a PUT its staging region of
    /// its size (up to 2^31 − 1 bytes), a GET its ring of a few MiB, until it ends.
    pub max_staged_bytes: u64,
    /// How long a prepared session waits for READY.
    pub prepare_timeout: Duration,
    /// How long READY's data phase (and a PUT's commit) may take.
    pub exec_timeout: Duration,
}

impl Default for SessionLimits {
    /// versitygw's defaults: 1024 sessions, 64 per principal, 100 s to READY, 30 s to move;
    /// and 1 GiB staged at once.
    fn default() -> Self {
        SessionLimits {
            max_sessions: 1024,
            max_per_principal: 64,
            max_staged_bytes: 1 << 30,
            prepare_timeout: Duration::from_secs(100),
            exec_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Publishing,
    Prepared,
    Transferring,
}

/// What a session moves, and where.
#[derive(Debug, Clone)]
pub struct Target {
    /// GET or PUT.
    pub op: Op,
    /// The bucket.
    pub bucket: String,
    /// The key.
    pub key: String,
    /// The bytes moved.
    pub size: u64,
    /// The bytes of memory the session holds registered (counted against
    /// [`SessionLimits::max_staged_bytes`]).
    pub held: u64,
    /// A PUT of a part of a multipart upload.
    pub part: Option<Part>,
    /// A GET's object's ETag.
    pub etag: Option<String>,
}

/// A part of a multipart upload, as a target's query names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// `uploadId`.
    pub upload_id: String,
    /// `partNumber`, 1 to 10000.
    pub number: i32,
}

struct Session {
    principal: String,
    cookie: u32,
    target: Target,
    state: State,
    expires: Instant,
    handle: Option<Handle>,
}

/// A session READY has claimed.
pub struct Claimed {
    /// What it moves.
    pub target: Target,
    /// Its thread.
    pub handle: Handle,
    /// When its data phase is given up.
    pub deadline: Instant,
}

/// The open sessions.
pub struct Sessions {
    limits: SessionLimits,
    open: Mutex<HashMap<u128, Session>>,
}

impl Sessions {
    /// None yet.
    pub fn new(limits: SessionLimits) -> Sessions {
        Sessions { limits, open: Mutex::new(HashMap::new()) }
    }

    /// The limits.
    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u128, Session>> {
        // Every update leaves the map consistent: a panicking holder leaves nothing half done.
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        open.retain(|_, s| s.expires > now);
        open
    }

    /// Removes the sessions whose deadline has passed (also done on every other call).
    pub fn reap(&self) {
        drop(self.lock());
    }

    /// A new session of `principal` in `Publishing`, within the limits; its id.
    pub fn reserve(&self, principal: &str, cookie: u32, target: Target) -> Result<u128, RcError> {
        let mut open = self.lock();
        if open.len() >= self.limits.max_sessions {
            return Err(RcError::limit(format!("{} sessions are open", open.len())));
        }
        let own = open.values().filter(|s| s.principal == principal).count();
        if own >= self.limits.max_per_principal {
            return Err(RcError::limit(format!("this access key has {own} sessions open")));
        }
        let staged: u64 = open.values().map(|s| s.target.held).sum();
        if staged.saturating_add(target.held) > self.limits.max_staged_bytes {
            return Err(RcError::limit(format!(
                "open sessions stage {staged} bytes, and {} more would pass the server's {}",
                target.held, self.limits.max_staged_bytes
            )));
        }
        let id = loop {
            let id = rand::random::<u128>();
            if !open.contains_key(&id) {
                break id;
            }
        };
        let session = Session {
            principal: principal.to_owned(),
            cookie,
            target,
            state: State::Publishing,
            expires: Instant::now() + self.limits.prepare_timeout,
            handle: None,
        };
        open.insert(id, session);
        Ok(id)
    }

    /// The reserved session `id` is set up: `Prepared`, READY goes to `handle`. False when
    /// it expired meanwhile (and `handle` is dropped).
    pub fn publish(&self, id: u128, handle: Handle) -> bool {
        let mut open = self.lock();
        let Some(s) = open.get_mut(&id) else { return false };
        s.state = State::Prepared;
        s.handle = Some(handle);
        true
    }

    /// Removes `id` (a failed setup, a finished transfer); its thread ends.
    pub fn remove(&self, id: u128) {
        self.lock().remove(&id);
    }

    /// READY: the `Prepared` session `id` of `principal` with `cookie` moves to
    /// `Transferring`. Another principal's session, or a wrong cookie, is as unknown as one
    /// that does not exist (and stays as it was).
    pub fn claim(&self, id: u128, principal: &str, cookie: u32) -> Result<Claimed, RcError> {
        let mut open = self.lock();
        let Some(s) = open.get_mut(&id).filter(|s| s.principal == principal && s.cookie == cookie)
        else {
            return Err(RcError::no_session());
        };
        let handle = match (&s.state, &s.handle) {
            (State::Prepared, Some(handle)) => handle.clone(),
            _ => return Err(RcError::conflict("the session is not waiting for READY")),
        };
        s.state = State::Transferring;
        s.expires = Instant::now() + self.limits.exec_timeout;
        Ok(Claimed { target: s.target.clone(), handle, deadline: s.expires })
    }

    /// A retryable data phase: back to `Prepared`, with a new prepare deadline.
    pub fn unclaim(&self, id: u128) {
        if let Some(s) = self.lock().get_mut(&id) {
            s.state = State::Prepared;
            s.expires = Instant::now() + self.limits.prepare_timeout;
        }
    }

    /// CANCEL: removes `principal`'s session `id` if there is one.
    pub fn cancel(&self, id: u128, principal: &str) {
        let mut open = self.lock();
        if open.get(&id).is_some_and(|s| s.principal == principal) {
            open.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(held: u64) -> Target {
        let (bucket, key) = ("b".into(), "k".into());
        Target { op: Op::Get, bucket, key, size: 1 << 30, held, part: None, etag: None }
    }

    #[test]
    fn the_bytes_staged_at_once_are_bounded_across_principals() {
        let limits = SessionLimits { max_staged_bytes: 100, ..SessionLimits::default() };
        let sessions = Sessions::new(limits);
        let first = sessions.reserve("a", 1, target(60)).unwrap();
        let refused = sessions.reserve("b", 1, target(50)).unwrap_err();
        assert!(format!("{refused:?}").contains("stage 60 bytes"), "{refused:?}");
        sessions.reserve("b", 1, target(40)).unwrap();
        sessions.remove(first);
        sessions.reserve("b", 1, target(50)).unwrap();
    }
}
