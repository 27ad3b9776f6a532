//! The host's GPUs, as the PCI bus shows them: where GPUDirect RDMA traffic comes from.

use std::fmt;
use std::path::Path;

use super::pci::PciAddress;
use super::sysfs::{names, read};

/// A GPU: a PCI function of display class (`0x03xxxx`: VGA, 3D controller, other display
/// controller) made by a vendor whose GPUs do GPUDirect RDMA.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Gpu {
    /// Its PCI function: `nvidia-smi --query-gpu=pci.bus_id` prints it too.
    pub address: PciAddress,
    /// Who made it.
    pub vendor: GpuVendor,
    /// The function's `numa_node`; `None` when the kernel reports -1.
    pub numa_node: Option<u32>,
}

/// A GPU's vendor, by PCI vendor id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GpuVendor {
    /// NVIDIA (`0x10de`): peer memory through `nvidia_peermem`, dma-buf through
    /// `cuMemGetHandleForAddressRange`.
    Nvidia,
    /// AMD (`0x1002`): peer memory through ROCm's `amdgpu`, dma-buf through ROCm's export.
    Amd,
}

impl fmt::Display for GpuVendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuVendor::Nvidia => "NVIDIA",
            GpuVendor::Amd => "AMD",
        })
    }
}

/// The GPUs of `<root>/sys/bus/pci/devices`, by address. A BMC's VGA function (ASPEED,
/// Matrox) is of another vendor, and so not one.
pub(super) fn read_gpus(root: &Path) -> Vec<Gpu> {
    let dir = root.join("sys/bus/pci/devices");
    names(&dir)
        .iter()
        .filter_map(|name| {
            let function = dir.join(name);
            if hex(&read(function.join("class"))?)? >> 16 != 0x03 {
                return None;
            }
            let vendor = match hex(&read(function.join("vendor"))?)? {
                0x10de => GpuVendor::Nvidia,
                0x1002 => GpuVendor::Amd,
                _ => return None,
            };
            let numa_node = super::device::numa_node(&function);
            Some(Gpu { address: name.parse().ok()?, vendor, numa_node })
        })
        .collect()
}

/// A sysfs hex attribute: `0x030200`.
fn hex(text: &str) -> Option<u32> {
    u32::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_attributes_parse() {
        assert_eq!(hex("0x030200"), Some(0x030200));
        assert_eq!(hex("0x10de"), Some(0x10de));
        assert_eq!(hex("10de"), None);
    }
}
