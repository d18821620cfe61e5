//! libFuzzer target `report`: drives `ipusim::fuzzing::report` (see that module for the input
//! format); run with `cargo fuzz run report`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::report(data);
});
