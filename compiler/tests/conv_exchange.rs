//! Laws of a compiled convolution's exchange: a split reduction of 16 partials or more is
//! summed in PopLibs' stages (`poplin/ConvReducePlan.cpp`), so that no reducing tile
//! receives a message from every partial; and a forward convolution whose weight blocks are
//! each read by one tile reads its weights where they are laid out (PopLibs'
//! `createWeights`), with no exchange of them, and one whose weight blocks are broadcast has
//! them laid out in its input-gradient pass's blocks, each pass gathering them in one
//! message per source tile; and a feature map holds the batch inside each channel group
//! (PopLibs' `createInput`).

use ipusim_compiler::codelets::VertexParams;
use ipusim_compiler::{compile, CompileOptions, CompileReport, Executable, Target};
use ipusim_ir::{DType, GraphBuilder, Init, Op};
use std::collections::{BTreeMap, BTreeSet};

/// An unstrided, unpadded, ungrouped convolution (its kernel's size is its weights').
fn plain_conv() -> Op {
    Op::Conv2d {
        stride: vec![],
        padding: vec![],
        dilation: vec![],
        groups: 1,
    }
}

/// `x[1, c, f, f] * w[o, c, 1, 1]` (named `y`) compiled for mk2 in FP16.
fn conv_1x1(c: usize, o: usize, f: usize) -> Executable {
    let mut b = GraphBuilder::new();
    let x = b
        .variable("x", DType::F16, [1, c, f, f], Init::Zeros)
        .unwrap();
    let w = b
        .variable("w", DType::F16, [o, c, 1, 1], Init::Zeros)
        .unwrap();
    let y = b.named("y", plain_conv(), &[x, w]).unwrap();
    b.outfeed("y", y).unwrap();
    compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap()
}

/// The forward row of the report: the reduction split and the rows split.
fn forward_splits(exe: &Executable) -> (u32, u32) {
    let report = CompileReport::new("conv", None, exe);
    let row = report
        .convolutions
        .iter()
        .find(|c| c.pass == "Forward")
        .expect("a forward row");
    (row.reduction_split, row.partition[3])
}

/// The most source tiles any destination tile of exchange `name` receives from.
fn max_sources(exe: &Executable, name: &str) -> usize {
    let ex = exe
        .exchanges
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no exchange {name}"));
    let mut from: BTreeMap<_, BTreeSet<_>> = BTreeMap::new();
    for c in &ex.copies {
        for d in &c.dsts {
            if d.tile != c.src_tile {
                from.entry(d.tile).or_default().insert(c.src_tile);
            }
        }
    }
    from.values().map(BTreeSet::len).max().unwrap_or(0)
}

#[test]
fn a_deep_reduction_is_summed_in_stages_of_few_messages() {
    // 2048 input channels into 8 outputs of 2x2: almost all of the work is the reduction.
    let exe = conv_1x1(2048, 8, 2);
    let (red, _) = forward_splits(&exe);
    assert!(
        red >= 16,
        "reduction split {red}: the case needs 16 partials or more"
    );
    let staged = exe
        .exchanges
        .iter()
        .any(|e| e.name == "y/reduce_stage0/exchange");
    assert!(staged, "no intermediate stage for {red} partials");
    // Single-stage, every reducing tile would hear from the other red - 1 partial tiles.
    let (first, last) = (
        max_sources(&exe, "y/reduce_stage0/exchange"),
        max_sources(&exe, "y/reduce/exchange"),
    );
    eprintln!("{red} partials: at most {first} then {last} sources per tile");
    assert!(first < red as usize - 1 && last < red as usize - 1);
    // A shallow reduction is summed in one stage, as before.
    let shallow = conv_1x1(64, 8, 2);
    let (red, _) = forward_splits(&shallow);
    assert!(red < 16, "reduction split {red}");
    assert!(!shallow
        .exchanges
        .iter()
        .any(|e| e.name.contains("reduce_stage")));
}

/// The bytes of the weights `w` that the exchanges move (per destination).
fn weight_bytes_moved(exe: &Executable) -> u64 {
    let w = exe
        .tensors
        .iter()
        .position(|t| t.name == "w")
        .expect("the weights' tensor");
    exe.exchanges
        .iter()
        .flat_map(|e| &e.copies)
        .filter(|c| c.src_tensor.0 as usize == w)
        .map(|c| u64::from(c.bytes) * c.dsts.len() as u64)
        .sum()
}

#[test]
fn weights_read_by_one_tile_each_are_laid_out_where_they_are_read() {
    // A small field: no rows split, so every weight block is read by one tile.
    let exe = conv_1x1(512, 512, 2);
    let (_, rows) = forward_splits(&exe);
    assert_eq!(rows, 1, "the case needs the field unsplit");
    assert_eq!(weight_bytes_moved(&exe), 0);
    // A large field is split by rows: its weight blocks are broadcast to every row's tile
    // from the default layout (owning them on one reader would pile its sends there).
    let exe = conv_1x1(256, 256, 56);
    let (_, rows) = forward_splits(&exe);
    assert!(rows > 1, "the case needs the rows split");
    assert!(weight_bytes_moved(&exe) > 0);
}

/// `y2 = w2 * relu(w1 * x)` for `x[n, 256, 2, 2]`, 1×1 convolutions of 256 channels, FP16.
fn conv_chain(n: usize) -> Executable {
    let (c, f) = (256usize, 2usize);
    let mut b = GraphBuilder::new();
    let x = b
        .variable("x", DType::F16, [n, c, f, f], Init::Zeros)
        .unwrap();
    let conv = plain_conv;
    let w1 = b
        .variable("w1", DType::F16, [c, c, 1, 1], Init::Zeros)
        .unwrap();
    let w2 = b
        .variable("w2", DType::F16, [c, c, 1, 1], Init::Zeros)
        .unwrap();
    let y1 = b.named("y1", conv(), &[x, w1]).unwrap();
    let r = b.named("r", Op::Relu, &[y1]).unwrap();
    let y2 = b.named("y2", conv(), &[r, w2]).unwrap();
    b.outfeed("y2", y2).unwrap();
    compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap()
}

#[test]
fn a_feature_map_holds_the_batch_inside_each_channel_group() {
    // PopLibs' `createInput` layout, `[C/g][N][H][W][g]`: the images of a channel group are
    // one run (`plane_rect`'s unit tests count the regions a block reads from it), and the
    // relu between the convolutions keeps its producer's groups.
    let exe = conv_chain(8);
    let v = exe.value("r").expect("the relu's value");
    assert!(
        v.group > 1,
        "the relu keeps its convolution's channel groups"
    );
    let t = exe.tensor(v.tensor.expect("a tensor"));
    let g = v.group as usize;
    assert_eq!(t.shape.dims(), &[256 / g, 8, 2, 2, g]);
}

/// `y = w * x` and its input gradient `dx = Conv2dInputGrad(dy, w)` for `w[o, c, 3, 3]`,
/// with `x[n, c, f, f]` and `dy[n, o, f, f]` outputs of 1×1 convolutions (held in channel
/// groups, as a network's feature maps and their gradients are), FP16: a training step's
/// two passes reading the weights.
fn conv_and_input_grad(n: usize, c: usize, o: usize, f: usize) -> Executable {
    let mut b = GraphBuilder::new();
    let pointwise = |b: &mut GraphBuilder, name: &str, chans: usize| {
        let x0 = b
            .variable(
                &format!("{name}0"),
                DType::F16,
                [n, chans, f, f],
                Init::Zeros,
            )
            .unwrap();
        let w0 = b
            .variable(
                &format!("w_{name}"),
                DType::F16,
                [chans, chans, 1, 1],
                Init::Zeros,
            )
            .unwrap();
        b.named(name, plain_conv(), &[x0, w0]).unwrap()
    };
    let x = pointwise(&mut b, "x", c);
    let dy = pointwise(&mut b, "dy", o);
    let w = b
        .variable("w", DType::F16, [o, c, 3, 3], Init::Zeros)
        .unwrap();
    let (stride, padding, dilation) = (vec![1, 1], vec![1, 1, 1, 1], vec![1, 1]);
    let conv = Op::Conv2d {
        stride: stride.clone(),
        padding: padding.clone(),
        dilation: dilation.clone(),
        groups: 1,
    };
    let y = b.named("y", conv, &[x, w]).unwrap();
    let grad = Op::Conv2dInputGrad {
        stride,
        padding,
        dilation,
        groups: 1,
        input_size: vec![f, f],
    };
    let dx = b.named("dx", grad, &[dy, w]).unwrap();
    b.outfeed("y", y).unwrap();
    b.outfeed("dx", dx).unwrap();
    compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap()
}

/// For each exchange that moves the weights `w`: the most messages of them and the most
/// source tiles of them any destination tile receives.
fn weight_messages(exe: &Executable) -> BTreeMap<String, (usize, usize)> {
    let w = exe.tensors.iter().position(|t| t.name == "w").unwrap();
    let mut out = BTreeMap::new();
    for ex in &exe.exchanges {
        let mut per: BTreeMap<_, (usize, BTreeSet<_>)> = BTreeMap::new();
        for c in ex.copies.iter().filter(|c| c.src_tensor.0 as usize == w) {
            for d in c.dsts.iter().filter(|d| d.tile != c.src_tile) {
                let e = per.entry(d.tile).or_default();
                e.0 += 1;
                e.1.insert(c.src_tile);
            }
        }
        if !per.is_empty() {
            let most = per.values().map(|p| p.0).max().unwrap_or(0);
            let sources = per.values().map(|p| p.1.len()).max().unwrap_or(0);
            out.insert(ex.name.clone(), (most, sources));
        }
    }
    out
}

#[test]
fn broadcast_weights_are_laid_out_in_the_input_gradients_blocks() {
    // A batch of 32 over 256 -> 256 channels of 3x3: the forward pass splits the batch, so
    // its weight blocks are broadcast. The weights are laid out in the input-gradient
    // pass's blocks, spread over the tiles reading each block in whole rows: each of that
    // pass's tiles receives one message from each tile holding a part of its block, where
    // the row-major layout sent one message per output channel of the block (a run of its
    // input channels), and the forward pass reads them chunk by chunk of those input
    // channels.
    let exe = conv_and_input_grad(32, 256, 256, 4);
    let report = CompileReport::new("conv", None, &exe);
    let row = |pass: &str| {
        report
            .convolutions
            .iter()
            .find(|c| c.pass == pass)
            .unwrap_or_else(|| panic!("no {pass} row"))
            .partition
    };
    let fwd = row("Forward");
    assert!(fwd[1] > 1, "the case needs the batch split: {fwd:?}");
    let msgs = weight_messages(&exe);
    eprintln!("{fwd:?} {:?} {msgs:?}", row("InputGrad"));
    let ig = msgs
        .iter()
        .find(|(name, _)| name.starts_with("dx/"))
        .map(|(_, m)| *m)
        .expect("the input gradient gathers weights");
    assert_eq!(ig.0, ig.1, "one message per source tile: {ig:?}");
    // Its block's parts are on the tiles reading that block (one per part of the batch).
    let readers = row("InputGrad")[1] as usize;
    assert!(
        ig.1 < readers,
        "{ig:?} from more than the {readers} readers"
    );
    let forward = msgs
        .iter()
        .find(|(name, _)| name.starts_with("y/"))
        .map(|(_, m)| *m)
        .expect("the forward pass gathers weights");
    assert_eq!(
        forward.0, forward.1,
        "one message per source tile: {forward:?}"
    );
}

/// The weight chunks the forward pass `y`'s vertices read their weights in.
fn forward_chunks(exe: &Executable) -> BTreeSet<u32> {
    exe.compute_sets
        .iter()
        .filter(|cs| cs.name.starts_with("y/") || cs.name == "y")
        .flat_map(|cs| &cs.tiles)
        .flat_map(|tw| &tw.groups)
        .flat_map(|g| &g.vertices)
        .filter_map(|v| match &v.params {
            VertexParams::Window(w) => Some(w.block.weight_chunk),
            _ => None,
        })
        .collect()
}

#[test]
fn small_broadcast_weights_keep_the_default_layout() {
    // 16 -> 16 channels of 3x3 over a batch of 32 on a 32x32 field (a CIFAR ResNet's first
    // stage): the weights are 4.5 KB on a few tiles, which the forward's many tiles read in
    // a few long runs; laid out in the input gradient's blocks, each would read a message
    // per chunk. The layout is taken only where the two passes gather fewer messages so.
    let small = conv_and_input_grad(32, 16, 16, 32);
    let report = CompileReport::new("conv", None, &small);
    let fwd = report
        .convolutions
        .iter()
        .find(|c| c.pass == "Forward" && c.name == "y")
        .map(|c| c.partition)
        .expect("the forward row");
    assert!(
        fwd[1] * fwd[3] > 1,
        "the case needs broadcast weights: {fwd:?}"
    );
    assert_eq!(forward_chunks(&small), BTreeSet::from([0]));
    let large = conv_and_input_grad(32, 256, 256, 4);
    let chunks = forward_chunks(&large);
    assert!(
        chunks.len() == 1 && !chunks.contains(&0),
        "the large case reads chunked weights: {chunks:?}"
    );
}
