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

pub mod json;

pub mod codec;
