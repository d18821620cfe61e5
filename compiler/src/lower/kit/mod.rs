//! Building blocks the op families share: tile mappings and grains ([`mapping`]),
//! staging operands onto tiles with exchanges ([`stage`]), the matmul planner ([`planner`]),
//! fills ([`fill`]), permutations and element moves ([`permute`]), row-wise block vertices
//! ([`rows`]) and long rows split over tiles ([`split_rows`]), the cross-tile reduction tree
//! in its documented order ([`reduction`]), a reduction pass's first stage on each tile
//! ([`first_stage`]) with a tile's reductions shared between its workers ([`share`]), the
//! reductions' block vertices ([`block`]), and the staged sum of split reductions' partials
//! ([`split_sum`]).

pub(crate) mod block;
pub(crate) mod fill;
pub(crate) mod first_stage;
pub(crate) mod mapping;
pub(crate) mod permute;
pub(crate) mod planner;
pub mod reduction;
pub(crate) mod rows;
pub(crate) mod share;
pub(crate) mod split_rows;
pub(crate) mod split_sum;
pub(crate) mod stage;
