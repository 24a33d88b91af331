//! The messages ranks send each other, as bytes: fabric traffic (writes into a chip,
//! semaphore increments, a fabric's abort) and host exchanges. No MPI here, so it is tested
//! without it.
//!
//! Fabric traffic travels in batches: every message a rank has for another rank when its
//! progress thread next sends is one MPI message, the messages back to back (each header
//! says how long its payload is). A large neighbour write arrives as one packet per page,
//! and one MPI message per page had cost more than the bytes' copies.

use ttmesh_fabric::{MemSpace, NocAddr};

/// Bytes before a message's payload.
pub const HEADER: usize = 32;

/// MPI tag of fabric traffic (deliveries into chips held by the receiving rank).
pub const TAG_FABRIC: i32 = 1;
/// MPI tag of host exchanges (each rank's part of an all-gather on the host side).
pub const TAG_HOST: i32 = 2;
/// MPI tag of heartbeats (empty): a rank that sends nothing at all, not even these, is
/// stopped, killed or hung.
pub const TAG_HEARTBEAT: i32 = 3;

/// One message, decoded.
#[derive(Clone, Debug, PartialEq)]
pub enum Message<'a> {
    /// Write `data` at `at` in chip `chip` (mesh `generation`).
    Write {
        generation: u32,
        chip: u32,
        at: NocAddr,
        data: &'a [u8],
    },
    /// Add `by` to semaphore `sem` of chip `chip`.
    SemInc {
        generation: u32,
        chip: u32,
        sem: u32,
        by: u64,
    },
    /// The sender's fabric stopped: its collective failed on `chip`, for `reason`.
    Abort {
        generation: u32,
        chip: u32,
        reason: &'a str,
    },
    /// The sender's part of host exchange `seq`.
    Host { seq: u32, data: &'a [u8] },
    /// `packets` carrying `payload` bytes crossed link `link` (from its `a` end if `a_to_b`)
    /// into chip `chip`, counted by the sender: the receiver adds them to its statistics.
    Arrived {
        generation: u32,
        chip: u32,
        link: u32,
        a_to_b: bool,
        packets: u64,
        payload: u64,
    },
    /// The sender has taken the first `upto` fabric messages (all but these) the receiver
    /// sent it: the credits waiting for them return (see `Outboxes`).
    Taken { upto: u64 },
}

const WRITE: u8 = 1;
const SEM_INC: u8 = 2;
const ABORT: u8 = 3;
const HOST: u8 = 4;
const ARRIVED: u8 = 5;
const TAKEN: u8 = 6;

/// Appends a header: kind, a sub-kind byte, then the fields and the payload's length.
#[allow(clippy::too_many_arguments)]
fn put_header(
    out: &mut Vec<u8>,
    kind: u8,
    sub: u8,
    generation: u32,
    chip: u32,
    a: u32,
    b: u64,
    payload: &[u8],
) {
    out.reserve(HEADER + payload.len());
    out.extend_from_slice(&[kind, sub, 0, 0]);
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(&chip.to_le_bytes());
    out.extend_from_slice(&a.to_le_bytes());
    out.extend_from_slice(&b.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
}

impl Message<'_> {
    /// The message as bytes (header, then payload).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode_into(&mut v);
        v
    }

    /// Appends the message's bytes to `out` (a batch for one rank).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match *self {
            Message::Write {
                generation,
                chip,
                at,
                data,
            } => {
                let space = match at.space {
                    MemSpace::Dram => 0,
                    MemSpace::L1 => 1,
                    MemSpace::Host => 2,
                };
                put_header(out, WRITE, space, generation, chip, at.bank, at.addr, data)
            }
            Message::SemInc {
                generation,
                chip,
                sem,
                by,
            } => put_header(out, SEM_INC, 0, generation, chip, sem, by, &[]),
            Message::Abort {
                generation,
                chip,
                reason,
            } => put_header(out, ABORT, 0, generation, chip, 0, 0, reason.as_bytes()),
            Message::Host { seq, data } => put_header(out, HOST, 0, seq, 0, 0, 0, data),
            Message::Arrived {
                generation,
                chip,
                link,
                a_to_b,
                packets,
                payload,
            } => put_header(
                out,
                ARRIVED,
                u8::from(a_to_b),
                generation,
                chip,
                link,
                packets,
                &payload.to_le_bytes(),
            ),
            Message::Taken { upto } => put_header(out, TAKEN, 0, 0, 0, 0, upto, &[]),
        }
    }

    /// Reads one whole message; None if the bytes are not exactly one (a peer of another
    /// version).
    pub fn decode(b: &[u8]) -> Option<Message<'_>> {
        match split_first(b) {
            Some((m, [])) => Some(m),
            _ => None,
        }
    }
}

/// The first message of `b` and the bytes after it; None if `b` does not start with a whole
/// message.
pub fn split_first(b: &[u8]) -> Option<(Message<'_>, &[u8])> {
    if b.len() < HEADER {
        return None;
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let len = usize::try_from(u64_at(24)).ok()?;
    let end = HEADER.checked_add(len).filter(|&e| e <= b.len())?;
    Some((read_message(&b[..end])?, &b[end..]))
}

/// The messages of a batch in order; a batch whose bytes stop being messages (another
/// version's) yields None there and ends.
pub fn batch(mut b: &[u8]) -> impl Iterator<Item = Option<Message<'_>>> {
    std::iter::from_fn(move || {
        if b.is_empty() {
            return None;
        }
        match split_first(b) {
            Some((m, rest)) => {
                b = rest;
                Some(Some(m))
            }
            None => {
                b = &[];
                Some(None)
            }
        }
    })
}

impl Message<'_> {
    /// The mesh generation a fabric message belongs to (None for a host exchange's part and
    /// a confirmation, which belong to the two ranks).
    pub fn generation(&self) -> Option<u32> {
        match *self {
            Message::Write { generation, .. }
            | Message::SemInc { generation, .. }
            | Message::Abort { generation, .. }
            | Message::Arrived { generation, .. } => Some(generation),
            Message::Host { .. } | Message::Taken { .. } => None,
        }
    }
}

/// One message's bytes (header and exactly its payload) read.
fn read_message(b: &[u8]) -> Option<Message<'_>> {
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let (generation, chip, a, x) = (u32_at(4), u32_at(8), u32_at(12), u64_at(16));
    let payload = &b[HEADER..];
    Some(match b[0] {
        WRITE => Message::Write {
            generation,
            chip,
            at: NocAddr {
                space: match b[1] {
                    0 => MemSpace::Dram,
                    1 => MemSpace::L1,
                    2 => MemSpace::Host,
                    _ => return None,
                },
                bank: a,
                addr: x,
            },
            data: payload,
        },
        SEM_INC => Message::SemInc {
            generation,
            chip,
            sem: a,
            by: x,
        },
        ABORT => Message::Abort {
            generation,
            chip,
            reason: std::str::from_utf8(payload).ok()?,
        },
        HOST => Message::Host {
            seq: generation,
            data: payload,
        },
        ARRIVED => Message::Arrived {
            generation,
            chip,
            link: a,
            a_to_b: match b[1] {
                0 => false,
                1 => true,
                _ => return None,
            },
            packets: x,
            payload: u64::from_le_bytes(payload.try_into().ok()?),
        },
        TAKEN => Message::Taken { upto: x },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_written() {
        let data = [1u8, 2, 3, 250];
        let msgs = [
            Message::Write {
                generation: 3,
                chip: 17,
                at: NocAddr {
                    space: MemSpace::L1,
                    bank: 63,
                    addr: 0x1234_5678_9abc,
                },
                data: &data,
            },
            Message::SemInc {
                generation: 1,
                chip: 31,
                sem: 0x8000_0001,
                by: u64::MAX,
            },
            Message::Abort {
                generation: 2,
                chip: 5,
                reason: "link chip 5 port 0 <-> chip 13 port 8 is down",
            },
            Message::Host {
                seq: 9,
                data: &data,
            },
            Message::Arrived {
                generation: 4,
                chip: 16,
                link: 40,
                a_to_b: false,
                packets: 4096,
                payload: 8 << 20,
            },
            Message::Taken { upto: 1 << 40 },
        ];
        for m in &msgs {
            assert_eq!(Message::decode(&m.encode()), Some(m.clone()));
        }
        assert_eq!(Message::decode(&[WRITE; 8]), None);
        // Back to back in one batch, they read back in order.
        let mut b = Vec::new();
        for m in &msgs {
            m.encode_into(&mut b);
        }
        let back: Vec<_> = batch(&b).collect();
        assert_eq!(back, msgs.iter().cloned().map(Some).collect::<Vec<_>>());
        // A batch cut short, or followed by a stray byte, ends with None there.
        let cut: Vec<_> = batch(&b[..b.len() - 1]).collect();
        assert_eq!(cut.len(), msgs.len());
        assert_eq!(cut.last(), Some(&None));
        let mut long = msgs_first().encode();
        long.push(0);
        assert_eq!(Message::decode(&long), None);
        let mut bad = msgs_first().encode();
        bad[0] = 77;
        assert_eq!(Message::decode(&bad), None);
    }

    fn msgs_first() -> Message<'static> {
        Message::SemInc {
            generation: 0,
            chip: 0,
            sem: 0,
            by: 1,
        }
    }
}
