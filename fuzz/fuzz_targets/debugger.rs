//! libFuzzer target `debugger`: drives `ipusim::fuzzing::debugger` (see that module for the input
//! format); run with `cargo fuzz run debugger`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::debugger(data);
});
