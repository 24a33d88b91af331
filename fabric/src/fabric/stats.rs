//! Link statistics: every link's counters, both directions.

use std::sync::atomic::Ordering::Relaxed;

use super::Fabric;
use crate::config::*;

impl Fabric {
    /// Counters of every link, both directions (a-to-b first), in spec order.
    pub fn link_stats(&self) -> Vec<LinkStats> {
        let inner = &self.inner;
        let mut out = Vec::with_capacity(inner.spec.links.len() * 2);
        for (i, link) in inner.spec.links.iter().enumerate() {
            for (d, direction) in [LinkDirection::AToB, LinkDirection::BToA]
                .into_iter()
                .enumerate()
            {
                let c = &inner.counters[i][d];
                let (packets, payload, slow_ps) = inner.link_chans[i][d]
                    .iter()
                    .map(|ch| ch.totals())
                    .fold((0, 0, 0), |a, t| (a.0 + t.0, a.1 + t.1, a.2 + t.2));
                let (from_chip, to_chip) = if d == 0 {
                    (link.a.0, link.b.0)
                } else {
                    (link.b.0, link.a.0)
                };
                out.push(LinkStats {
                    link_index: i,
                    link: *link,
                    direction,
                    from_chip,
                    to_chip,
                    packets,
                    bytes: payload + packets * inner.spec.params.header_bytes as u64,
                    payload_bytes: payload,
                    credit_stalls: c.credit_stalls.load(Relaxed),
                    dropped: c.dropped.load(Relaxed),
                    corrupted: c.corrupted.load(Relaxed),
                    busy_ns: inner.spec.params.busy_ns(packets, payload, slow_ps),
                    fault: inner.faults[i].get(),
                });
            }
        }
        out
    }
}
