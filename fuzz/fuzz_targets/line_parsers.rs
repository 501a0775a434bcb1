//! Differential target of the store's three readings of a stream line
//! (crates/custos-store/src/record.rs): the fast path (fastline.rs), the
//! serde parse, and the read by shape (shapeline.rs, through the raw
//! segment's cut, rawseg.rs).
//!
//! What the code promises, and so what is asserted:
//! - The fast path may give up on any line (then serde decides), but a line
//!   it reads, serde reads, and reads the same (fastline.rs's header).
//! - A line read by shape is read exactly as `parse_line` reads it: the same
//!   record, or the same error; and an event's held line is the one `cut`
//!   makes (rawseg.rs `read_by_shape`). It may decline a line (None).
//! Whether a line is read at all is free to differ; what is read is not.
#![no_main]

use custos_store::rawseg::SegmentBuilder;
use custos_store::record::{fast_and_serde, parse_line, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks how shapes are registered: as the ingest does
    // (events only) or for every line (more plans built and tried).
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut b = SegmentBuilder::default();
    for line in text.split('\n') {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        if let (Some(fast), serde) = fast_and_serde(line) {
            assert_eq!(Some(fast), serde, "fast path misread {line:?}");
        }
        let parsed = parse_line(line);
        let event = matches!(parsed, Ok(Record::Event(..)));
        match b.read_by_shape(line) {
            Some((rec, held)) => {
                assert_eq!(
                    format!("{rec:?}"),
                    format!("{parsed:?}"),
                    "read by shape differently: {line:?}"
                );
                assert_eq!(held.is_some(), event, "{line:?}");
                if let Some(h) = held {
                    assert_eq!(format!("{h:?}"), format!("{:?}", b.cut(line)), "{line:?}");
                }
            }
            None if event || mode & 1 == 1 => drop(b.cut(line)),
            None => {}
        }
    }
});
