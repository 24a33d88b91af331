//! The 32-byte packet header, the 1D route encoding and the checksum.
//!
//! Layout (little endian):
//! ```text
//!  0..4   route: 2 bits per hop, hop 1 in the low bits; each router reads the low 2 bits
//!         and shifts them out before forwarding (01 forward, 10 write, 11 write+forward);
//!         on a 2D fabric `00` then a direction (2 bits) turns onto the crossing line
//!         (see `route/mesh2d.rs`)
//!  4      kind (low 3 bits) | memory space (bit 4: L1, bit 3: host, neither: DRAM)
//!         | sealed (bit 5: checksum set)
//!  5      link index the sender asked for (each hop uses link % links between the pair)
//!  6..8   source chip
//!  8..10  bank
//! 10..16  address inside the bank (48 bits)
//! 16..18  payload length
//! 18..20  sequence number of the (source, destination) stream
//! 20..28  argument: semaphore id (u32) + increment (u32), or inline value (u32)
//! 28..32  checksum of bytes 4..28 and the payload (the route word changes per hop)
//! ```
//!
//! The checksum is a link-level check, like Ethernet's frame check sequence: the end that
//! puts a packet on a link that can corrupt (one on which a Corrupt fault is or was set)
//! seals it, and the far end verifies it. On links that cannot corrupt, sealing and
//! verifying would only re-read every payload, so neither happens there.

use crate::{MemSpace, NocAddr};

pub const HEADER_BYTES: usize = 32;
pub const MAX_HOPS: u32 = 16;

pub const HOP_FORWARD: u32 = 0b01;
pub const HOP_WRITE: u32 = 0b10;
pub const HOP_WRITE_FORWARD: u32 = 0b11;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A reserved slot that carries nothing (its packet was lost before it could be filled).
    Void = 0,
    Write = 1,
    InlineWrite = 2,
    AtomicInc = 3,
    WriteAtomicInc = 4,
}

impl Kind {
    fn from_bits(b: u8) -> Option<Kind> {
        Some(match b & 0x7 {
            0 => Kind::Void,
            1 => Kind::Write,
            2 => Kind::InlineWrite,
            3 => Kind::AtomicInc,
            4 => Kind::WriteAtomicInc,
            _ => return None,
        })
    }
    pub fn carries_sem(self) -> bool {
        matches!(self, Kind::AtomicInc | Kind::WriteAtomicInc)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub route: u32,
    pub kind: Kind,
    pub link: u8,
    pub src: u16,
    pub addr: NocAddr,
    pub len: u16,
    pub seq: u16,
    /// Semaphore id, or the inline value.
    pub arg0: u32,
    /// Semaphore increment.
    pub arg1: u32,
}

pub const VOID_HEADER: [u8; HEADER_BYTES] = [0; HEADER_BYTES];

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&self.route.to_le_bytes());
        h[4] = self.kind as u8 | space_bits(self.addr.space);
        h[5] = self.link;
        h[6..8].copy_from_slice(&self.src.to_le_bytes());
        h[8..10].copy_from_slice(&(self.addr.bank as u16).to_le_bytes());
        h[10..16].copy_from_slice(&self.addr.addr.to_le_bytes()[..6]);
        h[16..18].copy_from_slice(&self.len.to_le_bytes());
        h[18..20].copy_from_slice(&self.seq.to_le_bytes());
        h[20..24].copy_from_slice(&self.arg0.to_le_bytes());
        h[24..28].copy_from_slice(&self.arg1.to_le_bytes());
        h
    }

    /// `None` for a kind no sender produces (only possible if the header itself was damaged).
    pub fn decode(h: &[u8; HEADER_BYTES]) -> Option<Header> {
        let kind = Kind::from_bits(h[4])?;
        let mut a = [0u8; 8];
        a[..6].copy_from_slice(&h[10..16]);
        Some(Header {
            route: u32::from_le_bytes([h[0], h[1], h[2], h[3]]),
            kind,
            link: h[5],
            src: u16::from_le_bytes([h[6], h[7]]),
            addr: NocAddr {
                space: space_from_bits(h[4])?,
                bank: u16::from_le_bytes([h[8], h[9]]) as u32,
                addr: u64::from_le_bytes(a),
            },
            len: u16::from_le_bytes([h[16], h[17]]),
            seq: u16::from_le_bytes([h[18], h[19]]),
            arg0: u32::from_le_bytes([h[20], h[21], h[22], h[23]]),
            arg1: u32::from_le_bytes([h[24], h[25], h[26], h[27]]),
        })
    }
}

/// The memory space in bits 3 and 4 of the kind byte (bit 5 is the seal).
fn space_bits(space: MemSpace) -> u8 {
    match space {
        MemSpace::Dram => 0,
        MemSpace::L1 => 0x10,
        MemSpace::Host => 0x08,
    }
}

fn space_from_bits(b: u8) -> Option<MemSpace> {
    match b & 0x18 {
        0 => Some(MemSpace::Dram),
        0x10 => Some(MemSpace::L1),
        0x08 => Some(MemSpace::Host),
        _ => None,
    }
}

pub fn set_route(h: &mut [u8; HEADER_BYTES], route: u32) {
    h[0..4].copy_from_slice(&route.to_le_bytes());
}

pub fn stored_checksum(h: &[u8; HEADER_BYTES]) -> u32 {
    u32::from_le_bytes([h[28], h[29], h[30], h[31]])
}

const SEALED: u8 = 0x20;

pub fn is_sealed(h: &[u8; HEADER_BYTES]) -> bool {
    h[4] & SEALED != 0
}

/// Sets the checksum (and the sealed bit it covers).
pub fn seal(h: &mut [u8; HEADER_BYTES], payload: &[u8]) {
    h[4] |= SEALED;
    let c = checksum(h, payload);
    h[28..32].copy_from_slice(&c.to_le_bytes());
}

pub fn verify(h: &[u8; HEADER_BYTES], payload: &[u8]) -> bool {
    checksum(h, payload) == stored_checksum(h)
}

/// A prime below 2^32 such that no 2^(8m) (m = 1..=8) lies within 255 of a multiple of it, so
/// a single-byte change stays visible after the fold even when the 64-bit sum wraps.
const CHECK_MOD: u64 = 4_294_967_029;

/// Wrapping sum of the payload's little-endian u64 words (zero-padded) in 8 lanes.
#[inline(always)]
fn word_sum(payload: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = payload.chunks_exact(64);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            *a = a.wrapping_add(u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap()));
        }
    }
    let mut tail = [0u8; 64];
    let rem = chunks.remainder();
    tail[..rem.len()].copy_from_slice(rem);
    for (i, a) in acc.iter_mut().enumerate() {
        *a = a.wrapping_add(u64::from_le_bytes(
            tail[i * 8..i * 8 + 8].try_into().unwrap(),
        ));
    }
    acc.iter().fold(0u64, |s, a| s.wrapping_add(*a))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn word_sum_avx2(payload: &[u8]) -> u64 {
    word_sum(payload)
}

fn payload_sum(payload: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { word_sum_avx2(payload) };
        }
    }
    word_sum(payload)
}

/// Checksum of header bytes 4..28 and the payload: the wrapping sum of the payload's u64
/// words plus the header's u32 words and the length, folded mod a prime. A single changed
/// byte changes the word sum by d * 2^(8k) (0 < d < 256), which the fold keeps visible.
pub fn checksum(h: &[u8; HEADER_BYTES], payload: &[u8]) -> u32 {
    let mut s = payload_sum(payload);
    for w in h[4..28].chunks_exact(4) {
        s = s.wrapping_add(u32::from_le_bytes(w.try_into().unwrap()) as u64);
    }
    s = s.wrapping_add((payload.len() as u64) << 20);
    (s % CHECK_MOD) as u32
}

/// Route for a unicast `hops` away: forward through the first hops-1 chips, write at the last.
pub fn unicast_route(hops: u32) -> u32 {
    debug_assert!((1..=MAX_HOPS).contains(&hops));
    let mut r = 0;
    for i in 0..hops - 1 {
        r |= HOP_FORWARD << (2 * i);
    }
    r | HOP_WRITE << (2 * (hops - 1))
}

/// Route for a line multicast to every chip at distance `start..start+range`.
pub fn multicast_route(start: u32, range: u32) -> u32 {
    debug_assert!(start >= 1 && range >= 1 && start + range - 1 <= MAX_HOPS);
    let last = start + range - 1;
    let mut r = 0;
    for d in 1..=last {
        let code = if d < start {
            HOP_FORWARD
        } else if d < last {
            HOP_WRITE_FORWARD
        } else {
            HOP_WRITE
        };
        r |= code << (2 * (d - 1));
    }
    r
}

/// Distances (1 = next chip) at which a route still writes.
pub fn write_hops(route: u32) -> impl Iterator<Item = u32> {
    (0..MAX_HOPS).filter_map(move |i| ((route >> (2 * i)) & HOP_WRITE != 0).then_some(i + 1))
}

pub fn writes_in(route: u32) -> u64 {
    write_hops(route).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = Header {
            route: multicast_route(2, 3),
            kind: Kind::WriteAtomicInc,
            link: 3,
            src: 513,
            addr: NocAddr::l1(63, 0x1234_5678_9abc),
            len: 7616,
            seq: 65535,
            arg0: 7,
            arg1: 42,
        };
        assert_eq!(Header::decode(&h.encode()), Some(h));
    }

    #[test]
    fn routes_encode_hops() {
        assert_eq!(unicast_route(1), 0b10);
        assert_eq!(unicast_route(3), 0b10_01_01);
        assert_eq!(multicast_route(2, 3), 0b10_11_11_01);
        assert_eq!(
            write_hops(multicast_route(2, 3)).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        assert_eq!(writes_in(unicast_route(16)), 1);
    }

    #[test]
    fn checksum_catches_every_single_byte_flip() {
        let mut h = Header {
            route: 2,
            kind: Kind::Write,
            link: 0,
            src: 1,
            addr: NocAddr::dram(0, 64),
            len: 100,
            seq: 9,
            arg0: 0,
            arg1: 0,
        }
        .encode();
        let payload: Vec<u8> = (0..100u32).map(|i| (i * 37 % 251) as u8).collect();
        seal(&mut h, &payload);
        assert!(verify(&h, &payload));
        for i in 0..payload.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut p = payload.clone();
                p[i] ^= flip;
                assert!(!verify(&h, &p), "flip {flip:#x} at {i} not caught");
            }
        }
        for i in 4..28 {
            let mut hh = h;
            hh[i] ^= 0x01;
            assert!(!verify(&hh, &payload), "header byte {i} not covered");
        }
    }
}
