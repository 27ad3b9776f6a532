//! The providers libibverbs would load — its driver config plus `RDMAV_DRIVERS` — and
//! whether each one loads (in a child process, see `probe`).
//!
//! libibverbs' config directory, provider directory and provider ABI (the `-rdmavNN.so`
//! suffix) are compiled into it (`IBV_CONFIG_DIR`, `VERBS_PROVIDER_DIR`, the private ABI
//! number). They are read from the loaded file's string constants — the format strings its
//! `load_driver` passes to `dlopen` — so the probe tries exactly the files it would, in the
//! same order: an absolute name plus the suffix; else the provider directory, then the
//! loader's search path.

use std::path::{Path, PathBuf};

use rdma_verbs_sys as sys;

use super::probe::{self, Outcome};
use super::sysfs::names;
use super::{Out, ProviderProbe};

/// Runs the provider checks.
pub(super) fn check(out: &mut Out<'_>, verbs: &sys::Ibverbs, probe: ProviderProbe) {
    let settings = std::fs::read(verbs.path())
        .map_err(|e| format!("cannot read {}: {e}", verbs.path().display()))
        .and_then(|bytes| {
            Settings::from_library(&bytes).ok_or_else(|| {
                format!(
                    "{} holds no provider settings (no '.../libibverbs.d' or \
                     'lib%s-rdmavNN.so' string): it may be built with static providers only",
                    verbs.path().display()
                )
            })
        });
    let settings = match settings {
        Ok(settings) => settings,
        Err(why) => {
            out.warn("driver config", why, "use a libibverbs from a standard rdma-core build");
            out.skip("providers", "needs the driver config (see Library: driver config)");
            return;
        }
    };
    let drivers = drivers(&settings.config_dir);
    if drivers.is_empty() {
        out.warn(
            "driver config",
            format!(
                "no provider is listed in {} (nor in RDMAV_DRIVERS): libibverbs can open no \
                 device",
                settings.config_dir.display()
            ),
            "Debian/Ubuntu: apt-get install ibverbs-providers; RHEL/Rocky/Fedora: dnf install \
             libibverbs",
        );
        return;
    }
    let listed: Vec<&str> = drivers.iter().map(|d| d.name.as_str()).collect();
    let lookup = match &settings.provider_dir {
        Some(dir) => format!("{dir}/lib<name>{}, then the loader's search path", settings.suffix),
        None => format!("lib<name>{} on the loader's search path", settings.suffix),
    };
    let from_env = drivers.iter().any(|d| !d.source.starts_with('/'));
    out.pass(
        "driver config",
        format!(
            "{} listed in {}{} ({}); libibverbs loads {lookup}",
            drivers.len(),
            settings.config_dir.display(),
            if from_env { " and the environment" } else { "" },
            listed.join(", ")
        ),
    );
    if probe == ProviderProbe::Skip {
        out.skip("providers", "not loaded: the caller chose ProviderProbe::Skip");
        return;
    }
    let candidates: Vec<Vec<String>> =
        drivers.iter().map(|d| settings.candidates(&d.name)).collect();
    for (driver, outcome) in drivers.iter().zip(probe::load_all(&candidates)) {
        let check = format!("provider {}", driver.name);
        match outcome {
            Outcome::Loaded(file) => out.pass(&check, format!("loads: {file}")),
            Outcome::Failed(why) => out.warn(
                &check,
                format!("does not load: {why}"),
                format!(
                    "if such a device is installed, install its provider from libibverbs' \
                     rdma-core release (Debian/Ubuntu: ibverbs-providers; RHEL/Rocky/Fedora: \
                     libibverbs); otherwise the entry in {} is stale and only makes libibverbs \
                     print warnings",
                    driver.source
                ),
            ),
            Outcome::Crashed(why) => out.fail(
                &check,
                format!("loading it killed the probe process: {why}"),
                format!(
                    "every verbs program that loads it will fail the same way: install a \
                     provider matching libibverbs, or remove its entry in {}",
                    driver.source
                ),
            ),
            Outcome::NoProbe(why) => out.skip(&check, why),
        }
    }
}

/// The provider settings compiled into a libibverbs.
#[derive(Debug, PartialEq, Eq)]
struct Settings {
    /// `IBV_CONFIG_DIR`: where the `*.driver` files are.
    config_dir: PathBuf,
    /// `VERBS_PROVIDER_DIR`: tried before the loader's search path, when set.
    provider_dir: Option<String>,
    /// `-rdmav<private ABI>.so`, appended to every provider name.
    suffix: String,
}

impl Settings {
    /// Reads them from the NUL-terminated string constants of the library's file.
    fn from_library(bytes: &[u8]) -> Option<Settings> {
        let strings: Vec<&str> = c_strings(bytes).collect();
        let config_dir =
            strings.iter().find(|s| s.starts_with('/') && s.ends_with("/libibverbs.d"))?;
        let formats: Vec<_> = strings.iter().filter_map(|s| provider_format(s)).collect();
        let (_, suffix) = formats.first()?;
        let provider_dir = formats.iter().find_map(|(dir, _)| dir.clone());
        Some(Settings { config_dir: config_dir.into(), provider_dir, suffix: suffix.clone() })
    }

    /// The files libibverbs' `load_driver` tries for `name`, in its order.
    fn candidates(&self, name: &str) -> Vec<String> {
        let suffix = &self.suffix;
        if name.starts_with('/') {
            return vec![format!("{name}{suffix}")];
        }
        let in_dir = self.provider_dir.iter().map(|dir| format!("{dir}/lib{name}{suffix}"));
        in_dir.chain([format!("lib{name}{suffix}")]).collect()
    }
}

/// The printable tails of the NUL-terminated runs of `bytes`: the file's C strings, among
/// other bytes.
fn c_strings(bytes: &[u8]) -> impl Iterator<Item = &str> {
    bytes.split(|&b| b == 0).filter_map(|run| {
        let start = run.iter().rposition(|b| !(0x20..0x7f).contains(b)).map_or(0, |i| i + 1);
        std::str::from_utf8(&run[start..]).ok().filter(|s| s.len() >= 4)
    })
}

/// `(provider dir, suffix)` from a `[DIR/]lib%s-rdmavNN.so` format string.
fn provider_format(s: &str) -> Option<(Option<String>, String)> {
    let at = s.find("lib%s-rdmav")?;
    let suffix = &s[at + "lib%s".len()..];
    if !suffix.ends_with(".so") || suffix.contains('%') {
        return None;
    }
    let dir = match &s[..at] {
        "" => None,
        prefix => Some(prefix.strip_suffix('/').filter(|d| d.starts_with('/'))?.to_owned()),
    };
    Some((dir, suffix.to_owned()))
}

/// A provider name to load, and where it was listed.
#[derive(Debug, PartialEq, Eq)]
struct Driver {
    name: String,
    source: String,
}

/// The drivers of `RDMAV_DRIVERS` (or `IBV_DRIVERS`) and of the config files, without
/// repeats, as libibverbs' `load_drivers` gathers them.
fn drivers(config_dir: &Path) -> Vec<Driver> {
    let mut drivers: Vec<Driver> = Vec::new();
    let env = ["RDMAV_DRIVERS", "IBV_DRIVERS"]
        .into_iter()
        .find_map(|var| Some((var, std::env::var(var).ok()?)));
    if let Some((var, list)) = env {
        let names = list.split([':', ';']).filter(|n| !n.is_empty());
        drivers.extend(names.map(|name| Driver { name: name.into(), source: var.into() }));
    }
    for file in names(config_dir).into_iter().map(|n| config_dir.join(n)) {
        // libibverbs reads every regular file there (symlinks followed), whatever its name.
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let source = file.display().to_string();
        drivers.extend(
            config_drivers(&text).map(|name| Driver { name: name.into(), source: source.clone() }),
        );
    }
    let mut seen = std::collections::HashSet::new();
    drivers.retain(|d| seen.insert(d.name.clone()));
    drivers
}

/// The names of a config file's `driver <name>` lines.
fn config_drivers(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter_map(|line| {
        let mut fields = line.split([' ', '\t']).filter(|f| !f.is_empty());
        match (fields.next(), fields.next()) {
            (Some("driver"), Some(name)) => Some(name),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library_bytes(strings: &[&str]) -> Vec<u8> {
        let mut bytes = vec![0x7f, b'E', b'L', b'F', 2, 1, 0];
        for s in strings {
            bytes.extend_from_slice(&[0x90, 0x01]); // non-text bytes between constants
            bytes.extend_from_slice(s.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    #[test]
    fn settings_come_from_the_compiled_strings() {
        let bytes = library_bytes(&[
            "libibverbs: Warning: couldn't load driver '%s': %s\n",
            "/etc/libibverbs.d",
            "%s-rdmav34.so",
            "/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav34.so",
            "lib%s-rdmav34.so",
        ]);
        let settings = Settings::from_library(&bytes).unwrap();
        assert_eq!(
            settings,
            Settings {
                config_dir: "/etc/libibverbs.d".into(),
                provider_dir: Some("/usr/lib/x86_64-linux-gnu/libibverbs".into()),
                suffix: "-rdmav34.so".into(),
            }
        );
        assert_eq!(
            settings.candidates("rxe"),
            ["/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so", "librxe-rdmav34.so"]
        );
        assert_eq!(settings.candidates("/opt/p/libfoo"), ["/opt/p/libfoo-rdmav34.so"]);
    }

    #[test]
    fn a_library_without_a_provider_dir_searches_the_loader_path() {
        let bytes = library_bytes(&["/opt/etc/libibverbs.d", "lib%s-rdmav59.so"]);
        let settings = Settings::from_library(&bytes).unwrap();
        assert_eq!(settings.provider_dir, None);
        assert_eq!(settings.candidates("mlx5"), ["libmlx5-rdmav59.so"]);
        assert_eq!(Settings::from_library(&library_bytes(&["lib%s-rdmav59.so"])), None);
        assert_eq!(Settings::from_library(&library_bytes(&["/etc/libibverbs.d"])), None);
    }

    #[test]
    fn config_lines_are_read_like_libibverbs() {
        let text = "# comment\n\ndriver mlx5\n  driver\trxe  \nbogus line\ndriver\n";
        assert_eq!(config_drivers(text).collect::<Vec<_>>(), ["mlx5", "rxe"]);
    }

    #[test]
    fn provider_formats_need_a_suffix_and_an_absolute_dir() {
        assert_eq!(provider_format("lib%s-rdmav34.so"), Some((None, "-rdmav34.so".into())));
        assert_eq!(provider_format("junk/lib%s-rdmav34.so"), None);
        assert_eq!(provider_format("lib%s-rdmav%d.so"), None);
        assert_eq!(provider_format("lib%s-rdmav34"), None);
    }
}
