//! librdmacm (rdma_cm), loaded at run time on first use.
//!
//! Built only when the system has `rdma/rdma_cma.h` (cfg `rdma_verbs_rdma_cma`, set by
//! `build.rs`). Like libibverbs (see [`crate::loader`]): `dlopen("librdmacm.so.1", RTLD_NOW |
//! RTLD_LOCAL)` once per process, never `dlclose`d, with a fixed *required* list — the
//! `RDMACM_1.0` core the safe crate's `cm` module calls — and no "everything in the headers".
//! `RDMA_VERBS_LIBRDMACM` overrides the name.
//!
//! librdmacm itself `NEEDED`s `libibverbs.so.1`, and [`rdmacm()`] loads libibverbs first (through
//! [`crate::ibverbs`]), so the dynamic loader resolves librdmacm's dependency to the libibverbs
//! already in the process: the `ibv_context`s, PDs and QPs librdmacm hands out are objects of the
//! same libibverbs whose functions [`crate::Ibverbs`] holds. (An `RDMA_VERBS_LIBIBVERBS`
//! override pointing at a library with another SONAME would break that; both overrides must
//! name one rdma-core installation.)

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::os::unix::Library;

use crate::bindings::*;
use crate::loader::{fn_table, open_table, LoadError, RdmaLibrary};

/// The run-time name of librdmacm.
pub const LIBRDMACM_SONAME: &str = "librdmacm.so.1";

/// Environment variable naming the librdmacm to load instead of [`LIBRDMACM_SONAME`].
pub const LIBRDMACM_ENV: &str = "RDMA_VERBS_LIBRDMACM";

fn_table! {
    /// The librdmacm functions this crate calls (all `RDMACM_1.0`, rdma-core v13 and older).
    pub struct RdmacmFns, missing: LoadError::MissingSymbol { lib: RdmaLibrary::Rdmacm };
    required {
        /// `rdma_create_event_channel(3)`
        rdma_create_event_channel: fn() -> *mut rdma_event_channel;
        /// `rdma_destroy_event_channel(3)`
        rdma_destroy_event_channel: fn(*mut rdma_event_channel);
        /// `rdma_get_cm_event(3)`
        rdma_get_cm_event: fn(*mut rdma_event_channel, *mut *mut rdma_cm_event) -> c_int;
        /// `rdma_ack_cm_event(3)`
        rdma_ack_cm_event: fn(*mut rdma_cm_event) -> c_int;
        /// `rdma_create_id(3)`
        rdma_create_id: fn(*mut rdma_event_channel, *mut *mut rdma_cm_id, *mut c_void,
            rdma_port_space) -> c_int;
        /// `rdma_destroy_id(3)`
        rdma_destroy_id: fn(*mut rdma_cm_id) -> c_int;
        /// `rdma_bind_addr(3)`
        rdma_bind_addr: fn(*mut rdma_cm_id, *mut sockaddr) -> c_int;
        /// `rdma_resolve_addr(3)`
        rdma_resolve_addr: fn(*mut rdma_cm_id, *mut sockaddr, *mut sockaddr, c_int) -> c_int;
        /// `rdma_resolve_route(3)`
        rdma_resolve_route: fn(*mut rdma_cm_id, c_int) -> c_int;
        /// `rdma_listen(3)`
        rdma_listen: fn(*mut rdma_cm_id, c_int) -> c_int;
        /// `rdma_connect(3)`
        rdma_connect: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
        /// `rdma_accept(3)`
        rdma_accept: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
        /// `rdma_reject(3)`
        rdma_reject: fn(*mut rdma_cm_id, *const c_void, u8) -> c_int;
        /// `rdma_disconnect(3)`
        rdma_disconnect: fn(*mut rdma_cm_id) -> c_int;
    }
    optional {}
}

/// The loaded librdmacm: where it came from and its functions.
#[allow(missing_debug_implementations)]
pub struct Rdmacm {
    /// Kept so the library is never unloaded. `None` for a table built from plain pointers.
    _lib: Option<Library>,
    path: PathBuf,
    /// The function table.
    pub fns: RdmacmFns,
}

impl Rdmacm {
    /// A library made of plain function pointers, reported as loaded from `path`.
    ///
    /// # Safety
    ///
    /// Each function in `fns` must behave as the librdmacm function of the same name (its man
    /// page's contract), since safe code calls them on that promise.
    pub unsafe fn from_fns(fns: RdmacmFns, path: PathBuf) -> Rdmacm {
        Rdmacm { _lib: None, path, fns }
    }

    /// The file the library was loaded from, symlinks resolved (for example
    /// `/usr/lib/x86_64-linux-gnu/librdmacm.so.1.3.44.0`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The process-wide librdmacm, loaded on first use from `$RDMA_VERBS_LIBRDMACM` or
/// [`LIBRDMACM_SONAME`], after libibverbs (see the module docs).
///
/// # Errors
///
/// [`LoadError::Open`] when `dlopen` fails, [`LoadError::MissingSymbol`] when a required
/// symbol is absent, of librdmacm or, loaded first, of libibverbs (the error's `lib` says
/// which). The outcome of the first call is kept.
pub fn rdmacm() -> Result<&'static Rdmacm, LoadError> {
    static LIB: OnceLock<Result<Rdmacm, LoadError>> = OnceLock::new();
    let load = || {
        crate::ibverbs()?;
        let anchor = |fns: &RdmacmFns| fns.rdma_create_id as *const c_void;
        // SAFETY: dlopen runs librdmacm's initialisers, which only set up its own state (the
        // devices are opened lazily, on first use); the override is the user's explicit
        // choice, and a librdmacm of rdma-core implements the ABI of this build's headers.
        let (lib, path, fns) = unsafe {
            open_table(
                RdmaLibrary::Rdmacm,
                LIBRDMACM_ENV,
                LIBRDMACM_SONAME,
                RdmacmFns::resolve,
                anchor,
            )
        }?;
        Ok(Rdmacm { _lib: Some(lib), path, fns })
    };
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}
