//! mlx5 DC (feature `mlx5`).
//!
//! On rxe0: the mlx5 gate, `Mlx5Context::open` (every DC object is made from an
//! `Mlx5Context`), refuses cleanly with `Unsupported`, as does the real libmlx5's
//! `mlx5dv_is_supported`; `dc_pingpong` and `-c DC` exit with status 1 and one line.
//!
//! The `hardware` tests need an mlx5 (ConnectX) device and are `#[ignore]`d, so they visibly
//! do not run in CI. On a host with one:
//!
//! ```text
//! cargo build --features mlx5 -p rdma-verbs -p rdma-verbs-perftest --examples --bins
//! RDMA_VERBS_MLX5_DEVICE=mlx5_0 RDMA_VERBS_MLX5_GID_INDEX=3 cargo test \
//!     -p rdma-verbs-device-tests --features mlx5 --test device -- \
//!     --ignored --test-threads=1 device::dc::hardware
//! ```

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rdma_verbs::mlx5::Mlx5Context;
use rdma_verbs::Error;

use rdma_verbs_device_tests::{require_device, RXE};
use rdma_verbs_test_support::process::{output_within, text};
use rdma_verbs_test_support::programs::{binary, example};

/// The one way to DC objects (they are made from an `Mlx5Context`) is closed on rxe0.
#[test]
fn the_mlx5_gate_to_every_dc_object_is_unsupported_on_rxe() {
    let Some(ctx) = require_device(RXE) else { return };
    let err = Mlx5Context::open(&ctx).unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("expected Unsupported, got {err:?}") };
    // It names the device, the provider that is not libmlx5, and what DC needs.
    assert!(what.contains("on device rxe0"), "{err}");
    assert!(what.contains("librxe"), "{err}");
    assert!(what.contains("not libmlx5"), "{err}");
    assert!(what.contains("ConnectX"), "{err}");
    // Asked again (the provider's answer is kept), the same refusal.
    assert_eq!(Mlx5Context::open(&ctx).unwrap_err().to_string(), err.to_string());
}

#[test]
fn the_libmlx5_libibverbs_loaded_says_rxe0_is_not_mlx5() {
    let Some(ctx) = require_device(RXE) else { return };
    // libibverbs loads every provider its driver config lists (Debian's ibverbs-providers
    // includes libmlx5): reopen that very copy by its SONAME, never a second one.
    // SAFETY: an object loaded under that name is rdma-core's libmlx5.
    let lib = unsafe { rdma_verbs::sys::mlx5::loaded(Path::new("libmlx5.so.1")) }.expect(
        "libibverbs did not load libmlx5 (is ibverbs-providers installed, RDMAV_DRIVERS unset?)",
    );
    // The real gate on the real library: its mlx5dv_is_supported answers no for rxe0.
    // SAFETY: `lib` is the copy the libibverbs that opened `ctx` loaded.
    let err = unsafe { Mlx5Context::with_library(&ctx, lib) }.unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("expected Unsupported, got {err:?}") };
    assert!(what.contains("on device rxe0"), "{err}");
    assert!(what.contains("mlx5dv_is_supported says no"), "{err}");
}

#[test]
fn dc_pingpong_exits_non_zero_with_one_line_on_rxe() {
    let Some(_) = require_device(RXE) else { return };
    let mut cmd = Command::new(example("dc_pingpong"));
    cmd.args(["-d", RXE, "-p", "19060"]);
    let out = output_within(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", text(&out));
    assert!(lines[0].starts_with("dc_pingpong: mlx5 DC"), "{}", text(&out));
    assert!(lines[0].contains("not supported"), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
}

#[test]
fn bandwidth_tools_with_c_dc_exit_non_zero_with_one_line_on_rxe() {
    let Some(_) = require_device(RXE) else { return };
    for (tool, port) in [("write_bw", "19063"), ("send_bw", "19064")] {
        let mut cmd = Command::new(binary(tool));
        cmd.args(["-d", RXE, "-c", "DC", "-p", port]);
        let out = output_within(cmd, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}", text(&out));
        assert!(lines[0].starts_with(&format!("{tool}: mlx5 DC")), "{}", text(&out));
        assert!(lines[0].contains("on device rxe0"), "{}", text(&out));
    }
}

/// On an mlx5 device named by `RDMA_VERBS_MLX5_DEVICE` (see the module docs).
mod hardware {
    use std::process::Command;
    use std::time::{Duration, Instant};

    use rdma_verbs::mlx5::{
        DcDestination, DcKey, DcRoute, DcWr, Dci, DciInitAttr, DciToRtrAttr, DctInitAttr,
        DctToRtrAttr, Mlx5Context,
    };
    use rdma_verbs::{
        AccessFlags, Context, Gid, Lid, Mtu, Psn, RecvWr, Rts, SendFlags, ToInitAttr, ToRtsAttr,
        WcOpcode, WorkCompletion,
    };

    use super::super::pair::Loopback;
    use rdma_verbs_test_support::process::{output_within, spawn_server, text, wait_within};
    use rdma_verbs_test_support::programs::{binary, example};

    fn device() -> String {
        std::env::var("RDMA_VERBS_MLX5_DEVICE").expect(
            "set RDMA_VERBS_MLX5_DEVICE to an mlx5 device (and RDMA_VERBS_MLX5_GID_INDEX on RoCE)",
        )
    }

    fn gid_index() -> Option<u8> {
        std::env::var("RDMA_VERBS_MLX5_GID_INDEX").ok().map(|v| v.parse().expect("a GID index"))
    }

    /// Port 1's LID and the source GID of DC routes: its index (`RDMA_VERBS_MLX5_GID_INDEX`,
    /// else the routable GID's on RoCE, none on InfiniBand) and the GID itself.
    fn source(ctx: &Context) -> (Lid, Option<u8>, Gid) {
        let port = ctx.query_port(1).unwrap();
        let sgid =
            gid_index().or_else(|| port.is_ethernet().then(|| ctx.routable_gid(1).unwrap().index));
        let gid = sgid.map_or(Gid::ZERO, |i| ctx.gid(1, i).unwrap().gid);
        (port.lid(), sgid, gid)
    }

    #[test]
    #[ignore = "needs an mlx5 device: RDMA_VERBS_MLX5_DEVICE=mlx5_0 cargo test -p rdma-verbs-device-tests --features mlx5 --test device -- --ignored device::dc::hardware"]
    fn dc_loopback_write_then_send_arrives_with_the_right_bytes() {
        let ctx = Context::open(&device()).unwrap();
        let mlx5 = Mlx5Context::open(&ctx).unwrap();
        eprintln!("{mlx5:?}");
        let (lid, sgid, gid) = source(&ctx);
        // Room for the DCT's 4 receives and the DCI's 64 sends (`DciInitAttr::new`).
        let lo = Loopback::new(&ctx, 4 + 64);
        let (pd, cq) = (&lo.pd, &lo.cq);
        let srq = pd.create_srq(4, 1).unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mut region = pd.register_remote_writable(3 * 64, access).unwrap();
        region.write(128, &[0xa5; 64]).unwrap();

        let key = DcKey::new(0x1234_5678_9abc_def0);
        let dct = mlx5.create_dct(pd, &DctInitAttr { srq: &srq, recv_cq: cq, key }).unwrap();
        let init = ToInitAttr { port: 1, pkey_index: 0, access: AccessFlags::REMOTE_WRITE };
        let dct = dct.into_init(&init).unwrap();
        let dct = dct.into_rtr(&DctToRtrAttr::new(1, sgid, Mtu::MTU_1024)).unwrap();
        let token = dct.endpoint(gid, lid);
        let recv = [region.sge(0..64).unwrap()];
        // SAFETY: read only after its completion; the region outlives the DCT.
        unsafe { srq.post_recv_wr(&mut RecvWr::new(1, &recv)).unwrap() };

        let route = DcRoute::new(1, sgid, Mtu::MTU_1024);
        let (dci, peer) = mlx5.connect_dci(pd, &DciInitAttr::new(cq), &route, &token).unwrap();
        let src = [region.sge(128..192).unwrap()];
        let remote = region.remote(64..128).unwrap();
        let wrs = [
            DcWr::rdma_write(2, &src, remote, peer.destination()),
            DcWr::send(3, &src, peer.destination()).flags(SendFlags::SIGNALED),
        ];
        // SAFETY: the region outlives the WRs and is not written until they complete.
        unsafe { dci.post_send_wrs(&wrs).unwrap() };

        let mut seen = Vec::new();
        let mut wcs: [WorkCompletion; 4] = Default::default();
        let start = Instant::now();
        while seen.len() < 2 && start.elapsed() < Duration::from_secs(10) {
            for wc in cq.poll(&mut wcs).unwrap().iter() {
                assert!(wc.is_success(), "{wc:?}");
                seen.push((wc.wr_id(), wc.opcode()));
            }
        }
        seen.sort_by_key(|s| s.0);
        assert_eq!(seen, [(1, WcOpcode::RECV), (3, WcOpcode::SEND)]);
        let mut got = [0u8; 64];
        region.read(0, &mut got).unwrap();
        assert_eq!(got, [0xa5; 64], "the SEND's bytes");
        region.read(64, &mut got).unwrap();
        assert_eq!(got, [0xa5; 64], "the RDMA WRITE's bytes");
    }

    #[test]
    #[ignore = "needs an mlx5 device: RDMA_VERBS_MLX5_DEVICE=mlx5_0 cargo test -p rdma-verbs-device-tests --features mlx5 --test device -- --ignored device::dc::hardware"]
    fn dc_pingpong_runs_between_two_processes() {
        let dev = device();
        let mut args =
            vec!["-d".to_owned(), dev, "-p".into(), "19061".into(), "-n".into(), "50".into()];
        if let Some(g) = gid_index() {
            args.extend(["-g".into(), g.to_string()]);
        }
        let mut server = Command::new(example("dc_pingpong"));
        server.args(&args);
        let server = spawn_server(server, 19061);
        let mut client = Command::new(example("dc_pingpong"));
        client.args(&args).arg("localhost");
        let client = output_within(client, Duration::from_secs(120));
        let server = wait_within(server, Duration::from_secs(120));
        for out in [&client, &server] {
            assert!(out.status.success(), "{}", text(out));
            assert!(String::from_utf8_lossy(&out.stdout).contains("50 iters in"), "{}", text(out));
        }
    }

    #[test]
    #[ignore = "needs an mlx5 device: RDMA_VERBS_MLX5_DEVICE=mlx5_0 cargo test -p rdma-verbs-device-tests --features mlx5 --test device -- --ignored device::dc::hardware"]
    fn bandwidth_tools_run_over_dc() {
        for (tool, port) in [("write_bw", 19065u16), ("read_bw", 19066), ("send_bw", 19067)] {
            let mut args = vec!["-d".to_owned(), device(), "-c".into(), "DC".into()];
            args.extend(["-s", "4096", "-n", "2000", "-q", "2", "--json", "-p"].map(String::from));
            args.push(port.to_string());
            if let Some(g) = gid_index() {
                args.extend(["-x".into(), g.to_string()]);
            }
            let mut server = Command::new(binary(tool));
            server.args(&args);
            let server = spawn_server(server, port);
            let mut client = Command::new(binary(tool));
            client.args(&args).arg("localhost");
            let client = output_within(client, Duration::from_secs(120));
            let server = wait_within(server, Duration::from_secs(120));
            assert!(server.status.success(), "{}", text(&server));
            assert!(client.status.success(), "{}", text(&client));
            let json = String::from_utf8_lossy(&client.stdout);
            assert!(json.contains("\"completed\":4000"), "{tool}: {}", text(&client));
        }
    }

    #[test]
    #[ignore = "needs an mlx5 device: RDMA_VERBS_MLX5_DEVICE=mlx5_0 cargo test -p rdma-verbs-device-tests --features mlx5 --test device -- --ignored device::dc::hardware"]
    fn dc_caps_streams_read_depth_and_version_are_consistent() {
        let ctx = Context::open(&device()).unwrap();
        let mlx5 = Mlx5Context::open(&ctx).unwrap();
        let caps = mlx5.caps();
        eprintln!("{caps:?}");
        // Streams are reported only with at least 2^1 concurrent.
        assert!(caps.dci_streams.is_none_or(|s| s.max_log_concurrent > 0), "{caps:?}");
        assert!(caps.dci_max_rd_atomic >= 1, "{caps:?}");
        let part = ctx.query_device().unwrap().vendor_part_id();
        assert_eq!(caps.dc_version, rdma_verbs::mlx5::DcVersion::from_vendor_part_id(part));
    }

    #[test]
    #[ignore = "needs an mlx5 device: RDMA_VERBS_MLX5_DEVICE=mlx5_0 cargo test -p rdma-verbs-device-tests --features mlx5 --test device -- --ignored device::dc::hardware"]
    fn a_dci_renewed_after_an_error_completion_sends_again() {
        let ctx = Context::open(&device()).unwrap();
        let mlx5 = Mlx5Context::open(&ctx).unwrap();
        let (lid, sgid, gid) = source(&ctx);
        // Room for the DCT's 4 receives and the DCI's 64 sends (`DciInitAttr::new`).
        let lo = Loopback::new(&ctx, 4 + 64);
        let (pd, cq) = (&lo.pd, &lo.cq);
        let srq = pd.create_srq(4, 1).unwrap();
        let region = lo.region(128);
        let key = DcKey::new(0x5eed);
        let dct = mlx5.create_dct(pd, &DctInitAttr { srq: &srq, recv_cq: cq, key }).unwrap();
        let init = ToInitAttr { port: 1, pkey_index: 0, access: AccessFlags::empty() };
        let route = DcRoute::new(1, sgid, Mtu::MTU_1024);
        let dct = dct.into_init(&init).unwrap().into_rtr(&DctToRtrAttr::from_route(&route));
        let token = dct.unwrap().endpoint(gid, lid);
        let recv = [region.sge(0..64).unwrap()];
        // SAFETY: read only after its completion; the region outlives the DCT.
        unsafe { srq.post_recv_wr(&mut RecvWr::new(1, &recv)).unwrap() };
        let (dci, peer) = mlx5.connect_dci(pd, &DciInitAttr::new(cq), &route, &token).unwrap();
        let src = [region.sge(64..128).unwrap()];
        let wrong = DcDestination { key: DcKey::new(0xbad), ..peer.destination() };
        let poll_one = || {
            let mut wcs: [WorkCompletion; 1] = Default::default();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                if let Some(wc) = cq.poll(&mut wcs).unwrap().first() {
                    return (wc.wr_id(), wc.is_success());
                }
            }
            panic!("no completion in 60 s");
        };
        let send = |dci: &Dci<'_, Rts>, wr_id, dest| {
            let wr = DcWr::send(wr_id, &src, dest).flags(SendFlags::SIGNALED);
            // SAFETY: the region outlives the WR and is not written until it completes.
            unsafe { dci.post_send_wrs(&[wr]).unwrap() };
        };
        // A wrong key: the DCT never answers, the DCI retries out and goes to ERROR.
        send(&dci, 2, wrong);
        assert_eq!(poll_one(), (2, false));
        let dci = mlx5.renew_dci(dci, &DciInitAttr::new(cq)).unwrap().into_init(1, 0).unwrap();
        let dci = dci.into_rtr(&DciToRtrAttr { path_mtu: Mtu::MTU_1024 }).unwrap();
        let dci = dci.into_rts(&ToRtsAttr::new(Psn::new(0).unwrap())).unwrap();
        send(&dci, 3, peer.destination());
        let mut seen = [poll_one(), poll_one()];
        seen.sort();
        assert_eq!(seen, [(1, true), (3, true)]);
    }
}
