//! write_lat / read_lat / send_lat on rxe0: sweeps in both tiers, perftest's table beside
//! perftest's own (ib_*_lat), -D runs that end together, -H / -U, --latency_gap, and a
//! vanished peer.

use std::path::Path;
use std::process::Output;

use super::bandwidth::{
    a_server_that_dies_mid_run, assert_ran, json_field, json_lines, pair, pair_of, PEER_GONE,
};
use super::test_cases;
use rdma_verbs_device_tests::{require_device, RXE};
use rdma_verbs_test_support::process::text;

/// The figures of a latency JSON line, in perftest's order.
const FIGURES: [&str; 7] =
    ["t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9"];

/// A JSON line's sizes and figures hang together: 0 < t_min <= t_typical, t_avg <= t_max and
/// t_min <= the percentiles <= t_max.
fn assert_consistent(line: &str) {
    let [min, max, typical, avg, stdev, p99, p99_9] = FIGURES.map(|k| json_field::<f64>(line, k));
    assert!(0.0 < min && min <= typical && typical <= max && min <= avg && avg <= max, "{line}");
    assert!(min <= p99 && p99 <= p99_9 && p99_9 <= max && stdev >= 0.0, "{line}");
}

/// `name` with -a up to 4 KiB, 50 iterations and `extra`, in both tiers (ports `port` and
/// `port + 1`): every size reported by every side that measures (read_lat's server does not),
/// with consistent figures.
pub(super) fn sweep(name: &str, port: u16, extra: &[&str]) {
    let Some(_) = require_device(RXE) else { return };
    for (i, tier) in [&[][..], &["--raw"][..]].into_iter().enumerate() {
        let mut args = vec!["-a", "--max-size", "4096", "-n", "50", "--json"];
        args.extend_from_slice(tier);
        args.extend_from_slice(extra);
        let (server, client) = pair(name, port + i as u16, &args, &args);
        assert_ran(&server, &client);
        let sides: &[&Output] = if name == "read_lat" { &[&client] } else { &[&server, &client] };
        for out in sides {
            let lines = json_lines(out);
            let sizes: Vec<u64> = lines.iter().map(|l| json_field(l, "bytes")).collect();
            assert_eq!(sizes, (1..=12).map(|p| 1u64 << p).collect::<Vec<_>>(), "{}", text(out));
            for line in &lines {
                assert_eq!(json_field::<u64>(line, "iterations"), 50, "{line}");
                assert_consistent(line);
            }
        }
        if name == "read_lat" {
            assert!(json_lines(&server).is_empty(), "the READ target measures nothing");
        }
    }
}

test_cases! { sweep:
    write_lat_sweeps_sizes_in_both_tiers("write_lat", 19300, &[]);
    read_lat_sweeps_sizes_in_both_tiers("read_lat", 19302, &[]);
    send_lat_sweeps_sizes_in_both_tiers("send_lat", 19304, &[]);
}

/// The column header line of a latency table and the row after it (after the last header:
/// -H and -U print it again below their lists).
fn table(out: &Output) -> Option<(String, String)> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines.iter().rposition(|l| l.starts_with(" #bytes #iterations"))?;
    Some((lines[at].to_owned(), lines.get(at + 1)?.to_string()))
}

#[test]
fn the_tables_are_perftests_beside_ib_lat() {
    let Some(_) = require_device(RXE) else { return };
    for (i, mode) in ["write", "read", "send"].into_iter().enumerate() {
        let port = 19310 + 2 * i as u16;
        let args = ["-s", "64", "-n", "100"];
        let ours = pair(&format!("{mode}_lat"), port, &args, &args);
        let c_args = ["-s", "64", "-n", "100", "-F"];
        let perftest = pair_of(Path::new(&format!("ib_{mode}_lat")), port + 1, &c_args, &c_args);
        let (mut headers, mut reads) = (Vec::new(), Vec::new());
        for (server, client) in [&ours, &perftest] {
            assert_ran(server, client);
            let (header, row) = table(client).unwrap_or_else(|| panic!("{}", text(client)));
            // #bytes, #iterations, then t_min .. 99.9% as numbers, t_min <= t_typical <= t_max.
            let fields: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(fields[..2], ["64", "100"], "{row}");
            let t: Vec<f64> = fields[2..].iter().map(|f| f.parse().expect(f)).collect();
            assert!(t.len() == 7 && t[0] <= t[2] && t[2] <= t[1], "{row}");
            // A READ's target measures nothing and prints no table; the ping-pongs' does.
            assert_eq!(table(server).is_some(), mode != "read", "{}", text(server));
            headers.push(header);
            let stdout = String::from_utf8_lossy(&client.stdout).into_owned();
            reads.push(
                stdout
                    .lines()
                    .find_map(|l| l.strip_prefix(" Outstand reads  : ")?.parse::<u32>().ok()),
            );
        }
        assert_eq!(headers[0], headers[1], "ib_{mode}_lat's columns");
        // The RDMA READs outstanding, in READ tests only: the device's limit in both.
        assert_eq!(reads[0], reads[1], "ib_{mode}_lat's Outstand reads\n{}", text(&ours.1));
        assert_eq!(reads[0].is_some(), mode == "read", "{}", text(&ours.1));
    }
}

#[test]
fn duration_runs_end_together() {
    let Some(_) = require_device(RXE) else { return };
    for (i, name) in ["write_lat", "send_lat", "read_lat"].into_iter().enumerate() {
        let args = ["-D", "2", "--json"];
        let (server, client) = pair(name, 19320 + i as u16, &args, &args);
        assert_ran(&server, &client);
        let iterations = |out: &Output| -> Vec<u64> {
            json_lines(out).iter().map(|l| json_field(l, "iterations")).collect()
        };
        let (ours, theirs) = (iterations(&client), iterations(&server));
        assert!(ours.len() == 1 && ours[0] > 1, "{}", text(&client));
        let t_avg: f64 = json_field(&json_lines(&client)[0], "t_avg");
        assert!(t_avg > 0.0, "{}", text(&client));
        // A ping-pong's two sides post as many; the READ target reports nothing.
        let expected = if name == "read_lat" { vec![] } else { ours };
        assert_eq!(theirs, expected, "{}", text(&server));
    }
}

#[test]
fn the_samples_listed_by_u_and_h_are_those_of_the_line() {
    let Some(_) = require_device(RXE) else { return };
    let args = ["-s", "64", "-n", "30", "-U", "-H"];
    let (server, client) = pair("send_lat", 19330, &args, &args);
    assert_ran(&server, &client);
    let stdout = String::from_utf8_lossy(&client.stdout);
    // Two lists after "#, usec": the 29 samples as measured, then the 27 kept, sorted.
    let lists: Vec<Vec<f64>> = stdout
        .split("#, usec\n")
        .skip(1)
        .map(|part| {
            part.lines()
                .map_while(|l| l.split_once(", "))
                .map(|(_, v)| v.parse().expect(v))
                .collect()
        })
        .collect();
    assert_eq!(lists.iter().map(Vec::len).collect::<Vec<_>>(), [29, 27], "{stdout}");
    let mut sorted = lists[0].clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(sorted[..27], lists[1][..], "{stdout}");
    let (_, row) = table(&client).expect("a table");
    let t_min: f64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!((t_min - sorted[0]).abs() < 0.006, "t_min {t_min} is the smallest sample\n{stdout}");
}

#[test]
fn a_latency_gap_spaces_the_posts() {
    let Some(_) = require_device(RXE) else { return };
    // Each side waits 2 ms before it answers: a round trip of at least 4 ms, 2 ms one way.
    let args = ["-s", "2", "-n", "20", "--latency_gap", "2000", "--json"];
    let (server, client) = pair("write_lat", 19332, &args, &args);
    assert_ran(&server, &client);
    for out in [&server, &client] {
        let t_min: f64 = json_field(&json_lines(out)[0], "t_min");
        assert!(t_min >= 2000.0, "{}", text(out));
    }
}

#[test]
fn a_ping_pong_peer_that_dies_fails_the_other_in_bounded_time() {
    // With -D the side that follows also watches the TCP channel, which closes with the peer;
    // the side that leads finds its WR's retries exhausted.
    let expected = [&PEER_GONE[..], &["the peer closed the connection"]].concat();
    a_server_that_dies_mid_run("write_lat", 19334, &["-D", "60"], &expected);
    a_server_that_dies_mid_run("send_lat", 19335, &["-D", "60"], &expected);
}
