//! libFuzzer target `compile`: drives `ipusim::fuzzing::compile` (see that module for the input
//! format); run with `cargo fuzz run compile`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::compile(data);
});
