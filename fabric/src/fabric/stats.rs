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
                let packets = packets + c.arrived_packets.load(Relaxed);
                let payload = payload + c.arrived_payload.load(Relaxed);
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

    /// Adds traffic another process sent over link `link_index` (from its `a` end if
    /// `a_to_b`) into a chip held here, as it counted it (see [`crate::RemoteChips::arrived`]).
    /// A link index out of range is ignored (another version's message).
    pub fn count_arrived(&self, link_index: usize, a_to_b: bool, packets: u64, payload: u64) {
        if let Some(c) = self.inner.counters.get(link_index) {
            let c = &c[usize::from(!a_to_b)];
            c.arrived_packets.fetch_add(packets, Relaxed);
            c.arrived_payload.fetch_add(payload, Relaxed);
        }
    }
}
