//! The NCCL line parser and the streaming analyzer on arbitrary bytes: no panic, no unbounded memory.
//! `cargo fuzz run nccl_line` (or, on a stable toolchain, `cargo fuzz run -s none nccl_line`).

#![no_main]

use fabric_preflight::nccl::{self, line, Analyzer, Reader};
use fabric_preflight::profile::NcclExpect;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Each line on its own, as the parser sees it.
    let text = String::from_utf8_lossy(data);
    for l in text.split('\n') {
        line::parse_line(l, |_| {});
    }
    // The whole input as a log, through the block reader (line splitting, caps, line numbers).
    let (mut reader, mut analyzer) = (Reader::new(), Analyzer::new());
    if reader.read(&mut analyzer, "fuzz", data, None).is_ok() {
        let summary = analyzer.finish(reader.into_input());
        for expect in [NcclExpect::Gdrdma, NcclExpect::Socket, NcclExpect::Any] {
            let _ = nccl::judge(&summary, expect);
        }
        let _ = nccl::advice_for(&summary);
    }
});
