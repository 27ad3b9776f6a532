//! PCI addresses, a function's place in the PCIe hierarchy, and its link.

use std::fmt;
use std::path::{Component, Path};
use std::str::FromStr;

use super::sysfs::read;
use super::TopologyError;

/// A PCI function's address, `domain:bus:device.function` (BDF): `0000:3b:00.0`.
///
/// Parses what `lspci -D` and sysfs print, the 8-digit domain of `nvidia-smi`
/// (`00000000:3B:00.0`), and the short `3b:00.0` (domain 0); hex digits in either case.
/// Displays as sysfs names it: `0000:3b:00.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// The PCI segment (domain).
    pub domain: u32,
    /// The bus number.
    pub bus: u8,
    /// The device number on the bus, 0 to 31.
    pub device: u8,
    /// The function number, 0 to 7.
    pub function: u8,
}

impl FromStr for PciAddress {
    type Err = TopologyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_bdf(text.trim()).ok_or_else(|| TopologyError::BadPciAddress { text: text.into() })
    }
}

fn parse_bdf(text: &str) -> Option<PciAddress> {
    let (rest, function) = text.rsplit_once('.')?;
    let mut parts = rest.rsplitn(3, ':');
    let device = parts.next()?;
    let bus = parts.next()?;
    let domain = parts.next().unwrap_or("0");
    let hex = |s: &str, max: usize| {
        (!s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let (device, function) = (hex(device, 2)?, hex(function, 1)?);
    if device > 31 || function > 7 {
        return None;
    }
    Some(PciAddress {
        domain: hex(domain, 8)?,
        bus: u8::try_from(hex(bus, 2)?).ok()?,
        device: device as u8,
        function: function as u8,
    })
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

/// Where a PCI function sits: its host bridge and the bridges from the root port down.
///
/// From the directory sysfs keeps it in:
/// `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0` is function
/// `0000:03:00.0` behind host bridge `pci0000:00`, root port `0000:00:01.0` and a PCIe
/// switch (upstream port `0000:01:00.0`, downstream port `0000:02:00.0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciPath {
    /// The host bridge (root complex) sysfs names it after: `pci0000:00`.
    pub host_bridge: String,
    /// The bridges between the host bridge and the function, root port first; empty for a
    /// function on the root complex itself (an integrated device, most virtual machines).
    pub bridges: Vec<PciAddress>,
    /// The function.
    pub function: PciAddress,
}

impl PciPath {
    /// The path of the PCI function whose sysfs directory (symlinks resolved) is `dir`;
    /// `None` if `dir` is not under `<root>/sys/devices/pci…`. A device that is a child of a
    /// PCI function (a virtio device) gets its function's path.
    pub(crate) fn of_dir(root: &Path, dir: &Path) -> Option<PciPath> {
        let rel = dir.strip_prefix(root.join("sys/devices")).ok()?;
        let mut names = rel.components().filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        });
        let host_bridge = names.next().filter(|n| n.starts_with("pci"))?.to_owned();
        let mut chain: Vec<PciAddress> = names.map_while(parse_bdf).collect();
        let function = chain.pop()?;
        Some(PciPath { host_bridge, bridges: chain, function })
    }

    /// How many bridges this path and `other` share from the root port down; 0 also for
    /// paths under different host bridges.
    pub fn common_bridges(&self, other: &PciPath) -> usize {
        if self.host_bridge != other.host_bridge {
            return 0;
        }
        // A function is a bridge to what sits below it: a GPU's audio function or a
        // NIC's second port on the same card shares it.
        let mine = self.bridges.iter().chain([&self.function]);
        let theirs = other.bridges.iter().chain([&other.function]);
        mine.zip(theirs).take_while(|(a, b)| a == b).count()
    }

    /// The sysfs directory of the function, under `root`.
    pub(crate) fn dir(&self, root: &Path) -> std::path::PathBuf {
        let mut dir = root.join("sys/devices").join(&self.host_bridge);
        for hop in self.bridges.iter().chain([&self.function]) {
            dir.push(hop.to_string());
        }
        dir
    }
}

/// `pci0000:00 > 0000:00:01.0 > 0000:01:00.0 > 0000:03:00.0`.
impl fmt::Display for PciPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.host_bridge)?;
        for hop in self.bridges.iter().chain([&self.function]) {
            write!(f, " > {hop}")?;
        }
        Ok(())
    }
}

/// A PCIe link's state, as the kernel shows it in the function's `current_link_*` and
/// `max_link_*` attributes; `None` where the attribute is absent (conventional PCI, some
/// virtual machines' devices).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PciLink {
    /// Lanes in use: `current_link_width` (`16`).
    pub width: Option<u32>,
    /// Transfer rate in use: `current_link_speed` (`16.0 GT/s PCIe`; older kernels print
    /// `8 GT/s`).
    pub speed: Option<String>,
    /// Lanes the function supports: `max_link_width`.
    pub max_width: Option<u32>,
    /// Rate the function supports: `max_link_speed`.
    pub max_speed: Option<String>,
}

impl PciLink {
    pub(crate) fn read(dir: &Path) -> PciLink {
        let width = |name: &str| read(dir.join(name)).and_then(|w| w.parse().ok());
        // The kernel prints `Unknown` when the link's state cannot be read.
        let speed = |name: &str| read(dir.join(name)).filter(|s| s != "Unknown");
        PciLink {
            width: width("current_link_width"),
            speed: speed("current_link_speed"),
            max_width: width("max_link_width"),
            max_speed: speed("max_link_speed"),
        }
    }

    /// Whether the link trained below what the function supports, narrower or slower: a
    /// card in a slot with fewer lanes, a riser, or a link that retrained after errors.
    /// (Some devices lower their speed when idle to save power; the width stays.)
    pub fn is_degraded(&self) -> bool {
        let narrower = matches!((self.width, self.max_width), (Some(w), Some(m)) if w < m);
        let slower = match (self.speed.as_deref().and_then(gts), self.max_speed.as_deref()) {
            (Some(now), Some(max)) => gts(max).is_some_and(|max| now < max),
            _ => false,
        };
        narrower || slower
    }
}

/// `x16 16.0 GT/s PCIe (max x16 32.0 GT/s PCIe)`, or what of it is known.
impl fmt::Display for PciLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |w: Option<u32>, s: &Option<String>| match (w, s) {
            (Some(w), Some(s)) => format!("x{w} {s}"),
            (Some(w), None) => format!("x{w}"),
            (None, Some(s)) => s.clone(),
            (None, None) => "unknown".into(),
        };
        write!(f, "{}", part(self.width, &self.speed))?;
        if self.max_width.is_some() || self.max_speed.is_some() {
            write!(f, " (max {})", part(self.max_width, &self.max_speed))?;
        }
        Ok(())
    }
}

/// The rate in GT/s of a `*_link_speed` string: `16.0 GT/s PCIe` → 16.0.
fn gts(speed: &str) -> Option<f64> {
    speed.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_in_every_spelling_and_display_as_sysfs() {
        let a: PciAddress = "0000:3b:00.1".parse().unwrap();
        assert_eq!((a.domain, a.bus, a.device, a.function), (0, 0x3b, 0, 1));
        assert_eq!("00000000:3B:00.1".parse::<PciAddress>().unwrap(), a);
        assert_eq!("3b:00.1".parse::<PciAddress>().unwrap(), a);
        assert_eq!(a.to_string(), "0000:3b:00.1");
        assert_eq!("10001:c1:1f.7".parse::<PciAddress>().unwrap().to_string(), "10001:c1:1f.7");
        for bad in ["", "3b:00", "0000:3b:20.0", "0000:3b:00.8", "0000:3bb:00.0", "x:3b:00.0"] {
            let e = bad.parse::<PciAddress>().unwrap_err();
            assert!(e.to_string().contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn paths_come_from_sysfs_directories() {
        let root = Path::new("/r");
        let dir = Path::new("/r/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:03:00.0");
        let path = PciPath::of_dir(root, dir).unwrap();
        assert_eq!(path.host_bridge, "pci0000:00");
        assert_eq!(path.bridges.len(), 2);
        assert_eq!(path.function.to_string(), "0000:03:00.0");
        assert_eq!(path.dir(root), dir);
        assert_eq!(path.to_string(), "pci0000:00 > 0000:00:01.0 > 0000:01:00.0 > 0000:03:00.0");
        let virtio = Path::new("/r/sys/devices/pci0000:00/0000:00:03.0/virtio0");
        let path = PciPath::of_dir(root, virtio).unwrap();
        assert_eq!((path.bridges.len(), path.function.to_string()), (0, "0000:00:03.0".into()));
        assert_eq!(PciPath::of_dir(root, Path::new("/r/sys/devices/virtual/net/lo")), None);
        assert_eq!(PciPath::of_dir(root, Path::new("/elsewhere/pci0000:00/0000:00:03.0")), None);
    }

    #[test]
    fn a_link_below_its_maximum_is_degraded() {
        let link = |w, s: &str, mw, ms: &str| PciLink {
            width: Some(w),
            speed: Some(s.into()),
            max_width: Some(mw),
            max_speed: Some(ms.into()),
        };
        let full = link(16, "16.0 GT/s PCIe", 16, "16.0 GT/s PCIe");
        assert!(!full.is_degraded());
        assert_eq!(full.to_string(), "x16 16.0 GT/s PCIe (max x16 16.0 GT/s PCIe)");
        assert!(link(8, "16.0 GT/s PCIe", 16, "16.0 GT/s PCIe").is_degraded());
        assert!(link(16, "8.0 GT/s PCIe", 16, "16.0 GT/s PCIe").is_degraded());
        assert!(link(16, "8 GT/s", 16, "8 GT/s").to_string().starts_with("x16 8 GT/s"));
        assert!(!PciLink::default().is_degraded());
        assert_eq!(PciLink::default().to_string(), "unknown");
    }
}
