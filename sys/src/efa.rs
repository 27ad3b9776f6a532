//! libefa, the direct verbs (`efadv`) of the AWS Elastic Fabric Adapter provider, loaded at
//! run time on first use.
//!
//! Built only when the system has `infiniband/efadv.h` (cfg `rdma_verbs_efadv`, set by
//! `build.rs`). Only the SRD transport of the safe crate's `efa` feature uses it, so nothing
//! here runs until an EFA entry point asks for it ([`libefa()`]).
//!
//! Like librdmacm (`rdmacm.rs`): `dlopen("libefa.so.1", RTLD_NOW | RTLD_LOCAL)` once
//! per process, never `dlclose`d, after libibverbs (libefa `NEEDED`s `libibverbs.so.1`, which
//! then resolves to the one already loaded). `RDMA_VERBS_LIBEFA` overrides the name.
//!
//! # Which copy of libefa
//!
//! libefa is also the EFA *provider*: libibverbs loads it for an EFA device (on Debian as
//! `libibverbs/libefa-rdmav34.so`, a symlink to the same `libefa.so.1.*` file), and glibc's
//! `dlopen` returns that object again for `libefa.so.1`, matching the file rather than the
//! name. Every efadv function first asks `is_efa_dev()`, which compares the device's ops with
//! its own copy's: a device of another provider, or of a second copy of libefa, is answered
//! `EOPNOTSUPP`. Even so, efadv functions cast the context to libefa's own `efa_context`
//! once that test passes, so [`Efa::drives`] tells whether a context's provider is this very
//! file before the safe crate calls one.

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::os::unix::Library;

use crate::bindings::*;
use crate::loader::{fn_table, loaded_path, open, real_path, LoadError, RdmaLibrary};

/// The run-time name of libefa.
pub const LIBEFA_SONAME: &str = "libefa.so.1";

/// Environment variable naming the libefa to load instead of [`LIBEFA_SONAME`].
pub const LIBEFA_ENV: &str = "RDMA_VERBS_LIBEFA";

fn_table! {
    /// The libefa functions the SRD transport calls (both `EFA_1.1`, rdma-core v26).
    pub struct EfaFns, missing: LoadError::MissingSymbol { lib: RdmaLibrary::Efa };
    required {
        /// `efadv_query_device(3)`: returns 0 or an errno (`EOPNOTSUPP` for a device that is
        /// not EFA).
        efadv_query_device: fn(*mut ibv_context, *mut efadv_device_attr, u32) -> c_int;
        /// `efadv_create_qp_ex(3)`: the QP, or NULL with `errno` set.
        efadv_create_qp_ex: fn(*mut ibv_context, *mut ibv_qp_init_attr_ex,
            *mut efadv_qp_init_attr, u32) -> *mut ibv_qp;
    }
    optional {}
}

/// The loaded libefa: where it came from and its functions.
#[allow(missing_debug_implementations)]
pub struct Efa {
    /// Kept so the library is never unloaded. `None` for a table built from plain pointers.
    _lib: Option<Library>,
    path: PathBuf,
    /// The function table.
    pub fns: EfaFns,
}

impl Efa {
    /// A library made of plain function pointers (a mock provider's), reported as loaded
    /// from `path`.
    ///
    /// # Safety
    ///
    /// Each function in `fns` must behave as the libefa function of the same name (its man
    /// page's contract) on the objects of the libibverbs it is used with.
    pub unsafe fn from_fns(fns: EfaFns, path: PathBuf) -> Efa {
        Efa { _lib: None, path, fns }
    }

    /// The file the library was loaded from, symlinks resolved (for example
    /// `/usr/lib/x86_64-linux-gnu/libefa.so.1.2.44.0`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this libefa is the provider that drives `ctx`: the file holding the context's
    /// `ops.poll_cq` (every provider sets it, and it is the provider's own code) is this
    /// library's file. A table built from plain pointers drives no context.
    ///
    /// # Safety
    ///
    /// `ctx` must be a live context.
    pub unsafe fn drives(&self, ctx: *mut ibv_context) -> bool {
        if self._lib.is_none() {
            return false;
        }
        // SAFETY: the caller guarantees a live context; a plain field read.
        let Some(poll_cq) = (unsafe { (*ctx).ops.poll_cq }) else { return false };
        let Some(provider) = loaded_path(poll_cq as *const c_void) else { return false };
        provider.canonicalize().is_ok_and(|p| p == self.path)
    }
}

/// The process-wide libefa, loaded on first use from `$RDMA_VERBS_LIBEFA` or
/// [`LIBEFA_SONAME`], after libibverbs (see the module docs). It does not say that a device
/// is an EFA one: ask [`Efa::drives`].
///
/// # Errors
///
/// [`LoadError::Open`] when `dlopen` fails (no EFA provider installed), naming libefa and how
/// to install it; [`LoadError::MissingSymbol`] when a function of the table is absent (a
/// libefa older than rdma-core v26), of libefa or, loaded first, of libibverbs (the error's
/// `lib` says which). The outcome of the first call is kept.
pub fn libefa() -> Result<&'static Efa, LoadError> {
    static LIB: OnceLock<Result<Efa, LoadError>> = OnceLock::new();
    let load = || {
        crate::ibverbs()?;
        // SAFETY: dlopen runs libefa's initialisers, which only register the provider with
        // libibverbs; the override is the user's explicit choice, and a libefa of rdma-core
        // implements the ABI of this build's headers.
        unsafe { load(crate::loader::name_from_env(LIBEFA_ENV, LIBEFA_SONAME)) }
    };
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// `dlopen(name, RTLD_NOW | RTLD_LOCAL)` and the libefa table from it, not kept: use
/// [`libefa()`] for the process-wide one.
///
/// # Errors
///
/// As [`libefa()`], for libefa only.
///
/// # Safety
///
/// As `dlopen`: the object's initialisers must be sound to run in this process, and it must
/// implement the ABI of this build's headers for the efadv symbols it exports.
pub unsafe fn load(name: impl AsRef<Path>) -> Result<Efa, LoadError> {
    let name = name.as_ref();
    let library = name.display().to_string();
    // SAFETY: forwarded to the caller.
    let lib = unsafe { open(name) }.map_err(|reason| LoadError::Open {
        lib: RdmaLibrary::Efa,
        library: library.clone(),
        reason: reason.into(),
    })?;
    let fns = EfaFns::resolve(&lib, &library)?;
    let path = real_path(fns.efadv_query_device as *const c_void, name);
    Ok(Efa { _lib: Some(lib), path, fns })
}

// The layouts the safe crate passes as `inlen`: both structs have kept their size since
// rdma-core v26 (newer fields took the place of `reserved` bytes, or were appended to
// `efadv_qp_init_attr`, whose extension a library accepts when it is zero).
static_assertions::const_assert_eq!(std::mem::size_of::<efadv_device_attr>(), 32);
static_assertions::const_assert!(std::mem::size_of::<efadv_qp_init_attr>() >= 16);
static_assertions::const_assert_eq!(std::mem::offset_of!(efadv_qp_init_attr, driver_qp_type), 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_libefa_is_named_with_how_to_install_it() {
        // SAFETY: nothing is loaded: the file does not exist.
        let err = unsafe { load("/nonexistent/libefa.so.1") }.err().expect("absent");
        let LoadError::Open { lib, library, .. } = &err else { panic!("{err:?}") };
        assert_eq!((*lib, library.as_str()), (RdmaLibrary::Efa, "/nonexistent/libefa.so.1"));
        let text = err.to_string();
        assert!(
            text.contains("cannot load libefa") && text.contains("RDMA_VERBS_LIBEFA"),
            "{text}"
        );
    }

    #[test]
    fn a_library_without_efadv_is_named_with_the_missing_symbol() {
        // libc is in every process; it has no efadv functions.
        // SAFETY: libc is already loaded: its initialisers do not run again.
        let err = unsafe { load("libc.so.6") }.err().expect("no efadv");
        assert!(
            matches!(
                err,
                LoadError::MissingSymbol {
                    lib: RdmaLibrary::Efa,
                    symbol: "efadv_query_device",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
