//! Evaluation of a compiled postfix program with IPU arithmetic.

use half::f16;

use super::parse::Instr;
use super::{CalcOptions, Outcome, Value};
use crate::numerics::cast;
use crate::numerics::flags::FpSts;
use crate::numerics::rng::SrRng;
use crate::numerics::round::Rounding;
use crate::numerics::{fp16, fp32};
use ipusim_ir::DType;

/// Runs `program` (type-checked by the parser) and returns the top value and all flags.
pub(crate) fn run(
    program: &[Instr],
    options: &CalcOptions,
    rng: &mut SrRng,
    stack: &mut Vec<Value>,
) -> Outcome {
    let mut r = Rounding::new(options.sr, options.nanoo, rng);
    let mut flags = FpSts::empty();
    stack.clear();
    for instr in program {
        let (value, f) = match *instr {
            Instr::Push(v, f) => (v, f),
            Instr::Unary(op) => match pop(stack) {
                Value::F16(a) => wrap16(fp16::unary(op, a, &mut r)),
                a => wrap32(fp32::unary(op, as_f32(a))),
            },
            Instr::Binary(op) => {
                let b = pop(stack);
                match (pop(stack), b) {
                    (Value::F16(a), Value::F16(b)) => wrap16(fp16::binary(op, a, b, &mut r)),
                    (a, b) => wrap32(fp32::binary(op, as_f32(a), as_f32(b))),
                }
            }
            Instr::Compare(op) => {
                let b = pop(stack);
                let (v, f) = match (pop(stack), b) {
                    (Value::F16(a), Value::F16(b)) => fp16::compare(op, a, b),
                    (a, b) => fp32::compare(op, as_f32(a), as_f32(b)),
                };
                (Value::Bool(v), f)
            }
            Instr::Cast(to) => convert(pop(stack), to, &mut r),
        };
        stack.push(value);
        flags |= f;
    }
    Outcome {
        value: pop(stack),
        flags,
    }
}

fn wrap16((v, f): (f16, FpSts)) -> (Value, FpSts) {
    (Value::F16(v), f)
}

fn wrap32((v, f): (f32, FpSts)) -> (Value, FpSts) {
    (Value::F32(v), f)
}

/// Pops a value; the parser guarantees the stack is deep enough.
fn pop(stack: &mut Vec<Value>) -> Value {
    debug_assert!(
        !stack.is_empty(),
        "the parser emitted an unbalanced program"
    );
    stack.pop().unwrap_or(Value::F32(f32::NAN))
}

/// An FP32 operand; the parser guarantees float operands have matching types.
fn as_f32(v: Value) -> f32 {
    match v {
        Value::F32(x) => x,
        other => {
            debug_assert!(false, "the parser let a {:?} operand through", other.ty());
            f32::NAN
        }
    }
}

fn convert(v: Value, to: DType, r: &mut Rounding) -> (Value, FpSts) {
    match (to, v) {
        (DType::F16, Value::F32(x)) => wrap16(cast::f32_to_f16(x, r)),
        (DType::F16, Value::I32(x)) => wrap16(cast::i32_to_f16(x, r)),
        (DType::F16, Value::U8(x)) => wrap16(cast::u8_to_f16(x)),
        (DType::F32, Value::F16(x)) => wrap32(cast::f16_to_f32(x)),
        (DType::F32, Value::I32(x)) => wrap32(cast::i32_to_f32(x)),
        (DType::F32, Value::U8(x)) => wrap32(cast::u8_to_f32(x)),
        (DType::I32, Value::F16(x)) => {
            let (v, f) = cast::f16_to_i32(x);
            (Value::I32(v), f)
        }
        (DType::I32, Value::F32(x)) => {
            let (v, f) = cast::f32_to_i32(x);
            (Value::I32(v), f)
        }
        (DType::I32, Value::U8(x)) => (Value::I32(i32::from(x)), FpSts::empty()),
        // Identity casts.
        (_, v) => (v, FpSts::empty()),
    }
}
