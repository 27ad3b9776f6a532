//! perftest's result table, or one JSON object per size.

use super::traffic::Stats;
use super::Mode;

/// perftest's separator line.
const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// How results are printed.
pub struct Report {
    pub gbits: bool,
    pub json: bool,
    pub mode: Mode,
    pub tier: &'static str,
    pub qps: u32,
}

impl Report {
    /// The table header (not for JSON).
    pub fn header(&self) {
        if self.json {
            return;
        }
        let unit = if self.gbits { "Gb/sec" } else { "MB/sec" };
        println!("{RULE}");
        println!(
            " {} BW Test ({} tier, {} QP{})",
            self.mode.title(),
            self.tier,
            self.qps,
            if self.qps == 1 { "" } else { "s" }
        );
        println!(
            " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
        );
    }

    /// One size's line. `messages` counts what this side moved: WRs it completed plus SENDs
    /// it received.
    pub fn line(&self, size: u32, stats: &Stats) {
        let messages = stats.completed + stats.received;
        let secs = stats.elapsed.as_secs_f64();
        let bytes = messages as f64 * f64::from(size);
        let factor = if self.gbits { 125_000_000.0 } else { f64::from(1 << 20) };
        let (avg, peak) = (bytes / secs / factor, stats.peak.max(bytes / secs) / factor);
        let rate = messages as f64 / secs / 1e6;
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

    /// The closing rule (not for JSON).
    pub fn footer(&self) {
        if !self.json {
            println!("{RULE}");
        }
    }
}
