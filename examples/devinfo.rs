//! Lists RDMA devices with their ports and GID tables, like a short `ibv_devinfo -v`.
//!
//! ```text
//! devinfo            # every device
//! devinfo -d rxe0    # one device
//! ```

use std::process::ExitCode;

use clap::Parser;
use rdma_verbs::{DeviceList, Result};

/// Show RDMA devices, ports and GIDs.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Only this device
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinfo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    let lib = rdma_verbs::sys::ibverbs()?;
    let version = lib.rdma_core_version().unwrap_or_else(|| "unknown".into());
    println!("libibverbs: {} (rdma-core {version})", lib.path().display());
    let list = DeviceList::new()?;
    if list.is_empty() {
        return Err(rdma_verbs::Error::NoDevices);
    }
    if let Some(name) = &args.ib_dev {
        if list.find(name).is_none() {
            let available = list.names();
            return Err(rdma_verbs::Error::DeviceNotFound { name: name.clone(), available });
        }
    }
    for device in list.iter().filter(|d| args.ib_dev.as_deref().is_none_or(|n| n == d.name())) {
        let ctx = device.open()?;
        let attr = ctx.query_device()?;
        println!("hca_id: {}", device.name());
        println!("\ttransport:\t\t{} ({})", device.transport(), device.node_type());
        println!("\tnode_guid:\t\t{:016x}", device.guid());
        println!("\tfw_ver:\t\t\t{}", attr.fw_ver());
        println!("\tvendor_id:\t\t{:#06x}", attr.vendor_id());
        println!("\tvendor_part_id:\t\t{}", attr.vendor_part_id());
        println!(
            "\tmax_qp:\t\t\t{}\n\tmax_qp_wr:\t\t{}\n\tmax_cqe:\t\t{}",
            attr.max_qp(),
            attr.max_qp_wr(),
            attr.max_cqe()
        );
        for port in 1..=attr.phys_port_cnt() {
            let p = ctx.query_port(port)?;
            println!("\t\tport:\t{port}");
            println!("\t\t\tstate:\t\t{}", p.state());
            println!("\t\t\tmax_mtu:\t{}", p.max_mtu());
            println!("\t\t\tactive_mtu:\t{}", p.active_mtu());
            println!("\t\t\tport_lid:\t{}", p.lid().get());
            println!("\t\t\tlink_layer:\t{}", p.link_layer());
            // The effective bandwidth, where rdma-core (v62+), the provider and the kernel
            // can tell it.
            match ctx.query_port_speed(port) {
                Ok(mbps) => println!("\t\t\tport_speed:\t{} Gb/s", mbps as f64 / 1000.0),
                Err(e) => println!("\t\t\tport_speed:\tunknown ({e})"),
            }
            for gid in ctx.gid_table(port)? {
                println!("\t\t\tGID[{:>3}]:\t{}, {}", gid.index, gid.gid, gid.gid_type);
            }
            if let Ok(gid) = ctx.routable_gid(port) {
                println!("\t\t\troutable GID:\tindex {}", gid.index);
            }
        }
    }
    Ok(())
}
