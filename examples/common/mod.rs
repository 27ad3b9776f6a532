//! Code the examples share, included by each with `#[path = "common/mod.rs"] mod common;` (a
//! file directly in `examples/` would build as an example of its own): opening the device
//! the user named, the source GID, the LID check.
#![allow(dead_code)] // each example uses the part it needs

use rdma_verbs::{Context, GidEntry, PortAttr, Result};

/// Opens the device `name`, or the first one `ibv_get_device_list(3)` returns.
pub fn open_device(name: Option<&str>) -> Result<Context> {
    match name {
        Some(name) => Context::open(name),
        None => Context::open_first(),
    }
}

/// The GID to send from on port `port_num` (`port` its attributes): entry `index` when one is
/// given; else on an Ethernet (RoCE) port the routable one; on InfiniBand none (LID routing).
pub fn source_gid(
    ctx: &Context,
    port_num: u8,
    port: &PortAttr,
    index: Option<u8>,
) -> Result<Option<GidEntry>> {
    Ok(match index {
        Some(index) => Some(ctx.gid(port_num, index)?),
        None if port.is_ethernet() => Some(ctx.routable_gid(port_num)?),
        None => None,
    })
}

/// Refuses an InfiniBand port without a LID: no subnet manager has configured it.
pub fn require_lid(
    ctx: &Context,
    port_num: u8,
    port: &PortAttr,
) -> std::result::Result<(), String> {
    if !port.is_ethernet() && port.lid().0 == 0 {
        return Err(format!(
            "{} port {port_num} has no LID: is the subnet manager running?",
            ctx.name()
        ));
    }
    Ok(())
}
