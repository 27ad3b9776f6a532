//! perftest's rate limiter: `--rate_limit` in `--rate_units` (`g`: Gb/s, the default; `M`:
//! MiB/s; `p`: messages per second), enforced as `--rate_limit_type` says:
//!
//! - `HW` (the default, as perftest's): the route's static rate (`ah_attr.static_rate`, one
//!   of `enum ibv_rate`'s rates, in Gb/s), set at RTR. The NIC holds the QP to it; Soft-RoCE
//!   ignores it.
//! - `PP`: the QP's packet pacing (`ibv_modify_qp`'s `rate_limit`, in kbps, within the
//!   device's `packet_pacing_caps`), set after RTS. perftest takes it on raw Ethernet QPs only;
//!   these tools on their RC QPs, where the device paces them (ConnectX); elsewhere it is
//!   refused before the test.
//! - `SW`: the tool paces its own posting, as perftest's: bursts of `--burst_size` WRs (default
//!   -t) across the side's QPs, each burst starting when the rate allows it. Bandwidth tools
//!   only, not with -e (a side with nothing outstanding would sleep on a CQ that has nothing
//!   to report).
//!
//! The QPs connected by hand take them; with -R or -c DC they are refused.

use std::time::Duration;

use rdma_verbs::StaticRate;

use super::args::{Args, Test};
use super::traffic::STALL_LIMIT;
use super::Mode;

/// The unit of `--rate_limit`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Units {
    /// `M`: MiB/s.
    MibPerSec,
    /// `g`: Gb/s.
    Gbps,
    /// `p`: messages per second.
    PerSec,
}

/// How the rate is held.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// `HW`: each QP's route at this static rate.
    Static(StaticRate),
    /// `PP`: each QP paced to this many kbps.
    Paced { kbps: u32 },
    /// `SW`: this side's posts in bursts of `burst` WRs, at most `rate` in `units`.
    Software { rate: f64, units: Units, burst: u32 },
}

/// The pace of a SW-limited run of one size: `burst` WRs each `every`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    pub burst: u32,
    pub every: Duration,
}

impl Pace {
    /// WRs this side may have posted `elapsed` after it began: every burst begun by then.
    pub fn allowed(&self, elapsed: Duration) -> u64 {
        let bursts = elapsed.as_nanos() / self.every.as_nanos().max(1) + 1;
        u64::try_from(bursts).unwrap_or(u64::MAX).saturating_mul(u64::from(self.burst))
    }
}

impl Limit {
    /// The limit `args` asks for, checked for tool `mode`; `None` without `--rate_limit`.
    pub fn of(args: &Args, mode: Mode) -> Result<Option<Limit>, String> {
        let Some(rate) = args.rate_limit else {
            let given = [
                ("--rate_units", args.rate_units.is_some()),
                ("--rate_limit_type", args.rate_limit_type.is_some()),
                ("--burst_size", args.burst_size.is_some()),
            ];
            return match given.iter().find(|(_, given)| *given) {
                Some((name, _)) => Err(format!("{name} sets how --rate_limit holds: give it")),
                None => Ok(None),
            };
        };
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!("--rate_limit {rate} must be a positive number"));
        }
        if args.rdma_cm || args.is_dc() {
            return Err(
                "--rate_limit is set on the QPs connected by hand: not with -R or -c DC".into()
            );
        }
        let units = match args.rate_units.as_deref() {
            None | Some("g") => Units::Gbps,
            Some("M") => Units::MibPerSec,
            _ => Units::PerSec,
        };
        let kind = args.rate_limit_type.as_deref().unwrap_or("HW");
        if kind != "SW" && args.burst_size.is_some() {
            return Err(format!("--burst_size sets the SW limiter's bursts, not {kind}'s"));
        }
        match kind {
            "HW" => {
                if units != Units::Gbps {
                    return Err("--rate_limit_type=HW sets a static rate in Gb/s: give \
                                --rate_units=g (the default)"
                        .into());
                }
                let rates: Vec<String> = StaticRate::limits()
                    .filter_map(StaticRate::gbps)
                    .map(|g| g.to_string())
                    .collect();
                StaticRate::from_gbps(rate).map(|r| Some(Limit::Static(r))).ok_or_else(|| {
                    format!(
                        "--rate_limit {rate}: a static rate (HW) is one of {} Gb/s",
                        rates.join(", ")
                    )
                })
            }
            "PP" => {
                let kbps = match units {
                    Units::Gbps => rate * 1e6,
                    Units::MibPerSec => rate * 8.0 * 1_048_576.0 / 1000.0,
                    Units::PerSec => {
                        return Err(
                            "--rate_limit_type=PP paces bits: give --rate_units=g or M".into()
                        )
                    }
                };
                let kbps = kbps.round();
                if !(1.0..=f64::from(u32::MAX)).contains(&kbps) {
                    return Err(format!(
                        "--rate_limit {rate}: packet pacing takes 1 kbps to 4.29 Tb/s"
                    ));
                }
                Ok(Some(Limit::Paced { kbps: kbps as u32 }))
            }
            _ => {
                let bidirectional_send = mode == Mode::Send && args.bidirectional;
                if args.test == Test::Latency || bidirectional_send || args.events {
                    return Err("--rate_limit_type=SW paces a bandwidth tool's posting: not a \
                                latency tool's, nor send_bw -b's, nor with -e"
                        .into());
                }
                let burst = args.burst_size.unwrap_or(args.tx_depth);
                if burst == 0 {
                    return Err("--burst_size must be at least 1".into());
                }
                // A completion comes each burst or each -Q WRs, whichever is more.
                let signaled = burst.max(args.cq_mod());
                let slowest = Limit::Software { rate, units, burst: signaled };
                let every = slowest.pace(args.largest_size()).map_or(Duration::ZERO, |p| p.every);
                if every > STALL_LIMIT / 2 {
                    return Err(format!(
                        "--rate_limit {rate}: {signaled} WRs (a burst, or -Q) take {} s at this \
                         rate, too long to tell a slow run from a dead peer: raise the rate or \
                         lower --burst_size and -Q",
                        every.as_secs()
                    ));
                }
                Ok(Some(Limit::Software { rate, units, burst }))
            }
        }
    }

    /// The SW limiter's pace for messages of `size` bytes; `None` for HW and PP.
    pub fn pace(&self, size: u32) -> Option<Pace> {
        let Limit::Software { rate, units, burst } = *self else { return None };
        let per_sec = match units {
            Units::Gbps => rate * 1e9 / 8.0 / f64::from(size),
            Units::MibPerSec => rate * 1_048_576.0 / f64::from(size),
            Units::PerSec => rate,
        };
        let every =
            Duration::try_from_secs_f64(f64::from(burst) / per_sec).unwrap_or(Duration::MAX);
        Some(Pace { burst, every })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse;

    fn limit(test: Test, mode: Mode, args: &[&str]) -> Result<Option<Limit>, String> {
        let argv = std::iter::once("tool").chain(args.iter().copied()).map(String::from);
        Limit::of(&parse(test, mode, argv.collect()), mode)
    }

    fn bw(args: &[&str]) -> Result<Option<Limit>, String> {
        limit(Test::Bandwidth, Mode::Write, args)
    }

    #[test]
    fn each_kind_takes_the_units_it_can_hold() {
        assert_eq!(bw(&[]), Ok(None));
        assert_eq!(bw(&["--rate_limit", "25"]), Ok(Some(Limit::Static(StaticRate::GBPS_25))));
        let pp =
            |units| bw(&["--rate_limit", "2", "--rate_limit_type", "PP", "--rate_units", units]);
        assert_eq!(pp("g"), Ok(Some(Limit::Paced { kbps: 2_000_000 })));
        assert_eq!(pp("M"), Ok(Some(Limit::Paced { kbps: 16_777 })));
        let sw = bw(&["--rate_limit", "1000", "--rate_limit_type", "SW", "--rate_units", "p"]);
        let Ok(Some(sw)) = sw else { panic!("{sw:?}") };
        assert_eq!(sw.pace(64), Some(Pace { burst: 128, every: Duration::from_millis(128) }));
        for (args, says) in [
            (&["--rate_limit", "26"][..], "a static rate (HW) is one of 2.5, 5, 10"),
            (&["--rate_limit", "25", "--rate_units", "M"], "--rate_limit_type=HW sets a static"),
            (
                &["--rate_limit", "1", "--rate_limit_type", "PP", "--rate_units", "p"],
                "PP paces bits",
            ),
            (&["--rate_limit", "0"], "--rate_limit 0 must be a positive number"),
            (&["--rate_units", "g"], "--rate_units sets how --rate_limit holds"),
            (&["--rate_limit", "25", "--burst_size", "4"], "not HW's"),
            (&["--rate_limit", "25", "-R"], "not with -R or -c DC"),
            (
                &["--rate_limit", "1", "--rate_limit_type", "SW", "--rate_units", "p"],
                "128 WRs (a burst, or -Q) take 128 s",
            ),
        ] {
            let e = bw(args).unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
        let sw = ["--rate_limit", "1", "--rate_limit_type", "SW"];
        assert!(limit(Test::Latency, Mode::Write, &sw).is_err());
        assert!(limit(Test::Bandwidth, Mode::Send, &[&sw[..], &["-b"]].concat()).is_err());
        assert!(limit(Test::Bandwidth, Mode::Send, &sw).is_ok());
    }

    #[test]
    fn the_sw_pace_lets_each_burst_go_when_its_time_has_come() {
        // 1 Gb/s of 64 KiB WRITEs, bursts of 4: one each 2.097152 ms.
        let limit = Limit::Software { rate: 1.0, units: Units::Gbps, burst: 4 };
        let pace = limit.pace(65536).unwrap();
        assert_eq!(pace.every, Duration::from_nanos(2_097_152));
        assert_eq!(pace.allowed(Duration::ZERO), 4, "the first burst at once");
        assert_eq!(pace.allowed(Duration::from_nanos(2_097_151)), 4);
        assert_eq!(pace.allowed(Duration::from_nanos(2_097_152)), 8);
        assert_eq!(pace.allowed(Duration::from_secs(1)), 4 * 477);
        assert_eq!(Limit::Static(StaticRate::GBPS_10).pace(64), None);
    }
}
