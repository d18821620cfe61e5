//! libFuzzer target `csv`: drives `ipusim::fuzzing::csv` (see that module for the input
//! format); run with `cargo fuzz run csv`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::csv(data);
});
