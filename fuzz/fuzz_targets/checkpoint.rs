//! libFuzzer target `checkpoint`: drives `ipusim::fuzzing::checkpoint` (see that module for the input
//! format); run with `cargo fuzz run checkpoint`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::checkpoint(data);
});
