//! libFuzzer target `program`: drives `ipusim::fuzzing::program` (see that module for the input
//! format); run with `cargo fuzz run program`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::program(data);
});
