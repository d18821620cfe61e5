//! Writing and reading a checkpoint costs memory in proportion to its text and its largest
//! variable, not a tree of JSON values for every element: a checkpoint of a large model
//! (ResNet-50 with its momentum, 51 million values) took 12.7 GB to write through such a
//! tree and could not be read back. Here the heap's peak while writing 2 million FP16
//! values in 16 variables stays under twice the text plus the largest variable's values as
//! f64 (a tree costs 32 bytes an element, here several times the text), and while reading
//! them back under the tensors read plus the largest variable's tree.
//!
//! The heap is measured by a counting allocator (`tests/common/counting_alloc.rs`), so the
//! figures are exact and do not depend on the machine; this file holds one test so that no
//! other test allocates meanwhile.

use half::f16;
use ipusim_runtime::checkpoint::Checkpoint;
use ipusim_sim::tensor::Tensor;
#[path = "../../tests/common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{peak_of, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const VARIABLES: usize = 16;
const ELEMENTS: usize = 1 << 17;

#[test]
fn checkpoints_are_written_and_read_without_a_tree_of_every_element() {
    // Quarters from -8 to 8: a few characters each in the text.
    let variables: Vec<(String, Tensor)> = (0..VARIABLES)
        .map(|v| {
            let values = (0..ELEMENTS)
                .map(|i| f16::from_f32(((i * 7 + v) % 65) as f32 * 0.25 - 8.0))
                .collect();
            let shape = [ELEMENTS / 64, 8, 8];
            (
                format!("layer{v}.weight"),
                Tensor::f16(shape, values).unwrap(),
            )
        })
        .collect();
    let c = Checkpoint {
        program: "big".into(),
        precision: Some("16.16".into()),
        variables,
    };
    let (written, text) = peak_of(|| serde_json::to_string(&c).unwrap());
    let total = VARIABLES * ELEMENTS;
    let tree = 32 * total;
    let bound = 2 * text.len() + 8 * ELEMENTS + (64 << 10);
    assert!(
        written <= bound && bound < tree,
        "writing {} bytes of text took {written} bytes of heap (bound {bound}; a tree {tree})",
        text.len()
    );

    let (read, back) = peak_of(|| Checkpoint::parse(&text, "big.json").unwrap());
    // The tensors read (2 bytes an element, their names and vectors) and one variable's tree
    // of values (32 bytes an element and its arrays).
    let bound = 2 * total + 48 * ELEMENTS + (64 << 10);
    assert!(
        read <= bound && bound < tree,
        "reading {} bytes of text took {read} bytes of heap (bound {bound}; a tree {tree})",
        text.len()
    );
    assert_eq!(back, c);
}
