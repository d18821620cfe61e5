//! ipusim-sim: the simulator side of ipusim — IPU numerics ([`numerics`]), and (to come)
//! the reference interpreter of a graph, tile state, codelets, the BSP engine, cycle
//! accounting, trace events and the stepping debugger.

pub mod numerics;
