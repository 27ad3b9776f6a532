//! libibverbs, loaded at run time.
//!
//! `dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL)` once per process, never `dlclose`d, so
//! every function pointer stays valid until exit. The symbols split into a fixed *required*
//! list (the `IBVERBS_1.1` core the safe crate uses: loading fails, naming the symbol, if one is
//! missing) and *optional* newer ones (`Option`, so an older rdma-core still loads and the
//! caller reports `Unsupported`). Never "everything in the headers": a binary built against a
//! new rdma-core must still load on an old one.
//!
//! Plain `dlsym` returns each symbol's default version node, which is what a C program linked
//! today gets (`IBVERBS_1.0`, `IBVERBS_1.1`, … in rdma-core's `libibverbs/libibverbs.map.in`).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use crate::bindings::*;

/// The run-time name of libibverbs (the `.so` without version exists only in `-dev` packages).
pub const LIBIBVERBS_SONAME: &str = "libibverbs.so.1";

/// Environment variable naming the libibverbs to load instead of [`LIBIBVERBS_SONAME`], for
/// stacks installed in unusual places.
pub const LIBIBVERBS_ENV: &str = "RDMA_VERBS_LIBIBVERBS";

/// The rdma-core libraries loaded at run time, as a [`LoadError`] names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RdmaLibrary {
    /// libibverbs ([`ibverbs()`]), which every other one needs.
    Ibverbs,
    /// librdmacm (`rdmacm()`, only when the system has `rdma/rdma_cma.h`).
    Rdmacm,
    /// libefa, the AWS EFA provider's direct verbs (`efa::libefa()`, only when the system has
    /// `infiniband/efadv.h`).
    Efa,
}

impl RdmaLibrary {
    /// How to install the library, or point this crate at it.
    pub fn install_hint(self) -> &'static str {
        match self {
            RdmaLibrary::Ibverbs => {
                "install rdma-core's runtime (Debian/Ubuntu: apt-get install libibverbs1 \
                 ibverbs-providers; RHEL/Rocky/Fedora: dnf install libibverbs) or set \
                 RDMA_VERBS_LIBIBVERBS to the path of libibverbs.so.1"
            }
            RdmaLibrary::Rdmacm => {
                "install rdma-core's rdma_cm runtime (Debian/Ubuntu: apt-get install librdmacm1; \
                 RHEL/Rocky/Fedora: dnf install librdmacm) or set RDMA_VERBS_LIBRDMACM to the \
                 path of librdmacm.so.1"
            }
            RdmaLibrary::Efa => {
                "install rdma-core's EFA provider (Debian/Ubuntu: apt-get install \
                 ibverbs-providers; RHEL/Rocky/Fedora and Amazon Linux: dnf install libibverbs, \
                 or the AWS EFA installer) or set RDMA_VERBS_LIBEFA to the path of libefa.so.1"
            }
        }
    }
}

impl std::fmt::Display for RdmaLibrary {
    /// Its name: `libibverbs`, `librdmacm`, `libefa`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RdmaLibrary::Ibverbs => "libibverbs",
            RdmaLibrary::Rdmacm => "librdmacm",
            RdmaLibrary::Efa => "libefa",
        })
    }
}

/// Why an rdma-core library could not be loaded (librdmacm's: libibverbs' too, which it
/// needs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// `dlopen` failed: the library is absent or unusable.
    #[error("cannot load {lib} from {library}: {reason}; {}", .lib.install_hint())]
    Open {
        /// Which library.
        lib: RdmaLibrary,
        /// The name or path given to `dlopen`.
        library: String,
        /// The loader's own explanation (`dlerror`).
        reason: Box<str>,
    },
    /// A symbol of the required list is missing: the library is older than rdma-core v13 or
    /// not of rdma-core at all.
    #[error("{path} lacks the required symbol {symbol}; {}", .lib.install_hint())]
    MissingSymbol {
        /// Which library.
        lib: RdmaLibrary,
        /// The library that was loaded.
        path: String,
        /// The missing symbol.
        symbol: &'static str,
    },
}

/// Declares a function table: required symbols as plain pointers, optional ones as `Option`.
/// Each type is checked at compile time against the prototype in the system's headers.
/// `missing` is the error variant (with `path` and `symbol` fields, and any others given
/// after it in braces) for an absent required symbol. Used for libibverbs here, for librdmacm in `rdmacm.rs` and libmlx5 in `mlx5.rs`.
macro_rules! fn_table {
    (
        $(#[$tdoc:meta])*
        pub struct $table:ident, missing: $err:ident::$variant:ident $({ $($field:ident: $value:expr),* })?;
        required { $( $(#[$rdoc:meta])* $req:ident: fn($($rty:ty),* $(,)?) $(-> $rret:ty)?; )* }
        optional { $( $(#[$odoc:meta])* $opt:ident: fn($($oty:ty),* $(,)?) $(-> $oret:ty)?; )* }
    ) => {
        $(#[$tdoc])*
        ///
        /// All fields are public so that tests can build a table from plain function pointers
        /// (a mock provider) instead of loading the library.
        #[derive(Clone, Copy)]
        #[allow(missing_debug_implementations)]
        pub struct $table {
            $( $(#[$rdoc])* pub $req: unsafe extern "C" fn($($rty),*) $(-> $rret)?, )*
            $( $(#[$odoc])* pub $opt: Option<unsafe extern "C" fn($($oty),*) $(-> $oret)?>, )*
        }

        // The hand-written types above must match the system's prototypes.
        const _: () = {
            $( let _: unsafe extern "C" fn($($rty),*) $(-> $rret)? = $crate::decls::$req; )*
            $( let _: unsafe extern "C" fn($($oty),*) $(-> $oret)? = $crate::decls::$opt; )*
        };

        impl $table {
            fn resolve(
                lib: &::libloading::os::unix::Library,
                path: &str,
            ) -> Result<Self, $err> {
                let missing = |symbol| $err::$variant {
                    path: path.to_owned(),
                    symbol,
                    $($($field: $value),*)?
                };
                Ok(Self {
                    $( $req: {
                        // SAFETY: the type was checked against the header prototype above.
                        let sym = unsafe {
                            lib.get::<unsafe extern "C" fn($($rty),*) $(-> $rret)?>(
                                concat!(stringify!($req), "\0").as_bytes())
                        };
                        *sym.map_err(|_| missing(stringify!($req)))?
                    }, )*
                    $( $opt: {
                        // SAFETY: the type was checked against the header prototype above.
                        let sym = unsafe {
                            lib.get::<unsafe extern "C" fn($($oty),*) $(-> $oret)?>(
                                concat!(stringify!($opt), "\0").as_bytes())
                        };
                        sym.ok().map(|s| *s)
                    }, )*
                })
            }
        }
    };
}
pub(crate) use fn_table;

fn_table! {
    /// The libibverbs functions this crate calls.
    pub struct IbverbsFns, missing: LoadError::MissingSymbol { lib: RdmaLibrary::Ibverbs };
    required {
        /// `ibv_get_device_list(3)`
        ibv_get_device_list: fn(*mut c_int) -> *mut *mut ibv_device;
        /// `ibv_free_device_list(3)`
        ibv_free_device_list: fn(*mut *mut ibv_device);
        /// `ibv_get_device_name(3)`
        ibv_get_device_name: fn(*mut ibv_device) -> *const c_char;
        /// `ibv_get_device_guid(3)`
        ibv_get_device_guid: fn(*mut ibv_device) -> __be64;
        /// `ibv_open_device(3)`
        ibv_open_device: fn(*mut ibv_device) -> *mut ibv_context;
        /// `ibv_close_device(3)`
        ibv_close_device: fn(*mut ibv_context) -> c_int;
        /// `ibv_query_device(3)`
        ibv_query_device: fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
        /// `ibv_query_port@@IBVERBS_1.1`: the compat entry behind the inline
        /// `ibv_query_port(3)`; call [`crate::inline::ibv_query_port`] instead.
        ibv_query_port: fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;
        /// `ibv_query_gid(3)`
        ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
        /// `ibv_alloc_pd(3)`
        ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
        /// `ibv_dealloc_pd(3)`
        ibv_dealloc_pd: fn(*mut ibv_pd) -> c_int;
        /// `ibv_reg_mr@@IBVERBS_1.1`; call [`crate::inline::ibv_reg_mr`] instead.
        ibv_reg_mr: fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
        /// `ibv_dereg_mr(3)`
        ibv_dereg_mr: fn(*mut ibv_mr) -> c_int;
        /// `ibv_create_cq(3)`
        ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int)
            -> *mut ibv_cq;
        /// `ibv_destroy_cq(3)`
        ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
        /// `ibv_create_qp(3)`
        ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
        /// `ibv_modify_qp(3)`
        ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
        /// `ibv_query_qp(3)`
        ibv_query_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
        /// `ibv_destroy_qp(3)`
        ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
        /// `ibv_create_comp_channel(3)` (only `@@IBVERBS_1.0`, which `dlsym` returns).
        ibv_create_comp_channel: fn(*mut ibv_context) -> *mut ibv_comp_channel;
        /// `ibv_destroy_comp_channel(3)` (only `@@IBVERBS_1.0`).
        ibv_destroy_comp_channel: fn(*mut ibv_comp_channel) -> c_int;
        /// `ibv_get_cq_event(3)`
        ibv_get_cq_event: fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
        /// `ibv_ack_cq_events(3)`
        ibv_ack_cq_events: fn(*mut ibv_cq, c_uint);
        /// `ibv_get_async_event(3)`
        ibv_get_async_event: fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
        /// `ibv_ack_async_event(3)`
        ibv_ack_async_event: fn(*mut ibv_async_event);
        /// `ibv_create_ah(3)`
        ibv_create_ah: fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
        /// `ibv_destroy_ah(3)`
        ibv_destroy_ah: fn(*mut ibv_ah) -> c_int;
        /// `ibv_create_srq(3)`
        ibv_create_srq: fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
        /// `ibv_modify_srq(3)`
        ibv_modify_srq: fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int;
        /// `ibv_destroy_srq(3)`
        ibv_destroy_srq: fn(*mut ibv_srq) -> c_int;
    }
    optional {
        /// `ibv_reg_mr_iova2@@IBVERBS_1.8` (rdma-core v28).
        ibv_reg_mr_iova2: fn(*mut ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut ibv_mr;
        /// `_ibv_query_gid_ex@@IBVERBS_1.11` (rdma-core v32), behind `ibv_query_gid_ex(3)`.
        _ibv_query_gid_ex: fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize)
            -> c_int;
        /// `ibv_qp_to_qp_ex@@IBVERBS_1.6` (rdma-core v24).
        ibv_qp_to_qp_ex: fn(*mut ibv_qp) -> *mut ibv_qp_ex;
        /// `ibv_reg_dmabuf_mr@@IBVERBS_1.12` (rdma-core v34).
        ibv_reg_dmabuf_mr: fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr;
        /// `ibv_query_port_speed@@IBVERBS_1.16` (rdma-core v62).
        ibv_query_port_speed: fn(*mut ibv_context, u32, *mut u64) -> c_int;
        /// `ibv_dm_export_dmabuf_fd@@IBVERBS_1.16` (rdma-core v62).
        ibv_dm_export_dmabuf_fd: fn(*mut ibv_dm) -> c_int;
        /// `ibv_alloc_dmah@@IBVERBS_1.15` (rdma-core v59): `ibv_alloc_dmah(3)`.
        ibv_alloc_dmah: fn(*mut ibv_context, *mut ibv_dmah_init_attr) -> *mut ibv_dmah;
        /// `ibv_dealloc_dmah@@IBVERBS_1.15` (rdma-core v59): `ibv_alloc_dmah(3)`.
        ibv_dealloc_dmah: fn(*mut ibv_dmah) -> c_int;
        /// `ibv_reg_mr_ex@@IBVERBS_1.15` (rdma-core v59): `ibv_reg_mr(3)`.
        ibv_reg_mr_ex: fn(*mut ibv_pd, *mut ibv_mr_init_attr) -> *mut ibv_mr;
        /// `ibv_query_ece(3)` (rdma-core v31).
        ibv_query_ece: fn(*mut ibv_qp, *mut ibv_ece) -> c_int;
        /// `ibv_set_ece(3)` (rdma-core v31).
        ibv_set_ece: fn(*mut ibv_qp, *mut ibv_ece) -> c_int;
        /// `ibv_import_device@@IBVERBS_1.10` (rdma-core v31): `ibv_import_device(3)`. Takes
        /// the descriptor given; `ibv_close_device` closes it.
        ibv_import_device: fn(c_int) -> *mut ibv_context;
        /// `ibv_import_pd@@IBVERBS_1.10` (rdma-core v31): `ibv_import_pd(3)`.
        ibv_import_pd: fn(*mut ibv_context, u32) -> *mut ibv_pd;
        /// `ibv_unimport_pd@@IBVERBS_1.10` (rdma-core v31): `ibv_import_pd(3)`.
        ibv_unimport_pd: fn(*mut ibv_pd);
        /// `ibv_import_mr@@IBVERBS_1.10` (rdma-core v31): `ibv_import_mr(3)`.
        ibv_import_mr: fn(*mut ibv_pd, u32) -> *mut ibv_mr;
        /// `ibv_unimport_mr@@IBVERBS_1.10` (rdma-core v31): `ibv_import_mr(3)`.
        ibv_unimport_mr: fn(*mut ibv_mr);
    }
}

fn_table! {
    /// libibverbs' fork protection (`ibv_fork_init(3)`), apart from [`IbverbsFns`]: it acts
    /// on the process, not on a device, so a table of plain function pointers (a mock
    /// provider's, [`Ibverbs::from_fns`]) has none.
    pub struct ForkFns, missing: LoadError::MissingSymbol { lib: RdmaLibrary::Ibverbs };
    required {
        /// `ibv_fork_init(3)`
        ibv_fork_init: fn() -> c_int;
    }
    optional {
        /// `ibv_is_fork_initialized@@IBVERBS_1.13` (rdma-core v35), returning an
        /// `enum ibv_fork_status`.
        ibv_is_fork_initialized: fn() -> c_uint;
    }
}

/// The loaded libibverbs: where it came from and its functions.
#[allow(missing_debug_implementations)]
pub struct Ibverbs {
    /// Kept so the library is never unloaded: statics are never dropped. `None` for a table
    /// built from plain function pointers.
    _lib: Option<Library>,
    path: PathBuf,
    /// The function table.
    pub fns: IbverbsFns,
    /// The process-wide fork protection, `None` for a table built from function pointers.
    pub fork: Option<ForkFns>,
}

impl Ibverbs {
    /// A library made of plain function pointers, such as a mock provider's, reported as
    /// loaded from `path`.
    ///
    /// # Safety
    ///
    /// Each function in `fns` must behave as the libibverbs function of the same name
    /// (its man page's contract), since safe code calls them on that promise.
    pub unsafe fn from_fns(fns: IbverbsFns, path: PathBuf) -> Ibverbs {
        Ibverbs { _lib: None, path, fns, fork: None }
    }

    /// The file the library was loaded from, symlinks resolved (for example
    /// `/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rdma-core version read from the real file name (`libibverbs.so.1.14.44.0` →
    /// `44.0`; MLNX_OFED/DOCA-OFED builds follow the same scheme), or `None` when the name
    /// does not carry one.
    pub fn rdma_core_version(&self) -> Option<String> {
        rdma_core_version_from_file_name(self.path.file_name()?.to_str()?)
    }

    /// The highest `IBVERBS_1.N` ABI node the file name announces (`14` for
    /// `libibverbs.so.1.14.44.0`).
    pub fn abi_minor(&self) -> Option<u32> {
        let name = self.path.file_name()?.to_str()?;
        name.strip_prefix("libibverbs.so.1.")?.split('.').next()?.parse().ok()
    }

    /// Whether the library exports `name` (plain `dlsym`, so its default version), for
    /// reporting symbols the function table does not hold. Always `false` for a table built
    /// from function pointers, which has no library to ask.
    pub fn has_symbol(&self, name: &str) -> bool {
        let Some(lib) = &self._lib else { return false };
        // SAFETY: the symbol is only looked up, never called or dereferenced, so the pointer
        // type given to `get` makes no claim about it.
        unsafe { lib.get::<*const c_void>(name) }.is_ok()
    }
}

fn rdma_core_version_from_file_name(name: &str) -> Option<String> {
    let rest = name.strip_prefix("libibverbs.so.1.")?;
    let (_abi_minor, version) = rest.split_once('.')?;
    (!version.is_empty()).then(|| version.to_owned())
}

/// The loader's explanation: libloading's error names only the call ("dlopen failed"); its
/// source carries `dlerror`'s text (e.g. "No such file or directory").
fn load_reason(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    }
}

/// The process-wide libibverbs, loaded on first use from `$RDMA_VERBS_LIBIBVERBS` or
/// [`LIBIBVERBS_SONAME`].
///
/// # Errors
///
/// [`LoadError::Open`] when `dlopen` fails, [`LoadError::MissingSymbol`] when a required
/// symbol is absent. The outcome of the first call is kept: later calls return it again.
pub fn ibverbs() -> Result<&'static Ibverbs, LoadError> {
    static LIB: OnceLock<Result<Ibverbs, LoadError>> = OnceLock::new();
    let load = || {
        // The verbs and, apart, the fork protection.
        let resolve = |lib: &Library, name: &str| {
            Ok((IbverbsFns::resolve(lib, name)?, ForkFns::resolve(lib, name)?))
        };
        let anchor = |(fns, _): &(IbverbsFns, ForkFns)| fns.ibv_get_device_list as *const c_void;
        // SAFETY: dlopen runs the library's initialisers. libibverbs' (and its providers')
        // initialisers only set up its own state; the override is the user's explicit choice,
        // and a libibverbs of rdma-core implements the ABI of this build's headers.
        let (lib, path, (fns, fork)) = unsafe {
            open_table(RdmaLibrary::Ibverbs, LIBIBVERBS_ENV, LIBIBVERBS_SONAME, resolve, anchor)
        }?;
        Ok(Ibverbs { _lib: Some(lib), path, fns, fork: Some(fork) })
    };
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Opens `lib` from the file that the environment variable `env` names ([`name_from_env`]),
/// else `soname`, with [`open`], and resolves its function table with `resolve`; also the
/// real path of its file, found by the address of the function `anchor` picks
/// ([`real_path`]).
///
/// # Safety
///
/// As [`open`]; and the library must implement the ABI of this build's headers for the
/// symbols `resolve` looks up.
pub(crate) unsafe fn open_table<F>(
    lib: RdmaLibrary,
    env: &str,
    soname: &str,
    resolve: impl FnOnce(&Library, &str) -> Result<F, LoadError>,
    anchor: impl FnOnce(&F) -> *const c_void,
) -> Result<(Library, PathBuf, F), LoadError> {
    let name = name_from_env(env, soname);
    let name = Path::new(&name);
    let display = name.display().to_string();
    // SAFETY: forwarded to the caller.
    let library = match unsafe { open(name) } {
        Ok(library) => library,
        Err(reason) => {
            return Err(LoadError::Open { lib, library: display, reason: reason.into() })
        }
    };
    let fns = resolve(&library, &display)?;
    let path = real_path(anchor(&fns), name);
    Ok((library, path, fns))
}

/// The library named by the environment variable `env` when it is set and not empty, else
/// `soname`.
pub(crate) fn name_from_env(env: &str, soname: &str) -> OsString {
    std::env::var_os(env).filter(|v| !v.is_empty()).unwrap_or_else(|| OsString::from(soname))
}

/// `dlopen(name, RTLD_NOW | RTLD_LOCAL)`; on failure, the loader's explanation.
///
/// # Safety
///
/// As [`Library::open`]: `dlopen` runs the library's initialisers, which must be sound to run
/// in this process.
pub(crate) unsafe fn open(name: &Path) -> Result<Library, String> {
    // SAFETY: forwarded to the caller.
    unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| load_reason(&e))
}

/// The real file (symlinks resolved) that holds `addr`, a function of the library loaded as
/// `name`; `name` itself when the loader cannot tell.
pub(crate) fn real_path(addr: *const c_void, name: &Path) -> PathBuf {
    let path = loaded_path(addr).unwrap_or_else(|| name.into());
    path.canonicalize().unwrap_or(path)
}

/// The file that holds `addr`, from `dladdr`, as the dynamic loader names it.
pub(crate) fn loaded_path(addr: *const c_void) -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    if unsafe { libc::dladdr(addr, info.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: dladdr returned non-zero, so it filled `info`.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, alive while the
    // library stays loaded (forever).
    let fname = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(fname.to_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_from_file_name() {
        let v = |n| rdma_core_version_from_file_name(n);
        assert_eq!(v("libibverbs.so.1.14.44.0").as_deref(), Some("44.0"));
        assert_eq!(v("libibverbs.so.1.14.2410068.0").as_deref(), Some("2410068.0"));
        assert_eq!(v("libibverbs.so.1"), None);
        assert_eq!(v("libibverbs.so.1.14"), None);
        assert_eq!(v("libfoo.so"), None);
    }
}
