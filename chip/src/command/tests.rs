use super::*;
use proptest::prelude::*;

#[test]
fn round_trip_every_record() {
    let mut e = Encoder::new();
    e.write_linear(MemSpace::L1, 7, 0x1000, &[1, 2, 3]);
    e.write_paged(MemSpace::Dram, 4, &[(0, 64), (1, 64)], &[9; 8]);
    e.launch(42, 64, &[0xAB; 100], 3, &(0..192).collect::<Vec<u32>>());
    e.read_paged(77, MemSpace::Dram, 2048, &[(5, 0x100040)]);
    e.simple(Opcode::RecordEvent, 0, 5);
    e.simple(Opcode::WaitEvent, 1, 4);
    e.exec_buf(3, 0x3FF0_0000, 12, 24, 98304);
    e.discard(MemSpace::L1, 0x20000, 4096);
    e.simple(Opcode::ExecBufEnd, 0, 0);
    assert_eq!(e.len() % 16, 0);
    let recs: Vec<Record> = RecordIter::new(&e.bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.len(), 11);
    assert_eq!(
        recs[0],
        Record::WriteLinear {
            space: MemSpace::L1,
            bank: 7,
            addr: 0x1000,
            data: &[1, 2, 3]
        }
    );
    match recs[1] {
        Record::WritePaged {
            page_size: 4,
            locations,
            data,
            ..
        } => {
            assert_eq!(locations.iter().collect::<Vec<_>>(), vec![(0, 64), (1, 64)]);
            assert_eq!(data, &[9; 8]);
        }
        ref r => panic!("{r:?}"),
    }
    assert_eq!(
        recs[2],
        Record::LaunchProgram {
            program_id: 42,
            cores: 64,
            config: &[0xAB; 100]
        }
    );
    match recs[3] {
        Record::WritePacked {
            program_id: 42,
            args_per_core: 3,
            args,
        } => {
            assert_eq!(decode::packed_arg(args, 191), Some(191));
        }
        ref r => panic!("{r:?}"),
    }
    assert_eq!(recs[4], Record::GoSignal { program_id: 42 });
    assert!(matches!(
        recs[5],
        Record::ReadPaged {
            handle: 77,
            page_size: 2048,
            ..
        }
    ));
    assert_eq!(recs[6], Record::RecordEvent { event: 5 });
    assert_eq!(recs[7], Record::WaitEvent { cq: 1, event: 4 });
    assert_eq!(
        recs[8],
        Record::ExecBuf {
            trace_id: 3,
            address: 0x3FF0_0000,
            log2_page_size: 12,
            num_pages: 24,
            size: 98304
        }
    );
    assert_eq!(
        recs[9],
        Record::Discard {
            space: MemSpace::L1,
            address: 0x20000,
            size: 4096
        }
    );
    assert_eq!(recs[10], Record::ExecBufEnd);
}

#[test]
fn malformed_records_are_errors() {
    assert!(decode(&[0xFFu8; 16], 0)
        .unwrap_err()
        .to_string()
        .contains("unknown opcode"));
    assert!(decode(&[1u8; 8], 0)
        .unwrap_err()
        .to_string()
        .contains("truncated header"));
    let mut e = Encoder::new();
    e.write_linear(MemSpace::Dram, 0, 0, &[0; 40]);
    assert!(decode(&e.bytes[..40], 0)
        .unwrap_err()
        .to_string()
        .contains("runs past the end"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    /// The decoder is a fuzz target: arbitrary bytes never panic or read out of bounds.
    #[test]
    fn decoder_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for r in RecordIter::new(&bytes) {
            if let Ok(Record::WritePaged { locations, .. }) | Ok(Record::ReadPaged { locations, .. }) = r {
                let _ = locations.iter().count();
            }
        }
    }

    /// Garbage with a valid opcode and plausible length exercises deeper paths.
    #[test]
    fn decoder_survives_plausible_headers(op in 1u8..=0x0F, aux in any::<u16>(), len in 0u32..200, arg in any::<u64>(),
                                          tail in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut b = vec![op, 0];
        b.extend_from_slice(&aux.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&arg.to_le_bytes());
        b.extend_from_slice(&tail);
        let _ = RecordIter::new(&b).count();
    }
}
