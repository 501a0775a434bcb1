//! `custos verify` on arbitrary bytes: the sealed-stream verifier
//! (crates/custos-seal `Verifier`) is fed the input's lines as the command
//! feeds them (crates/custos/src/verify.rs: `read_until(b'\n')`, the newline
//! kept, the last line maybe without one) and must return a report, never
//! panic. A report that calls the stream intact must have verified a seal:
//! an unsealed stream is never "intact".
#![no_main]

use custos_seal::Verifier;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut v = Verifier::new(None).expect("no pinned key");
    for line in data.split_inclusive(|&b| b == b'\n') {
        v.line(line);
    }
    let report = v.finish();
    if report.intact {
        assert!(report.batches_verified > 0, "{report:?}");
    }
    // The report is what `--json` prints.
    let _ = format!("{report:?}");
});
