//! libmlx5 (the `mlx5dv` direct verbs), found at run time through the device's own provider.
//!
//! Only the DC (Dynamically Connected) transport of the safe crate's `mlx5` feature uses it, so
//! nothing here runs until a DC entry point asks for a context's provider ([`mlx5_for`]).
//!
//! # Which copy of libmlx5
//!
//! `mlx5dv_is_supported()` compares the device's `verbs_device->ops` with the address of its
//! own `mlx5_dev_ops`: a second copy of libmlx5 (another path, another build) would answer
//! "not mlx5" for every device, and its `mlx5dv_create_qp` would work on objects it did not
//! allocate. So the table must come from the very object libibverbs loaded for *this* device.
//!
//! We ask the dynamic loader which file holds one of the context's provider ops
//! (`dladdr(ctx->ops.poll_cq)`: every provider sets `poll_cq`, and it is the provider's own
//! code, not libibverbs'), then `dlopen(that file, RTLD_NOW | RTLD_NOLOAD)`. `RTLD_NOLOAD`
//! returns the object already in the process (glibc matches it by device and inode, whatever
//! name it was loaded under — on Debian `libmlx5-rdmav34.so` is a symlink to
//! `libmlx5.so.1.24.44.0`) and never maps a second one. We prefer this to
//! `dlopen("libmlx5.so.1", RTLD_NOLOAD)` because it needs no name: it finds the provider
//! wherever a MOFED/DOCA-OFED stack installed it, and on a host with both an mlx5 and another
//! device it asks the provider of the device at hand: a Soft-RoCE context resolves to
//! `librxe-rdmav34.so`, which lacks the mlx5dv symbols, so that device is refused before any
//! mlx5dv function is called.
//!
//! Not covered: providers linked statically into the program (`RDMA_STATIC_PROVIDERS` with a
//! static libibverbs). There `dladdr` names the main program, which this crate's loader does
//! not use (it `dlopen`s a shared libibverbs), so such a setup is not one this crate runs in.
//!
//! Every table is kept for the life of the process, never `dlclose`d, like libibverbs'.

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use libloading::os::unix::{Library, RTLD_NOW};

use crate::bindings::*;
use crate::loader::{fn_table, loaded_path};

/// Why the mlx5dv functions of a context's provider are not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Mlx5LoadError {
    /// The context has no provider op to locate its provider by (`ops.poll_cq` is NULL or
    /// not inside a loaded object).
    #[error("cannot tell which provider library drives this device: {reason}")]
    NoProvider {
        /// What was missing.
        reason: &'static str,
    },
    /// `dlopen(RTLD_NOLOAD)` failed: no such object is loaded.
    #[error("cannot reopen {library}: {reason}")]
    Open {
        /// The provider's file, as the dynamic loader names it.
        library: String,
        /// The loader's explanation (`dlerror`).
        reason: String,
    },
    /// The provider lacks an mlx5dv function: it is not libmlx5 (another vendor's device or
    /// a soft device), or a libmlx5 older than rdma-core v24.
    #[error("the provider {path} lacks {symbol}")]
    MissingSymbol {
        /// The provider's file.
        path: String,
        /// The first missing function.
        symbol: &'static str,
    },
}

fn_table! {
    /// The libmlx5 functions the DC transport calls (rdma-core v24+: `mlx5dv_qp_ex_from_ibv_qp_ex`
    /// is `MLX5_1.10`, the newest of them).
    pub struct Mlx5Fns, missing: Mlx5LoadError::MissingSymbol;
    required {
        /// `mlx5dv_query_device(3)` (`MLX5_1.0`).
        mlx5dv_query_device: fn(*mut ibv_context, *mut mlx5dv_context) -> c_int;
        /// `mlx5dv_is_supported(3)` (`MLX5_1.8`, rdma-core v22).
        mlx5dv_is_supported: fn(*mut ibv_device) -> bool;
        /// `mlx5dv_create_qp(3)` (`MLX5_1.3`, rdma-core v16).
        mlx5dv_create_qp: fn(*mut ibv_context, *mut ibv_qp_init_attr_ex,
            *mut mlx5dv_qp_init_attr) -> *mut ibv_qp;
        /// `mlx5dv_qp_ex_from_ibv_qp_ex(3)` (`MLX5_1.10`, rdma-core v24). A bare
        /// `container_of`: undefined behaviour on a QP libmlx5 did not create.
        mlx5dv_qp_ex_from_ibv_qp_ex: fn(*mut ibv_qp_ex) -> *mut mlx5dv_qp_ex;
    }
    optional {
        /// `mlx5dv_dci_stream_id_reset(3)` (`MLX5_1.21`, rdma-core v37): takes a DCI stream
        /// out of error. Returns 0 or an errno.
        mlx5dv_dci_stream_id_reset: fn(*mut ibv_qp, u16) -> c_int;
    }
}

/// `MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM` (`1 << 14`, rdma-core v47): ask
/// `mlx5dv_query_device` for `max_dc_rd_atom` and `max_dc_init_rd_atom`. Defined here because
/// the headers this crate is built against may predate it (v44 lacks it); read the fields with
/// [`DvContext::max_dc_rd_atom`].
pub const MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM: u32 = 1 << 14;

/// The offset of `max_dc_rd_atom` (`uint64_t`) in rdma-core v47's `struct mlx5dv_context`:
/// right after `crypto_caps`, aligned to 8. `max_dc_init_rd_atom` follows it.
pub const MAX_DC_RD_ATOM_OFFSET: usize = 152;

/// The offset of `max_dc_init_rd_atom` (`uint64_t`) in rdma-core v47's `struct mlx5dv_context`.
pub const MAX_DC_INIT_RD_ATOM_OFFSET: usize = MAX_DC_RD_ATOM_OFFSET + 8;

/// A `struct mlx5dv_context` for `mlx5dv_query_device(3)`, with room for the fields of newer
/// libraries than this build's headers know: its first bytes are this build's
/// `mlx5dv_context`, and it reaches past `max_dc_init_rd_atom` (rdma-core v47) whatever the
/// headers. A library writes only the fields of the `comp_mask` bits it knows, so a larger
/// buffer than it expects is never overrun.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
#[allow(missing_debug_implementations)]
pub struct DvContext([u8; 256]);

/// The DC read/atomic limits of rdma-core v47's `mlx5dv_context`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcRdAtom {
    /// `max_dc_rd_atom`: the most incoming RDMA READs and atomics a DCT serves at once.
    pub responder: u64,
    /// `max_dc_init_rd_atom`: the most a DCI may have outstanding.
    pub init: u64,
}

impl DvContext {
    /// A zeroed context whose `comp_mask` asks for `comp_mask`.
    pub fn asking(comp_mask: u64) -> DvContext {
        let mut buf = DvContext([0; 256]);
        let at = std::mem::offset_of!(mlx5dv_context, comp_mask);
        buf.0[at..at + 8].copy_from_slice(&comp_mask.to_ne_bytes());
        buf
    }

    /// The pointer to pass to `mlx5dv_query_device`.
    pub fn as_mut_ptr(&mut self) -> *mut mlx5dv_context {
        self.0.as_mut_ptr().cast()
    }

    /// The fields this build's headers know.
    pub fn context(&self) -> mlx5dv_context {
        // SAFETY: the buffer is 8-aligned and larger than `mlx5dv_context` (asserted below),
        // whose fields are integers and one raw pointer: every bit pattern is a valid value.
        unsafe { self.0.as_ptr().cast::<mlx5dv_context>().read() }
    }

    /// `max_dc_rd_atom` and `max_dc_init_rd_atom`, when the library answered
    /// [`MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM`] (v47+; an older one clears the bit).
    pub fn max_dc_rd_atom(&self) -> Option<DcRdAtom> {
        let field = |at: usize| u64::from_ne_bytes(self.0[at..at + 8].try_into().expect("8"));
        (self.context().comp_mask & u64::from(MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM) != 0).then(|| {
            DcRdAtom {
                responder: field(MAX_DC_RD_ATOM_OFFSET),
                init: field(MAX_DC_INIT_RD_ATOM_OFFSET),
            }
        })
    }
}

// The v47 fields follow `crypto_caps` (the last field of v44's struct, ending at 148), and the
// buffer holds this build's struct and them.
static_assertions::const_assert!(
    std::mem::offset_of!(mlx5dv_context, crypto_caps) + std::mem::size_of::<mlx5dv_crypto_caps>()
        <= MAX_DC_RD_ATOM_OFFSET
);
static_assertions::const_assert!(std::mem::size_of::<mlx5dv_context>() <= 256);
static_assertions::const_assert!(MAX_DC_INIT_RD_ATOM_OFFSET + 8 <= 256);

/// A provider's libmlx5 functions and the file they came from.
#[allow(missing_debug_implementations)]
pub struct Mlx5 {
    /// Kept so the object is never unloaded. `None` for a table built from plain pointers.
    _lib: Option<Library>,
    path: PathBuf,
    /// The function table.
    pub fns: Mlx5Fns,
}

impl Mlx5 {
    /// A library made of plain function pointers (a mock provider's), reported as loaded
    /// from `path`.
    ///
    /// # Safety
    ///
    /// Each function in `fns` must behave as the libmlx5 function of the same name (its man
    /// page's contract) on the objects of the libibverbs it is used with.
    pub unsafe fn from_fns(fns: Mlx5Fns, path: PathBuf) -> Mlx5 {
        Mlx5 { _lib: None, path, fns }
    }

    /// The name it was reopened by: for [`mlx5_for`], the provider's file as the dynamic
    /// loader names it (for example
    /// `/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The libmlx5 functions of the provider that drives `ctx` (see the module docs), loaded on
/// first use per provider file and kept for the life of the process. It does not say that the
/// device is an mlx5 one: ask `mlx5dv_is_supported` next.
///
/// # Errors
///
/// [`Mlx5LoadError`]: the provider cannot be located, reopened, or is not libmlx5.
///
/// # Safety
///
/// `ctx` must be a live context opened by the libibverbs loaded in this process (not a mock
/// one, whose ops live in the test binary).
pub unsafe fn mlx5_for(ctx: *mut ibv_context) -> Result<&'static Mlx5, Mlx5LoadError> {
    // SAFETY: the caller guarantees a live context; a plain field read.
    let Some(poll_cq) = (unsafe { (*ctx).ops.poll_cq }) else {
        return Err(Mlx5LoadError::NoProvider { reason: "the context's ops.poll_cq is NULL" });
    };
    let Some(path) = loaded_path(poll_cq as *const c_void) else {
        return Err(Mlx5LoadError::NoProvider {
            reason: "dladdr does not place ops.poll_cq in a loaded library",
        });
    };
    // SAFETY: the object holding the provider op of a live context is the provider
    // libibverbs loaded for it.
    unsafe { loaded(&path) }
}

/// The libmlx5 functions of `name` (a path, or a SONAME such as `libmlx5.so.1`), an object
/// already loaded in this process: `dlopen(name, RTLD_NOW | RTLD_NOLOAD)`, which never maps a
/// second copy. A table found is kept per name for the life of the process; a failure is
/// not, since the object may be loaded later (libibverbs loads its providers on first use).
/// Use [`mlx5_for`] to get a context's own provider.
///
/// # Errors
///
/// [`Mlx5LoadError::Open`] when no such object is loaded, [`Mlx5LoadError::MissingSymbol`]
/// when it lacks an mlx5dv function.
///
/// # Safety
///
/// An object of that name that is loaded must implement the ABI of this build's headers for
/// the mlx5dv symbols it exports (a genuine libmlx5, or a provider without them).
pub unsafe fn loaded(name: &Path) -> Result<&'static Mlx5, Mlx5LoadError> {
    static LOADED: OnceLock<Mutex<Vec<(PathBuf, &'static Mlx5)>>> = OnceLock::new();
    let mut loaded = LOADED.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, lib)) = loaded.iter().find(|(p, _)| p == name) {
        return Ok(lib);
    }
    // SAFETY: RTLD_NOLOAD only returns an object already in the process (no initialiser
    // runs); the caller vouches for its ABI.
    let lib: &'static Mlx5 = Box::leak(Box::new(unsafe { reopen(name) }?));
    loaded.push((name.to_owned(), lib));
    Ok(lib)
}

/// `dlopen(path, RTLD_NOW | RTLD_NOLOAD)` and the table from it.
///
/// # Safety
///
/// `path` must be an object already loaded in this process, implementing the ABI of this
/// build's headers for the symbols it exports.
unsafe fn reopen(path: &Path) -> Result<Mlx5, Mlx5LoadError> {
    let display = path.display().to_string();
    // SAFETY: forwarded to the caller; NOLOAD maps nothing new.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | libc::RTLD_NOLOAD) }.map_err(|e| {
        let reason = match std::error::Error::source(&e) {
            Some(source) => format!("{e}: {source}"),
            None => format!("{e} (it is not loaded in this process)"),
        };
        Mlx5LoadError::Open { library: display.clone(), reason }
    })?;
    let fns = Mlx5Fns::resolve(&lib, &display)?;
    Ok(Mlx5 { _lib: Some(lib), path: path.to_owned(), fns })
}

// The offsets the inline `mlx5dv_wr_set_dc_addr*` rely on (`struct mlx5dv_qp_ex` in rdma-core's `providers/mlx5/mlx5dv.h`).
static_assertions::const_assert_eq!(std::mem::offset_of!(mlx5dv_qp_ex, wr_set_dc_addr), 8);
static_assertions::const_assert_eq!(std::mem::size_of::<mlx5dv_qp_init_attr>(), 40);
static_assertions::const_assert_eq!(std::mem::size_of::<mlx5dv_dc_init_attr>(), 16);

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths of the files mapped into this process, from /proc/self/maps.
    fn mapped() -> Vec<PathBuf> {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        maps.lines().filter_map(|l| l.split_whitespace().nth(5)).map(PathBuf::from).collect()
    }

    #[test]
    fn an_object_not_loaded_is_never_mapped() {
        // A copy of libc: a loadable object whose file (path and inode) the process has not
        // loaded, so a plain dlopen would map it; NOLOAD must refuse it.
        let libc = mapped()
            .into_iter()
            .find(|p| p.file_name().is_some_and(|f| f == "libc.so.6"))
            .expect("libc.so.6 is mapped");
        let copy =
            std::env::temp_dir().join(format!("rdma-verbs-sys-noload-{}.so", std::process::id()));
        std::fs::copy(&libc, &copy).expect("copy libc");
        // SAFETY: NOLOAD maps nothing new; were it mapped, it would be a genuine libc.
        let result = unsafe { loaded(&copy) };
        let now_mapped = mapped().contains(&copy);
        std::fs::remove_file(&copy).expect("remove the copy");
        let err = result.err().expect("an object not loaded is refused");
        assert!(matches!(err, Mlx5LoadError::Open { .. }), "{err:?}");
        assert!(err.to_string().contains(&*copy.to_string_lossy()), "{err}");
        assert!(!now_mapped, "{} was mapped", copy.display());
    }

    #[test]
    fn a_loaded_object_without_mlx5dv_is_named_with_the_missing_symbol() {
        // libc is in every process; it has no mlx5dv functions.
        // SAFETY: NOLOAD maps nothing new; nothing of libc is called.
        let err = unsafe { loaded(Path::new("libc.so.6")) }.err().unwrap();
        assert_eq!(
            err,
            Mlx5LoadError::MissingSymbol {
                path: "libc.so.6".into(),
                symbol: "mlx5dv_query_device"
            }
        );
    }
}
