//! The HTTP/2 side of a call, in request order, before tonic decodes it: `accept` (the
//! listener, backing off on accept errors), `edge` (the outermost layer: content-type,
//! deadline, codes, counting), `intake` (gRPC prefix, memory budget, body timeout, the
//! `prescan` of the message on the wire, large calls off the async workers).

pub mod accept;
pub mod edge;
pub mod intake;
pub mod prescan;
