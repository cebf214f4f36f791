//! The candidate nodes of a request, resolved: nodes sent whole, nodes by reference through the
//! node cache, node sets kept and changed; every node checked the same way.

pub mod build;
pub mod whole;
