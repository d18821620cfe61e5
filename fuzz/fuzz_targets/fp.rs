//! libFuzzer target `fp`: drives `ipusim::fuzzing::fp` (see that module for the input
//! format); run with `cargo fuzz run fp`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::fp(data);
});
