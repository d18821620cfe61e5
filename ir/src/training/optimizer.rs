//! The optimizers' weight updates, emitted as Update-phase nodes (structure only).
//!
//! For a trained variable `w` with unscaled gradient `g`, all in the weight dtype; nodes are
//! named `update/<w>/<name>`, scale attributes and constants are rounded to the weight dtype
//! when the graph is evaluated:
//!
//! - **SGD**: `new = ScaledAdd(w, g, -lr)` (PopLibs `scaledAddTo`); `assign: w := new`.
//! - **Momentum** (TensorFlow's `MomentumOptimizer`): state `<w>/momentum` (Zeros);
//!   `momentum_new = ScaledAdd(g, v, momentum)` = `g + m v`; `new = ScaledAdd(w, momentum_new,
//!   -lr)`; `momentum_assign: v := momentum_new`, `assign: w := new`.
//! - **Adam** (Kingma & Ba, in TensorFlow 1's `AdamOptimizer` form, the optimizer of seed
//!   000's FP32-update example): state `<w>/adam_m`, `<w>/adam_v` (Zeros);
//!   `m_new = ScaledAdd(m * beta1, g, 1 - beta1)`, `v_new = ScaledAdd(v * beta2, g * g, 1 -
//!   beta2)`, `new = w - lr_t * m_new / (sqrt(v_new) + epsilon)`. Bias correction is folded
//!   into the step size `lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)` (so `epsilon` is TF's
//!   "epsilon hat"), computed once per update in FP32 from two shared FP32 scalar Variables
//!   `adam/beta1_power` and `adam/beta2_power` (initialised to `beta1`, `beta2`, i.e. `t = 1`
//!   at the first update, and multiplied by `beta1`, `beta2` after every update by
//!   `update/adam/beta{1,2}_power_assign`). The powers stay FP32 in every policy: they are
//!   two scalars, and `1 - beta2^t` loses most of its digits in FP16. `lr_t` is cast to the
//!   weight dtype (`update/adam/lr_t_f16`) for FP16 weights.
//! - **AdamW** (PyTorch's `torch.optim.AdamW`, matched by PopTorch's `poptorch.optim.AdamW`,
//!   the hands-on day's optimizer): state `<w>/adam_m` in `first_order_momentum_accum_type`
//!   and `<w>/adam_v` in `second_order_momentum_accum_type` (default the weight dtype; the
//!   gradient is cast to each); `m_new`, `v_new` as Adam's; `v_scaled = sqrt(v_new) *
//!   inv_sqrt_bias2`, `denominator = v_scaled + epsilon` and `ratio = m_new / denominator`
//!   in `v`'s dtype (`m_new` cast to it: PopART's `AdamUpdaterOpx` divides in the second
//!   moment's type; divided in an FP16 first moment's, the denominator would flush a small
//!   epsilon to zero and make 0/0 of every weight whose gradient has been zero), `ratio`
//!   cast to the weight dtype, `delta = ratio * step_size`,
//!   `decayed = w * (1 - lr * weight_decay)`, `new = decayed - delta`: PyTorch's order
//!   (weight decay first, epsilon added after the bias correction of `sqrt(v)`). The shared
//!   FP32 scalars `update/adam/step_size = lr / (1 - beta1^t)` and
//!   `update/adam/inv_sqrt_bias2 = 1 / sqrt(1 - beta2^t)` come from the same beta powers
//!   and are cast to the dtypes that need them (`…_f16`).

use crate::builder::GraphBuilder;
use crate::dtype::{DType, Shape};
use crate::error::IrError;
use crate::graph::{NodeId, Phase};
use crate::op::{Init, Op};
use crate::program::Optimizer;
use std::collections::HashMap;

/// Checks an optimizer's hyper-parameters; the message names the bad one.
pub(super) fn check(opt: &Optimizer) -> Result<(), String> {
    let finite = |name: &str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(format!("{name} must be a finite number >= 0, got {v}"))
        }
    };
    let fraction = |name: &str, v: f64| {
        if (0.0..1.0).contains(&v) {
            Ok(())
        } else {
            Err(format!("{name} must be in [0, 1), got {v}"))
        }
    };
    match *opt {
        Optimizer::Sgd { learning_rate } => finite("learning_rate", learning_rate),
        Optimizer::Momentum {
            learning_rate,
            momentum,
        } => {
            finite("learning_rate", learning_rate)?;
            finite("momentum", momentum)
        }
        Optimizer::Adam {
            learning_rate,
            beta1,
            beta2,
            epsilon,
        }
        | Optimizer::AdamW {
            learning_rate,
            beta1,
            beta2,
            epsilon,
            ..
        } => {
            finite("learning_rate", learning_rate)?;
            fraction("beta1", beta1)?;
            fraction("beta2", beta2)?;
            finite("epsilon", epsilon)?;
            check_adamw(opt)
        }
    }
}

/// AdamW's own hyper-parameters: the weight decay and the moments' dtypes.
fn check_adamw(opt: &Optimizer) -> Result<(), String> {
    match *opt {
        Optimizer::AdamW {
            weight_decay,
            first_order_momentum_accum_type,
            second_order_momentum_accum_type,
            ..
        } => {
            if !(weight_decay.is_finite() && weight_decay >= 0.0) {
                return Err(format!(
                    "weight_decay must be a finite number >= 0, got {weight_decay}"
                ));
            }
            for (name, d) in [
                (
                    "first_order_momentum_accum_type",
                    first_order_momentum_accum_type,
                ),
                (
                    "second_order_momentum_accum_type",
                    second_order_momentum_accum_type,
                ),
            ] {
                if let Some(d) = d.filter(|d| !d.is_float()) {
                    return Err(format!("{name} must be f16 or f32, got {d}"));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Adam's state shared by all variables.
struct AdamShared {
    beta1_power: NodeId,
    beta2_power: NodeId,
    /// The bias-corrected step size per dtype (F32 first, casts added on demand): Adam's
    /// `lr_t`, AdamW's `step_size`.
    lr_t: HashMap<DType, NodeId>,
    /// AdamW's `1 / sqrt(1 - beta2^t)` per dtype (F32 first); empty for Adam.
    inv_sqrt_bias2: HashMap<DType, NodeId>,
}

/// Emits the updates of one optimizer.
pub(super) struct Updater<'a> {
    opt: &'a Optimizer,
    adam: Option<AdamShared>,
}

type R = Result<NodeId, IrError>;

impl<'a> Updater<'a> {
    /// Prepares the optimizer (Adam's shared state and step size are added here).
    pub fn new(b: &mut GraphBuilder, opt: &'a Optimizer) -> Result<Updater<'a>, IrError> {
        let adam = match *opt {
            Optimizer::Adam {
                learning_rate,
                beta1,
                beta2,
                ..
            } => Some(adam_shared(b, learning_rate, beta1, beta2, false)?),
            Optimizer::AdamW {
                learning_rate,
                beta1,
                beta2,
                ..
            } => Some(adam_shared(b, learning_rate, beta1, beta2, true)?),
            _ => None,
        };
        Ok(Updater { opt, adam })
    }

    /// Adds the update of `var` (named `var_name`) by the unscaled gradient `g` (weight
    /// dtype). The builder is in the Update phase, scoped `update/<var>`.
    pub fn update(
        &mut self,
        b: &mut GraphBuilder,
        var: NodeId,
        var_name: &str,
        g: NodeId,
    ) -> Result<(), IrError> {
        let ty = b.graph().node(var).ty.clone();
        let new = match *self.opt {
            Optimizer::Sgd { learning_rate } => b.op(
                "new",
                Op::ScaledAdd {
                    scale: -learning_rate,
                },
                &[var, g],
            )?,
            Optimizer::Momentum {
                learning_rate,
                momentum,
            } => {
                let v = state(
                    b,
                    &format!("{var_name}/momentum"),
                    ty.dtype,
                    &ty.shape,
                    Init::Zeros,
                )?;
                let v_new = b.op("momentum_new", Op::ScaledAdd { scale: momentum }, &[g, v])?;
                b.op("momentum_assign", Op::Assign, &[v, v_new])?;
                b.op(
                    "new",
                    Op::ScaledAdd {
                        scale: -learning_rate,
                    },
                    &[var, v_new],
                )?
            }
            Optimizer::Adam {
                beta1,
                beta2,
                epsilon,
                ..
            } => {
                let dtypes = (ty.dtype, ty.dtype);
                let (m_new, v_new) = moments(b, var_name, &ty.shape, g, dtypes, (beta1, beta2))?;
                let root = b.op("v_sqrt", Op::Sqrt, &[v_new])?;
                let eps = b.scalar("epsilon", ty.dtype, epsilon)?;
                let denom = b.op("denominator", Op::Add, &[root, eps])?;
                let ratio = b.op("ratio", Op::Div, &[m_new, denom])?;
                let lr_t = self.adam_lr(b, ty.dtype)?;
                let delta = b.op("delta", Op::Mul, &[ratio, lr_t])?;
                b.op("new", Op::Sub, &[var, delta])?
            }
            Optimizer::AdamW {
                learning_rate,
                beta1,
                beta2,
                epsilon,
                weight_decay,
                first_order_momentum_accum_type,
                second_order_momentum_accum_type,
                ..
            } => {
                let wdt = ty.dtype;
                let mdt = first_order_momentum_accum_type.unwrap_or(wdt);
                let vdt = second_order_momentum_accum_type.unwrap_or(wdt);
                let (m_new, v_new) =
                    moments(b, var_name, &ty.shape, g, (mdt, vdt), (beta1, beta2))?;
                let root = b.op("v_sqrt", Op::Sqrt, &[v_new])?;
                let inv_bias2 = self.adamw_inv_sqrt_bias2(b, vdt)?;
                let scaled = b.op("v_scaled", Op::Mul, &[root, inv_bias2])?;
                let eps = b.scalar("epsilon", vdt, epsilon)?;
                let denom = b.op("denominator", Op::Add, &[scaled, eps])?;
                let m_v = cast_to(b, "m_new_v", m_new, vdt)?;
                let ratio = b.op("ratio", Op::Div, &[m_v, denom])?;
                let ratio = cast_to(b, "ratio_w", ratio, wdt)?;
                let step = self.adam_lr(b, wdt)?;
                let delta = b.op("delta", Op::Mul, &[ratio, step])?;
                let keep = b.scalar("decay", wdt, 1.0 - learning_rate * weight_decay)?;
                let decayed = b.op("decayed", Op::Mul, &[var, keep])?;
                b.op("new", Op::Sub, &[decayed, delta])?
            }
        };
        b.op("assign", Op::Assign, &[var, new])?;
        Ok(())
    }

    /// Adds what runs once per update after all variables (Adam's beta-power updates).
    pub fn finish(self, b: &mut GraphBuilder) -> Result<(), IrError> {
        let (beta1, beta2) = match self.opt {
            Optimizer::Adam { beta1, beta2, .. } | Optimizer::AdamW { beta1, beta2, .. } => {
                (beta1, beta2)
            }
            _ => return Ok(()),
        };
        let Some(adam) = &self.adam else {
            return Ok(());
        };
        b.set_phase(Phase::Update);
        b.push_scope("update/adam");
        let result = (|| {
            for (power, beta, name) in [
                (adam.beta1_power, *beta1, "beta1_power"),
                (adam.beta2_power, *beta2, "beta2_power"),
            ] {
                let c = b.scalar(&format!("{name}_beta"), DType::F32, beta)?;
                let next = b.op(&format!("{name}_next"), Op::Mul, &[power, c])?;
                b.op(&format!("{name}_assign"), Op::Assign, &[power, next])?;
            }
            Ok(())
        })();
        b.pop_scope();
        b.set_phase(Phase::Step);
        result
    }

    /// Adam's step size in `dtype` (AdamW's `step_size`).
    fn adam_lr(&mut self, b: &mut GraphBuilder, dtype: DType) -> R {
        let Some(adam) = self.adam.as_mut() else {
            return Err(IrError::Program(
                "internal error: Adam state missing".into(),
            ));
        };
        let base = match self.opt {
            Optimizer::AdamW { .. } => "step_size",
            _ => "lr_t",
        };
        in_dtype(b, &mut adam.lr_t, base, dtype)
    }

    /// AdamW's `1 / sqrt(1 - beta2^t)` in `dtype`.
    fn adamw_inv_sqrt_bias2(&mut self, b: &mut GraphBuilder, dtype: DType) -> R {
        let Some(adam) = self.adam.as_mut() else {
            return Err(IrError::Program(
                "internal error: AdamW state missing".into(),
            ));
        };
        in_dtype(b, &mut adam.inv_sqrt_bias2, "inv_sqrt_bias2", dtype)
    }
}

/// The shared FP32 scalar `update/adam/NAME` of `by_dtype` in `dtype`, cast on first need.
fn in_dtype(
    b: &mut GraphBuilder,
    by_dtype: &mut HashMap<DType, NodeId>,
    name: &str,
    dtype: DType,
) -> R {
    if let Some(&id) = by_dtype.get(&dtype) {
        return Ok(id);
    }
    let Some(&f32_value) = by_dtype.get(&DType::F32) else {
        return Err(IrError::Program(format!(
            "internal error: update/adam/{name} missing"
        )));
    };
    let id = b.named(
        &format!("update/adam/{name}_{}", dtype.name()),
        Op::Cast { dtype },
        &[f32_value],
    )?;
    by_dtype.insert(dtype, id);
    Ok(id)
}

/// Adam's moments of `var_name` with gradient `g`: state `<var>/adam_m` and `<var>/adam_v`
/// (Zeros) in `dtypes` (the gradient cast to each), `m_new = ScaledAdd(m * beta1, g, 1 -
/// beta1)`, `v_new = ScaledAdd(v * beta2, g * g, 1 - beta2)`, and their assigns.
fn moments(
    b: &mut GraphBuilder,
    var_name: &str,
    shape: &Shape,
    g: NodeId,
    (mdt, vdt): (DType, DType),
    (beta1, beta2): (f64, f64),
) -> Result<(NodeId, NodeId), IrError> {
    let m = state(b, &format!("{var_name}/adam_m"), mdt, shape, Init::Zeros)?;
    let v = state(b, &format!("{var_name}/adam_v"), vdt, shape, Init::Zeros)?;
    let gm = cast_to(b, "grad_m", g, mdt)?;
    let gv = cast_to(b, "grad_v", g, vdt)?;
    let c_beta1 = b.scalar("beta1", mdt, beta1)?;
    let m_decay = b.op("m_decay", Op::Mul, &[m, c_beta1])?;
    let m_new = b.op(
        "m_new",
        Op::ScaledAdd { scale: 1.0 - beta1 },
        &[m_decay, gm],
    )?;
    let c_beta2 = b.scalar("beta2", vdt, beta2)?;
    let v_decay = b.op("v_decay", Op::Mul, &[v, c_beta2])?;
    let g2 = b.op("grad_sq", Op::Mul, &[gv, gv])?;
    let v_new = b.op(
        "v_new",
        Op::ScaledAdd { scale: 1.0 - beta2 },
        &[v_decay, g2],
    )?;
    b.op("m_assign", Op::Assign, &[m, m_new])?;
    b.op("v_assign", Op::Assign, &[v, v_new])?;
    Ok((m_new, v_new))
}

/// `x` in `dtype`: itself, or a cast named `name` (in the builder's scope).
fn cast_to(b: &mut GraphBuilder, name: &str, x: NodeId, dtype: DType) -> R {
    if b.graph().node(x).ty.dtype == dtype {
        Ok(x)
    } else {
        b.op(name, Op::Cast { dtype }, &[x])
    }
}

impl Updater<'_> {}

/// Adam's beta powers and FP32 step size `lr * sqrt(1 - beta2^t) / (1 - beta1^t)`; with
/// `decoupled` (AdamW), the step size `lr / (1 - beta1^t)` and `1 / sqrt(1 - beta2^t)`.
fn adam_shared(
    b: &mut GraphBuilder,
    lr: f64,
    beta1: f64,
    beta2: f64,
    decoupled: bool,
) -> Result<AdamShared, IrError> {
    let scalar_shape = Shape::scalar();
    let beta1_power = state(
        b,
        "adam/beta1_power",
        DType::F32,
        &scalar_shape,
        Init::Constant(beta1),
    )?;
    let beta2_power = state(
        b,
        "adam/beta2_power",
        DType::F32,
        &scalar_shape,
        Init::Constant(beta2),
    )?;
    b.set_phase(Phase::Update);
    b.push_scope("update/adam");
    let result = (|| {
        let one = b.scalar("one", DType::F32, 1.0)?;
        let d2 = b.op("one_minus_beta2_power", Op::Sub, &[one, beta2_power])?;
        let root = b.op("sqrt_one_minus_beta2_power", Op::Sqrt, &[d2])?;
        let d1 = b.op("one_minus_beta1_power", Op::Sub, &[one, beta1_power])?;
        let c_lr = b.scalar("learning_rate", DType::F32, lr)?;
        if decoupled {
            let step = b.op("step_size", Op::Div, &[c_lr, d1])?;
            let inv = b.op("inv_sqrt_bias2", Op::Div, &[one, root])?;
            return Ok((step, Some(inv)));
        }
        let ratio = b.op("bias_correction", Op::Div, &[root, d1])?;
        Ok((b.op("lr_t", Op::Mul, &[ratio, c_lr])?, None))
    })();
    b.pop_scope();
    b.set_phase(Phase::Step);
    let (lr_t, inv) = result?;
    Ok(AdamShared {
        beta1_power,
        beta2_power,
        lr_t: HashMap::from([(DType::F32, lr_t)]),
        inv_sqrt_bias2: inv
            .map(|i| HashMap::from([(DType::F32, i)]))
            .unwrap_or_default(),
    })
}

/// An optimizer-state Variable named exactly `name`, in the Step phase like every source.
fn state(b: &mut GraphBuilder, name: &str, dtype: DType, shape: &Shape, init: Init) -> R {
    let op = Op::Variable {
        dtype,
        shape: shape.clone(),
        init,
    };
    // Variables are phase-independent state; keep sources in the Step phase.
    let phase = b.phase();
    b.set_phase(Phase::Step);
    let id = b.named(name, op, &[]);
    b.set_phase(phase);
    id
}
