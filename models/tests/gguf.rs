//! GGUF: dequantisation of each type against hand-computed blocks, writer -> reader round trip,
//! and bad files (truncated, not GGUF, unsupported type, lying sizes) as named errors.

mod common;

use common::TempFile;
use std::path::Path;

use half::{bf16, f16};
use proptest::prelude::*;
use ttmesh_models::gguf::{
    dequantize, GgmlType, GgufFile, GgufWriter, MetadataArray, MetadataValue, WriteTensor,
};
use ttmesh_models::ModelError;

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

fn temp_path(name: &str) -> TempFile {
    TempFile::new(name)
}

#[test]
fn float_types_dequantise_exactly() {
    let f32_bytes: Vec<u8> = [1.5f32, -2.25]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(dequantize(GgmlType::F32, &f32_bytes).unwrap(), [1.5, -2.25]);
    let f16_bytes = [h(0.5), h(-3.0), [0x00, 0x7c]].concat(); // 0x7c00 is +inf
    assert_eq!(
        dequantize(GgmlType::F16, &f16_bytes).unwrap(),
        [0.5, -3.0, f32::INFINITY]
    );
    let bf16_bytes = [bf16::from_f32(1.0).to_le_bytes(), [0x80, 0xc0]].concat(); // 0xc080 = -4.0
    assert_eq!(
        dequantize(GgmlType::BF16, &bf16_bytes).unwrap(),
        [1.0, -4.0]
    );
}

#[test]
fn q8_0_block() {
    // d = 0.5, q[i] = i - 16: x[i] = (i - 16) / 2.
    let mut block = h(0.5).to_vec();
    block.extend((0..32).map(|i| (i as i8 - 16) as u8));
    let x = dequantize(GgmlType::Q8_0, &block).unwrap();
    assert_eq!(x[0], -8.0);
    assert_eq!(x[16], 0.0);
    assert_eq!(x[31], 7.5);
    for (i, v) in x.iter().enumerate() {
        assert_eq!(*v, (i as f32 - 16.0) * 0.5);
    }
}

#[test]
fn q4_0_block() {
    // d = 2, byte j = j | (15 - j) << 4: x[j] = 2 (j - 8), x[j + 16] = 2 (7 - j).
    let mut block = h(2.0).to_vec();
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let x = dequantize(GgmlType::Q4_0, &block).unwrap();
    assert_eq!(&x[..3], &[-16.0, -14.0, -12.0]);
    assert_eq!(x[16], 14.0);
    assert_eq!(x[31], -16.0);
    for j in 0..16 {
        assert_eq!(x[j], 2.0 * (j as f32 - 8.0));
        assert_eq!(x[j + 16], 2.0 * (7.0 - j as f32));
    }
}

#[test]
fn q4_1_block() {
    // d = 0.25, m = -1: x[j] = j / 4 - 1, x[j + 16] = (15 - j) / 4 - 1.
    let mut block = [h(0.25), h(-1.0)].concat();
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let x = dequantize(GgmlType::Q4_1, &block).unwrap();
    assert_eq!(x[0], -1.0);
    assert_eq!(x[15], 2.75);
    assert_eq!(x[16], 2.75);
    assert_eq!(x[31], -1.0);
    for j in 0..16 {
        assert_eq!(x[j], j as f32 * 0.25 - 1.0);
        assert_eq!(x[j + 16], (15 - j) as f32 * 0.25 - 1.0);
    }
}

#[test]
fn q4_k_block() {
    // d = 1, dmin = 0.5; eight (scale, min) pairs packed by hand into 12 bytes: pairs 4..8
    // need their high 2 bits from the top of bytes 0..8.
    let scales = [1.0, 2.0, 3.0, 4.0, 17.0, 33.0, 50.0, 63.0];
    let mins = [0.0, 1.0, 2.0, 3.0, 20.0, 40.0, 5.0, 63.0];
    let packed = [
        0x41, 0x82, 0xc3, 0xc4, 0x40, 0x81, 0x02, 0xc3, 0x41, 0x81, 0x52, 0xff,
    ];
    let qs: Vec<u8> = (0..128)
        .map(|i| (i % 16) as u8 | ((15 - (i % 16) as u8) << 4))
        .collect();
    let block = [h(1.0).as_slice(), &h(0.5), &packed, &qs].concat();
    assert_eq!(block.len(), 144);
    let x = dequantize(GgmlType::Q4_K, &block).unwrap();
    // Worked by hand: element 33 is chunk 0's high nibble of byte 1 (14) with pair 1 (2, 1);
    // element 133 the low nibble of byte 69 (5) with pair 4 (17, 20); element 255 the high
    // nibble of byte 127 (0) with pair 7 (63, 63).
    assert_eq!(x[0], 0.0);
    assert_eq!(x[33], 2.0 * 14.0 - 0.5 * 1.0);
    assert_eq!(x[133], 17.0 * 5.0 - 0.5 * 20.0);
    assert_eq!(x[255], -0.5 * 63.0);
    for (e, v) in x.iter().enumerate() {
        let (chunk, l) = (e / 64, e % 64);
        let byte = qs[32 * chunk + l % 32];
        let (q, pair) = if l < 32 {
            (byte & 15, 2 * chunk)
        } else {
            (byte >> 4, 2 * chunk + 1)
        };
        assert_eq!(
            *v,
            scales[pair] * f32::from(q) - 0.5 * mins[pair],
            "element {e}"
        );
    }
}

#[test]
fn q6_k_block() {
    // d = 0.5, scales k - 8, low nibbles from bytes 0..128 = their index, every high-bits byte
    // 0b11_10_01_00 (quarter t of each 128 gets high bits t).
    let ql: Vec<u8> = (0..128).collect();
    let qh = [0xe4u8; 64];
    let sc: Vec<u8> = (0..16).map(|k| (k as i8 - 8) as u8).collect();
    let block = [ql.as_slice(), &qh, &sc, &h(0.5)].concat();
    assert_eq!(block.len(), 210);
    let x = dequantize(GgmlType::Q6_K, &block).unwrap();
    // Worked by hand: element 0 = 0.5 * -8 * (0 - 32); element 33 = 0.5 * -6 * ((1 | 16) - 32);
    // element 81 = 0.5 * -3 * ((1 | 32) - 32); element 255 = 0.5 * 7 * ((7 | 48) - 32).
    assert_eq!(x[0], 128.0);
    assert_eq!(x[33], 45.0);
    assert_eq!(x[81], -1.5);
    assert_eq!(x[255], 80.5);
    for (e, v) in x.iter().enumerate() {
        let (half, r) = (e / 128, e % 128);
        let (quarter, l) = (r / 32, r % 32);
        let low = ql[64 * half + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1)) & 15;
        let high = (qh[32 * half + l] >> (2 * quarter)) & 3;
        let q = i32::from(low | (high << 4)) - 32;
        let scale = sc[8 * half + l / 16 + 2 * quarter] as i8;
        assert_eq!(*v, 0.5 * f32::from(scale) * q as f32, "element {e}");
    }
}

fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.metadata(
        "general.architecture",
        MetadataValue::String("llama".into()),
    )
    .metadata("a.u8", MetadataValue::U8(7))
    .metadata("a.i8", MetadataValue::I8(-7))
    .metadata("a.u16", MetadataValue::U16(65535))
    .metadata("a.i16", MetadataValue::I16(-300))
    .metadata("a.u32", MetadataValue::U32(1 << 31))
    .metadata("a.i32", MetadataValue::I32(-5))
    .metadata("a.f32", MetadataValue::F32(1e-5))
    .metadata("a.bool", MetadataValue::Bool(true))
    .metadata("a.u64", MetadataValue::U64(u64::MAX))
    .metadata("a.i64", MetadataValue::I64(i64::MIN))
    .metadata("a.f64", MetadataValue::F64(0.1))
    .metadata("a.strings", MetadataValue::string_array(["x", "ÿ é", ""]))
    .metadata(
        "a.nested",
        MetadataValue::Array(MetadataArray {
            element_type: 9,
            values: vec![
                MetadataValue::i32_array([1, 2]),
                MetadataValue::i32_array([]),
            ],
        }),
    );
    let ramp = |n: usize| {
        (0..n)
            .map(|i| (i as f32 - n as f32 / 2.0) / 16.0)
            .collect::<Vec<_>>()
    };
    w.tensor(WriteTensor {
        name: "t.f32".into(),
        dims: vec![3, 2],
        ty: GgmlType::F32,
        values: ramp(6),
    })
    .tensor(WriteTensor {
        name: "t.f16".into(),
        dims: vec![5],
        ty: GgmlType::F16,
        values: ramp(5),
    })
    .tensor(WriteTensor {
        name: "t.q8_0".into(),
        dims: vec![64, 2],
        ty: GgmlType::Q8_0,
        values: ramp(128),
    })
    .tensor(WriteTensor {
        name: "t.q4_1".into(),
        dims: vec![32, 3],
        ty: GgmlType::Q4_1,
        values: ramp(96),
    });
    w
}

#[test]
fn writer_reader_round_trip() {
    let path = temp_path("round_trip.gguf");
    let w = sample_writer();
    w.write(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.alignment, 32);
    assert_eq!(file.data_offset % 32, 0);
    assert_eq!(file.get("a.u8"), Some(&MetadataValue::U8(7)));
    assert_eq!(file.get("a.i8"), Some(&MetadataValue::I8(-7)));
    assert_eq!(file.get("a.u16"), Some(&MetadataValue::U16(65535)));
    assert_eq!(file.get("a.i16"), Some(&MetadataValue::I16(-300)));
    assert_eq!(file.get("a.u32"), Some(&MetadataValue::U32(1 << 31)));
    assert_eq!(file.get("a.i32"), Some(&MetadataValue::I32(-5)));
    assert_eq!(file.get("a.f32"), Some(&MetadataValue::F32(1e-5)));
    assert_eq!(file.get("a.bool"), Some(&MetadataValue::Bool(true)));
    assert_eq!(file.get("a.u64"), Some(&MetadataValue::U64(u64::MAX)));
    assert_eq!(file.get("a.i64"), Some(&MetadataValue::I64(i64::MIN)));
    assert_eq!(file.get("a.f64"), Some(&MetadataValue::F64(0.1)));
    assert_eq!(
        file.require_string_array("a.strings", "test").unwrap(),
        ["x", "ÿ é", ""]
    );
    assert_eq!(file.require_array("a.nested", "test").unwrap().len(), 2);
    assert_eq!(
        file.require_str("general.architecture", "test").unwrap(),
        "llama"
    );

    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["t.f32", "t.f16", "t.q8_0", "t.q4_1"]);
    let info = file.tensor_info("t.q8_0").unwrap();
    assert_eq!(
        (info.dims.as_slice(), info.ty, info.size),
        (&[64u64, 2][..], GgmlType::Q8_0, 4 * 34)
    );
    let ramp = |n: usize| {
        (0..n)
            .map(|i| (i as f32 - n as f32 / 2.0) / 16.0)
            .collect::<Vec<_>>()
    };
    assert_eq!(file.read_tensor_f32("t.f32").unwrap(), ramp(6));
    // The ramp's steps of 1/16 are exact in f16; the quantised types are within half a step.
    assert_eq!(file.read_tensor_f32("t.f16").unwrap(), ramp(5));
    for (name, n, step) in [
        ("t.q8_0", 128, 4.0 / 127.0),
        ("t.q4_1", 96, 31.0 / 16.0 / 15.0),
    ] {
        let got = file.read_tensor_f32(name).unwrap();
        for (g, e) in got.iter().zip(ramp(n)) {
            assert!((g - e).abs() <= step * 0.5 + 1e-3, "{name}: {g} vs {e}");
        }
    }
    // The writer is deterministic.
    assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes().unwrap());
}

/// A model written tensor by tensor through a spill file is byte for byte the one built in
/// memory, and the spill file is gone afterwards.
#[test]
fn spilled_synthetic_model_equals_the_in_memory_one() {
    use ttmesh_models::synthetic::{synthetic_llama, write_synthetic_llama, SyntheticConfig};
    let cfg = SyntheticConfig::heads_9_kv_3();
    let path = temp_path("spilled.gguf");
    write_synthetic_llama(&path, &cfg).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        synthetic_llama(&cfg).to_bytes().unwrap()
    );
    let mut spill = path.as_os_str().to_owned();
    spill.push(".data");
    assert!(
        !Path::new(&spill).exists(),
        "the spill file was left behind"
    );
}

fn open_bytes(name: &str, bytes: &[u8]) -> (TempFile, Result<GgufFile, ModelError>) {
    let path = temp_path(name);
    std::fs::write(&path, bytes).unwrap();
    let r = GgufFile::open(&path);
    (path, r)
}

fn message_names(err: &ModelError, path: &Path, what: &str) -> String {
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "{msg} does not name the file"
    );
    assert!(msg.contains(what), "{msg} does not name {what}");
    msg
}

#[test]
fn every_truncation_is_an_error_naming_the_file() {
    let bytes = sample_writer().to_bytes().unwrap();
    let path = temp_path("truncated.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let whole = GgufFile::open(&path).unwrap();
    let header_end = whole.data_offset as usize;
    // The writer pads after the last tensor too; cutting only that padding loses nothing.
    let data_end = whole
        .tensors()
        .iter()
        .map(|t| header_end + (t.offset + t.size) as usize)
        .max()
        .unwrap();
    // Every cut inside the header and a sample of cuts inside the data.
    let cuts = (0..header_end)
        .chain((header_end..data_end).step_by(7))
        .chain([data_end - 1]);
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let err = GgufFile::open(&path).expect_err("a truncated file must not open");
        let msg = err.to_string();
        assert!(
            msg.contains(&path.display().to_string()),
            "cut {cut}: {msg}"
        );
        assert!(
            matches!(
                err,
                ModelError::Truncated { .. } | ModelError::NotGguf { .. }
            ),
            "cut {cut}: {err:?}"
        );
    }
    // A cut in the data names the tensor whose data is missing.
    std::fs::write(&path, &bytes[..data_end - 1]).unwrap();
    let err = GgufFile::open(&path).unwrap_err();
    message_names(&err, &path, "tensor t.q4_1");
}

#[test]
fn not_gguf_and_wrong_version() {
    let (path, r) = open_bytes("not.gguf", b"PK\x03\x04 this is a zip file");
    let err = r.unwrap_err();
    assert!(matches!(err, ModelError::NotGguf { .. }));
    message_names(&err, &path, "not a GGUF file");

    let (path, r) = open_bytes("empty.gguf", b"");
    message_names(&r.unwrap_err(), &path, "not a GGUF file");

    let mut bytes = sample_writer().to_bytes().unwrap();
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    let (path, r) = open_bytes("v1.gguf", &bytes);
    message_names(&r.unwrap_err(), &path, "version 1");

    let missing = temp_path("does-not-exist.gguf");
    let err = GgufFile::open(&missing).unwrap_err();
    assert!(matches!(err, ModelError::Io { .. }));
    message_names(&err, &missing, "cannot read");
}

/// Offset of the first occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

#[test]
fn unsupported_tensor_type_names_the_tensor_and_type() {
    let mut bytes = sample_writer().to_bytes().unwrap();
    // The tensor info after the name "t.f16": n_dims (4), dim (8), then the type id.
    let at = find(&bytes, b"t.f16") + 5 + 4 + 8;
    bytes[at..at + 4].copy_from_slice(&13u32.to_le_bytes()); // Q5_K
    let (path, r) = open_bytes("q5k.gguf", &bytes);
    let err = r.unwrap_err();
    assert!(
        matches!(err, ModelError::UnsupportedTensorType { type_id: 13, .. }),
        "{err:?}"
    );
    let msg = message_names(&err, &path, "tensor t.f16");
    assert!(msg.contains("Q5_K"), "{msg}");
}

#[test]
fn lying_sizes_are_refused_before_allocating() {
    let good = sample_writer().to_bytes().unwrap();

    // An array claiming 2^60 strings.
    let mut bytes = good.clone();
    let at = find(&bytes, b"a.strings") + 9 + 4 + 4; // key, value type, element type
    bytes[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let (path, r) = open_bytes("huge_array.gguf", &bytes);
    message_names(&r.unwrap_err(), &path, "metadata a.strings");

    // A string claiming u64::MAX bytes.
    let mut bytes = good.clone();
    let at = find(&bytes, b"general.architecture") + 20 + 4;
    bytes[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let (path, r) = open_bytes("huge_string.gguf", &bytes);
    message_names(&r.unwrap_err(), &path, "metadata general.architecture");

    // A tensor whose dims overflow, and one whose data lies past the end of the file.
    let mut bytes = good.clone();
    let at = find(&bytes, b"t.f32") + 5 + 4;
    bytes[at..at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let (path, r) = open_bytes("huge_dims.gguf", &bytes);
    message_names(&r.unwrap_err(), &path, "t.f32");

    let mut bytes = good.clone();
    let at = find(&bytes, b"t.q8_0") + 6 + 4 + 16 + 4; // name, n_dims, 2 dims, type
    bytes[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let (path, r) = open_bytes("far_offset.gguf", &bytes);
    let err = r.unwrap_err();
    assert!(matches!(err, ModelError::Truncated { .. }), "{err:?}");
    message_names(&err, &path, "tensor t.q8_0");

    // Millions of tensor infos claimed by a tiny file.
    let mut bytes = good;
    bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let (path, r) = open_bytes("many_tensors.gguf", &bytes);
    message_names(&r.unwrap_err(), &path, "tensor");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Any corruption of a valid file's bytes opens and reads as data or as an error: never a
    /// panic, never an allocation the file's size does not justify.
    #[test]
    fn corrupted_files_never_panic(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = sample_writer().to_bytes().unwrap();
        // Most edits land in the header, where the lengths are.
        let header = 620.min(bytes.len());
        for (at, value) in edits {
            let i = at.index(header);
            bytes[i] = value;
        }
        let path = temp_path(&format!("corrupt-{}.gguf", std::thread::current().name().unwrap_or("t").replace("::", "-")));
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(file) = GgufFile::open(&path) {
            let elements: u64 = file.tensors().iter().map(|t| t.element_count()).sum();
            prop_assert!(elements <= 8 * bytes.len() as u64);
            for t in file.tensors() {
                let values = file.read_tensor_f32(&t.name).unwrap();
                prop_assert_eq!(values.len() as u64, t.element_count());
            }
        }
    }
}
