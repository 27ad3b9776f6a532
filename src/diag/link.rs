//! Link layer: each port's state, physical state, link layer, rate and MTU; LID and SM LID
//! on InfiniBand.

use super::kernel::Opened;
use super::{named, Gate, Out, Targets};
use crate::context::Context;
use crate::device::TransportType;
use crate::port::{PortAttr, PortState};

/// A port whose link is up, for the layers above.
#[derive(Clone, Copy)]
pub(super) struct Port<'a> {
    /// The device name.
    pub device: &'a str,
    /// The open device.
    pub ctx: &'a Context,
    /// How the device connects.
    pub transport: TransportType,
    /// The port number, from 1.
    pub num: u8,
    /// Its attributes.
    pub attr: PortAttr,
}

/// `IB_PORT_PHYS_STATE_DISABLED`: turned off by management, not merely without link.
const DISABLED: u8 = 3;

/// Runs the layer's checks; returns each port (`rxe0/1`), usable or with why not.
pub(super) fn check<'a>(out: &mut Out<'_>, devices: &'a Targets<Opened>) -> Targets<Port<'a>> {
    let mut ports = Vec::new();
    for (name, gate) in devices {
        let opened = match gate {
            Ok(opened) => opened,
            Err(reason) => {
                out.skip(&named("port", name), reason.clone());
                ports.push((name.clone(), Err(reason.clone())));
                continue;
            }
        };
        let count = match opened.ctx.query_device() {
            Ok(attr) => attr.phys_port_cnt(),
            Err(e) => {
                out.fail(
                    &named("port", name),
                    e.to_string(),
                    "check dmesg for the driver's errors",
                );
                ports.push((name.clone(), Err(format!("{name} cannot be queried (see Link)"))));
                continue;
            }
        };
        let attrs: Vec<_> = (1..=count).map(|p| (p, opened.ctx.query_port(p))).collect();
        let any_up =
            attrs.iter().any(|(_, a)| a.as_ref().is_ok_and(|a| a.state() == PortState::ACTIVE));
        for (num, attr) in attrs {
            let label = format!("{name}/{num}");
            let gate = match attr {
                Ok(attr) => port(out, &label, attr, any_up).map(|()| Port {
                    device: name,
                    ctx: &opened.ctx,
                    transport: opened.transport,
                    num,
                    attr,
                }),
                Err(e) => {
                    out.fail(
                        &named("port", &label),
                        e.to_string(),
                        "check dmesg for the driver's errors",
                    );
                    Err(format!("port {label} cannot be queried (see Link)"))
                }
            };
            ports.push((label, gate));
        }
    }
    ports
}

/// One port's finding; `Ok` when it can carry traffic.
fn port(out: &mut Out<'_>, label: &str, attr: PortAttr, any_up: bool) -> Gate<()> {
    let check = named("port", label);
    let ib = !attr.is_ethernet();
    let mut seen = format!(
        "{}, {}, {}, {}, active MTU {} (max {})",
        attr.state(),
        phys_state(attr.phys_state()),
        attr.link_layer(),
        rate(attr.active_width(), attr.active_speed()),
        attr.active_mtu(),
        attr.max_mtu()
    );
    if ib {
        seen += &format!(", LID {}, SM LID {}", attr.lid().get(), attr.sm_lid().get());
    }
    let skip = format!("port {label} cannot carry traffic (see Link: {check})");
    if attr.state() == PortState::ACTIVE {
        if ib && attr.lid().get() == 0 {
            out.fail(
                &check,
                format!("{seen}: no LID, so no subnet manager has configured it"),
                "run a subnet manager (opensm) on the fabric",
            );
            return Err(skip);
        }
        out.pass(&check, seen);
        return Ok(());
    }
    let remedy = match attr.state() {
        PortState::INIT => "it waits for a subnet manager: run opensm on the fabric",
        PortState::ARMED => "the subnet manager is activating it: wait, or check the SM's log",
        _ if attr.phys_state() == DISABLED => {
            "the port is disabled: enable it (ibportstate, or the NIC's tool)"
        }
        _ => {
            "no link: check the cable and the switch port; for RoCE and iWARP, that the netdev is \
              up (ip link set <netdev> up)"
        }
    };
    // One idle port of a multi-port NIC is common; a device with no active port is broken.
    if any_up {
        out.warn(&check, format!("{seen}; another port of the device is ACTIVE"), remedy);
    } else {
        out.fail(&check, seen, remedy);
    }
    Err(skip)
}

/// `IB_PORT_PHYS_STATE_*` by name.
fn phys_state(state: u8) -> String {
    match state {
        1 => "Sleep".into(),
        2 => "Polling".into(),
        DISABLED => "Disabled".into(),
        4 => "PortConfigurationTraining".into(),
        5 => "LinkUp".into(),
        6 => "LinkErrorRecovery".into(),
        7 => "PhyTest".into(),
        n => format!("physical state {n}"),
    }
}

/// The rate from `active_width` (`IBV_WIDTH_*`) and `active_speed` (`IBV_SPEED_*`), as the
/// kernel's sysfs `rate` shows it: `2.5 Gb/s (1X SDR)`, `100 Gb/s (4X EDR)`.
fn rate(width: u8, speed: u8) -> String {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => return format!("rate unknown (width {width}, speed {speed})"),
    };
    let (per_lane, name) = match speed {
        1 => (2.5, "SDR"),
        2 => (5.0, "DDR"),
        4 => (10.0, "QDR"),
        8 => (10.0, "FDR10"),
        16 => (14.0, "FDR"),
        32 => (25.0, "EDR"),
        64 => (50.0, "HDR"),
        128 => (100.0, "NDR"),
        _ => return format!("rate unknown (width {lanes}X, speed {speed})"),
    };
    format!("{} Gb/s ({lanes}X {name})", f64::from(lanes) * per_lane)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_like_sysfs() {
        assert_eq!(rate(1, 1), "2.5 Gb/s (1X SDR)");
        assert_eq!(rate(2, 32), "100 Gb/s (4X EDR)");
        assert_eq!(rate(2, 16), "56 Gb/s (4X FDR)");
        assert_eq!(rate(16, 128), "200 Gb/s (2X NDR)");
        assert_eq!(rate(3, 1), "rate unknown (width 3, speed 1)");
        assert_eq!(rate(1, 3), "rate unknown (width 1X, speed 3)");
    }

    #[test]
    fn physical_states_are_named() {
        assert_eq!(phys_state(5), "LinkUp");
        assert_eq!(phys_state(3), "Disabled");
        assert_eq!(phys_state(42), "physical state 42");
    }
}
