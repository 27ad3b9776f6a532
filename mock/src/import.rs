//! Sharing objects between contexts (`ibv_import_device(3)`, `ibv_import_pd(3)`,
//! `ibv_import_mr(3)`, rdma-core v31), present when [`Optional::import`](crate::Optional)
//! says so.
//!
//! A mock context's command file is a memfd ([`ops::new_context`](super::ops)); a descriptor
//! of the same file (a duplicate) imports the context again, as the same uverbs file does on a
//! real device. The imported context shares the exporting one's PDs and MRs: `ibv_import_pd`
//! and `ibv_import_mr` find them by handle among the live objects of contexts on the same
//! file. An imported PD or MR is the exporting context's object, which the importer releases
//! with `ibv_unimport_*` only: destroying it (`ibv_dealloc_pd`, `ibv_dereg_mr`) is refused
//! with `EINVAL` and fatal at the mock's drop, since the kernel would destroy the exporter's
//! object. Unimporting what was not imported, or a PD still used here, is fatal too. As in
//! the kernel, the exporter's PD is busy (`EBUSY`) while objects an importer made on it
//! live.
//!
//! Failures leave the descriptor given to `ibv_import_device` open, as libibverbs' own
//! checks do (`libibverbs/device.c`); on success the imported context owns it.

use std::ffi::{c_int, c_void};
use std::ptr;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::ops::new_context;
use super::state::{serve, with, Kind, State};
use super::verbs::or_null;
use super::ContextConfig;

/// The file a descriptor names (device and inode), `None` when it names none.
fn file_of(fd: c_int) -> Option<(u64, u64)> {
    // (Under Miri contexts have no command file, and fstat is not available.)
    if fd < 0 {
        return None;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes only `st`, and fails cleanly on a bad descriptor.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

/// The command file of a live context.
fn file_of_context(ctx: *mut ibv_context) -> Option<(u64, u64)> {
    // SAFETY: the caller passes a live mock context.
    file_of(unsafe { (*ctx).cmd_fd })
}

/// The live object of exactly `kind` whose context shares `ctx`'s command file and that
/// `matches`; `EINVAL` when there is none, as for any unknown object.
fn shared<T>(
    s: &State,
    kind: Kind,
    ctx: *mut ibv_context,
    context_of: impl Fn(*mut T) -> *mut ibv_context,
    matches: impl Fn(*mut T) -> bool,
) -> Result<*mut T, c_int> {
    let file = file_of_context(ctx).ok_or(libc::EINVAL)?;
    let found = s.live_of(kind).into_iter().map(<*mut c_void>::cast::<T>).find(|&object| {
        !s.imported.contains(&object.cast())
            && file_of_context(context_of(object)) == Some(file)
            && matches(object)
    });
    found.ok_or(libc::EINVAL)
}

/// `ibv_import_device`: a new context on the file `cmd_fd` names, which must be a live mock
/// context's (`EINVAL` for a descriptor that names no file, `ENODEV` for another file).
pub(super) extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    or_null(serve(|s| {
        s.begin(Call::ImportDevice, Verb::ImportDevice)?;
        let file = file_of(cmd_fd).ok_or(libc::EINVAL)?;
        let contexts = s.live_of(Kind::Context);
        if !contexts.iter().any(|&ctx| file_of_context(ctx.cast()) == Some(file)) {
            return Err(libc::ENODEV);
        }
        let ctx = new_context(s, &ContextConfig::default()).as_ptr();
        // SAFETY: a context just made, which owns its own descriptor: it takes `cmd_fd`
        // instead, as a provider's imported context does.
        unsafe {
            libc::close((*ctx).cmd_fd);
            (*ctx).cmd_fd = cmd_fd;
        }
        Ok(ctx)
    }))
}

/// `ibv_import_pd`: the PD with `pd_handle` of a context on `context`'s command file.
pub(super) extern "C" fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd {
    or_null(serve(|s| {
        s.begin(Call::ImportPd { handle: pd_handle }, Verb::ImportPd)?;
        s.expect(context, Kind::Context)?;
        // SAFETY: live mock PDs, allocated as such.
        let context_of = |pd: *mut ibv_pd| unsafe { (*pd).context };
        // SAFETY: as above.
        let handle = |pd: *mut ibv_pd| unsafe { (*pd).handle } == pd_handle;
        shared(s, Kind::Pd, context, context_of, handle)?;
        let pd = s.adopt(ibv_pd { context, handle: pd_handle }, Kind::Pd);
        s.imported.insert(pd.cast());
        Ok(pd)
    }))
}

/// `ibv_import_mr`: the MR with `mr_handle`, of a PD with `pd`'s handle on `pd`'s command
/// file, with NULL `addr`, as `ibv_import_mr(3)` says.
pub(super) extern "C" fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr {
    or_null(serve(|s| {
        s.begin(Call::ImportMr { handle: mr_handle }, Verb::ImportMr)?;
        s.expect(pd, Kind::Pd)?;
        // SAFETY: a live mock PD (checked above).
        let (context, pd_handle) = unsafe { ((*pd).context, (*pd).handle) };
        // SAFETY: live mock MRs and their live PDs.
        let context_of = |mr: *mut ibv_mr| unsafe { (*mr).context };
        // SAFETY: as above.
        let named = |mr: *mut ibv_mr| unsafe {
            (*mr).handle == mr_handle && (*(*mr).pd).handle == pd_handle
        };
        let original = shared(s, Kind::Mr, context, context_of, named)?;
        // SAFETY: a live mock MR.
        let ibv_mr { length, lkey, rkey, .. } = unsafe { original.read() };
        let mr =
            ibv_mr { context, pd, addr: ptr::null_mut(), length, handle: mr_handle, lkey, rkey };
        let mr = s.adopt(mr, Kind::Mr);
        s.imported.insert(mr.cast());
        Ok(mr)
    }))
}

/// Releases an imported `object` of `kind` without touching the exporter's: fatal when it
/// was not imported or is still used (`in_use`).
fn unimport<T>(
    object: *mut T,
    kind: Kind,
    call: Call,
    verb: &str,
    in_use: fn(&State, *mut T) -> bool,
) {
    with(|s| {
        s.record(call);
        let problem = if s.expect(object, kind).is_err() {
            Some("not a live object")
        } else if !s.imported.contains(&object.cast()) {
            Some("not imported: its owner must destroy it")
        } else if in_use(s, object) {
            Some("still used by objects made on it")
        } else {
            None
        };
        match problem {
            Some(why) => s.destroyed_imports.push(format!("{verb} of {object:?}: {why}")),
            None => drop(s.release(object, kind)),
        }
    });
}

/// `ibv_unimport_pd`.
pub(super) extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    unimport(pd, Kind::Pd, Call::UnimportPd, "ibv_unimport_pd", State::pd_in_use);
}

/// `ibv_unimport_mr`.
pub(super) extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    unimport(mr, Kind::Mr, Call::UnimportMr, "ibv_unimport_mr", |_, _| false);
}

/// Whether a PD imported from `pd` is used by objects made on it: the kernel counts the users
/// of the one PD object whichever context made them, so `pd` is busy then.
pub(super) fn twins_in_use(s: &State, pd: *mut ibv_pd) -> bool {
    if s.imported.is_empty() {
        return false;
    }
    // SAFETY: a live mock PD (the caller checked), and live imported ones.
    let (file, handle) = unsafe { (file_of_context((*pd).context), (*pd).handle) };
    s.imported.iter().map(|&object| object.cast::<ibv_pd>()).any(|twin| {
        s.expect(twin, Kind::Pd).is_ok()
            // SAFETY: as above.
            && unsafe { (*twin).handle == handle && file_of_context((*twin).context) == file }
            && s.pd_in_use(twin)
    })
}

/// `EINVAL`, fatal at the mock's drop, when `verb` would destroy an imported `object`.
pub(super) fn refuse_imported<T>(s: &mut State, object: *mut T, verb: &str) -> Result<(), c_int> {
    if !s.imported.contains(&object.cast()) {
        return Ok(());
    }
    s.destroyed_imports
        .push(format!("{verb} of the imported {object:?}: the exporting process owns it"));
    Err(libc::EINVAL)
}
