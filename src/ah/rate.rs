//! The static rate of a route (`enum ibv_rate`): the rate the port injects a QP's packets at
//! toward that destination, below the link's own.

use crate::c_enum::c_enum;

c_enum! {
    /// The injection rate of a route (`enum ibv_rate` in `<infiniband/verbs.h>`, the
    /// `static_rate` of `struct ibv_ah_attr`; `ibv_modify_qp(3)`, `ibv_create_ah(3)`).
    /// [`StaticRate::MAX`], the default, sends at the port's rate; another value holds the
    /// route to that rate, for a peer on a slower link, or to share a link between flows. A
    /// NIC that does not pace by static rate ignores it (Soft-RoCE does).
    pub struct StaticRate(u32) {
        /// The port's own rate: no limit (`IBV_RATE_MAX`).
        MAX = 0 => "port rate",
        /// 2.5 Gb/s (`IBV_RATE_2_5_GBPS`).
        GBPS_2_5 = 2 => "2.5 Gb/s",
        /// 5 Gb/s.
        GBPS_5 = 5 => "5 Gb/s",
        /// 10 Gb/s.
        GBPS_10 = 3 => "10 Gb/s",
        /// 14 Gb/s.
        GBPS_14 = 11 => "14 Gb/s",
        /// 20 Gb/s.
        GBPS_20 = 6 => "20 Gb/s",
        /// 25 Gb/s.
        GBPS_25 = 15 => "25 Gb/s",
        /// 28 Gb/s.
        GBPS_28 = 19 => "28 Gb/s",
        /// 30 Gb/s.
        GBPS_30 = 4 => "30 Gb/s",
        /// 40 Gb/s.
        GBPS_40 = 7 => "40 Gb/s",
        /// 50 Gb/s.
        GBPS_50 = 20 => "50 Gb/s",
        /// 56 Gb/s.
        GBPS_56 = 12 => "56 Gb/s",
        /// 60 Gb/s.
        GBPS_60 = 8 => "60 Gb/s",
        /// 80 Gb/s.
        GBPS_80 = 9 => "80 Gb/s",
        /// 100 Gb/s.
        GBPS_100 = 16 => "100 Gb/s",
        /// 112 Gb/s.
        GBPS_112 = 13 => "112 Gb/s",
        /// 120 Gb/s.
        GBPS_120 = 10 => "120 Gb/s",
        /// 168 Gb/s.
        GBPS_168 = 14 => "168 Gb/s",
        /// 200 Gb/s.
        GBPS_200 = 17 => "200 Gb/s",
        /// 300 Gb/s.
        GBPS_300 = 18 => "300 Gb/s",
        /// 400 Gb/s.
        GBPS_400 = 21 => "400 Gb/s",
        /// 600 Gb/s.
        GBPS_600 = 22 => "600 Gb/s",
        /// 800 Gb/s.
        GBPS_800 = 23 => "800 Gb/s",
        /// 1200 Gb/s.
        GBPS_1200 = 24 => "1200 Gb/s",
    }
}

/// Each limiting rate and its Mb/s, as rdma-core's `ibv_rate_to_mbps` (libibverbs/verbs.c)
/// gives them.
const MBPS: [(StaticRate, u32); 23] = [
    (StaticRate::GBPS_2_5, 2_500),
    (StaticRate::GBPS_5, 5_000),
    (StaticRate::GBPS_10, 10_000),
    (StaticRate::GBPS_14, 14_062),
    (StaticRate::GBPS_20, 20_000),
    (StaticRate::GBPS_25, 25_781),
    (StaticRate::GBPS_28, 28_125),
    (StaticRate::GBPS_30, 30_000),
    (StaticRate::GBPS_40, 40_000),
    (StaticRate::GBPS_50, 53_125),
    (StaticRate::GBPS_56, 56_250),
    (StaticRate::GBPS_60, 60_000),
    (StaticRate::GBPS_80, 80_000),
    (StaticRate::GBPS_100, 103_125),
    (StaticRate::GBPS_112, 112_500),
    (StaticRate::GBPS_120, 120_000),
    (StaticRate::GBPS_168, 168_750),
    (StaticRate::GBPS_200, 206_250),
    (StaticRate::GBPS_300, 309_375),
    (StaticRate::GBPS_400, 425_000),
    (StaticRate::GBPS_600, 637_500),
    (StaticRate::GBPS_800, 850_000),
    (StaticRate::GBPS_1200, 1_275_000),
];

impl StaticRate {
    /// Every rate that limits (all but [`MAX`](Self::MAX)), slowest first.
    pub fn limits() -> impl Iterator<Item = StaticRate> {
        MBPS.iter().map(|&(rate, _)| rate)
    }

    /// The limiting rate named `gbps` Gb/s (2.5, 5, 10, 14, … 1200), `None` for a rate
    /// `enum ibv_rate` has no value for.
    #[must_use]
    pub fn from_gbps(gbps: f64) -> Option<StaticRate> {
        StaticRate::limits().find(|rate| rate.gbps() == Some(gbps))
    }

    /// The rate's name in Gb/s (25 for [`GBPS_25`](Self::GBPS_25)); `None` for
    /// [`MAX`](Self::MAX) and values this build does not know.
    #[must_use]
    pub fn gbps(self) -> Option<f64> {
        let name = self.name()?;
        name.strip_suffix(" Gb/s")?.parse().ok()
    }

    /// The data rate the NIC holds the route to, in Mb/s, as `ibv_rate_to_mbps(3)` gives it
    /// (above the name's from 14 Gb/s on, the encodings' payload rates: 25 Gb/s is 25,781
    /// Mb/s); `None` for [`MAX`](Self::MAX) and unknown values.
    #[must_use]
    pub fn mbps(self) -> Option<u32> {
        MBPS.iter().find(|&&(rate, _)| rate == self).map(|&(_, mbps)| mbps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limiting_rate_is_found_by_its_name_in_gbps() {
        for (rate, mbps) in MBPS {
            let gbps = rate.gbps().unwrap();
            assert_eq!(StaticRate::from_gbps(gbps), Some(rate), "{rate}");
            assert!(f64::from(mbps) >= gbps * 1000.0 && f64::from(mbps) < gbps * 1070.0, "{rate}");
        }
        assert_eq!(StaticRate::from_gbps(26.0), None);
        assert_eq!(StaticRate::MAX.gbps(), None);
        assert_eq!(StaticRate::MAX.mbps(), None);
        assert_eq!(StaticRate(99).mbps(), None);
        let mbps: Vec<u32> = StaticRate::limits().filter_map(StaticRate::mbps).collect();
        assert!(mbps.len() == MBPS.len() && mbps.is_sorted(), "slowest first: {mbps:?}");
    }
}
