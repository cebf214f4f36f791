//! Counting a request on the wire before it is decoded (`scan`), against the limits: a
//! protobuf reader (`wire`), the field numbers it walks (`fields`, checked against the
//! generated descriptors) and the cost model of the estimates (`cost`).

mod cost;
mod fields;
mod scan;
mod wire;

pub use scan::scan;
