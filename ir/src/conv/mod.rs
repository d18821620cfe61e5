//! The convolution and pooling family in one place: the geometry of a 2-D window over NCHW
//! activations, shape inference with errors that name the offending dimension, and the
//! gradient rules (each convolution's gradients are convolutions, as PopLibs plans them).
//!
//! | op | inputs | output |
//! |---|---|---|
//! | `Conv2d` | `x[N, C, H, W]`, `w[O, C/groups, KH, KW]` | `y[N, O, OH, OW]` |
//! | `Conv2dInputGrad` | `dy[N, O, OH, OW]`, `w` | `dx[N, C, H, W]` (`input_size: [H, W]`) |
//! | `Conv2dWeightGrad` | `x`, `dy` | `dw[O, C/groups, KH, KW]` (`kernel_size: [KH, KW]`) |
//! | `MaxPool2d` | `x[N, C, H, W]` | `y[N, C, OH, OW]` |
//! | `MaxPool2dGrad` | `x`, `dy[N, C, OH, OW]` | `dx[N, C, H, W]` |
//!
//! `OH = (H + pad_top + pad_bottom − dilation·(KH − 1) − 1) / stride + 1` (floor), and the
//! same for the width; `padding` is `[top, left, bottom, right]` (ONNX's `pads` order for two
//! spatial dimensions), `stride` and `dilation` are `[height, width]`. An empty `stride` of a
//! pool means the kernel (PyTorch's default); an empty `padding` means none.
//!
//! The composite ops of the family (`AvgPool2d`, `GlobalAvgPool`, `Flatten`) are rewritten by
//! [`crate::decompose`]; the evaluation order of the primitives is written down in the
//! interpreter (`sim/src/interp/conv.rs`).
//!
//! The family's files: this module (geometry and inference, which `crate::infer` calls),
//! [`rules`] (gradients, which `crate::autodiff` calls) and [`decompose`] (the composite
//! pools, which `crate::decompose` calls) — split so that no file imports one that imports it.

pub(crate) mod decompose;
pub(crate) mod rules;

use crate::dtype::{Shape, TensorType};
use crate::fault::InferFault;
use crate::op::Op;

/// The geometry of one 2-D convolution: sizes and the window's placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Batch size.
    pub n: usize,
    /// Input channels (all groups).
    pub c: usize,
    /// Input height and width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels (all groups).
    pub o: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride `[height, width]`.
    pub stride: [usize; 2],
    /// Padding `[top, left, bottom, right]`.
    pub padding: [usize; 4],
    /// Kernel dilation `[height, width]`.
    pub dilation: [usize; 2],
    /// Convolution groups (`c` and `o` are multiples of it).
    pub groups: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
}

impl ConvGeometry {
    /// Input channels per group.
    pub fn c_per_group(&self) -> usize {
        self.c / self.groups
    }

    /// Output channels per group.
    pub fn o_per_group(&self) -> usize {
        self.o / self.groups
    }

    /// The input row read by output row `oh` at kernel row `kh`, or `None` in the padding.
    pub fn input_row(&self, oh: usize, kh: usize) -> Option<usize> {
        (oh * self.stride[0] + kh * self.dilation[0])
            .checked_sub(self.padding[0])
            .filter(|&r| r < self.h)
    }

    /// The input column read by output column `ow` at kernel column `kw`, or `None` in the
    /// padding.
    pub fn input_col(&self, ow: usize, kw: usize) -> Option<usize> {
        (ow * self.stride[1] + kw * self.dilation[1])
            .checked_sub(self.padding[1])
            .filter(|&c| c < self.w)
    }

    /// Multiply-accumulates of the forward convolution (each a 2-FLOP operation).
    pub fn macs(&self) -> u64 {
        [
            self.n,
            self.o,
            self.oh,
            self.ow,
            self.c_per_group(),
            self.kh,
            self.kw,
        ]
        .iter()
        .fold(1u64, |a, &d| a.saturating_mul(d as u64))
    }

    /// The output shape `[N, O, OH, OW]`.
    pub fn output_shape(&self) -> Shape {
        Shape(vec![self.n, self.o, self.oh, self.ow])
    }

    /// The input shape `[N, C, H, W]`.
    pub fn input_shape(&self) -> Shape {
        Shape(vec![self.n, self.c, self.h, self.w])
    }

    /// The weight shape `[O, C/groups, KH, KW]`.
    pub fn weight_shape(&self) -> Shape {
        Shape(vec![self.o, self.c_per_group(), self.kh, self.kw])
    }
}

/// The window attributes of a convolution op, checked: stride, padding, dilation, groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// `[height, width]`.
    pub stride: [usize; 2],
    /// `[top, left, bottom, right]`.
    pub padding: [usize; 4],
    /// `[height, width]`.
    pub dilation: [usize; 2],
    /// Convolution groups.
    pub groups: usize,
}

fn invalid(message: String) -> InferFault {
    InferFault::Invalid(message)
}

fn pair(name: &str, v: &[usize], default: usize, zero_ok: bool) -> Result<[usize; 2], InferFault> {
    let p = match v {
        [] => [default, default],
        [a, b] => [*a, *b],
        _ => {
            return Err(invalid(format!(
                "{name} needs 2 entries [height, width], got {v:?}"
            )))
        }
    };
    if !zero_ok && p.contains(&0) {
        let dim = if p[0] == 0 { "height" } else { "width" };
        return Err(invalid(format!(
            "{name} {v:?}: the {dim} must be at least 1"
        )));
    }
    Ok(p)
}

fn padding4(v: &[usize]) -> Result<[usize; 4], InferFault> {
    match v {
        [] => Ok([0; 4]),
        [t, l, b, r] => Ok([*t, *l, *b, *r]),
        _ => Err(invalid(format!(
            "padding needs 4 entries [top, left, bottom, right], got {v:?}"
        ))),
    }
}

impl Window {
    /// The window of a convolution op's attributes (`None` for other ops).
    pub fn of(op: &Op) -> Option<Result<Window, InferFault>> {
        let (stride, padding, dilation, groups) = match op {
            Op::Conv2d {
                stride,
                padding,
                dilation,
                groups,
            }
            | Op::Conv2dInputGrad {
                stride,
                padding,
                dilation,
                groups,
                ..
            }
            | Op::Conv2dWeightGrad {
                stride,
                padding,
                dilation,
                groups,
                ..
            } => (stride, padding, dilation, *groups),
            _ => return None,
        };
        Some((|| {
            if groups == 0 {
                return Err(invalid("groups must be at least 1".into()));
            }
            Ok(Window {
                stride: pair("stride", stride, 1, false)?,
                padding: padding4(padding)?,
                dilation: pair("dilation", dilation, 1, false)?,
                groups,
            })
        })())
    }

    /// The geometry of this window applied to input `x` (`[N, C, H, W]`) with a weight of
    /// `[O, C/groups, KH, KW]`.
    pub fn geometry(&self, x: &[usize], w: &[usize]) -> Result<ConvGeometry, InferFault> {
        let [n, c, h, wd] = rank4("the input", x)?;
        let [o, cg, kh, kw] = rank4("the weight", w)?;
        let groups = self.groups;
        if c % groups != 0 {
            return Err(invalid(format!(
                "the input's {c} channels (dimension 1 of {x:?}) are not divisible by groups {groups}"
            )));
        }
        if o % groups != 0 {
            return Err(invalid(format!(
                "the weight's {o} output channels (dimension 0 of {w:?}) are not divisible by groups {groups}"
            )));
        }
        if cg != c / groups {
            return Err(InferFault::ShapeMismatch {
                a: 0,
                b: 1,
                why: format!(
                    "the weight has {cg} input channels per group (dimension 1 of {w:?}) where \
                     the input's {c} channels in {groups} group(s) give {}",
                    c / groups
                ),
            });
        }
        if kh == 0 || kw == 0 || o == 0 {
            return Err(invalid(format!("the weight {w:?} has an empty dimension")));
        }
        let out =
            |size: usize, pad_lo: usize, pad_hi: usize, k: usize, d: usize, s: usize, dim: &str| {
                let (Some(padded), Some(span)) = (
                    size.checked_add(pad_lo).and_then(|p| p.checked_add(pad_hi)),
                    d.checked_mul(k - 1).and_then(|s| s.checked_add(1)),
                ) else {
                    return Err(invalid(format!(
                        "the padded input's {dim} ({size} + {pad_lo} + {pad_hi}) or the kernel's \
                         dilated {dim} ({k} with dilation {d}) exceeds 2^64"
                    )));
                };
                if span > padded {
                    return Err(invalid(format!(
                    "the kernel's {dim} ({k}, dilated to {span}) is larger than the padded input's \
                     {dim} ({size} + {pad_lo} + {pad_hi} = {padded})"
                )));
                }
                Ok((padded - span) / s + 1)
            };
        let [pt, pl, pb, pr] = self.padding;
        let oh = out(h, pt, pb, kh, self.dilation[0], self.stride[0], "height")?;
        let ow = out(wd, pl, pr, kw, self.dilation[1], self.stride[1], "width")?;
        Ok(ConvGeometry {
            n,
            c,
            h,
            w: wd,
            o,
            kh,
            kw,
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            groups,
            oh,
            ow,
        })
    }
}

fn rank4(what: &str, dims: &[usize]) -> Result<[usize; 4], InferFault> {
    match dims {
        [a, b, c, d] => Ok([*a, *b, *c, *d]),
        _ => Err(invalid(format!(
            "{what} must have rank 4 (NCHW activations, OIHW weights), got {dims:?}"
        ))),
    }
}

/// The window of a pooling op, checked: kernel, stride, padding (no dilation, one group per
/// channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool {
    /// `[height, width]`.
    pub kernel: [usize; 2],
    /// `[height, width]`.
    pub stride: [usize; 2],
    /// `[top, left, bottom, right]`.
    pub padding: [usize; 4],
}

impl Pool {
    /// The window of a pooling op's attributes (`None` for other ops).
    pub fn of(op: &Op) -> Option<Result<Pool, InferFault>> {
        let (kernel, stride, padding) = match op {
            Op::MaxPool2d {
                kernel,
                stride,
                padding,
            }
            | Op::MaxPool2dGrad {
                kernel,
                stride,
                padding,
            }
            | Op::AvgPool2d {
                kernel,
                stride,
                padding,
                ..
            } => (kernel, stride, padding),
            _ => return None,
        };
        Some((|| {
            if kernel.is_empty() {
                return Err(invalid(
                    "kernel needs 2 entries [height, width], got []".into(),
                ));
            }
            let kernel = pair("kernel", kernel, 1, false)?;
            let stride = if stride.is_empty() {
                kernel
            } else {
                pair("stride", stride, 1, false)?
            };
            let padding = padding4(padding)?;
            // PyTorch's rule: padding at most half the kernel, so every window sees the input.
            for (i, &p) in padding.iter().enumerate() {
                let k = kernel[i % 2];
                if p > k / 2 {
                    let side = ["top", "left", "bottom", "right"][i];
                    return Err(invalid(format!(
                        "the {side} padding {p} is more than half the kernel's {} ({k})",
                        ["height", "width"][i % 2]
                    )));
                }
            }
            Ok(Pool {
                kernel,
                stride,
                padding,
            })
        })())
    }

    /// The pooling as a convolution geometry of one channel per group over `x`.
    pub fn geometry(&self, x: &[usize]) -> Result<ConvGeometry, InferFault> {
        let [_, c, _, _] = rank4("the input", x)?;
        let window = Window {
            stride: self.stride,
            padding: self.padding,
            dilation: [1, 1],
            groups: c.max(1),
        };
        if c == 0 {
            return Err(invalid(format!("the input {x:?} has no channels")));
        }
        window.geometry(x, &[c, 1, self.kernel[0], self.kernel[1]])
    }
}

/// The output type of an op of this family, or `None` for other ops.
pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Option<Result<TensorType, InferFault>> {
    let float = |i: usize| -> Result<(), InferFault> {
        if inputs[i].dtype.is_float() {
            Ok(())
        } else {
            Err(InferFault::BadDType {
                input: i,
                expected: "a float tensor",
            })
        }
    };
    let same = |a: usize, b: usize| -> Result<(), InferFault> {
        if inputs[a].dtype == inputs[b].dtype {
            Ok(())
        } else {
            Err(InferFault::DTypeMismatch { a, b })
        }
    };
    let dims = |i: usize| inputs[i].shape.dims();
    let result = match op {
        Op::Conv2d { .. } => Window::of(op)?.and_then(|win| {
            float(0)?;
            same(0, 1)?;
            let g = win.geometry(dims(0), dims(1))?;
            Ok(TensorType::new(inputs[0].dtype, g.output_shape()))
        }),
        Op::Conv2dInputGrad { input_size, .. } => Window::of(op)?.and_then(|win| {
            float(0)?;
            same(0, 1)?;
            let [n, _, _, _] = rank4("the output gradient", dims(0))?;
            let [_, cg, _, _] = rank4("the weight", dims(1))?;
            let [h, w] = pair("input_size", input_size, 1, true)?;
            let x = [n, cg * win.groups, h, w];
            let g = win.geometry(&x, dims(1))?;
            expect_shape("the output gradient", dims(0), &g.output_shape())?;
            Ok(TensorType::new(inputs[0].dtype, g.input_shape()))
        }),
        Op::Conv2dWeightGrad { kernel_size, .. } => Window::of(op)?.and_then(|win| {
            float(0)?;
            same(0, 1)?;
            let [_, c, _, _] = rank4("the input", dims(0))?;
            let [_, o, _, _] = rank4("the output gradient", dims(1))?;
            let [kh, kw] = pair("kernel_size", kernel_size, 1, false)?;
            let w = [o, c / win.groups.max(1), kh, kw];
            let g = win.geometry(dims(0), &w)?;
            expect_shape("the output gradient", dims(1), &g.output_shape())?;
            Ok(TensorType::new(inputs[0].dtype, g.weight_shape()))
        }),
        Op::MaxPool2d { .. } | Op::AvgPool2d { .. } => Pool::of(op)?.and_then(|pool| {
            float(0)?;
            let g = pool.geometry(dims(0))?;
            Ok(TensorType::new(inputs[0].dtype, g.output_shape()))
        }),
        Op::MaxPool2dGrad { .. } => Pool::of(op)?.and_then(|pool| {
            float(0)?;
            same(0, 1)?;
            let g = pool.geometry(dims(0))?;
            expect_shape("the output gradient", dims(1), &g.output_shape())?;
            Ok(inputs[0].clone())
        }),
        Op::GlobalAvgPool => (|| {
            float(0)?;
            let [n, c, h, w] = rank4("the input", dims(0))?;
            if h == 0 || w == 0 {
                return Err(invalid(format!(
                    "the input {:?} has an empty spatial field",
                    dims(0)
                )));
            }
            Ok(TensorType::new(inputs[0].dtype, Shape(vec![n, c])))
        })(),
        Op::Flatten { axis } => (|| {
            let d = dims(0);
            if *axis > d.len() {
                return Err(invalid(format!(
                    "axis {axis} is beyond the {} dimensions of {:?}",
                    d.len(),
                    d
                )));
            }
            let outer: usize = d[..*axis].iter().product();
            let inner: usize = d[*axis..].iter().product();
            Ok(TensorType::new(inputs[0].dtype, Shape(vec![outer, inner])))
        })(),
        _ => return None,
    };
    Some(result)
}

fn expect_shape(what: &str, found: &[usize], expected: &Shape) -> Result<(), InferFault> {
    if found == expected.dims() {
        Ok(())
    } else {
        Err(InferFault::ShapeMismatch {
            a: 0,
            b: 1,
            why: format!("{what} has shape {found:?}, the window gives {expected}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The family's inference (`crate::infer` calls it after checking the arity).
    fn infer_all(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, InferFault> {
        infer(op, inputs).expect("an op of the family")
    }
    use crate::DType;

    fn t(s: &[usize]) -> TensorType {
        TensorType::new(DType::F32, Shape::from(s))
    }

    fn conv(stride: &[usize], padding: &[usize], groups: usize) -> Op {
        Op::Conv2d {
            stride: stride.to_vec(),
            padding: padding.to_vec(),
            dilation: vec![],
            groups,
        }
    }

    #[test]
    fn resnet_stem_and_bottleneck_shapes() {
        // torchvision's stem: 7×7, stride 2, padding 3 on 224×224 gives 112×112.
        let y = infer_all(
            &conv(&[2, 2], &[3, 3, 3, 3], 1),
            &[&t(&[1, 3, 224, 224]), &t(&[64, 3, 7, 7])],
        )
        .unwrap();
        assert_eq!(y.shape.dims(), [1, 64, 112, 112]);
        // The max pool after it: 3×3, stride 2, padding 1 gives 56×56.
        let pool = Op::MaxPool2d {
            kernel: vec![3, 3],
            stride: vec![2, 2],
            padding: vec![1, 1, 1, 1],
        };
        let p = infer_all(&pool, &[&y]).unwrap();
        assert_eq!(p.shape.dims(), [1, 64, 56, 56]);
        // A depthwise convolution.
        let d = infer_all(&conv(&[], &[1, 1, 1, 1], 64), &[&p, &t(&[64, 1, 3, 3])]).unwrap();
        assert_eq!(d.shape.dims(), [1, 64, 56, 56]);
    }

    #[test]
    fn errors_name_the_dimension() {
        let e = infer_all(&conv(&[], &[], 2), &[&t(&[1, 3, 8, 8]), &t(&[4, 1, 3, 3])]).unwrap_err();
        assert!(
            format!("{e:?}").contains("3 channels (dimension 1"),
            "{e:?}"
        );
        let e = infer_all(&conv(&[], &[], 1), &[&t(&[1, 3, 2, 8]), &t(&[4, 3, 3, 3])]).unwrap_err();
        assert!(
            format!("{e:?}").contains("larger than the padded input's height"),
            "{e:?}"
        );
        let pool = Op::MaxPool2d {
            kernel: vec![2, 2],
            stride: vec![0, 1],
            padding: vec![],
        };
        let e = infer_all(&pool, &[&t(&[1, 3, 8, 8])]).unwrap_err();
        assert!(
            format!("{e:?}").contains("height must be at least 1"),
            "{e:?}"
        );
    }

    #[test]
    fn gradients_have_the_forward_shapes() {
        let op = Op::Conv2dInputGrad {
            stride: vec![2, 2],
            padding: vec![1, 1, 1, 1],
            dilation: vec![],
            groups: 1,
            input_size: vec![7, 7],
        };
        let dx = infer_all(&op, &[&t(&[2, 8, 4, 4]), &t(&[8, 3, 3, 3])]).unwrap();
        assert_eq!(dx.shape.dims(), [2, 3, 7, 7]);
        let op = Op::Conv2dWeightGrad {
            stride: vec![2, 2],
            padding: vec![1, 1, 1, 1],
            dilation: vec![],
            groups: 1,
            kernel_size: vec![3, 3],
        };
        let dw = infer_all(&op, &[&t(&[2, 3, 7, 7]), &t(&[2, 8, 4, 4])]).unwrap();
        assert_eq!(dw.shape.dims(), [8, 3, 3, 3]);
    }
}
