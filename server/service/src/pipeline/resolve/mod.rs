//! The candidate nodes of a request, resolved (`sets::candidates`): as a change to a kept node
//! set (`sets`), from nodes by reference through the node cache (`refs`) after the nodes sent
//! whole (`whole`); every node checked the same way and the candidates made by one builder
//! (`build`).

pub mod build;
pub mod refs;
pub mod sets;
pub mod whole;
