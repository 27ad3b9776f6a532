//! perftest's result tables, bandwidth and latency, or one JSON object per size.

use std::time::Duration;

use rdma_verbs::VerbsPath;

use super::traffic::Stats;
use super::Mode;

/// perftest's separator line.
pub(crate) const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// perftest's latency columns (`RESULT_FMT_LAT`, trailing space included).
const LATENCY_COLUMNS: &str =
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    \
t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// perftest's latency columns of a -D run (`RESULT_FMT_LAT_DUR`).
const DURATION_COLUMNS: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// perftest's header lines on the setup: with -e, the device and vector its events use
/// (`rxe0_comp0`); whether sends go through the `ibv_wr_*` builders (`ON`, the extended verbs)
/// or `ibv_post_send` (`OFF`: `--use_old_post_send`, or a provider without the extended QP);
/// and for READ tests the RDMA READs each QP keeps outstanding.
fn setup_lines(events: Option<&str>, path: VerbsPath, reads: Option<u8>) {
    if let Some(events) = events {
        println!(" Test with events. Using {events}");
    }
    let on = if path == VerbsPath::Extended { "ON" } else { "OFF" };
    println!(" ibv_wr* API     : {on}");
    if let Some(reads) = reads {
        println!(" Outstand reads  : {reads}");
    }
}

/// A results table: its header, one line per size, its footer.
pub trait Table {
    /// One size's figures.
    type Line;
    /// The lines before the first size.
    fn header(&self);
    /// The line (or JSON object) of `size`.
    fn line(&self, size: u32, line: &Self::Line);
    /// Whether it prints JSON objects, one per size, instead of a table.
    fn json(&self) -> bool;
    /// The lines after the last size: the closing rule (none for JSON).
    fn footer(&self) {
        if !self.json() {
            println!("{RULE}");
        }
    }
}

/// How bandwidth results are printed.
pub struct Report {
    pub gbits: bool,
    pub json: bool,
    pub mode: Mode,
    pub tier: &'static str,
    pub qps: u32,
    /// How the QPs post sends.
    pub verbs_path: VerbsPath,
    /// The RDMA READs each QP keeps outstanding (read tests), for perftest's header line.
    pub reads: Option<u8>,
    /// With -e, the device and vector of the events, for perftest's header line.
    pub events: Option<String>,
    /// With a `-d` list, the devices, each with `qps` QPs.
    pub devices: Option<String>,
}

impl Table for Report {
    type Line = Stats;

    /// The table header (not for JSON).
    fn header(&self) {
        if self.json {
            return;
        }
        let unit = if self.gbits { "Gb/sec" } else { "MB/sec" };
        println!("{RULE}");
        println!(
            " {} BW Test ({} tier, {} QP{}{})",
            self.mode.title(),
            self.tier,
            self.qps,
            if self.qps == 1 { "" } else { "s" },
            self.devices.as_ref().map_or(String::new(), |d| format!(" on each of {d}"))
        );
        setup_lines(self.events.as_deref(), self.verbs_path, self.reads);
        println!(
            " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
        );
    }

    /// One size's line. `messages` counts what the side that measured moved: WRs it
    /// completed plus SENDs it received; with -b, the WRs each side completed, each side's
    /// rate over its own time and the two summed, as perftest's duplex report.
    fn line(&self, size: u32, stats: &Stats) {
        let sides: Vec<(u64, &Stats)> = match &stats.peer {
            Some(peer) => vec![(stats.completed, stats), (peer.completed, &**peer)],
            None => vec![(stats.completed + stats.received, stats)],
        };
        let secs = stats.elapsed.as_secs_f64();
        let messages: u64 = sides.iter().map(|(n, _)| n).sum();
        let per_sec = |(n, s): &(u64, &Stats)| *n as f64 / s.elapsed.as_secs_f64();
        let rate_per_sec: f64 = sides.iter().map(per_sec).sum();
        let bytes_per_sec = rate_per_sec * f64::from(size);
        let peak_bps: f64 =
            sides.iter().map(|side| side.1.peak.max(per_sec(side) * f64::from(size))).sum();
        let factor = if self.gbits { 125_000_000.0 } else { f64::from(1 << 20) };
        let (avg, peak) = (bytes_per_sec / factor, peak_bps / factor);
        let rate = rate_per_sec / 1e6;
        if self.json {
            println!(
                "{{\"mode\":\"{}\",\"tier\":\"{}\",\"bytes\":{size},\"iterations\":{messages},\"qps\":{},\
                 \"bw_peak\":{peak:.6},\"bw_average\":{avg:.6},\"unit\":\"{}\",\"msg_rate_mpps\":{rate:.6},\
                 \"seconds\":{secs:.6},\"posted\":{},\"completed\":{},\"received\":{}}}",
                self.mode.name(),
                self.tier,
                self.qps,
                if self.gbits { "Gb/sec" } else { "MB/sec" },
                stats.posted,
                stats.completed,
                stats.received
            );
        } else {
            println!(" {size:<7}    {messages:<10}       {peak:<7.2}            {avg:<7.2}\t\t     {rate:<7.6}");
        }
    }

    fn json(&self) -> bool {
        self.json
    }
}

/// One size's figures of a latency test.
pub enum Latency {
    /// A -n run of `iters` posts: the `iters - 1` times from one post to the next, in ns.
    Gaps { iters: u64, gaps_ns: Vec<u64> },
    /// A -D run: `posts` posts, the first and the last `span` apart.
    Duration { posts: u64, span: Duration },
}

/// How latency results are printed: perftest's table (`print_report_lat`) or JSON.
pub struct LatencyTable {
    pub json: bool,
    pub mode: Mode,
    pub tier: &'static str,
    /// How the QP posts sends.
    pub verbs_path: VerbsPath,
    /// The RDMA READs the QP keeps outstanding (read_lat), for perftest's header line.
    pub reads: Option<u8>,
    /// With -e, the device and vector of the events, for perftest's header line.
    pub events: Option<String>,
    /// A -D run: t_avg and transactions per second only.
    pub duration: bool,
    /// This side measures (every side but read_lat's server, which prints the title only).
    pub measures: bool,
    /// -H: the sorted samples before each line.
    pub histogram: bool,
    /// -U: the samples in the order measured before each line.
    pub unsorted: bool,
}

impl LatencyTable {
    /// perftest's round-trip factor: a WRITE or SEND ping-pong's gap between posts is two
    /// one-way trips, a READ's one.
    fn rtt_factor(&self) -> f64 {
        if self.mode == Mode::Read {
            1.0
        } else {
            2.0
        }
    }

    fn columns(&self) -> &'static str {
        if self.duration {
            DURATION_COLUMNS
        } else {
            LATENCY_COLUMNS
        }
    }

    fn gaps(&self, size: u32, iters: u64, gaps_ns: &[u64]) {
        let usec: Vec<f64> =
            gaps_ns.iter().map(|&ns| ns as f64 / 1000.0 / self.rtt_factor()).collect();
        let mut sorted = usec.clone();
        sorted.sort_by(f64::total_cmp);
        let s = Summary::of(&sorted);
        let kept = &sorted[..sorted.len() - DROPPED];
        if self.json {
            let list = |v: &[f64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
            let mut samples = String::new();
            if self.histogram {
                samples += &format!(",\"sorted_usec\":[{}]", list(kept));
            }
            if self.unsorted {
                samples += &format!(",\"unsorted_usec\":[{}]", list(&usec));
            }
            println!(
                "{{\"mode\":\"{}\",\"test\":\"lat\",\"tier\":\"{}\",\"bytes\":{size},\
                 \"iterations\":{iters},\"t_min\":{:.6},\"t_max\":{:.6},\"t_typical\":{:.6},\
                 \"t_avg\":{:.6},\"t_stdev\":{:.6},\"percentile_99\":{:.6},\
                 \"percentile_99.9\":{:.6},\"unit\":\"usec\"{samples}}}",
                self.mode.name(),
                self.tier,
                s.min,
                s.max,
                s.typical,
                s.avg,
                s.stdev,
                s.p99,
                s.p99_9
            );
            return;
        }
        let list = |v: &[f64]| {
            println!("#, usec");
            for (i, x) in v.iter().enumerate() {
                println!("{}, {}", i + 1, c_g(*x));
            }
        };
        if self.unsorted {
            list(&usec);
        }
        if self.histogram {
            list(kept);
        }
        if self.histogram || self.unsorted {
            println!("{RULE}");
            println!("{}", self.columns());
        }
        println!(
            " {size:<7} {iters}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \
             \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p99_9
        );
    }
}

impl Table for LatencyTable {
    type Line = Latency;

    /// The rule, the title and (on a side that measures) the columns; nothing for JSON.
    fn header(&self) {
        if self.json {
            return;
        }
        println!("{RULE}");
        println!(" {} Latency Test ({} tier)", self.mode.title(), self.tier);
        setup_lines(self.events.as_deref(), self.verbs_path, self.reads);
        if self.measures {
            println!("{}", self.columns());
        }
    }

    fn line(&self, size: u32, line: &Latency) {
        match line {
            Latency::Gaps { iters, gaps_ns } => self.gaps(size, *iters, gaps_ns),
            Latency::Duration { posts, span } => {
                let trips = posts.saturating_sub(1).max(1) as f64;
                let avg = span.as_secs_f64() * 1e6 / trips / self.rtt_factor();
                let tps = trips / span.as_secs_f64();
                if self.json {
                    println!(
                        "{{\"mode\":\"{}\",\"test\":\"lat\",\"tier\":\"{}\",\"bytes\":{size},\
                         \"iterations\":{posts},\"t_avg\":{avg:.6},\"tps_average\":{tps:.6},\
                         \"unit\":\"usec\"}}",
                        self.mode.name(),
                        self.tier
                    );
                } else {
                    println!(" {size:<7}       {posts}            {avg:<7.2}        {tps:<7.2}");
                }
            }
        }
    }

    fn json(&self) -> bool {
        self.json
    }
}

/// How many of the largest samples perftest leaves out (`LAT_MEASURE_TAIL`).
const DROPPED: usize = 2;

/// perftest's latency figures of a set of samples, in usec.
#[derive(Debug, PartialEq)]
pub struct Summary {
    pub min: f64,
    /// The largest sample left out (the second largest of all), as perftest's t_max.
    pub max: f64,
    /// The median of the samples kept.
    pub typical: f64,
    pub avg: f64,
    /// The standard deviation of the samples kept. perftest truncates each deviation to whole
    /// microseconds before squaring it; this one does not.
    pub stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
}

impl Summary {
    /// perftest's method on `sorted` (ascending, at least three samples): the two largest
    /// are left out; t_typical is the median of the rest, t_avg and t_stdev their mean and
    /// standard deviation; t_max and the percentiles index the whole sorted set at the count
    /// kept, times 1, 0.99 and 0.999, rounded up.
    pub fn of(sorted: &[f64]) -> Summary {
        let kept = &sorted[..sorted.len() - DROPPED];
        let m = kept.len();
        let typical =
            if m.is_multiple_of(2) { (kept[m / 2] + kept[m / 2 - 1]) / 2.0 } else { kept[m / 2] };
        let avg = kept.iter().sum::<f64>() / m as f64;
        let variance = kept.iter().map(|x| (avg - x).powi(2)).sum::<f64>() / m as f64;
        let at = |fraction: f64| sorted[((m as f64 * fraction).ceil() as usize).min(m)];
        Summary {
            min: sorted[0],
            max: sorted[m],
            typical,
            avg,
            stdev: variance.sqrt(),
            p99: at(0.99),
            p99_9: at(0.999),
        }
    }
}

/// `x` as C's `%g` prints it: 6 significant digits, trailing zeros dropped, the exponent
/// form (`1e+06`) below 1e-4 and from 1e6.
pub fn c_g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return x.to_string();
    }
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a number");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s.to_owned()
        }
    };
    if !(-4..6).contains(&exp) {
        format!("{}e{}{:02}", trim(mantissa), if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        trim(&format!("{x:.*}", (5 - exp) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_drops_the_two_largest_and_takes_the_median_of_the_rest() {
        // Ten samples 1..=10: 8 kept (1..=8), their median 4.5 and mean 4.5.
        let sorted: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Summary::of(&sorted);
        assert_eq!((s.min, s.max, s.typical, s.avg), (1.0, 9.0, 4.5, 4.5));
        assert!((s.stdev - 5.25f64.sqrt()).abs() < 1e-12, "{}", s.stdev);
        // ceil(8 * 0.99) = ceil(8 * 0.999) = 8: the smaller of the two left out.
        assert_eq!((s.p99, s.p99_9), (9.0, 9.0));
    }

    #[test]
    fn an_odd_count_kept_has_its_middle_sample_as_median() {
        let sorted = [1.0, 2.0, 7.0, 50.0, 60.0];
        let s = Summary::of(&sorted);
        assert_eq!((s.typical, s.avg, s.max), (2.0, 10.0 / 3.0, 50.0));
    }

    #[test]
    fn the_percentiles_of_perftests_default_999_samples() {
        // -n 1000: 999 gaps, 997 kept; 99% at ceil(987.03) = 988, 99.9% at ceil(996.003) = 997.
        let sorted: Vec<f64> = (0..999).map(f64::from).collect();
        let s = Summary::of(&sorted);
        assert_eq!((s.p99, s.p99_9, s.max, s.typical), (988.0, 997.0, 997.0, 498.0));
    }

    #[test]
    fn c_g_prints_as_c_does() {
        for (x, c) in [
            (16.91214, "16.9121"),
            (151.7234, "151.723"),
            (20.0, "20"),
            (0.5, "0.5"),
            (123456.7, "123457"),
            (999999.7, "1e+06"),
            (1234567.0, "1.23457e+06"),
            (0.00001234, "1.234e-05"),
            (0.0, "0"),
        ] {
            assert_eq!(c_g(x), c, "{x}");
        }
    }
}
