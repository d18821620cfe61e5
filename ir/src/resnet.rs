//! The ResNet family as programs: CIFAR-style ResNet-8/14/20/32/44/56 and ImageNet-style
//! ResNet-18/34/50/101/152, built as torchvision builds them.
//!
//! - **ImageNet** (torchvision `resnet.py`): a 7×7 stride-2 stem convolution (no bias), batch
//!   norm, ReLU, a 3×3 stride-2 max pool; four stages of 64/128/256/512 channels of basic
//!   blocks (18, 34) or bottleneck blocks (50, 101, 152; expansion 4, the stride in the 3×3
//!   convolution, torchvision's v1.5); a `downsample` (1×1 convolution with the stage's
//!   stride, then batch norm) where a block changes the shape; global average pooling; a
//!   dense `fc` with bias.
//! - **CIFAR** (He et al. 2016, §4.2): a 3×3 stem of 16 channels, three stages of 16/32/64
//!   channels of `n = (depth − 2) / 6` basic blocks, strides 1/2/2, global average pooling,
//!   `fc`. Shortcuts that change the shape are a 1×1 convolution and batch norm (option B:
//!   the IR has no zero-padding shortcut), so the parameter counts are option B's.
//!
//! Node names follow torchvision's module paths — `conv1`, `bn1`, `maxpool`,
//! `layer3.8.conv2`, `layer1.0.downsample.0`, `fc` — and parameters are `<module>.weight`,
//! `<module>.bias`, `<module>.running_mean`, `<module>.running_var`; a block's residual add
//! is `layerL.B.add` and its last ReLU `layerL.B.relu`, so every node of block `layerL.B`
//! has the prefix `layerL.B.` (PopTorch's `model.layer3[8]` is the nodes named `layer3.8.*`).
//! Initial values follow torchvision: Kaiming-normal convolutions (`std = sqrt(2 /
//! fan_out)`), batch-norm scale 1 and shift 0, running mean 0 and variance 1, `fc` uniform in
//! `±1/sqrt(fan_in)`. Group norm replaces batch norm on request.

use crate::builder::GraphBuilder;
use crate::dtype::{DType, Shape};
use crate::error::IrError;
use crate::graph::NodeId;
use crate::op::{Init, LossReduction, Op};
use crate::program::{DataSource, InfeedSpec, Optimizer, Precision, Program, TrainingSpec};

/// The normalisation layers of a generated ResNet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// Batch norm (torchvision's).
    Batch,
    /// Group norm with this many groups per layer.
    Group(usize),
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct ResNetSpec {
    /// A name of [`MODELS`] (`resnet50`, `resnet20`, ...).
    pub name: String,
    /// Samples per micro-batch.
    pub batch: usize,
    /// Image height and width (224 for ImageNet, 32 for CIFAR by default).
    pub image_size: usize,
    /// Image channels (3; 1 for grey images).
    pub channels: usize,
    /// Classes of the classifier.
    pub classes: usize,
    /// The normalisation layers.
    pub norm: Norm,
    /// The training spec's precision policy.
    pub precision: Precision,
}

/// One model of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    /// Its name.
    pub name: &'static str,
    /// ImageNet-style (else CIFAR-style).
    pub imagenet: bool,
    /// Bottleneck blocks (else basic).
    pub bottleneck: bool,
    /// Blocks per stage.
    pub blocks: &'static [usize],
}

/// The models, as `ipusim model list` shows them.
pub const MODELS: &[Model] = &[
    Model {
        name: "resnet8",
        imagenet: false,
        bottleneck: false,
        blocks: &[1, 1, 1],
    },
    Model {
        name: "resnet14",
        imagenet: false,
        bottleneck: false,
        blocks: &[2, 2, 2],
    },
    Model {
        name: "resnet20",
        imagenet: false,
        bottleneck: false,
        blocks: &[3, 3, 3],
    },
    Model {
        name: "resnet32",
        imagenet: false,
        bottleneck: false,
        blocks: &[5, 5, 5],
    },
    Model {
        name: "resnet44",
        imagenet: false,
        bottleneck: false,
        blocks: &[7, 7, 7],
    },
    Model {
        name: "resnet56",
        imagenet: false,
        bottleneck: false,
        blocks: &[9, 9, 9],
    },
    Model {
        name: "resnet18",
        imagenet: true,
        bottleneck: false,
        blocks: &[2, 2, 2, 2],
    },
    Model {
        name: "resnet34",
        imagenet: true,
        bottleneck: false,
        blocks: &[3, 4, 6, 3],
    },
    Model {
        name: "resnet50",
        imagenet: true,
        bottleneck: true,
        blocks: &[3, 4, 6, 3],
    },
    Model {
        name: "resnet101",
        imagenet: true,
        bottleneck: true,
        blocks: &[3, 4, 23, 3],
    },
    Model {
        name: "resnet152",
        imagenet: true,
        bottleneck: true,
        blocks: &[3, 8, 36, 3],
    },
];

impl Model {
    /// The model named `name`.
    pub fn named(name: &str) -> Option<&'static Model> {
        MODELS.iter().find(|m| m.name == name)
    }

    /// The default spec of the model (batch 1, its dataset's image size and classes, batch
    /// norm, 16.16).
    pub fn default_spec(&self) -> ResNetSpec {
        ResNetSpec {
            name: self.name.to_string(),
            batch: 1,
            image_size: if self.imagenet { 224 } else { 32 },
            channels: 3,
            classes: if self.imagenet { 1000 } else { 10 },
            norm: Norm::Batch,
            precision: Precision::P16_16,
        }
    }

    /// Times the image is halved before the last stage (the smallest image is `2^this`).
    pub fn downsampling(&self) -> u32 {
        if self.imagenet {
            5
        } else {
            2
        }
    }
}

struct Gen<'a> {
    b: GraphBuilder,
    spec: &'a ResNetSpec,
    seed: u64,
}

impl Gen<'_> {
    fn var(&mut self, name: &str, shape: &[usize], init: Init) -> Result<NodeId, IrError> {
        let op = Op::Variable {
            dtype: DType::F32,
            shape: Shape::from(shape),
            init,
        };
        self.b.named(name, op, &[])
    }

    fn conv(
        &mut self,
        name: &str,
        x: NodeId,
        (cin, cout): (usize, usize),
        k: usize,
        stride: usize,
    ) -> Result<NodeId, IrError> {
        self.seed += 1;
        let std = (2.0 / (cout * k * k) as f64).sqrt();
        let init = Init::Normal {
            mean: 0.0,
            std,
            seed: self.seed,
        };
        let w = self.var(&format!("{name}.weight"), &[cout, cin, k, k], init)?;
        let p = k / 2;
        let op = Op::Conv2d {
            stride: vec![stride, stride],
            padding: if p == 0 { vec![] } else { vec![p; 4] },
            dilation: vec![],
            groups: 1,
        };
        self.b.named(name, op, &[x, w])
    }

    fn norm(&mut self, name: &str, x: NodeId, c: usize) -> Result<NodeId, IrError> {
        let scale = self.var(&format!("{name}.weight"), &[c], Init::Constant(1.0))?;
        let shift = self.var(&format!("{name}.bias"), &[c], Init::Zeros)?;
        match self.spec.norm {
            Norm::Batch => {
                let rm = self.var(&format!("{name}.running_mean"), &[c], Init::Zeros)?;
                let rv = self.var(&format!("{name}.running_var"), &[c], Init::Constant(1.0))?;
                let op = Op::BatchNorm {
                    epsilon: 1e-5,
                    momentum: 0.1,
                };
                self.b.named(name, op, &[x, scale, shift, rm, rv])
            }
            Norm::Group(groups) => {
                let op = Op::GroupNorm {
                    groups,
                    epsilon: 1e-5,
                };
                self.b.named(name, op, &[x, scale, shift])
            }
        }
    }

    fn relu(&mut self, name: &str, x: NodeId) -> Result<NodeId, IrError> {
        self.b.named(name, Op::Relu, &[x])
    }

    /// One residual block `prefix` (`layerL.B`) from `cin` channels.
    fn block(
        &mut self,
        prefix: &str,
        x: NodeId,
        cin: usize,
        (width, stride): (usize, usize),
        bottleneck: bool,
    ) -> Result<(NodeId, usize), IrError> {
        let p = |s: &str| format!("{prefix}.{s}");
        let (h, out) = if bottleneck {
            let out = width * 4;
            let h = self.conv(&p("conv1"), x, (cin, width), 1, 1)?;
            let h = self.norm(&p("bn1"), h, width)?;
            let h = self.relu(&p("relu1"), h)?;
            let h = self.conv(&p("conv2"), h, (width, width), 3, stride)?;
            let h = self.norm(&p("bn2"), h, width)?;
            let h = self.relu(&p("relu2"), h)?;
            let h = self.conv(&p("conv3"), h, (width, out), 1, 1)?;
            (self.norm(&p("bn3"), h, out)?, out)
        } else {
            let h = self.conv(&p("conv1"), x, (cin, width), 3, stride)?;
            let h = self.norm(&p("bn1"), h, width)?;
            let h = self.relu(&p("relu1"), h)?;
            let h = self.conv(&p("conv2"), h, (width, width), 3, 1)?;
            (self.norm(&p("bn2"), h, width)?, width)
        };
        let shortcut = if stride != 1 || cin != out {
            let s = self.conv(&p("downsample.0"), x, (cin, out), 1, stride)?;
            self.norm(&p("downsample.1"), s, out)?
        } else {
            x
        };
        let sum = self.b.named(&p("add"), Op::Add, &[h, shortcut])?;
        Ok((self.relu(&p("relu"), sum)?, out))
    }
}

/// Checks a spec against its model: positive sizes, an image that survives the model's
/// downsampling, group counts that divide every normalised layer.
fn check(model: &Model, spec: &ResNetSpec) -> Result<(), IrError> {
    let bad = |m: String| Err(IrError::Program(format!("model {}: {m}", model.name)));
    if spec.batch == 0 || spec.classes == 0 || spec.channels == 0 {
        return bad(format!(
            "batch ({}), classes ({}) and image channels ({}) must be at least 1",
            spec.batch, spec.classes, spec.channels
        ));
    }
    if i32::try_from(spec.classes).is_err() {
        return bad(format!(
            "classes ({}) must be at most 2^31 - 1 = {}: the labels are I32 class indices",
            spec.classes,
            i32::MAX
        ));
    }
    let min = 1usize << model.downsampling();
    if spec.image_size < min {
        return bad(format!(
            "an image of {0}x{0} is smaller than the {min}x{min} its {1} halvings need",
            spec.image_size,
            model.downsampling()
        ));
    }
    if spec
        .batch
        .saturating_mul(spec.channels)
        .saturating_mul(spec.image_size.saturating_mul(spec.image_size))
        > 1 << 31
    {
        return bad("the image batch has more than 2^31 elements".into());
    }
    if let Norm::Group(g) = spec.norm {
        let smallest = if model.imagenet { 64 } else { 16 };
        if g == 0 || smallest % g != 0 {
            return bad(format!(
                "{g} groups do not divide the {smallest} channels of its first layers"
            ));
        }
    }
    Ok(())
}

/// The program of `spec`: `image` and `labels` infeeds (synthetic uniform images and
/// labels, so it runs without data), the network, a mean softmax cross-entropy `loss` sent
/// to the host, and a training spec (momentum SGD, loss scaling 128, the spec's precision).
pub fn resnet(spec: &ResNetSpec) -> Result<Program, IrError> {
    let model = Model::named(&spec.name).ok_or_else(|| {
        IrError::Program(format!(
            "no model '{}' (the models: {})",
            spec.name,
            MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
        ))
    })?;
    check(model, spec)?;
    let mut g = Gen {
        b: GraphBuilder::new(),
        spec,
        seed: 0,
    };
    let s = spec.image_size;
    let image = g.b.named(
        "image",
        Op::Input {
            stream: "image".into(),
            dtype: DType::F32,
            shape: Shape::from([spec.batch, spec.channels, s, s]),
        },
        &[],
    )?;
    let labels = g.b.named(
        "labels",
        Op::Input {
            stream: "labels".into(),
            dtype: DType::I32,
            shape: Shape::from([spec.batch]),
        },
        &[],
    )?;
    let (mut x, mut c, widths): (NodeId, usize, &[usize]) = if model.imagenet {
        let h = g.conv("conv1", image, (spec.channels, 64), 7, 2)?;
        let h = g.norm("bn1", h, 64)?;
        let h = g.relu("relu", h)?;
        let pool = Op::MaxPool2d {
            kernel: vec![3, 3],
            stride: vec![2, 2],
            padding: vec![1, 1, 1, 1],
        };
        (g.b.named("maxpool", pool, &[h])?, 64, &[64, 128, 256, 512])
    } else {
        let h = g.conv("conv1", image, (spec.channels, 16), 3, 1)?;
        let h = g.norm("bn1", h, 16)?;
        (g.relu("relu", h)?, 16, &[16, 32, 64])
    };
    for (stage, (&n, &width)) in model.blocks.iter().zip(widths).enumerate() {
        for blk in 0..n {
            let stride = if blk == 0 && stage > 0 { 2 } else { 1 };
            let prefix = format!("layer{}.{blk}", stage + 1);
            (x, c) = g.block(&prefix, x, c, (width, stride), model.bottleneck)?;
        }
    }
    let pooled = g.b.named("avgpool", Op::GlobalAvgPool, &[x])?;
    let bound = 1.0 / (c as f64).sqrt();
    let uniform = |seed| Init::Uniform {
        low: -bound,
        high: bound,
        seed,
    };
    let w = g.var("fc.weight", &[c, spec.classes], uniform(1001))?;
    let bias = g.var("fc.bias", &[spec.classes], uniform(1002))?;
    let mm = g.b.named("fc.matmul", Op::MatMul, &[pooled, w])?;
    let logits = g.b.named("fc", Op::Add, &[mm, bias])?;
    let loss = g.b.named(
        "loss",
        Op::SparseSoftmaxCrossEntropy {
            reduction: LossReduction::Mean,
        },
        &[logits, labels],
    )?;
    g.b.named(
        "loss_out",
        Op::Outfeed {
            stream: "loss".into(),
        },
        &[loss],
    )?;
    let mut p = Program::new(spec.name.clone(), g.b.finish());
    p.description = format!(
        "{} ({}), batch {}, {}x{}x{} images, {} classes, {}",
        model.name,
        if model.imagenet {
            "torchvision"
        } else {
            "CIFAR, option B shortcuts"
        },
        spec.batch,
        spec.channels,
        s,
        s,
        spec.classes,
        match spec.norm {
            Norm::Batch => "batch norm".to_string(),
            Norm::Group(g) => format!("group norm ({g} groups)"),
        }
    );
    p.infeeds = vec![
        InfeedSpec {
            stream: "image".into(),
            source: DataSource::Uniform {
                low: -1.0,
                high: 1.0,
                seed: 1,
            },
        },
        InfeedSpec {
            stream: "labels".into(),
            source: DataSource::Uniform {
                low: 0.0,
                high: spec.classes as f64,
                seed: 2,
            },
        },
    ];
    p.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::Momentum {
            learning_rate: 0.01,
            momentum: 0.9,
        },
        loss_scaling: 128.0,
        precision: spec.precision,
        gradient_accumulation: 1,
        accumulation_dtype: None,
        stable_norm: false,
    });
    Ok(p)
}

/// The trainable parameters of a program: elements of the floating-point variables that no
/// `Assign` writes once its composite ops are decomposed for a training step (batch norm's
/// running statistics are state, not parameters).
pub fn trainable_parameters(program: &Program) -> Result<u64, IrError> {
    let g = crate::decompose::decompose(
        &program.graph,
        crate::decompose::Statistics::Batch { stable: false },
    )?;
    Ok(crate::training::trainable_variables(&g)
        .into_iter()
        .map(|id| g.node(id).ty.num_elements() as u64)
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(name: &str) -> u64 {
        let model = Model::named(name).unwrap();
        let p = resnet(&model.default_spec()).unwrap();
        crate::validate::validate_program(&p).unwrap();
        trainable_parameters(&p).unwrap()
    }

    #[test]
    fn parameter_counts_equal_torchvisions() {
        // torchvision.models.resnetN(num_classes=1000): sum(p.numel() for p in parameters()).
        assert_eq!(count("resnet18"), 11_689_512);
        assert_eq!(count("resnet34"), 21_797_672);
        assert_eq!(count("resnet50"), 25_557_032);
        assert_eq!(count("resnet101"), 44_549_160);
        assert_eq!(count("resnet152"), 60_192_808);
    }

    #[test]
    fn cifar_resnet20_with_option_b_shortcuts() {
        // Convolutions 3·16·9 + 6·16·16·9 + (16·32·9 + 5·32·32·9) + (32·64·9 + 5·64·64·9) =
        // 432 + 13,824 + 50,688 + 202,752; batch norms 2·(16 + 6·16 + 6·32 + 6·64) = 1,376;
        // fc 64·10 + 10 = 650: 269,722 with option A's parameter-free shortcuts. Option B's two
        // 1x1 shortcuts with batch norm add 16·32 + 2·32 = 576 and 32·64 + 2·64 = 2,176:
        // 272,474.
        assert_eq!(count("resnet20"), 272_474);
    }

    #[test]
    fn names_follow_torchvision_and_blocks_share_a_prefix() {
        let p = resnet(&Model::named("resnet101").unwrap().default_spec()).unwrap();
        let g = &p.graph;
        for name in [
            "conv1",
            "bn1",
            "maxpool",
            "layer1.0.downsample.0",
            "layer3.8.conv2",
            "layer3.22.relu",
            "layer4.2.add",
            "avgpool",
            "fc",
        ] {
            assert!(g.find(name).is_some(), "{name}");
        }
        assert!(g.find("layer3.23.conv1").is_none());
    }

    #[test]
    fn a_training_step_builds_for_resnet50() {
        let p = resnet(&Model::named("resnet50").unwrap().default_spec()).unwrap();
        crate::training::training_step(&p, p.training.as_ref().unwrap()).unwrap();
    }

    #[test]
    fn bad_specs_are_named() {
        let mut spec = Model::named("resnet50").unwrap().default_spec();
        spec.image_size = 16;
        let e = resnet(&spec).unwrap_err().to_string();
        assert!(e.contains("16x16") && e.contains("32x32"), "{e}");
        spec.image_size = 224;
        spec.norm = Norm::Group(3);
        assert!(resnet(&spec).unwrap_err().to_string().contains("3 groups"));
        spec.norm = Norm::Batch;
        spec.batch = 0;
        assert!(resnet(&spec).unwrap_err().to_string().contains("batch (0)"));
        spec.batch = 1;
        spec.classes = 1 << 31;
        let e = resnet(&spec).unwrap_err().to_string();
        assert!(
            e.contains("classes (2147483648) must be at most 2^31 - 1"),
            "{e}"
        );
        spec.classes = 1000;
        spec.name = "resnet51".into();
        assert!(resnet(&spec)
            .unwrap_err()
            .to_string()
            .contains("no model 'resnet51'"));
    }
}
