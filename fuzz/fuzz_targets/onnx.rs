//! libFuzzer target `onnx`: drives `ipusim::fuzzing::onnx` (an ONNX model's bytes); run
//! with `cargo fuzz run onnx`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ipusim::fuzzing::onnx(data);
});
