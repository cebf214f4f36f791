//! Generated code of the gpusched v1 API (`proto/gpusched/v1`).
//!
//! Only the service crates and clients depend on this crate; the policy engine does not.

/// `gpusched.v1`: messages, `PlacementService` and `InventoryService`.
pub mod v1 {
    #![allow(
        missing_docs,
        missing_debug_implementations,
        clippy::all,
        clippy::pedantic
    )]
    tonic::include_proto!("gpusched.v1");
}

/// Encoded `FileDescriptorSet` of the v1 API, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/gpusched_descriptor.bin"));

/// The response metadata (header) every `PlacementService` answer carries, successes and
/// errors alike, from a server that reads `node_refs` (`NodeRef`). Clients send nodes whole
/// until they have seen it, so a server that predates `node_refs` (and would ignore them) is
/// never sent references. Set by the service, read by the clients.
pub const NODE_REFS_HEADER: &str = "gpusched-node-refs";

/// The response metadata (header) every `PlacementService` answer carries from a server that
/// reads `node_set` (`NodeSetRef`). Clients name a base set only after they have seen it.
pub const NODE_SETS_HEADER: &str = "gpusched-node-sets";

pub mod json;

pub mod codec;
