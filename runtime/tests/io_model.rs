//! The host I/O model against the seed's arithmetic (reference/user-features.md §5): Rx per
//! run = elements × dtype bytes × micro-batches, halved by 8-bit input.

use ipusim_compiler::{build, BuildOptions};
use ipusim_ir::text::load_program;
use ipusim_runtime::io_model::HostIoModel;
use ipusim_runtime::report::human_bytes;
use std::path::Path;

fn model(name: &str) -> HostIoModel {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/programs/run")
        .join(name);
    let program = load_program(&path).unwrap();
    let exe = build(&program, &BuildOptions::default())
        .unwrap()
        .executable;
    HostIoModel::new(&exe, 3)
}

#[test]
fn rx_is_elements_times_dtype_bytes_times_micro_batches() {
    let images = 64 * 3 * 64 * 64;
    let labels = 64 * 4 * 3;
    let f16 = model("seed_io_f16.ron");
    let s = f16.stream("images").unwrap();
    assert_eq!((s.direction.as_str(), s.dtype.as_str()), ("rx", "f16"));
    assert_eq!(s.copies_per_run, 3, "gradient accumulation 3");
    assert_eq!(s.bytes_per_run, images * 2 * 3);
    assert_eq!(human_bytes(s.bytes_per_run), "4.5 MB", "the seed's IPU0 Rx");
    assert_eq!(f16.stream("labels").unwrap().bytes_per_run, labels);
    assert_eq!(human_bytes(labels), "768 B");
    assert_eq!(f16.rx_bytes_per_run, images * 2 * 3 + labels);
    assert_eq!(f16.ipus[0].rx, f16.rx_bytes_per_run);
    assert_eq!(f16.tx_bytes_per_run, 3 * 4, "one f32 loss per micro-batch");
    assert_eq!(s.host_buffer_bytes, images * 2 * 3, "prefetch depth 3");

    let u8 = model("seed_io_u8.ron");
    let s = u8.stream("images").unwrap();
    assert_eq!(s.dtype, "u8");
    assert_eq!(
        s.bytes_per_run * 2,
        f16.stream("images").unwrap().bytes_per_run
    );
    assert_eq!(u8.rx_bytes_per_run, images * 3 + labels);
    // StreamCopy cycles scale with the bytes on the host link.
    assert!(s.cycles_per_run < f16.stream("images").unwrap().cycles_per_run);
}
