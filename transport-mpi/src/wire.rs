//! The messages ranks send each other, as bytes: fabric traffic (writes into a chip,
//! semaphore increments, a fabric's abort) and host exchanges. No MPI here, so it is tested
//! without it.

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
}

const WRITE: u8 = 1;
const SEM_INC: u8 = 2;
const ABORT: u8 = 3;
const HOST: u8 = 4;

fn header(kind: u8, generation: u32, chip: u32, a: u32, b: u64, payload: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + payload);
    v.push(kind);
    v.extend_from_slice(&[0; 3]);
    v.extend_from_slice(&generation.to_le_bytes());
    v.extend_from_slice(&chip.to_le_bytes());
    v.extend_from_slice(&a.to_le_bytes());
    v.extend_from_slice(&b.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    v
}

impl Message<'_> {
    /// The message as bytes (header, then payload).
    pub fn encode(&self) -> Vec<u8> {
        match *self {
            Message::Write {
                generation,
                chip,
                at,
                data,
            } => {
                let mut v = header(WRITE, generation, chip, at.bank, at.addr, data.len());
                v[1] = match at.space {
                    MemSpace::Dram => 0,
                    MemSpace::L1 => 1,
                    MemSpace::Host => 2,
                };
                v.extend_from_slice(data);
                v
            }
            Message::SemInc {
                generation,
                chip,
                sem,
                by,
            } => header(SEM_INC, generation, chip, sem, by, 0),
            Message::Abort {
                generation,
                chip,
                reason,
            } => {
                let mut v = header(ABORT, generation, chip, 0, 0, reason.len());
                v.extend_from_slice(reason.as_bytes());
                v
            }
            Message::Host { seq, data } => {
                let mut v = header(HOST, seq, 0, 0, 0, data.len());
                v.extend_from_slice(data);
                v
            }
        }
    }

    /// Reads a message; None if the bytes are not one (a peer of another version).
    pub fn decode(b: &[u8]) -> Option<Message<'_>> {
        if b.len() < HEADER {
            return None;
        }
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
            _ => return None,
        })
    }
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
        ];
        for m in msgs {
            assert_eq!(Message::decode(&m.encode()), Some(m.clone()));
        }
        assert_eq!(Message::decode(&[WRITE; 8]), None);
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
