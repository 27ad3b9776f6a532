//! A process out of file descriptors. libibverbs reports a `/sys/class/infiniband_verbs`
//! it could not open as `ENOSYS`, which read as "the kernel exposes no uverbs"; librdmacm's
//! event channel got the "rdma_cm node missing" hint. Both now say `EMFILE`, the limit and
//! how to raise it. Run in a child process: RLIMIT_NOFILE is lowered there to 64.

use std::fs::File;

use rdma_verbs::*;

use rdma_verbs_device_tests::{crash_isolated, require_device, RXE};

/// The RLIMIT_NOFILE soft limit the child runs under.
const LIMIT: u64 = 64;

/// Asserts `err` is `EMFILE` naming the limit and the remedy, not a missing kernel or node.
#[track_caller]
fn assert_out_of_descriptors(err: &Error, verb: &str) {
    let text = err.to_string();
    assert_eq!(err.errno(), Some(libc::EMFILE), "{verb}: {text}");
    assert!(text.starts_with(&format!("{verb} failed: EMFILE")), "{text}");
    assert!(text.contains(&format!("RLIMIT_NOFILE allows ({LIMIT})")), "{text}");
    assert!(text.contains("ulimit -n"), "{text}");
    for wrong in ["is absent", "no uverbs", "rdma_cm is missing"] {
        assert!(!text.contains(wrong), "{wrong:?} in {text}");
    }
}

#[test]
fn out_of_file_descriptors_is_emfile_with_the_limit_not_a_missing_kernel_or_node() {
    crash_isolated(
        "device::fds::out_of_file_descriptors_is_emfile_with_the_limit_not_a_missing_kernel_or_node",
        || {
            let Some(first) = require_device(RXE) else { return };
            // librdmacm loads and initialises on first use, which needs descriptors itself.
            #[cfg(feature = "rdmacm")]
            drop(rdma_verbs::cm::EventChannel::new().unwrap());
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: getrlimit writes only the struct; setrlimit reads it, and lowering the
            // soft limit below the hard one is always allowed.
            unsafe {
                assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
                limit.rlim_cur = LIMIT;
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
            }
            // Contexts until one fails: each holds the device's descriptor.
            let mut held = vec![first];
            let err = loop {
                match Context::open(RXE) {
                    Ok(ctx) => held.push(ctx),
                    Err(e) => break e,
                }
                assert!(held.len() < LIMIT as usize, "{} contexts open", held.len());
            };
            let verb = if err.to_string().starts_with("ibv_open_device") {
                "ibv_open_device"
            } else {
                "ibv_get_device_list"
            };
            assert_out_of_descriptors(&err, verb);
            // Every descriptor taken: the device list fails where libibverbs said ENOSYS.
            let files: Vec<File> =
                std::iter::from_fn(|| File::open("/dev/null").ok()).take(LIMIT as usize).collect();
            assert!(File::open("/dev/null").is_err(), "{} more files opened", files.len());
            assert_out_of_descriptors(&DeviceList::new().unwrap_err(), "ibv_get_device_list");
            assert_out_of_descriptors(&Context::open(RXE).unwrap_err(), "ibv_get_device_list");
            #[cfg(feature = "rdmacm")]
            assert_out_of_descriptors(
                &rdma_verbs::cm::EventChannel::new().unwrap_err(),
                "rdma_create_event_channel",
            );
            drop((files, held));
        },
    );
}
