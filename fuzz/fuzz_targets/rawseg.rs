//! The raw-segment codec (crates/custos-store/src/rawseg.rs):
//! - round trip: the lines kept in a segment (events cut by shape or kept
//!   whole, other lines whole) read back from its sealed blob exactly, in
//!   the order `lines` promises (events as applied, then the others);
//! - the reader on arbitrary segment bytes (a store's blob is untrusted
//!   input to `custos verify --db` and the queries): an error, never a panic.
#![no_main]

use custos_store::rawseg::{lines, SegmentBuilder};
use custos_store::record::{parse_line, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        // The reader on arbitrary plain bytes, compressed as a blob is.
        if let Ok(blob) = zstd::bulk::compress(rest, 1) {
            let _ = lines(&blob);
            let _ = custos_store::rawseg::event_line(&blob, 1, 1);
        }
        return;
    }
    let text = String::from_utf8_lossy(rest);
    let mut b = SegmentBuilder::default();
    let (mut events, mut others) = (Vec::new(), Vec::new());
    let mut ids = std::collections::HashSet::new();
    for line in text.split('\n') {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        // As the ingest keeps them (ingest.rs): an event once per id, the
        // other records whole, rejects not at all.
        match parse_line(line) {
            Ok(Record::Event(e, _)) => {
                if ids.insert(e.id) {
                    b.keep_event(1, e.id, line);
                    events.push(line.to_string());
                }
            }
            Ok(Record::Loss(_) | Record::Other(_)) => {
                b.keep_other(line);
                others.push(line.to_string());
            }
            _ => {}
        }
    }
    if b.is_empty() {
        return;
    }
    let (blob, n, _runs) = b.seal().expect("sealing a segment");
    events.extend(others);
    assert_eq!(n as usize, events.len());
    assert_eq!(lines(&blob).expect("reading a sealed segment"), events);
});
