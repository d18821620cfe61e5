//! ipusim-sim: the simulator side of ipusim — IPU numerics ([`numerics`]), host tensor
//! values ([`tensor`]), initial values ([`init`]), the reference interpreter of a graph
//! ([`interp`]), and (to come) tile state, codelets, the BSP engine, cycle accounting, trace
//! events and the stepping debugger.

pub mod host;
pub mod init;
pub mod interp;
pub mod numerics;
pub mod tensor;
