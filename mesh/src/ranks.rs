//! A big mesh over MPI ranks: which chips each rank opens (the rank bindings) and whether this
//! process may run as one rank at all.

mod barrier;
mod bindings;
#[cfg(feature = "mpi")]
mod over_mpi;
#[cfg(not(feature = "mpi"))]
mod single;

pub(crate) use barrier::barrier;
pub use bindings::{BindingsError, RankBindings};
#[cfg(feature = "mpi")]
pub(crate) use over_mpi::MeshRanks;
#[cfg(feature = "mpi")]
pub use over_mpi::{end_of_job, exchange_in_job};
#[cfg(not(feature = "mpi"))]
pub(crate) use single::MeshRanks;
#[cfg(not(feature = "mpi"))]
pub use single::{end_of_job, exchange_in_job};
use ttmesh_chip::tensor::HostData;
use ttmesh_chip::{DataType, HostTensor};
use ttmesh_settings::{settings, MpiLaunch};

/// True when this build carries the MPI transport (cargo feature `mpi`).
pub const BUILT_WITH_MPI: bool = cfg!(feature = "mpi");

/// Refuses to go on when an MPI launcher started this process but the build has no MPI: each
/// rank would open the whole mesh by itself. Call before opening any chip.
pub fn check_launch() -> Result<(), String> {
    check_launch_of(settings().mpi_launch.as_ref(), BUILT_WITH_MPI)
}

fn check_launch_of(launch: Option<&MpiLaunch>, built_with_mpi: bool) -> Result<(), String> {
    match launch {
        Some(l) if !built_with_mpi => Err(format!(
            "this ttmesh was built without MPI, but an MPI launcher started it as rank {} of {} \
             ({} is set): every rank would open the whole mesh alone. Build with the feature \
             (`bash scripts/mpi-setup.sh && cargo build --release -p ttmesh-cli --features mpi`; \
             for Python, `bash scripts/mpi-setup.sh && TTMESH_PYTHON_MPI=1 bash \
             scripts/python-setup.sh`) or run it without mpirun",
            l.rank, l.size, l.detected_by
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_without_mpi_is_refused_naming_the_fix() {
        let l = MpiLaunch {
            detected_by: "OMPI_COMM_WORLD_SIZE",
            rank: 1,
            size: 2,
        };
        let e = check_launch_of(Some(&l), false).unwrap_err();
        assert!(
            e.contains("rank 1 of 2") && e.contains("--features mpi"),
            "{e}"
        );
        assert!(check_launch_of(Some(&l), true).is_ok());
        assert!(check_launch_of(None, false).is_ok());
    }

    #[test]
    fn a_mesh_in_this_process_refuses_rank_bindings_and_holds_every_chip() {
        let config = |bindings: Option<&str>| crate::MeshConfig {
            topology: "n300".into(),
            rank_bindings: bindings.map(Into::into),
            ..Default::default()
        };
        let e = open_in_this_process(config(Some("n300-2-ranks.toml")))
            .err()
            .expect("bindings refused")
            .to_string();
        assert!(
            e.contains("n300-2-ranks.toml") && e.contains("MeshDevice::open"),
            "{e}"
        );
        assert!(!opening_in_this_process(), "the flag outlives the refusal");
        let mesh = open_in_this_process(config(None)).unwrap();
        assert!(!opening_in_this_process(), "the flag outlives the open");
        assert_eq!(mesh.num_devices(), 2);
        mesh.close().unwrap();
    }
}

/// A host exchange's bytes labelled with what the rank is doing (`what`), so a rank that took
/// another path through the program is named instead of its bytes being read as ours.
#[cfg(any(feature = "mpi", test))]
pub(crate) fn label(what: &str, data: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + what.len() + data.len());
    out.extend_from_slice(&(what.len() as u64).to_le_bytes());
    out.extend_from_slice(what.as_bytes());
    out.extend(data);
    out
}

/// Every rank's bytes without their labels, or an error naming the first rank whose label is
/// not `what` (`me` is this rank).
#[cfg(any(feature = "mpi", test))]
pub(crate) fn unlabel(
    what: &str,
    me: u32,
    all: Vec<Vec<u8>>,
) -> std::result::Result<Vec<Vec<u8>>, String> {
    all.into_iter()
        .enumerate()
        .map(|(rank, b)| {
            let mut r = Reader { b: &b, at: 0 };
            let theirs = r
                .u64_()
                .and_then(|n| r.take(usize::try_from(n).ok()?))
                .map(String::from_utf8_lossy);
            match theirs {
                Some(t) if t == what => Ok(b[r.at..].to_vec()),
                Some(t) => Err(format!(
                    "rank {rank} is in `{t}` while rank {me} (this rank) is in `{what}`: the \
                     ranks' programs took different paths (a rank that failed says why in its \
                     own error); every rank must make the same mesh calls in the same order"
                )),
                None => Err(format!(
                    "rank {rank} sent bytes that are not a mesh exchange while rank {me} (this \
                     rank) is in `{what}`: it may have ended its program or be running another \
                     ttmesh version"
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod label_tests {
    use super::*;

    #[test]
    fn labels_come_off_and_a_rank_elsewhere_is_named() {
        let all = vec![
            label("synchronize", vec![1, 2]),
            label("synchronize", vec![]),
        ];
        assert_eq!(
            unlabel("synchronize", 0, all).unwrap(),
            vec![vec![1, 2], vec![]]
        );
        let all = vec![
            label("synchronize", vec![1]),
            label("reading a mesh tensor", vec![]),
        ];
        let e = unlabel("synchronize", 0, all).unwrap_err();
        assert!(
            e.contains(
                "rank 1 is in `reading a mesh tensor` while rank 0 (this rank) is in `synchronize`"
            ),
            "{e}"
        );
        let e = unlabel("synchronize", 1, vec![vec![], label("synchronize", vec![])]).unwrap_err();
        assert!(
            e.contains("rank 0 sent bytes that are not a mesh exchange"),
            "{e}"
        );
    }
}

/// Tensors read on this rank, as bytes for the other ranks: per chip its id, shape and
/// elements (f32 or u32 bits). Every rank knows each tensor's dtype from its own spec.
pub(crate) fn encode_shards(shards: &[(u32, HostTensor)]) -> Vec<u8> {
    let mut out = Vec::new();
    let put = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    put(&mut out, shards.len() as u64);
    for (chip, t) in shards {
        put(&mut out, *chip as u64);
        put(&mut out, t.shape.len() as u64);
        for &d in &t.shape {
            put(&mut out, d as u64);
        }
        let (kind, bits): (u64, Vec<u32>) = match &t.data {
            HostData::F32(v) => (0, v.iter().map(|x| x.to_bits()).collect()),
            HostData::U32(v) => (1, v.clone()),
        };
        put(&mut out, kind);
        put(&mut out, bits.len() as u64);
        for b in bits {
            out.extend_from_slice(&b.to_le_bytes());
        }
    }
    out
}

/// Reads what `encode_shards` wrote (another rank's bytes: checked, never trusted).
fn decode_shards(b: &[u8], dtype: DataType) -> Option<Vec<(u32, HostTensor)>> {
    let mut r = Reader { b, at: 0 };
    let count = r.u64_()?;
    let mut out = Vec::new();
    for _ in 0..count {
        let chip = u32::try_from(r.u64_()?).ok()?;
        let dims = r.u64_()?;
        if dims > 16 {
            return None;
        }
        let shape = (0..dims)
            .map(|_| r.u64_().map(|d| d as usize))
            .collect::<Option<Vec<_>>>()?;
        let kind = r.u64_()?;
        let len = usize::try_from(r.u64_()?).ok()?;
        let bytes = r.take(len.checked_mul(4)?)?;
        let bits = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()));
        let data = match kind {
            0 => HostData::F32(bits.map(f32::from_bits).collect()),
            1 => HostData::U32(bits.collect()),
            _ => return None,
        };
        out.push((chip, HostTensor { shape, dtype, data }));
    }
    Some(out)
}

/// A cursor over bytes another rank sent.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u64_(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// Every shard's host tensor, in the mesh's order: this rank's from `mine`, the others' from
/// the bytes each rank sent (`all`, by rank).
pub(crate) fn gather_shards(
    shards: &[ttmesh_chip::tensor::Tensor],
    mine: Vec<(u32, HostTensor)>,
    all: &[Vec<u8>],
) -> crate::Result<Vec<HostTensor>> {
    let dtype = shards[0].spec().dtype;
    let mut by_chip: std::collections::HashMap<u32, HostTensor> = mine.into_iter().collect();
    for (rank, bytes) in all.iter().enumerate() {
        let parts = decode_shards(bytes, dtype).ok_or_else(|| {
            crate::MeshError::Config(format!(
                "reading a mesh tensor: rank {rank} sent bytes that are not tensors (a rank of \
                 another ttmesh version?)"
            ))
        })?;
        for (chip, t) in parts {
            by_chip.entry(chip).or_insert(t);
        }
    }
    shards
        .iter()
        .map(|s| {
            let id = s.chip().id();
            by_chip.remove(&id).ok_or_else(|| {
                crate::MeshError::Config(format!(
                    "reading a mesh tensor: no rank sent chip {id}'s part"
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod digest_tests {
    use super::*;

    #[test]
    fn digests_combine_in_chip_order_whatever_rank_sent_them() {
        let rank0 = encode_digests(&[(0, 11), (1, 12)]);
        let rank1 = encode_digests(&[(2, 13), (3, 14)]);
        let whole = encode_digests(&[(0, 11), (1, 12), (2, 13), (3, 14)]);
        let chips = [0, 1, 2, 3];
        let split = combine_digests(&chips, &[rank0.clone(), rank1.clone()]).unwrap();
        assert_eq!(split, combine_digests(&chips, &[whole]).unwrap());
        assert_eq!(
            split,
            combine_digests(&chips, &[rank1.clone(), rank0.clone()]).unwrap()
        );
        // Another chip order, or another digest, is another digest.
        assert_ne!(
            split,
            combine_digests(&[1, 0, 2, 3], &[rank0.clone(), rank1.clone()]).unwrap()
        );
        let other = encode_digests(&[(2, 13), (3, 15)]);
        assert_ne!(
            split,
            combine_digests(&chips, &[rank0.clone(), other]).unwrap()
        );
        // A chip nobody sent, or bytes that are not whole pairs, are named.
        let e = combine_digests(&chips, std::slice::from_ref(&rank0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no rank sent the digest of chip 2"), "{e}");
        let e = combine_digests(&chips, &[rank0, rank1[..5].to_vec()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 1 sent 5 bytes"), "{e}");
    }
}

#[cfg(test)]
mod shard_tests {
    use super::*;

    #[test]
    fn shards_read_back_as_sent_and_bad_bytes_are_refused() {
        let f = HostTensor {
            shape: vec![1, 2, 3],
            dtype: DataType::BFloat16,
            data: HostData::F32(vec![1.5, -0.0, f32::NAN, 3.0, 1e-30, 7.0]),
        };
        let u = HostTensor {
            shape: vec![2],
            dtype: DataType::BFloat16,
            data: HostData::U32(vec![7, u32::MAX]),
        };
        let bytes = encode_shards(&[(3, f.clone()), (9, u.clone())]);
        let back = decode_shards(&bytes, DataType::BFloat16).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!((back[0].0, &back[0].1.shape), (3, &f.shape));
        let bits = |t: &HostTensor| match &t.data {
            HostData::F32(v) => v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            HostData::U32(v) => v.clone(),
        };
        assert_eq!(bits(&back[0].1), bits(&f));
        assert_eq!(bits(&back[1].1), bits(&u));
        assert!(decode_shards(&bytes[..bytes.len() - 1], DataType::BFloat16).is_none());
        assert!(decode_shards(&[0xff; 8], DataType::BFloat16).is_none());
    }
}

thread_local! {
    /// Set while [`open_in_this_process`] opens a mesh on this thread.
    static OPENING_IN_THIS_PROCESS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Opens `config`'s mesh wholly in this process, even under `mpirun`: every chip here, no
/// links to other ranks, and no barrier with them at `synchronize_device`, `finish` or
/// `close`. For a rank that runs a small mesh of its own, or that times one mesh in one
/// process beside the same mesh split over the ranks (`ttmesh bench ranks`). Outside
/// `mpirun` it is `MeshDevice::open`.
pub fn open_in_this_process(config: crate::MeshConfig) -> crate::Result<crate::MeshDevice> {
    if let Some(file) = &config.rank_bindings {
        return Err(crate::error::invalid(
            "open_in_this_process",
            format!(
                "rank bindings {} were given for a mesh that opens wholly in this process: \
                 drop them, or open it with MeshDevice::open to split it over the ranks",
                file.display()
            ),
        ));
    }
    // Cleared on the way out however `open` leaves.
    struct Opening;
    impl Drop for Opening {
        fn drop(&mut self) {
            OPENING_IN_THIS_PROCESS.with(|f| f.set(false));
        }
    }
    OPENING_IN_THIS_PROCESS.with(|f| f.set(true));
    let _opening = Opening;
    crate::MeshDevice::open(config)
}

/// True while [`open_in_this_process`] is opening a mesh on this thread.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn opening_in_this_process() -> bool {
    OPENING_IN_THIS_PROCESS.with(|f| f.get())
}

/// This process's rank and the job's size when an MPI launcher started it, else None.
pub fn launched() -> Option<(u32, u32)> {
    settings().mpi_launch.as_ref().map(|l| (l.rank, l.size))
}

/// Every rank's `data`, by rank (only ours when the mesh is wholly in this process): a
/// host-side exchange between the ranks of `mesh`, labelled `what` (every rank must be making
/// the same call), bounded by `timeout`.
pub fn exchange_bytes(
    mesh: &crate::MeshDevice,
    what: &str,
    data: Vec<u8>,
    timeout: std::time::Duration,
) -> crate::Result<Vec<Vec<u8>>> {
    match mesh.ranks() {
        None => Ok(vec![data]),
        Some(r) => r.exchange(what, data, timeout),
    }
}

/// Wire bytes that crossed every link of `mesh` so far, both directions, 0 without a
/// fabric. On a mesh over MPI ranks a link direction's counts are whole only on the rank that
/// holds its receiving chip (ARCHITECTURE.md, "Meshes over MPI ranks", *Statistics*), so each
/// rank sums those after a barrier (so every rank's traffic before it has been counted) and
/// the sums are added up: every rank must call it, and gets the same total.
pub fn fabric_wire_bytes(
    mesh: &crate::MeshDevice,
    timeout: std::time::Duration,
) -> crate::Result<u64> {
    let Some(fabric) = mesh.fabric() else {
        return Ok(0);
    };
    if mesh.ranks().is_some() {
        mesh.synchronize_device()?;
    }
    let here: u64 = fabric
        .link_stats()
        .iter()
        .filter(|l| !fabric.is_remote(l.to_chip))
        .map(|l| l.bytes)
        .sum();
    let all = exchange_words(mesh, "counting fabric bytes", here.to_le_bytes(), timeout)?;
    Ok(all.into_iter().map(u64::from_le_bytes).sum())
}

/// Every rank's `value`, by rank (one value when the mesh is wholly in this process): a
/// host-side exchange between the ranks of `mesh`, bounded by `timeout`.
pub fn exchange_f64(
    mesh: &crate::MeshDevice,
    value: f64,
    timeout: std::time::Duration,
) -> Result<Vec<f64>, String> {
    let all = exchange_words(mesh, "exchanging a figure", value.to_le_bytes(), timeout)
        .map_err(|e| e.to_string())?;
    Ok(all.into_iter().map(f64::from_le_bytes).collect())
}

/// Every rank's 8-byte `word`, by rank, labelled `what`; a rank that sent another length is
/// an error naming it.
fn exchange_words(
    mesh: &crate::MeshDevice,
    what: &str,
    word: [u8; 8],
    timeout: std::time::Duration,
) -> crate::Result<Vec<[u8; 8]>> {
    exchange_bytes(mesh, what, word.to_vec(), timeout)?
        .iter()
        .enumerate()
        .map(|(rank, b)| {
            b.as_slice().try_into().map_err(|_| {
                crate::MeshError::Config(format!(
                    "{what}: rank {rank} sent {} bytes, not 8; every rank must run the same \
                     ttmesh",
                    b.len()
                ))
            })
        })
        .collect()
}

/// Each chip's digest as bytes (chip id, digest), for [`combine_digests`] on every rank.
pub(crate) fn encode_digests(digests: &[(u32, u64)]) -> Vec<u8> {
    digests
        .iter()
        .flat_map(|(id, d)| id.to_le_bytes().into_iter().chain(d.to_le_bytes()))
        .collect()
}

/// The digest of every chip's digest, in the order of `chips`, from every rank's
/// [`encode_digests`] (another rank's bytes: checked, never trusted).
pub(crate) fn combine_digests(chips: &[u32], parts: &[Vec<u8>]) -> crate::Result<u64> {
    let mut by_chip = std::collections::HashMap::new();
    for (rank, part) in parts.iter().enumerate() {
        if part.len() % 12 != 0 {
            return Err(crate::MeshError::Config(format!(
                "digesting a mesh tensor: rank {rank} sent {} bytes, not whole (chip, digest) \
                 pairs; every rank must run the same ttmesh",
                part.len()
            )));
        }
        for pair in part.chunks_exact(12) {
            let id = u32::from_le_bytes(pair[..4].try_into().unwrap());
            by_chip.insert(id, u64::from_le_bytes(pair[4..].try_into().unwrap()));
        }
    }
    let mut h = FNV_OFFSET;
    for &id in chips {
        let d = by_chip.get(&id).ok_or_else(|| {
            crate::MeshError::Config(format!(
                "digesting a mesh tensor: no rank sent the digest of chip {id}"
            ))
        })?;
        h = fnv(h, &d.to_le_bytes());
    }
    Ok(h)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A digest of tensors' bits (FNV-1a over each element's f32 or u32 bits, in order): two runs
/// (one process, or the mesh split over MPI ranks) computed the same values exactly if their
/// digests are equal. A comparison of runs, not a checksum against tampering.
pub fn bits_digest<'a>(parts: impl IntoIterator<Item = &'a HostTensor>) -> u64 {
    let mut h = FNV_OFFSET;
    for t in parts {
        let mut add = |bits: u32| h = fnv(h, &bits.to_le_bytes());
        match &t.data {
            HostData::F32(v) => v.iter().for_each(|x| add(x.to_bits())),
            HostData::U32(v) => v.iter().for_each(|&x| add(x)),
        }
    }
    h
}
