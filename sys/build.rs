//! Generates the rdma-core bindings from the system's headers and publishes what was found.
//!
//! Nothing is linked: libibverbs is loaded at run time (see `src/loader.rs`). The `links` key
//! only carries metadata (`DEP_RDMA_VERBS_SYS_*`) to the safe crate's build script.

use std::env;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const INCLUDE_ENV: &str = "RDMA_CORE_INCLUDE_DIR";

const PACKAGES_HINT: &str = "install the rdma-core development headers and libclang:\n  \
     Debian/Ubuntu: apt-get install libibverbs-dev librdmacm-dev libclang-dev pkg-config\n  \
     RHEL/Rocky/Fedora: dnf install rdma-core-devel clang-devel pkgconf-pkg-config\n  \
     MLNX_OFED/DOCA-OFED: install its rdma-core-devel (or libibverbs-dev) package\n\
     or point RDMA_CORE_INCLUDE_DIR at the directory that holds infiniband/verbs.h";

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed={INCLUDE_ENV}");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let headers = header_dir();
    let include_dirs = include_dirs(&headers, &out);
    let found = Arc::new(Mutex::new(Vec::new()));

    let types = builder(&include_dirs, &found)
        .allowlist_type("ibv_.*|_ibv_.*|_compat_ibv_port_attr|verbs_.*|mlx5dv_.*|rdma_.*")
        .allowlist_type("efadv_(device_attr|qp_init_attr)")
        .allowlist_var("IBV_.*|IB_UVERBS_.*|MLX5DV_.*|RDMA_.*")
        .allowlist_var("EFADV_(DEVICE_ATTR_CAPS|QP_DRIVER_TYPE)_.*");
    let types = generate(types);
    // DC (src/mlx5.rs, the safe crate's `mlx5` feature) needs DCI streams, new in v37's mlx5dv.h.
    let types = types.to_string();
    let dci_streams = types.contains("pub struct mlx5dv_dci_streams_caps");
    let efadv = types.contains("pub struct efadv_device_attr");
    let efa_constants: &[_] = if efadv { &OWN_EFA_CONSTANTS } else { &[] };
    let own = missing_types(&types)
        + &missing_constants(&types, &OWN_CONSTANTS)
        + &missing_constants(&types, efa_constants);
    std::fs::write(out.join("bindings.rs"), types.clone() + &own)
        .unwrap_or_else(|e| fail(&format!("writing bindings.rs: {e}")));

    // Declarations only, never called: they let the loader check its hand-written function
    // pointer types against the system's prototypes at compile time.
    let decls = builder(&include_dirs, &Arc::new(Mutex::new(Vec::new())))
        .allowlist_function("ibv_.*|_ibv_.*|rdma_.*")
        // Only the mlx5dv functions src/mlx5.rs loads: others name types outside the bindings.
        .allowlist_function(
            "mlx5dv_(query_device|is_supported|create_qp|qp_ex_from_ibv_qp_ex|dci_stream_id_reset)",
        )
        // And the efadv functions src/efa.rs loads.
        .allowlist_function("efadv_(query_device|create_qp_ex)")
        .allowlist_recursively(false);
    let decls = generate(decls).to_string();
    std::fs::write(out.join("decls.rs"), decls.clone() + &missing_prototypes(&decls))
        .unwrap_or_else(|e| fail(&format!("writing decls.rs: {e}")));

    publish_facts(&found.lock().expect("no poisoning in a single thread"), &headers, dci_streams);
    publish_efadv(efadv);
}

/// The include directory handed to clang: one of its own in `OUT_DIR` that holds only the
/// rdma-core header directories (`infiniband/`, `rdma/`) of `source` ([`header_dir`]), as
/// symlinks.
///
/// Never `-I/usr/include` itself: a cross toolchain (cargo-zigbuild's `zig cc`, a sysroot)
/// brings its own C library headers, and `-I/usr/include` would put the host's glibc headers
/// in front of them (clang then fails in `stdio.h`: "use of undeclared identifier
/// 'L_tmpnam'"). What the rdma-core headers include from elsewhere (`<linux/types.h>`,
/// `<rdma/ib_user_verbs.h>` of the kernel headers) comes from the compiler's own search path.
fn include_dirs(source: &Path, out: &Path) -> Vec<PathBuf> {
    let isolated = out.join("rdma-core-include");
    // (Rebuilt on every run: a stale link would point at the previous header directory.)
    let _ = std::fs::remove_dir_all(&isolated);
    std::fs::create_dir_all(&isolated)
        .unwrap_or_else(|e| fail(&format!("creating {}: {e}", isolated.display())));
    for sub in ["infiniband", "rdma"] {
        let target = source.join(sub);
        if target.is_dir() {
            std::os::unix::fs::symlink(&target, isolated.join(sub)).unwrap_or_else(|e| {
                fail(&format!("linking {} into {}: {e}", target.display(), isolated.display()))
            });
        }
    }
    vec![isolated]
}

/// The directory holding `infiniband/verbs.h`: `RDMA_CORE_INCLUDE_DIR`, else pkg-config's
/// libibverbs include path, else the usual system directories.
fn header_dir() -> PathBuf {
    let has_verbs = |d: &Path| d.join("infiniband/verbs.h").is_file();
    if let Some(dir) = env::var_os(INCLUDE_ENV) {
        let dir = PathBuf::from(dir);
        if !has_verbs(&dir) {
            fail(&format!("{INCLUDE_ENV}={} holds no infiniband/verbs.h", dir.display()));
        }
        return dir;
    }
    let from_pkg_config = pkg_config::Config::new()
        .cargo_metadata(false)
        .env_metadata(false)
        .probe("libibverbs")
        .map(|lib| lib.include_paths)
        .unwrap_or_default();
    // (pkg-config leaves out /usr/include, the default, so it is searched after its answer.)
    from_pkg_config
        .into_iter()
        .chain(["/usr/include", "/usr/local/include"].map(PathBuf::from))
        .find(|d| has_verbs(d))
        .unwrap_or_else(|| fail("infiniband/verbs.h was not found"))
}

fn builder(include_dirs: &[PathBuf], found: &Arc<Mutex<Vec<String>>>) -> bindgen::Builder {
    let msrv = env::var("CARGO_PKG_RUST_VERSION").expect("rust-version is set");
    let target = bindgen::RustTarget::stable(
        msrv.split('.').nth(1).and_then(|m| m.parse().ok()).expect("rust-version is 1.x"),
        0,
    )
    .unwrap_or_else(|e| fail(&format!("bindgen does not know Rust {msrv}: {e}")));
    bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(include_dirs.iter().map(|d| format!("-I{}", d.display())))
        .rust_target(target)
        // C enums stay plain integers: a newer library may return values this build never saw.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .parse_callbacks(Box::new(HeaderFacts(Arc::clone(found))))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
}

/// Prototypes of optional functions that older headers lack, declared by this crate (as the
/// newer headers declare them) so that the loader's table has the same fields whatever the
/// headers: the running library decides at run time whether the symbol is there.
const OWN_PROTOTYPES: [(&str, &str, &str); 7] = [
    (
        "ibv_reg_dmabuf_mr",
        "rdma-core v34",
        "pub fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, \
         fd: ::std::ffi::c_int, access: ::std::ffi::c_int) -> *mut ibv_mr;",
    ),
    // `enum ibv_fork_status` is a C enum: an unsigned int, as bindgen renders it.
    (
        "ibv_is_fork_initialized",
        "rdma-core v35",
        "pub fn ibv_is_fork_initialized() -> ::std::ffi::c_uint;",
    ),
    (
        "ibv_query_port_speed",
        "rdma-core v62",
        "pub fn ibv_query_port_speed(context: *mut ibv_context, port_num: u32, \
         port_speed: *mut u64) -> ::std::ffi::c_int;",
    ),
    (
        "ibv_dm_export_dmabuf_fd",
        "rdma-core v62",
        "pub fn ibv_dm_export_dmabuf_fd(dm: *mut ibv_dm) -> ::std::ffi::c_int;",
    ),
    (
        "ibv_alloc_dmah",
        "rdma-core v59",
        "pub fn ibv_alloc_dmah(context: *mut ibv_context, attr: *mut ibv_dmah_init_attr) \
         -> *mut ibv_dmah;",
    ),
    ("ibv_dealloc_dmah", "rdma-core v59", "pub fn ibv_dealloc_dmah(dmah: *mut ibv_dmah) -> ::std::ffi::c_int;"),
    (
        "ibv_reg_mr_ex",
        "rdma-core v59",
        "pub fn ibv_reg_mr_ex(pd: *mut ibv_pd, mr_init_attr: *mut ibv_mr_init_attr) -> *mut ibv_mr;",
    ),
];

/// Types that older headers lack, declared by this crate as the newest headers (rdma-core
/// 65.0) lay them out, each with its constants: the loader's prototypes name them whatever the
/// headers. Each is keyed by the type whose absence means the whole declaration is missing.
/// On 64-bit targets the sizes and offsets are checked against the C layout at compile time.
const OWN_TYPES: [(&str, &str, &str); 2] = [
    // DMA handles: `struct ibv_dmah`, `ibv_alloc_dmah(3)`'s `struct ibv_dmah_init_attr` and its
    // enums.
    (
        "ibv_dmah",
        "rdma-core v59",
        "#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct ibv_dmah {
    pub context: *mut ibv_context,
}
pub type ibv_tph_mem_type = ::std::ffi::c_uint;
pub const IBV_TPH_MEM_TYPE_VM: ibv_tph_mem_type = 0;
pub const IBV_TPH_MEM_TYPE_PM: ibv_tph_mem_type = 1;
pub type ibv_dmah_init_attr_mask = ::std::ffi::c_uint;
pub const IBV_DMAH_INIT_ATTR_MASK_CPU_ID: ibv_dmah_init_attr_mask = 1;
pub const IBV_DMAH_INIT_ATTR_MASK_PH: ibv_dmah_init_attr_mask = 2;
pub const IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE: ibv_dmah_init_attr_mask = 4;
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct ibv_dmah_init_attr {
    pub comp_mask: u32,
    pub cpu_id: u32,
    pub ph: u8,
    pub tph_mem_type: u8,
}
#[cfg(target_pointer_width = \"64\")]
const _: () = {
    assert!(::std::mem::size_of::<ibv_dmah>() == 8);
    assert!(::std::mem::size_of::<ibv_dmah_init_attr>() == 12);
    assert!(::std::mem::offset_of!(ibv_dmah_init_attr, ph) == 8);
    assert!(::std::mem::offset_of!(ibv_dmah_init_attr, tph_mem_type) == 9);
};
",
    ),
    // `ibv_reg_mr_ex(3)`'s `struct ibv_mr_init_attr` and its mask; `buf` (and the opaque
    // `struct ibv_buf` it points to) arrived in v64, after the struct itself.
    (
        "ibv_mr_init_attr",
        "rdma-core v59",
        "pub type ibv_mr_init_attr_mask = ::std::ffi::c_uint;
pub const IBV_REG_MR_MASK_IOVA: ibv_mr_init_attr_mask = 1;
pub const IBV_REG_MR_MASK_ADDR: ibv_mr_init_attr_mask = 2;
pub const IBV_REG_MR_MASK_FD: ibv_mr_init_attr_mask = 4;
pub const IBV_REG_MR_MASK_FD_OFFSET: ibv_mr_init_attr_mask = 8;
pub const IBV_REG_MR_MASK_DMAH: ibv_mr_init_attr_mask = 16;
pub const IBV_REG_MR_MASK_BUF: ibv_mr_init_attr_mask = 32;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct ibv_buf {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct ibv_mr_init_attr {
    pub length: usize,
    pub access: ::std::ffi::c_int,
    pub comp_mask: u64,
    pub iova: u64,
    pub addr: *mut ::std::ffi::c_void,
    pub fd: ::std::ffi::c_int,
    pub fd_offset: u64,
    pub dmah: *mut ibv_dmah,
    pub buf: *mut ibv_buf,
}
impl Default for ibv_mr_init_attr {
    fn default() -> Self {
        ibv_mr_init_attr {
            length: 0,
            access: 0,
            comp_mask: 0,
            iova: 0,
            addr: ::std::ptr::null_mut(),
            fd: 0,
            fd_offset: 0,
            dmah: ::std::ptr::null_mut(),
            buf: ::std::ptr::null_mut(),
        }
    }
}
#[cfg(target_pointer_width = \"64\")]
const _: () = {
    assert!(::std::mem::size_of::<ibv_mr_init_attr>() == 72);
    assert!(::std::mem::offset_of!(ibv_mr_init_attr, comp_mask) == 16);
    assert!(::std::mem::offset_of!(ibv_mr_init_attr, fd) == 40);
    assert!(::std::mem::offset_of!(ibv_mr_init_attr, fd_offset) == 48);
    assert!(::std::mem::offset_of!(ibv_mr_init_attr, dmah) == 56);
    assert!(::std::mem::offset_of!(ibv_mr_init_attr, buf) == 64);
};
",
    ),
];

/// Values of C enums that older headers lack, declared by this crate with the number the
/// newer headers give them (an enum's values are never renumbered: they are kernel ABI).
const OWN_CONSTANTS: [(&str, &str, &str); 1] = [(
    "IBV_EVENT_DEVICE_SPEED_CHANGE",
    "rdma-core v62",
    "pub const IBV_EVENT_DEVICE_SPEED_CHANGE: ibv_event_type = 20;",
)];

/// `efadv_query_device(3)`'s capability bits that efadv.h of older releases lacks, declared
/// with the numbers the newer headers give them (only when the system has efadv.h).
const OWN_EFA_CONSTANTS: [(&str, &str, &str); 3] = [
    (
        "EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID",
        "rdma-core v43",
        "pub const EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID: u32 = 1 << 2;",
    ),
    (
        "EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE",
        "rdma-core v46",
        "pub const EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE: u32 = 1 << 3;",
    ),
    (
        "EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV",
        "rdma-core v52",
        "pub const EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV: u32 = 1 << 4;",
    ),
];

/// The declarations of [`OWN_PROTOTYPES`] that `decls` (bindgen's output) lacks.
fn missing_prototypes(decls: &str) -> String {
    let mut own = String::new();
    for (name, since, prototype) in OWN_PROTOTYPES {
        if !decls.contains(&format!("pub fn {name}(")) {
            own += &own_note(since);
            own += &format!("unsafe extern \"C\" {{\n    {prototype}\n}}\n");
        }
    }
    own
}

/// The declarations of [`OWN_TYPES`] that `types` (bindgen's output) lacks.
fn missing_types(types: &str) -> String {
    let mut own = String::new();
    for (name, since, declaration) in OWN_TYPES {
        if !types.contains(&format!("pub struct {name} {{")) {
            own += &own_note(since);
            own += declaration;
        }
    }
    own
}

/// The constants of `constants` ([`OWN_CONSTANTS`], [`OWN_EFA_CONSTANTS`]) that `types`
/// (bindgen's output) lacks.
fn missing_constants(types: &str, constants: &[(&str, &str, &str)]) -> String {
    let mut own = String::new();
    for &(name, since, constant) in constants {
        if !types.contains(&format!("pub const {name}:")) {
            own += &own_note(since);
            own += constant;
            own += "\n";
        }
    }
    own
}

fn own_note(since: &str) -> String {
    format!("// Not in these headers (new in {since}): declared by build.rs.\n")
}

fn generate(builder: bindgen::Builder) -> bindgen::Bindings {
    // bindgen panics when it cannot load libclang: turn that into the one message below.
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate()));
    let _ = std::panic::take_hook();
    match result {
        Ok(Ok(bindings)) => bindings,
        Ok(Err(e)) => fail(&format!("bindgen could not parse the rdma-core headers ({e})")),
        Err(_) => fail("bindgen could not load libclang"),
    }
}

/// Records which of the wrapper's optional headers clang actually included.
#[derive(Debug)]
struct HeaderFacts(Arc<Mutex<Vec<String>>>);

impl bindgen::callbacks::ParseCallbacks for HeaderFacts {
    fn include_file(&self, filename: &str) {
        self.0.lock().expect("bindgen parses on one thread").push(filename.to_owned());
    }
}

fn publish_facts(included: &[String], headers: &Path, dci_streams: bool) {
    let has = |suffix: &str| included.iter().find(|f| f.ends_with(suffix));
    let Some(verbs_h) = has("infiniband/verbs.h") else {
        fail("infiniband/verbs.h was not found");
    };
    // The real file, not its path through the isolated include directory.
    let verbs_h = Path::new(verbs_h).canonicalize().unwrap_or_else(|_| verbs_h.into());
    println!("cargo::metadata=verbs_h={}", verbs_h.display());
    let rdma_cma = has("rdma/rdma_cma.h").is_some();
    // An mlx5dv.h older than rdma-core v37 counts as absent, and the safe crate's build
    // refuses its `mlx5` feature then, naming v37 (`mlx5dv_too_old`).
    let mlx5dv_found = has("infiniband/mlx5dv.h").is_some();
    let mlx5dv = mlx5dv_found && dci_streams;
    println!("cargo::metadata=mlx5dv={}", u8::from(mlx5dv));
    println!("cargo::metadata=mlx5dv_too_old={}", u8::from(mlx5dv_found && !dci_streams));
    println!("cargo::metadata=rdma_cma={}", u8::from(rdma_cma));
    // The librdmacm table (src/rdmacm.rs) needs rdma_cma.h's types and prototypes, and the
    // libmlx5 table (src/mlx5.rs) mlx5dv.h's.
    if rdma_cma {
        println!("cargo:rustc-cfg=rdma_verbs_rdma_cma");
    }
    if mlx5dv {
        println!("cargo:rustc-cfg=rdma_verbs_mlx5dv");
    }
    if let Some(v) = rdma_core_version(headers) {
        println!("cargo::metadata=rdma_core_version={v}");
    }
}

/// Whether efadv.h was found: the libefa table (src/efa.rs) needs its types and prototypes,
/// and the safe crate's `efa` feature needs that table.
fn publish_efadv(efadv: bool) {
    println!("cargo::metadata=efadv={}", u8::from(efadv));
    if efadv {
        println!("cargo:rustc-cfg=rdma_verbs_efadv");
    }
}

/// The rdma-core release of the headers, from the `libibverbs.pc` that was installed with
/// them (`PREFIX/include` beside `PREFIX/lib/<multiarch>/pkgconfig` or
/// `PREFIX/lib{,64}/pkgconfig`); pkg-config's own answer for the system's headers.
/// libibverbs.pc's version is 1.<abi minor>.<rdma-core version>, e.g. 1.14.44.0.
fn rdma_core_version(headers: &Path) -> Option<String> {
    let version = if env::var_os(INCLUDE_ENV).is_some() {
        let lib = headers.parent()?.join("lib");
        let mut dirs = vec![lib.join("pkgconfig"), headers.parent()?.join("lib64/pkgconfig")];
        if let Ok(entries) = std::fs::read_dir(&lib) {
            dirs.extend(entries.flatten().map(|e| e.path().join("pkgconfig")));
        }
        let pc = dirs.iter().find_map(|d| std::fs::read_to_string(d.join("libibverbs.pc")).ok())?;
        pc.lines().find_map(|l| l.strip_prefix("Version:")).map(|v| v.trim().to_owned())?
    } else {
        pkg_config::Config::new().cargo_metadata(false).probe("libibverbs").ok()?.version
    };
    version.splitn(3, '.').nth(2).map(str::to_owned)
}

fn fail(what: &str) -> ! {
    eprintln!("\nerror: rdma-verbs-sys: {what}.\nTo fix it, {PACKAGES_HINT}\n");
    std::process::exit(1);
}
