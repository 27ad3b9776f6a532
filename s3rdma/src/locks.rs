//! Per-key locks that keep a reader from opening an object's bytes and metadata of two
//! different publications: a publish renames both under the write lock, a reader opens both
//! under the read lock. One server process per root directory.

use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// How many locks the keys share (by hash).
const STRIPES: usize = 64;

/// The locks, striped by the hash of the object's path.
#[derive(Debug)]
pub struct KeyLocks {
    hasher: RandomState,
    stripes: [RwLock<()>; STRIPES],
}

impl Default for KeyLocks {
    fn default() -> Self {
        Self { hasher: RandomState::new(), stripes: std::array::from_fn(|_| RwLock::new(())) }
    }
}

impl KeyLocks {
    fn stripe(&self, path: &Path) -> &RwLock<()> {
        &self.stripes[(self.hasher.hash_one(path) % STRIPES as u64) as usize]
    }

    /// Held while the object at `path` is opened with its metadata.
    pub fn read(&self, path: &Path) -> RwLockReadGuard<'_, ()> {
        // A poisoned lock guards no data: a panic while holding it left nothing half-done.
        self.stripe(path).read().unwrap_or_else(|e| e.into_inner())
    }

    /// Held while the object at `path` and its metadata are renamed into place or removed.
    pub fn write(&self, path: &Path) -> RwLockWriteGuard<'_, ()> {
        self.stripe(path).write().unwrap_or_else(|e| e.into_inner())
    }
}
