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

    let include_dirs = include_dirs();
    let found = Arc::new(Mutex::new(Vec::new()));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    let types = builder(&include_dirs, &found)
        .allowlist_type("ibv_.*|_ibv_.*|_compat_ibv_port_attr|verbs_.*|mlx5dv_.*|rdma_.*")
        .allowlist_var("IBV_.*|IB_UVERBS_.*|MLX5DV_.*|RDMA_.*");
    write(generate(types), &out.join("bindings.rs"));

    // Declarations only, never called: they let the loader check its hand-written function
    // pointer types against the system's prototypes at compile time.
    let decls = builder(&include_dirs, &Arc::new(Mutex::new(Vec::new())))
        .allowlist_function("ibv_.*|_ibv_.*|rdma_.*")
        // Only the mlx5dv functions src/mlx5.rs loads: others name types outside the bindings.
        .allowlist_function(
            "mlx5dv_(query_device|is_supported|create_qp|qp_ex_from_ibv_qp_ex|dci_stream_id_reset)",
        )
        .allowlist_recursively(false);
    write(generate(decls), &out.join("decls.rs"));

    publish_facts(&found.lock().expect("no poisoning in a single thread"));
}

/// `RDMA_CORE_INCLUDE_DIR`, else pkg-config's libibverbs include path, else the compiler's.
fn include_dirs() -> Vec<PathBuf> {
    if let Some(dir) = env::var_os(INCLUDE_ENV) {
        let dir = PathBuf::from(dir);
        if !dir.join("infiniband/verbs.h").is_file() {
            fail(&format!("{INCLUDE_ENV}={} holds no infiniband/verbs.h", dir.display()));
        }
        return vec![dir];
    }
    pkg_config::Config::new()
        .cargo_metadata(false)
        .env_metadata(false)
        .probe("libibverbs")
        .map(|lib| lib.include_paths)
        .unwrap_or_default()
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

fn write(bindings: bindgen::Bindings, path: &Path) {
    bindings
        .write_to_file(path)
        .unwrap_or_else(|e| fail(&format!("writing {}: {e}", path.display())));
}

/// Records which of the wrapper's optional headers clang actually included.
#[derive(Debug)]
struct HeaderFacts(Arc<Mutex<Vec<String>>>);

impl bindgen::callbacks::ParseCallbacks for HeaderFacts {
    fn include_file(&self, filename: &str) {
        self.0.lock().expect("bindgen parses on one thread").push(filename.to_owned());
    }
}

fn publish_facts(included: &[String]) {
    let has = |suffix: &str| included.iter().find(|f| f.ends_with(suffix));
    let Some(verbs_h) = has("infiniband/verbs.h") else {
        fail("infiniband/verbs.h was not found");
    };
    println!("cargo::metadata=verbs_h={verbs_h}");
    for (key, header) in [("mlx5dv", "infiniband/mlx5dv.h"), ("rdma_cma", "rdma/rdma_cma.h")] {
        println!("cargo::metadata={key}={}", u8::from(has(header).is_some()));
    }
    // The librdmacm table (src/rdmacm.rs) needs rdma_cma.h's types and prototypes, and the
    // libmlx5 table (src/mlx5.rs) mlx5dv.h's.
    if has("rdma/rdma_cma.h").is_some() {
        println!("cargo:rustc-cfg=rdma_verbs_rdma_cma");
    }
    if has("infiniband/mlx5dv.h").is_some() {
        println!("cargo:rustc-cfg=rdma_verbs_mlx5dv");
    }
    // libibverbs.pc's version is 1.<abi minor>.<rdma-core version>, e.g. 1.14.44.0.
    if let Ok(lib) = pkg_config::Config::new().cargo_metadata(false).probe("libibverbs") {
        if let Some(v) = lib.version.splitn(3, '.').nth(2) {
            println!("cargo::metadata=rdma_core_version={v}");
        }
    }
}

fn fail(what: &str) -> ! {
    eprintln!("\nerror: rdma-verbs-sys: {what}.\nTo fix it, {PACKAGES_HINT}\n");
    std::process::exit(1);
}
